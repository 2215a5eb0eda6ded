// KV-cache capacity from memory arithmetic, as vLLM sizes it:
//
//   block_bytes    = 2 (K and V) * layers * block_size * kv_heads * head_dim * KV dtype bytes
//   kv_bytes       = memory * gpu_memory_utilization - weight bytes - LoRA slots
//                    - activation reserve
//
// The KV dtype is model.kv_dtype() (model.kv_cache_dtype: fp8 stores one byte per element, half
// of bf16's two, so about twice the blocks fit); the weight bytes are model.weight_bytes(), its
// projection matrices as model.quantization stores them (awq or fp8 leave more room for KV).
//   num_gpu_blocks = floor(kv_bytes / block_bytes)        (or the given override)
//   num_cpu_blocks = floor(swap_space_gib * 2^30 / block_bytes)
//
// With tensor parallelism over tp GPUs and pipeline parallelism over pp stages
// (serving/parallel_config.h) the arithmetic is done per GPU: a GPU of stage s holds its
// layers' share of the weights (tensor_shard of the model; the first stage also the embedding,
// the last the final norm and LM head) and of the KV cache (its layers, its KV heads), and the
// replica has as many blocks as its most constrained GPU.
//
// With LoRA on (serving.lora), vLLM allocates max_loras adapter slots at max_lora_rank when it
// loads the model (LoRAModelManager: every adapted layer's A and B stacked over the slots), so
// they count with the weights it measures and leave that much less for the KV cache: lora_bytes
// = lora_slots * lora_slot_bytes(). The CUDA engine allocates the same slots before it sizes its
// cache (core/lora_slots.h).
//
// The activation reserve stands for what vLLM measures in its profiling run (peak activations
// at max_num_batched_tokens, sampler logits) plus memory outside PyTorch's allocator (CUDA
// context, cuBLAS workspace, CUDA graphs). When not given it is estimated by
// default_activation_reserve_bytes(); see docs/cost-model.md.
#pragma once

#include <cstdint>
#include <optional>

#include "serving/hardware_config.h"
#include "serving/model_config.h"

namespace servelab {

struct KvCapacityOptions {
  std::int32_t block_size = 16;         // tokens per block, >= 1
  double gpu_memory_utilization = 0.9;  // in (0, 1], vLLM's flag of the same name
  // Bytes held back for activations and non-PyTorch memory; estimated when unset.
  std::optional<std::int64_t> activation_reserve_bytes;
  // Used only by the estimate: the largest forward pass and the most sequences sampled at once.
  std::int32_t max_num_batched_tokens = 8192;
  std::int32_t max_num_seqs = 256;
  // Use exactly this many device blocks (vLLM's num_gpu_blocks_override, or the count an engine
  // reported); skips the memory arithmetic and its fit check.
  std::optional<std::int64_t> num_gpu_blocks;
  double swap_space_gib = 4.0;  // host memory for swapped-out blocks (vLLM's default, 4 GiB),
                                // per GPU
  // Model parallelism of the replica (serving/parallel_config.h).
  std::int32_t tensor_parallel = 1;
  std::int32_t pipeline_parallel = 1;
  // Redundant expert copies of the replica (ParallelConfig::redundant_experts): each GPU of a
  // stage holds redundant_experts / tensor_parallel more whole experts of its layers.
  std::int32_t redundant_experts = 0;
  // LoRA adapter slots on each GPU (vLLM's max_loras; 0: LoRA off) and their rank (max_lora_rank).
  std::int32_t lora_slots = 0;
  std::int32_t lora_rank = 0;
  // Speculative decoding's drafter on each replica (vLLM loads it beside the target, and its
  // attention layers take KV in every block): its weights and its KV bytes per block, whole (a
  // tensor-parallel replica holds 1 / tensor_parallel of each on its last stage's GPUs).
  std::int64_t draft_weight_bytes = 0;
  std::int64_t draft_block_bytes = 0;
};

struct KvCapacity {
  std::int32_t block_size = 0;
  std::int64_t block_bytes = 0;      // K and V of a block across the whole model (all GPUs)
  std::int64_t gpu_block_bytes = 0;  // the part one GPU holds (the largest); block_bytes on one
  std::int32_t num_gpus = 1;         // tensor_parallel * pipeline_parallel
  std::int64_t num_gpu_blocks = 0;
  std::int64_t num_cpu_blocks = 0;
  bool overridden = false;  // num_gpu_blocks came from the options, not from memory arithmetic

  // The terms of the arithmetic, in bytes (all 0 except block_bytes when overridden, but
  // weight_bytes and lora_bytes, which are always filled in); per GPU, of the GPU that limits the
  // block count, when the replica has several (the first such stage on a tie).
  std::int64_t memory_bytes = 0;  // the device's memory
  std::int64_t usable_bytes = 0;  // memory * gpu_memory_utilization
  std::int64_t weight_bytes = 0;
  std::int64_t lora_bytes = 0;  // lora_slots adapter slots (0 without LoRA)
  std::int64_t activation_reserve_bytes = 0;
  std::int64_t kv_bytes = 0;  // usable - weights - LoRA slots - reserve

  double weights_gib() const { return static_cast<double>(weight_bytes) / (1 << 30); }
  double kv_gib() const { return static_cast<double>(num_gpu_blocks * block_bytes) / (1 << 30); }
  // Tokens the device cache holds.
  std::int64_t num_gpu_tokens() const { return num_gpu_blocks * block_size; }
};

// K and V of block_size tokens across all layers. REQUIRES: block_size >= 1.
std::int64_t kv_block_bytes(const ModelConfig& model, std::int32_t block_size);

// One LoRA adapter slot of rank `rank` on a GPU holding `layers` layers of `shard` (the model, or
// tensor_shard of it): per layer, A [rank][in] and B [out][rank] of the q, k, v, o, gate, up and
// down projections in the model's dtype, split as vLLM splits them (the column-parallel q, k, v,
// gate and up keep A whole and shard B; the row-parallel o and down shard A and keep B whole):
//   layers * rank * (7 hidden + 2 q_size + 2 kv_size + 3 intermediate) * dtype bytes,
// q_size, kv_size and intermediate of the shard. REQUIRES: layers >= 0, rank >= 0.
std::int64_t lora_slot_bytes(const ModelConfig& shard, std::int64_t layers, std::int32_t rank);

// Estimate of the reserve: 1 GiB for non-PyTorch memory (CUDA context, cuBLAS workspace, CUDA
// graphs) plus the activations alive at the MLP of a max_num_batched_tokens forward pass
// (residual, normed input, qkv, gate/up output, activated output: (2h + q + 2kv + 3 inter) *
// dtype bytes per token, inter = model.mlp_width_per_token(): a mixture of experts holds
// experts_per_token experts' intermediates per token) plus fp32 logits for max_num_seqs
// sequences.
std::int64_t default_activation_reserve_bytes(const ModelConfig& model,
                                              std::int32_t max_num_batched_tokens,
                                              std::int32_t max_num_seqs);

// Throws ConfigError with the numbers when an option is out of range, when the weights, the LoRA
// slots and the reserve do not fit in memory * utilization, or when fewer than one block remains
// (or the override is < 1), and (from tensor_shard) when the model's heads do not split over
// tensor_parallel GPUs.
KvCapacity compute_kv_capacity(const ModelConfig& model, const HardwareConfig& hardware,
                               const KvCapacityOptions& options);

// `bytes` as "12.34 GiB" (two decimals, 2^30 bytes to the GiB), as the capacity messages write it.
std::string format_gib(std::int64_t bytes);

}  // namespace servelab
