// The RoPE cos/sin table the GPU kernels read: for each position p and pair j < head_dim / 2,
// angle = p * inv_freq[j] computed in double (exactly as CpuExecutor's apply_rope), stored as
// fp32: table[p * head_dim + j] = cos(angle), table[p * head_dim + head_dim / 2 + j] = sin(angle).
// inv_freq comes from engine rope_inv_freq() (plain, Llama-3 or linear scaling), so the kernel
// never evaluates a transcendental at large angles in single precision.
#pragma once

#include <cstdint>
#include <vector>

namespace servelab::kernels {

// REQUIRES: max_positions >= 1, !inv_freq.empty(). head_dim = 2 * inv_freq.size().
std::vector<float> rope_cos_sin_table(const std::vector<double>& inv_freq,
                                      std::int64_t max_positions);

// Reference rotation of one head (head_dim values) with that table: pair (j, j + d/2) becomes
// (x1 c - x2 s, x2 c + x1 s). What the kernel computes, in fp32.
void rope_rotate_reference(float* head, std::int32_t head_dim, const float* table_row);

}  // namespace servelab::kernels
