#include "kernels/kv_layout.h"

#include <algorithm>
#include <cmath>

namespace servelab::kernels {

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
