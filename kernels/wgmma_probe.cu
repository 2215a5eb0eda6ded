// The warpgroup-MMA probe (contract: kernels/wgmma_probe.h).
#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/ptx.cuh"
#include "kernels/wgmma_probe.h"

namespace servelab::kernels {

namespace {

// Shared memory: A's region, then B's, both zero-filled first. The regions are larger than the
// operands so that any strides wgmma_probe accepts (operand_extent) stay inside them, whichever way
// the hardware reads LBO and SBO: a misread layout reads zeros or the other operand, never past
// the allocation (48 KB, the most a launch gets without opting in).
constexpr int kARegion = 4096;
constexpr int kSmemBytes = 48 * 1024;
constexpr int kBRegion = kSmemBytes - kARegion;

// The farthest byte a 16-deep operand of `rows` rows (M/N) can reach with these strides under
// either reading of LBO and SBO.
std::int64_t operand_extent(std::int64_t rows, const WgmmaStrides& st) {
  const std::int64_t stride = std::max(st.lbo, st.sbo);
  return (rows / 8 + 1) * stride + 256;
}

template <int N, bool kRs>
__global__ void __launch_bounds__(128)
    wgmma_probe_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d,
                       std::uint32_t a_lbo, std::uint32_t a_sbo, std::uint32_t b_lbo,
                       std::uint32_t b_sbo) {
#if SERVELAB_WGMMA
  SERVELAB_DYNAMIC_SMEM(sm);  // kSmemBytes: A's region, then B's
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int i = tid; i < kSmemBytes / 16; i += 128) {
    reinterpret_cast<uint4*>(sm)[i] = make_uint4(0, 0, 0, 0);
  }
  __syncthreads();
  // A: row m, chunk c, placed as the prefill kernel places Q (detail::core_matrix_offset).
  for (int i = tid; i < 64 * 2; i += 128) {
    const int m = i / 2, c = i % 2;
    *reinterpret_cast<uint4*>(sm + detail::core_matrix_offset<16>(m, c)) =
        detail::load16(a + m * 16 + c * 8);
  }
  unsigned char* sb = sm + kARegion;
  if constexpr (kRs) {
    // B MN-major: row k, chunk c holds B(k, 8 c .. 8 c + 7), contiguous in b.
    for (int i = tid; i < 16 * (N / 8); i += 128) {
      const int k = i / (N / 8), c = i % (N / 8);
      *reinterpret_cast<uint4*>(sb + detail::core_matrix_offset<N>(k, c)) =
          detail::load16(b + k * N + c * 8);
    }
  } else {
    // B K-major: row j, chunk c holds B(8 c .. 8 c + 7, j), gathered down a column of b.
    for (int i = tid; i < N * 2; i += 128) {
      const int j = i / 2, c = i % 2;
      __nv_bfloat16* row =
          reinterpret_cast<__nv_bfloat16*>(sb + detail::core_matrix_offset<16>(j, c));
#pragma unroll
      for (int e = 0; e < 8; ++e) row[e] = b[(8 * c + e) * N + j];
    }
  }
  detail::fence_proxy_async();
  __syncthreads();

  float acc[N / 8][4];
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
  const std::uint32_t base = detail::smem_u32(sm);
  const std::uint64_t db = detail::wgmma_desc(base + kARegion, b_lbo, b_sbo);
  if constexpr (kRs) {
    // The warp's mma.m16n8k16 A fragment: rows r0 + g (+ 8), columns 2 t (+ 8), pairs.
    const int r0 = 16 * (warp % 4);
    auto pair = [&](int row, int col) {
      return *reinterpret_cast<const std::uint32_t*>(a + row * 16 + col);
    };
    std::uint32_t af[4] = {pair(r0 + g, 2 * t), pair(r0 + g + 8, 2 * t), pair(r0 + g, 2 * t + 8),
                           pair(r0 + g + 8, 2 * t + 8)};
    detail::wgmma_fence();
    detail::wgmma_rs_bmn<N>(acc, af, db, false);
    detail::wgmma_commit();
    detail::wgmma_wait<0>(acc, af);
  } else {
    detail::wgmma_fence();
    detail::wgmma_ss<N>(acc, detail::wgmma_desc(base, a_lbo, a_sbo), db, false);
    detail::wgmma_commit();
    detail::wgmma_wait<0>(acc);
  }
  // Element i of 8-column tile j: row 16 (warp % 4) + g + 8 ((i / 2) % 2), column 8 j + 2 t + i
  // % 2.
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = 16 * (warp % 4) + g + 8 * ((i / 2) % 2), col = 8 * j + 2 * t + i % 2;
      d[row * N + col] = acc[j][i];
    }
#endif
}

template <int N>
void launch(const WgmmaProbeArgs& p, cudaStream_t s) {
  void (*kernel)(const __nv_bfloat16*, const __nv_bfloat16*, float*, std::uint32_t, std::uint32_t,
                 std::uint32_t, std::uint32_t) =
      p.form == WgmmaProbeForm::kRsBmn ? wgmma_probe_kernel<N, true> : wgmma_probe_kernel<N, false>;
  SERVELAB_LAUNCH(kernel, 1, 128, kSmemBytes, s)
  (detail::bf(p.a), detail::bf(p.b), p.d, p.a_strides.lbo, p.a_strides.sbo, p.b_strides.lbo,
   p.b_strides.sbo);
}

}  // namespace

WgmmaStrides wgmma_probe_kernel_strides(WgmmaProbeForm form, bool operand_b, std::int32_t n) {
  if (form == WgmmaProbeForm::kRsBmn && operand_b) {
    return {static_cast<std::uint32_t>(16 * n), 128};
  }
  return {128, 256};
}

bool wgmma_probe_built() { return detail::kWgmmaBuilt; }

void wgmma_probe(const WgmmaProbeArgs& p, Stream stream) {
  if (!detail::kWgmmaBuilt) {
    throw std::invalid_argument(
        "wgmma_probe: needs a build for sm_90a (cmake -DSERVELAB_CUDA_SM90A=ON)");
  }
  if (p.n != 64 && p.n != 128) {
    throw std::invalid_argument("wgmma_probe: n must be 64 or 128, got " + std::to_string(p.n));
  }
  for (const WgmmaStrides* st : {&p.a_strides, &p.b_strides}) {
    if (st->lbo % 16 != 0 || st->sbo % 16 != 0 || st->lbo == 0 || st->sbo == 0) {
      throw std::invalid_argument("wgmma_probe: strides must be positive multiples of 16 bytes");
    }
  }
  if ((p.form == WgmmaProbeForm::kSs && operand_extent(64, p.a_strides) > kARegion) ||
      operand_extent(p.n, p.b_strides) > kBRegion) {
    throw std::invalid_argument("wgmma_probe: the strides reach past the probe's shared memory");
  }
  p.n == 64 ? launch<64>(p, detail::as_stream(stream)) : launch<128>(p, detail::as_stream(stream));
  detail::check_launch("wgmma_probe");
}

}  // namespace servelab::kernels
