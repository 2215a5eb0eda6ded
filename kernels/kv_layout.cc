#include "kernels/kv_layout.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace servelab::kernels {

int kv_elem_bytes(FloatFormat format) {
  switch (format) {
    case FloatFormat::kBf16:
      return 2;
    case FloatFormat::kFp8E4m3:
    case FloatFormat::kFp8E5m2:
      return 1;
    default:
      throw std::invalid_argument("the GPU KV cache holds bf16, fp8_e4m3 or fp8_e5m2, not " +
                                  std::string(format_name(format)));
  }
}

void check_kv_format(FloatFormat format, float k_scale, float v_scale, std::string_view what) {
  try {
    if (kv_elem_bytes(format) == 2) return;
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(what) + ": " + e.what());
  }
  auto good = [](float s) { return std::isfinite(s) && s > 0.0f; };
  if (!good(k_scale) || !good(v_scale)) {
    throw std::invalid_argument(std::string(what) +
                                ": fp8 KV scales must be positive and finite, got k_scale " +
                                std::to_string(k_scale) + " v_scale " + std::to_string(v_scale));
  }
}

std::int64_t kv_blocks_for_memory(std::int64_t total_bytes, std::int64_t free_bytes,
                                  double utilization, std::int64_t block_bytes) {
  const double used = static_cast<double>(total_bytes - free_bytes);
  const double budget = std::floor(static_cast<double>(total_bytes) * utilization - used);
  // Never more than is actually free, whatever the utilization says.
  const double usable = std::min(budget, static_cast<double>(free_bytes));
  if (!(usable > 0)) return 0;
  return static_cast<std::int64_t>(usable) / block_bytes;
}

}  // namespace servelab::kernels
