#include "serving/kv_capacity.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "serving/config_node.h"

namespace servelab {

namespace {

std::string gib(std::int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

std::int64_t kv_block_bytes(const ModelConfig& model, std::int32_t block_size) {
  return model.kv_bytes_per_token() * block_size;
}

std::int64_t default_activation_reserve_bytes(const ModelConfig& model,
                                              std::int32_t max_num_batched_tokens,
                                              std::int32_t max_num_seqs) {
  constexpr std::int64_t kNonTorchBytes = std::int64_t{1} << 30;
  const std::int64_t per_token = (2 * std::int64_t{model.hidden_size} + model.q_size() +
                                  2 * model.kv_size() + 3 * std::int64_t{model.intermediate_size}) *
                                 model.dtype_bytes;
  const std::int64_t logits = std::int64_t{max_num_seqs} * model.vocab_size * 4;
  return kNonTorchBytes + std::int64_t{max_num_batched_tokens} * per_token + logits;
}

KvCapacity compute_kv_capacity(const ModelConfig& model, const HardwareConfig& hardware,
                               const KvCapacityOptions& options) {
  const std::string who = "model " + model.name + " on " + hardware.name;
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
  KvCapacity c;
  c.block_size = options.block_size;
  c.block_bytes = kv_block_bytes(model, options.block_size);
  c.weight_bytes = model.weight_bytes();
  c.num_cpu_blocks = static_cast<std::int64_t>(
      std::floor(options.swap_space_gib * 1073741824.0 / static_cast<double>(c.block_bytes)));

  if (options.num_gpu_blocks) {
    if (*options.num_gpu_blocks < 1) {
      throw ConfigError("num_gpu_blocks must be at least 1, got " +
                        std::to_string(*options.num_gpu_blocks));
    }
    c.num_gpu_blocks = *options.num_gpu_blocks;
    c.overridden = true;
    return c;
  }

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
  c.kv_bytes = c.usable_bytes - c.weight_bytes - c.activation_reserve_bytes;
  if (c.kv_bytes < c.block_bytes) {
    throw ConfigError(who + ": no room for the KV cache: memory " + gib(c.memory_bytes) + " x " +
                      num(options.gpu_memory_utilization) + " = " + gib(c.usable_bytes) +
                      ", minus weights " + gib(c.weight_bytes) + " and activation reserve " +
                      gib(c.activation_reserve_bytes) + " leaves " + gib(c.kv_bytes) +
                      ", less than one block (" + std::to_string(c.block_bytes) +
                      " bytes); use a larger GPU, a higher gpu_memory_utilization or a smaller "
                      "model (tensor parallelism is not supported yet)");
  }
  c.num_gpu_blocks = c.kv_bytes / c.block_bytes;
  return c;
}

}  // namespace servelab
