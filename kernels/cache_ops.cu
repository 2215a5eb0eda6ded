// KV write and block copies (kernels/cache_ops.h). Pure data movement with 16-byte accesses.
#include <cuda_bf16.h>

#include <stdexcept>

#include "kernels/cache_ops.h"
#include "kernels/common.cuh"
#include "kernels/fp8.cuh"
#include "kernels/kv_layout.h"

namespace servelab::kernels {

namespace {

__global__ void kv_write_kernel(const KvWriteArgs a) {
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const int t = blockIdx.x;
  const std::int64_t slot = a.slot_mapping[t];
  if (slot < 0) return;
  const std::int64_t row = std::int64_t{a.num_kv_heads} * a.head_dim;  // elements per token
  const std::int64_t dst = (slot / a.block_size) * a.block_stride + (slot % a.block_size) * row;
  const uint4* k = reinterpret_cast<const uint4*>(a.k + t * row);
  const uint4* v = reinterpret_cast<const uint4*>(a.v + t * row);
  if (!detail::is_fp8(a.format)) {
    uint4* kc = reinterpret_cast<uint4*>(static_cast<Bf16*>(a.k_cache) + dst);
    uint4* vc = reinterpret_cast<uint4*>(static_cast<Bf16*>(a.v_cache) + dst);
    for (int i = threadIdx.x; i < row / 8; i += blockDim.x) {
      kc[i] = k[i];
      vc[i] = v[i];
    }
    return;
  }
  // fp8: 8 bf16 values in, 8 codes out (one 8-byte store).
  const bool e5m2 = a.format == FloatFormat::kFp8E5m2;
  uint2* kc = reinterpret_cast<uint2*>(static_cast<unsigned char*>(a.k_cache) + dst);
  uint2* vc = reinterpret_cast<uint2*>(static_cast<unsigned char*>(a.v_cache) + dst);
  auto encode8 = [e5m2](const uint4 raw, float scale) {
    float f[8];
    detail::unpack8(raw, f);
    unsigned w[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      w[j / 4] |= unsigned{detail::fp8_encode(f[j], scale, e5m2)} << (8 * (j % 4));
    }
    return make_uint2(w[0], w[1]);
  };
  for (int i = threadIdx.x; i < row / 8; i += blockDim.x) {
    kc[i] = encode8(k[i], a.k_scale);
    vc[i] = encode8(v[i], a.v_scale);
  }
}

constexpr std::int64_t kChunkBytes = 64 * 1024;  // bytes one CTA copies per block

__global__ void copy_blocks_kernel(const unsigned char* src, unsigned char* dst,
                                   const BlockPair* pairs, std::int64_t block_bytes) {
  const BlockPair pr = pairs[blockIdx.x];
  const std::int64_t begin = std::int64_t{blockIdx.y} * kChunkBytes;
  const std::int64_t end = min(block_bytes, begin + kChunkBytes);
  const uint4* s = reinterpret_cast<const uint4*>(src + pr.src * block_bytes);
  uint4* d = reinterpret_cast<uint4*>(dst + pr.dst * block_bytes);
  for (std::int64_t i = begin / 16 + threadIdx.x; i < end / 16; i += blockDim.x) d[i] = s[i];
}

}  // namespace

void kv_write(const KvWriteArgs& a, Stream stream) {
  if (a.num_tokens == 0) return;
  if ((std::int64_t{a.num_kv_heads} * a.head_dim) % 8 != 0) {
    throw std::invalid_argument("kv_write: num_kv_heads * head_dim must be a multiple of 8");
  }
  check_kv_format(a.format, a.k_scale, a.v_scale, "kv_write");
  SERVELAB_LAUNCH_PDL(kv_write_kernel, a.num_tokens, 128, 0, detail::as_stream(stream))(a);
  detail::check_launch("kv_write");
}

void copy_blocks(const void* src, void* dst, const BlockPair* pairs, std::int32_t num_pairs,
                 std::int64_t block_bytes, Stream stream) {
  if (num_pairs == 0) return;
  if (block_bytes % 16 != 0) throw std::invalid_argument("copy_blocks: block_bytes % 16 != 0");
  const dim3 grid(num_pairs, static_cast<unsigned>((block_bytes + kChunkBytes - 1) / kChunkBytes));
  SERVELAB_LAUNCH(copy_blocks_kernel, grid, 256, 0, detail::as_stream(stream))
  (static_cast<const unsigned char*>(src), static_cast<unsigned char*>(dst), pairs, block_bytes);
  detail::check_launch("copy_blocks");
}

}  // namespace servelab::kernels
