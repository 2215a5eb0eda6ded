// fp8 KV-cache elements on the device: encoding (the KV write) and decoding to bf16 (the
// attention kernels), one definition each. Internal to the .cu files (never included by host-only
// code). Under the CUDA emulator (SERVELAB_CUDA_EMU) the same functions call the host reference
// of kernels/float_formats.h, so the kernels' own code is what the emulated tests execute.
//
// Contracts (the formats of kernels/float_formats.h):
//   fp8_encode(x, scale, e5m2)   the fp8 code of x / scale (an IEEE division), rounded to
//                                nearest even, saturating at the largest finite value (CUDA's
//                                __NV_SATFINITE; NaN stays NaN): float_formats.h's
//                                float_to_fp8_e4m3 / _e5m2 of (x / scale), bit for bit;
//   fp8x2_to_bf16x2(codes, e5m2) the low 2 codes (byte 0 -> the low half) to a bf16 pair, exact;
//   fp8x8_to_bf16x8(raw, e5m2)   8 codes (byte i of `raw` is element i) to 8 bf16 values (uint4,
//                                element i in the low half of word i / 2 when i is even), exact:
//                                every e4m3 and e5m2 value is a bf16 value.
// `e5m2` selects the format (false: e4m3, the "fn" variant); it is uniform across a launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/float_formats.h"
#if !defined(SERVELAB_CUDA_EMU)
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

namespace servelab::kernels::detail {

// The KV element type of an attention kernel instance (its template argument kKv): with the
// format a template argument, every widening is one conversion, with no branch on a run-time
// format flag around it.
constexpr int kKvBf16 = 0, kKvE4m3 = 1, kKvE5m2 = 2;
// The instance argument of a PagedKv format (kBf16, kFp8E4m3, kFp8E5m2).
constexpr int kv_instance(FloatFormat f) {
  return f == FloatFormat::kFp8E5m2 ? kKvE5m2 : f == FloatFormat::kFp8E4m3 ? kKvE4m3 : kKvBf16;
}

// Host side of the attention launchers: calls f(hd, kv) with hd and kv std::integral_constant
// tags of the instance for head_dim (64, else 128: the launchers check head_dim first) and the
// format (kv_instance), so that a launcher names its template instances once.
template <typename F>
void with_attention_instance(int head_dim, FloatFormat format, F&& f) {
  const int kv = kv_instance(format);
  auto with_kv = [&](auto hd) {
    using Bf16 = std::integral_constant<int, kKvBf16>;
    using E4m3 = std::integral_constant<int, kKvE4m3>;
    using E5m2 = std::integral_constant<int, kKvE5m2>;
    kv == kKvBf16 ? f(hd, Bf16{}) : kv == kKvE4m3 ? f(hd, E4m3{}) : f(hd, E5m2{});
  };
  head_dim == 64 ? with_kv(std::integral_constant<int, 64>{})
                 : with_kv(std::integral_constant<int, 128>{});
}

#if defined(SERVELAB_CUDA_EMU)

__device__ __forceinline__ std::uint8_t fp8_encode(float x, float scale, bool e5m2) {
  return e5m2 ? float_to_fp8_e5m2(x / scale) : float_to_fp8_e4m3(x / scale);
}
__device__ __forceinline__ float2 fp8x2_to_float2(unsigned codes, bool e5m2) {
  const auto lo = static_cast<std::uint8_t>(codes & 0xffu);
  const auto hi = static_cast<std::uint8_t>((codes >> 8) & 0xffu);
  return e5m2 ? make_float2(fp8_e5m2_to_float(lo), fp8_e5m2_to_float(hi))
              : make_float2(fp8_e4m3_to_float(lo), fp8_e4m3_to_float(hi));
}

#else

__device__ __forceinline__ std::uint8_t fp8_encode(float x, float scale, bool e5m2) {
  return static_cast<std::uint8_t>(
      __nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3));
}
// cvt.rn.f16x2.e4m3x2 / .e5m2x2: the low byte becomes the low half.
__device__ __forceinline__ float2 fp8x2_to_float2(unsigned codes, bool e5m2) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes),
                                                   e5m2 ? __NV_E5M2 : __NV_E4M3);
  return __half22float2(__half2(h));
}

#endif

__device__ __forceinline__ unsigned fp8x2_to_bf16x2(unsigned codes, bool e5m2) {
  const float2 f = fp8x2_to_float2(codes, e5m2);
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
  return *reinterpret_cast<const unsigned*>(&b);
}

__device__ __forceinline__ uint4 fp8x8_to_bf16x8(const uint2 raw, bool e5m2) {
  const unsigned in[2] = {raw.x, raw.y};
  unsigned out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = fp8x2_to_bf16x2(in[i / 2] >> (16 * (i % 2)), e5m2);
  return make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace servelab::kernels::detail
