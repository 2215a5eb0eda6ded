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

// The fused form the executor uses (issue 19 item 3): qkv_rope and kv_write (cache_ops.h) in one
// kernel. Q goes to `q` as in qkv_rope; K (after bias and RoPE) and V (after bias) go straight
// to their KV-cache slots, with no bf16 k/v scratch rows: token t's rows land in slot
// slot_mapping[t] of one layer's planes (element (b, s, h, d) of the K plane is
// k_cache[b * block_stride + (s * num_kv_heads + h) * head_dim + d], V likewise), and
// slot_mapping[t] < 0 writes no K/V for t (its Q is still written). The arithmetic is
// qkv_rope's, rounding step for step (both kernels share one device helper with explicitly
// rounded fp32 operations), so the cache receives bit-for-bit what qkv_rope + kv_write store.
// Grid: num_tokens CTAs. REQUIRES: even head_dim; no two tokens share a slot.
struct QkvRopeKvWriteArgs {
  const float* qkv = nullptr;
  const float* bias = nullptr;
  const std::int32_t* positions = nullptr;  // device [num_tokens]
  const float* cos_sin = nullptr;
  std::int32_t num_tokens = 0;
  std::int32_t num_q_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  Bf16* q = nullptr;
  const std::int64_t* slot_mapping = nullptr;  // device [num_tokens]
  Bf16* k_cache = nullptr;
  Bf16* v_cache = nullptr;
  std::int64_t block_stride = 0;
  std::int32_t block_size = 0;
};
void qkv_rope_kv_write(const QkvRopeKvWriteArgs& args, Stream stream);

}  // namespace servelab::kernels
