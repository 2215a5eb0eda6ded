#include "kernels/rope_table.h"

#include <cmath>

namespace servelab::kernels {

std::vector<float> rope_cos_sin_table(const std::vector<double>& inv_freq,
                                      std::int64_t max_positions) {
  const std::int64_t half = static_cast<std::int64_t>(inv_freq.size()), hd = 2 * half;
  std::vector<float> table(static_cast<std::size_t>(max_positions * hd));
  for (std::int64_t p = 0; p < max_positions; ++p) {
    float* row = table.data() + p * hd;
    for (std::int64_t j = 0; j < half; ++j) {
      const double angle = static_cast<double>(p) * inv_freq[j];
      row[j] = static_cast<float>(std::cos(angle));
      row[half + j] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

void rope_rotate_reference(float* head, std::int32_t head_dim, const float* table_row) {
  const std::int32_t half = head_dim / 2;
  for (std::int32_t j = 0; j < half; ++j) {
    const float c = table_row[j], s = table_row[half + j];
    const float x1 = head[j], x2 = head[j + half];
    head[j] = x1 * c - x2 * s;
    head[j + half] = x2 * c + x1 * s;
  }
}

}  // namespace servelab::kernels
