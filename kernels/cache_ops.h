// KV cache maintenance: writing a step's K/V into blocks, and copying whole blocks (copy-on-write
// within the device cache, swap to and from pinned host memory). Exact (bit-for-bit) operations.
// Implementation: kernels/cache_ops.cu.
#pragma once

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/device.h"

namespace servelab::kernels {

// Writes token t's K and V rows (k, v: [num_tokens][num_kv_heads * head_dim]) into slot
// slot_mapping[t] (= block * block_size + slot, kv_layout.h slot_of) of one layer's planes, whose
// K (V) element (b, s, h, d) is k_cache[b * block_stride + (s * num_kv_heads + h) * head_dim + d].
// slot_mapping[t] < 0 skips the token. Grid: num_tokens CTAs, 16-byte copies.
// An fp8 cache (`format` kFp8E4m3 or kFp8E5m2, one byte per element) receives
// fp8(x / k_scale) for K and fp8(x / v_scale) for V (kernels/float_formats.h: nearest even,
// saturating), x being the bf16 value; a bf16 cache receives the bits unchanged.
// REQUIRES: no two tokens share a slot. Throws std::invalid_argument when num_kv_heads *
// head_dim is not a multiple of 8 or check_kv_format refuses the format or scales.
struct KvWriteArgs {
  const Bf16* k = nullptr;
  const Bf16* v = nullptr;
  const std::int64_t* slot_mapping = nullptr;  // device [num_tokens]
  std::int32_t num_tokens = 0;
  void* k_cache = nullptr;  // elements of `format` (kv_layout.h)
  void* v_cache = nullptr;
  std::int64_t block_stride = 0;
  std::int32_t block_size = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  FloatFormat format = FloatFormat::kBf16;  // kBf16, kFp8E4m3, kFp8E5m2
  float k_scale = 1.0f;                     // fp8 only
  float v_scale = 1.0f;
};
void kv_write(const KvWriteArgs& args, Stream stream);

// Copies block pairs[i].src of `src` to block pairs[i].dst of `dst`, each block `block_bytes`
// contiguous bytes (a whole block-major block of kv_layout.h: every layer, K and V). src and dst
// may be device memory or the device alias of pinned host memory (DeviceBuffer kPinnedHost), so
// one launch performs a whole batched swap-out, swap-in or copy-on-write. Pairs run in parallel:
// REQUIRES no pair's dst equals another pair's src or dst; block_bytes a multiple of 16.
// pairs is a device array of {src, dst} int64 block ids.
struct BlockPair {
  std::int64_t src = 0;
  std::int64_t dst = 0;
};
void copy_blocks(const void* src, void* dst, const BlockPair* pairs, std::int32_t num_pairs,
                 std::int64_t block_bytes, Stream stream);

}  // namespace servelab::kernels
