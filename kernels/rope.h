// Q/K/V post-processing after the fused QKV projection (kernels/elementwise.cu): optional bias
// add (Qwen2), then rotate-half RoPE on Q and K at each token's absolute position, then bf16.
//
// qkv: [num_tokens][(num_q_heads + 2 * num_kv_heads) * head_dim] fp32 (Q heads, then K, then V,
// the packed projection's output order). bias: the same width or null. cos_sin: the table of
// kernels/rope_table.h ([position][head_dim]: cos for pairs j < d/2, then sin), which carries any
// Llama-3 / linear frequency scaling. positions[t] must be < the table's rows.
// Outputs: q [num_tokens][num_q_heads * head_dim], k and v [num_tokens][num_kv_heads * head_dim].
// Tolerance vs CpuExecutor apply_rope: one bf16 rounding.
#pragma once

#include <cstdint>

#include "kernels/device.h"

namespace servelab::kernels {

struct RopeArgs {
  const float* qkv = nullptr;
  const float* bias = nullptr;
  const std::int32_t* positions = nullptr;  // device [num_tokens]
  const float* cos_sin = nullptr;
  std::int32_t num_tokens = 0;
  std::int32_t num_q_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  Bf16* q = nullptr;
  Bf16* k = nullptr;
  Bf16* v = nullptr;
};
void qkv_rope(const RopeArgs& args, Stream stream);

}  // namespace servelab::kernels
