// Stand-in for NVIDIA's <mma.h> (nvcuda::wmma) in the CUDA emulator build: the subset the WMMA
// prefill kernel (kernels/attention_prefill.cu) uses, 16x16x16 bf16 -> fp32. A fragment's layout
// across lanes is opaque in CUDA, so here every lane holds the whole tile: each lane loads all of
// it, which keeps the kernel's own __syncwarp calls the ordering between lanes, with two
// exceptions that mirror the hardware: a load completes in every lane before any lane goes on (so
// a later store cannot feed an earlier load of another lane), and each lane stores only its share
// of a tile (elements i with i % 32 == lane), so a missing __syncwarp after a store is still
// visible. mma_sync computes only that share of the accumulator in each lane (the warp together
// computes the tile once, not 32 times: the emulator's slowest path before) and sets the rest to
// NaN: an accumulator leaves a fragment only through store_matrix_sync (its layout is opaque), so
// a kernel that used another lane's element would show NaN in its output.
#pragma once

#include <limits>

#include "servelab_cuda_emu.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int kRows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int kCols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = kRows * kCols;
  float x[num_elements];  // row-major, values (bf16 inputs held exactly)
};

namespace detail {
inline int lane() {
  return static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;
}
inline float value(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float value(float v) { return v; }
template <typename Frag, typename T>
void load(Frag& f, const T* p, unsigned ldm, bool col_major) {
  for (int r = 0; r < Frag::kRows; ++r) {
    for (int c = 0; c < Frag::kCols; ++c) {
      f.x[r * Frag::kCols + c] = value(col_major ? p[c * ldm + r] : p[r * ldm + c]);
    }
  }
  __syncwarp();
}
}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float v) {
  for (float& e : f.x) e = v;
}
template <typename Use, int M, int N, int K, typename T, typename Layout, typename P>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const P* p, unsigned ldm) {
  detail::load(f, p, ldm, std::is_same_v<Layout, col_major>);
}
template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm,
                      layout_t layout) {
  detail::load(f, p, ldm, layout == mem_col_major);
}
template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm,
                       layout_t layout) {
  for (int i = detail::lane(); i < M * N; i += 32) {
    const int r = i / N, c = i % N;
    (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[i];
  }
}
template <int M, int N, int K, typename TA, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d,
              const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TA, LB>& b,
              const fragment<accumulator, M, N, K, float>& c) {
  float out[M * N];
  for (float& e : out) e = std::numeric_limits<float>::quiet_NaN();
  for (int i = detail::lane(); i < M * N; i += 32) {  // this lane's share (store_matrix_sync's)
    const int r = i / N, n = i % N;
    double acc = c.x[i];
    for (int k = 0; k < K; ++k) acc += double{a.x[r * K + k]} * b.x[k * N + n];
    out[i] = static_cast<float>(acc);
  }
  for (int i = 0; i < M * N; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma
