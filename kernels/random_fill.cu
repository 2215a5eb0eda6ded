// Device side of kernels/random_fill.h: one grid-stride kernel per output type.
#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>

#include "kernels/common.cuh"
#include "kernels/random_fill.h"

namespace servelab::kernels {

namespace {

constexpr int kThreads = 256;
// Enough CTAs to fill any H100/H200 several times over; the loop strides over the rest.
constexpr std::int64_t kMaxBlocks = 4096;

__global__ void __launch_bounds__(kThreads)
    fill_bf16_kernel(__nv_bfloat16* dst, std::int64_t n, const CounterNormal p, float multiplier) {
  for (std::int64_t i = std::int64_t{blockIdx.x} * kThreads + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * kThreads) {
    const float v = counter_normal(p, static_cast<std::uint64_t>(i));
    dst[i] = __float2bfloat16_rn(__fmul_rn(multiplier, v));
  }
}

__global__ void __launch_bounds__(kThreads)
    fill_f32_kernel(float* dst, std::int64_t n, const CounterNormal p) {
  for (std::int64_t i = std::int64_t{blockIdx.x} * kThreads + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * kThreads) {
    dst[i] = counter_normal(p, static_cast<std::uint64_t>(i));
  }
}

int blocks_for(std::int64_t n) {
  if (n < 0) throw std::invalid_argument("fill_counter_normal: negative element count");
  return static_cast<int>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

}  // namespace

void fill_counter_normal(Bf16* dst, std::int64_t n, const CounterNormal& params, Stream stream,
                         float multiplier) {
  const int blocks = blocks_for(n);
  if (blocks == 0) return;
  SERVELAB_LAUNCH(fill_bf16_kernel, blocks, kThreads, 0, detail::as_stream(stream))
  (detail::bf(dst), n, params, multiplier);
  detail::check_launch("fill_counter_normal (bf16)");
}

void fill_counter_normal(float* dst, std::int64_t n, const CounterNormal& params, Stream stream) {
  const int blocks = blocks_for(n);
  if (blocks == 0) return;
  SERVELAB_LAUNCH(fill_f32_kernel, blocks, kThreads, 0, detail::as_stream(stream))(dst, n, params);
  detail::check_launch("fill_counter_normal (f32)");
}

}  // namespace servelab::kernels
