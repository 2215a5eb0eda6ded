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
#include "kernels/float_formats.h"

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
// rounded fp32 operations), so a bf16 cache receives bit-for-bit what qkv_rope + kv_write store.
// An fp8 cache (`format` kFp8E4m3 or kFp8E5m2) receives fp8(x / k_scale) for K and
// fp8(x / v_scale) for V, rounded once from the fp32 x (kernels/fp8.cuh fp8_encode; CpuExecutor
// rounds the same way); the unfused pair rounds to bf16 first, so the two can differ by one fp8
// step where that double rounding lands on a tie.
// Grid: (num_tokens, ceil(items / 128)) CTAs, one RoPE pair or V value a thread. REQUIRES: even
// head_dim; no two tokens share a slot. Throws std::invalid_argument for an odd head_dim,
// block_size < 1, or a format or scales check_kv_format refuses.
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
  void* k_cache = nullptr;                     // elements of `format` (kv_layout.h)
  void* v_cache = nullptr;
  std::int64_t block_stride = 0;
  std::int32_t block_size = 0;
  FloatFormat format = FloatFormat::kBf16;  // kBf16, kFp8E4m3, kFp8E5m2
  float k_scale = 1.0f;                     // fp8 only
  float v_scale = 1.0f;
};
void qkv_rope_kv_write(const QkvRopeKvWriteArgs& args, Stream stream);

}  // namespace servelab::kernels
