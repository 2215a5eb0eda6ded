#include "serving/kv_capacity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "serving/config_node.h"
#include "serving/parallel_config.h"

namespace servelab {

std::string format_gib(std::int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

namespace {

// "NAME", or "NAME (FILE)" for an entry read from a file outside the catalogue (a user's own
// hardware or model file, which may reuse a catalogue entry's name).
std::string entry_label(const std::string& name, const std::string& source) {
  if (source.empty()) return name;
  std::error_code ec;
  const std::filesystem::path folder =
      std::filesystem::weakly_canonical(std::filesystem::path(source).parent_path(), ec);
  const std::filesystem::path catalog =
      std::filesystem::weakly_canonical(default_catalog_dir(), ec);
  if (!ec && folder.parent_path() == catalog) return name;
  return name + " (" + source + ")";
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// ", LoRA slots X GiB (N of rank R)" in the no-room messages; empty without LoRA.
std::string lora_term(const KvCapacityOptions& options, std::int64_t bytes) {
  if (options.lora_slots == 0) return "";
  return ", LoRA slots " + format_gib(bytes) + " (" + std::to_string(options.lora_slots) +
         " of rank " + std::to_string(options.lora_rank) + ": serving.lora)";
}

}  // namespace

// The tensor * pipeline case: the same arithmetic per GPU, the replica limited by its most
// constrained GPU (one of each stage stands for its whole tensor-parallel group).
// serving.num_gpu_blocks, when given, replaces the memory arithmetic: `c` gets that many blocks
// and true comes back. ConfigError for fewer than 1.
static bool apply_block_override(const KvCapacityOptions& options, KvCapacity& c) {
  if (!options.num_gpu_blocks) return false;
  if (*options.num_gpu_blocks < 1) {
    throw ConfigError("num_gpu_blocks must be at least 1, got " +
                      std::to_string(*options.num_gpu_blocks));
  }
  c.num_gpu_blocks = *options.num_gpu_blocks;
  c.overridden = true;
  return true;
}

// One GPU's memory, the share ServeLab may use and the activation reserve of `model` (the
// whole model, or one GPU's tensor shard of it).
static void set_memory_budget(const ModelConfig& model, const HardwareConfig& hardware,
                              const KvCapacityOptions& options, KvCapacity& c) {
  c.memory_bytes = hardware.memory_bytes;
  // Rounded to the nearest byte: 0.9 is not exact in binary, and floor could lose a byte (and,
  // at an exact block boundary, a block) to representation error.
  c.usable_bytes =
      std::llround(static_cast<double>(hardware.memory_bytes) * options.gpu_memory_utilization);
  c.activation_reserve_bytes =
      options.activation_reserve_bytes
          ? *options.activation_reserve_bytes
          : default_activation_reserve_bytes(model, options.max_num_batched_tokens,
                                             options.max_num_seqs);
  if (c.activation_reserve_bytes < 0) {
    throw ConfigError("activation_reserve_bytes must not be negative, got " +
                      std::to_string(c.activation_reserve_bytes));
  }
}

static KvCapacity parallel_kv_capacity(const ModelConfig& model, const HardwareConfig& hardware,
                                       const KvCapacityOptions& options) {
  const std::int32_t tp = options.tensor_parallel, pp = options.pipeline_parallel;
  const std::string who = "model " + entry_label(model.name, model.source) + " on " +
                          std::to_string(tp * pp) + " x " +
                          entry_label(hardware.name, hardware.source) + " (tensor " +
                          std::to_string(tp) + ", pipeline " + std::to_string(pp) + ")";
  const ModelConfig shard = tensor_shard(model, tp);
  const std::int64_t d = model.dtype_bytes;
  KvCapacity c;
  c.block_size = options.block_size;
  c.block_bytes = kv_block_bytes(model, options.block_size) + options.draft_block_bytes;
  c.num_gpus = tp * pp;
  struct Stage {
    std::int64_t weights, lora, block_bytes;
  };
  std::vector<Stage> stages;
  for (std::int32_t s = 0; s < pp; ++s) {
    const std::int64_t layers = stage_layers(model.num_layers, pp, s);
    // Layers as stored (model.quantization applies to their matrices); the rest in dtype.
    std::int64_t params = 0;
    if (s == 0) params += shard.embedding_params();
    if (s == pp - 1) {
      params += model.hidden_size;  // final norm
      // The LM head; a tied one is the embedding's copy, held by the last stage when it is not
      // the first.
      if (!model.tie_word_embeddings || pp > 1) params += shard.embedding_params();
    }
    // Redundant expert copies (expert parallelism): whole experts, as stored.
    const std::int64_t copies = std::int64_t{options.redundant_experts} / tp;
    stages.push_back(
        {layers * (shard.layer_weight_bytes() + copies * model.expert_weight_bytes()) + params * d,
         options.lora_slots * lora_slot_bytes(shard, layers, options.lora_rank),
         2 * layers * shard.kv_size() * shard.kv_dtype_bytes() * options.block_size});
    if (s == pp - 1) {  // the drafter runs after the last stage, split like the target
      stages.back().weights += options.draft_weight_bytes / tp;
      stages.back().block_bytes += options.draft_block_bytes / tp;
    }
  }
  c.gpu_block_bytes = 0;
  for (const Stage& st : stages) c.gpu_block_bytes = std::max(c.gpu_block_bytes, st.block_bytes);
  c.num_cpu_blocks = static_cast<std::int64_t>(
      std::floor(options.swap_space_gib * 1073741824.0 / static_cast<double>(c.gpu_block_bytes)));
  c.weight_bytes = 0;
  for (const Stage& st : stages) {
    if (st.weights + st.lora > c.weight_bytes + c.lora_bytes) {
      c.weight_bytes = st.weights;
      c.lora_bytes = st.lora;
    }
  }
  if (apply_block_override(options, c)) return c;
  set_memory_budget(shard, hardware, options, c);
  c.num_gpu_blocks = -1;
  for (std::int32_t s = 0; s < pp; ++s) {
    const Stage& st = stages[s];
    const std::int64_t kv = c.usable_bytes - st.weights - st.lora - c.activation_reserve_bytes;
    // Two blocks at least: the pool keeps block 0 as vLLM's null block.
    if (kv < 2 * st.block_bytes) {
      throw ConfigError(who + ": no room for the KV cache on a GPU of stage " + std::to_string(s) +
                        ": memory " + format_gib(c.memory_bytes) + " x " +
                        num(options.gpu_memory_utilization) + " = " + format_gib(c.usable_bytes) +
                        ", minus its weights " + format_gib(st.weights) +
                        lora_term(options, st.lora) + " and activation reserve " +
                        format_gib(c.activation_reserve_bytes) + " leaves " + format_gib(kv) +
                        ", less than two blocks (" + std::to_string(st.block_bytes) +
                        " bytes each; the cache keeps one as its null block); use more GPUs "
                        "(tensor or pipeline), a larger GPU or a smaller "
                        "model");
    }
    const std::int64_t blocks = kv / st.block_bytes;
    if (c.num_gpu_blocks < 0 || blocks < c.num_gpu_blocks) {
      c.num_gpu_blocks = blocks;
      c.weight_bytes = st.weights;
      c.lora_bytes = st.lora;
      c.kv_bytes = kv;
    }
  }
  return c;
}

std::int64_t kv_block_bytes(const ModelConfig& model, std::int32_t block_size) {
  return model.kv_bytes_per_token() * block_size;
}

std::int64_t lora_slot_bytes(const ModelConfig& shard, std::int64_t layers, std::int32_t rank) {
  const std::int64_t per_rank = 7 * std::int64_t{shard.hidden_size} + 2 * shard.q_size() +
                                2 * shard.kv_size() + 3 * std::int64_t{shard.intermediate_size};
  return layers * rank * per_rank * shard.dtype_bytes;
}

std::int64_t default_activation_reserve_bytes(const ModelConfig& model,
                                              std::int32_t max_num_batched_tokens,
                                              std::int32_t max_num_seqs) {
  constexpr std::int64_t kNonTorchBytes = std::int64_t{1} << 30;
  const std::int64_t per_token = (2 * std::int64_t{model.hidden_size} + model.q_size() +
                                  2 * model.kv_size() + 3 * model.mlp_width_per_token()) *
                                 model.dtype_bytes;
  const std::int64_t logits = std::int64_t{max_num_seqs} * model.vocab_size * 4;
  return kNonTorchBytes + std::int64_t{max_num_batched_tokens} * per_token + logits;
}

// compute_kv_capacity without the block pools' size limit.
static KvCapacity unchecked_kv_capacity(const ModelConfig& model, const HardwareConfig& hardware,
                                        const KvCapacityOptions& options);

KvCapacity compute_kv_capacity(const ModelConfig& model, const HardwareConfig& hardware,
                               const KvCapacityOptions& options) {
  const KvCapacity c = unchecked_kv_capacity(model, hardware, options);
  const std::string limit = std::to_string(BlockPool::kMaxBlocks) + " (2^27)";
  if (c.num_gpu_blocks > BlockPool::kMaxBlocks) {
    throw ConfigError(
        c.overridden
            ? "num_gpu_blocks " + std::to_string(c.num_gpu_blocks) + " is more than " + limit
            : "the KV cache of model " + model.name + " on " + hardware.name + " would hold " +
                  std::to_string(c.num_gpu_blocks) + " blocks of " +
                  std::to_string(options.block_size) +
                  " tokens, more than ServeLab's block pool takes, " + limit +
                  "; use a larger serving.block_size, a lower serving.gpu_memory_utilization "
                  "or set serving.num_gpu_blocks");
  }
  if (c.num_cpu_blocks > BlockPool::kMaxBlocks) {
    throw ConfigError("serving.swap_space_gb " + num(options.swap_space_gib) + " is " +
                      std::to_string(c.num_cpu_blocks) + " swap blocks of " +
                      std::to_string(c.gpu_block_bytes) +
                      " bytes, more than the swap pool takes, " + limit +
                      "; lower serving.swap_space_gb or use a larger serving.block_size");
  }
  return c;
}

static KvCapacity unchecked_kv_capacity(const ModelConfig& model, const HardwareConfig& hardware,
                                        const KvCapacityOptions& options) {
  const std::string who = "model " + entry_label(model.name, model.source) + " on " +
                          entry_label(hardware.name, hardware.source);
  if (options.block_size < 1) {
    throw ConfigError("block_size must be at least 1, got " + std::to_string(options.block_size));
  }
  if (!(options.gpu_memory_utilization > 0 && options.gpu_memory_utilization <= 1)) {
    throw ConfigError("gpu_memory_utilization must be in (0, 1], got " +
                      num(options.gpu_memory_utilization));
  }
  if (!(options.swap_space_gib >= 0 && options.swap_space_gib < 1e6)) {
    throw ConfigError("swap_space_gib must be in [0, 1e6), got " + num(options.swap_space_gib));
  }
  if (hardware.tensor_parallel != 1) {
    throw ConfigError(who + ": tensor_parallel " + std::to_string(hardware.tensor_parallel) +
                      " is not supported (only 1)");
  }
  if (options.lora_slots < 0 || options.lora_rank < 0 ||
      (options.lora_slots > 0 && options.lora_rank < 1)) {
    throw ConfigError("lora_slots and lora_rank must not be negative, and the rank at least 1 " +
                      std::string("with slots; got ") + std::to_string(options.lora_slots) +
                      " slots of rank " + std::to_string(options.lora_rank));
  }
  const std::int32_t tp = options.tensor_parallel, pp = options.pipeline_parallel;
  if (tp < 1 || pp < 1 || pp > model.num_layers) {
    throw ConfigError(who + ": tensor_parallel " + std::to_string(tp) + " and pipeline_parallel " +
                      std::to_string(pp) + " must be at least 1 (and at most one stage per layer)");
  }
  if (tp != 1 || pp != 1) return parallel_kv_capacity(model, hardware, options);
  KvCapacity c;
  c.block_size = options.block_size;
  c.block_bytes = kv_block_bytes(model, options.block_size) + options.draft_block_bytes;
  c.gpu_block_bytes = c.block_bytes;
  c.weight_bytes = model.weight_bytes() + options.draft_weight_bytes;
  c.lora_bytes = options.lora_slots * lora_slot_bytes(model, model.num_layers, options.lora_rank);
  c.num_cpu_blocks = static_cast<std::int64_t>(
      std::floor(options.swap_space_gib * 1073741824.0 / static_cast<double>(c.block_bytes)));

  if (apply_block_override(options, c)) return c;
  set_memory_budget(model, hardware, options, c);
  c.kv_bytes = c.usable_bytes - c.weight_bytes - c.lora_bytes - c.activation_reserve_bytes;
  // Two blocks at least: the pool keeps block 0 as vLLM's null block.
  if (c.kv_bytes < 2 * c.block_bytes) {
    throw ConfigError(who + ": no room for the KV cache: memory " + format_gib(c.memory_bytes) +
                      " x " + num(options.gpu_memory_utilization) + " = " +
                      format_gib(c.usable_bytes) + ", minus weights " + format_gib(c.weight_bytes) +
                      lora_term(options, c.lora_bytes) + " and activation reserve " +
                      format_gib(c.activation_reserve_bytes) + " leaves " + format_gib(c.kv_bytes) +
                      ", less than two blocks (" + std::to_string(c.block_bytes) +
                      " bytes each; the cache keeps one as its null block); use a larger GPU, a "
                      "higher gpu_memory_utilization, a smaller "
                      "model or more GPUs (parallel.tensor, parallel.pipeline)");
  }
  c.num_gpu_blocks = c.kv_bytes / c.block_bytes;
  return c;
}

}  // namespace servelab
