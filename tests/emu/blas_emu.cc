// The emulated cuBLAS family's GEMM (contract: tests/emu/blas_emu.h).
#include "blas_emu.h"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace servelab_emu {

namespace {

float load(const void* p, cudaDataType_t type, long long i) {
  if (type == CUDA_R_32F) return static_cast<const float*>(p)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
void store(void* p, cudaDataType_t type, long long i, float v) {
  if (type == CUDA_R_32F) {
    static_cast<float*>(p)[i] = v;
  } else {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  }
}
bool known(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }

// Four dot products of `a` with b0..b3 over [k0, k1), each in double and in k order (four
// independent sums, so no serial chain of additions bounds the speed).
void dot4(const float* a, const float* b0, const float* b1, const float* b2, const float* b3,
          int k0, int k1, double out[4]) {
  double acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
  for (int kk = k0; kk < k1; ++kk) {
    const double x = a[kk];
    acc0 += x * b0[kk];
    acc1 += x * b1[kk];
    acc2 += x * b2[kk];
    acc3 += x * b3[kk];
  }
  out[0] = acc0;
  out[1] = acc1;
  out[2] = acc2;
  out[3] = acc3;
}

}  // namespace

bool blas_gemm_valid(const BlasGemm& g) {
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.splits < 1 || !known(g.atype) || !known(g.btype) ||
      !known(g.ctype)) {
    return false;
  }
  return g.lda >= std::max(1, g.transa == CUBLAS_OP_N ? g.m : g.k) &&
         g.ldb >= std::max(1, g.transb == CUBLAS_OP_N ? g.k : g.n) && g.ldc >= std::max(1, g.m);
}

void run_blas_gemm(const BlasGemm& g) {
  const int m = g.m, n = g.n, k = g.k;
  // op(A) rows and op(B) columns widened to float once, each contiguous in k, into buffers
  // reused between calls; then the dot products of each element of C.
  thread_local std::vector<float> arow, bcol;
  arow.resize(static_cast<std::size_t>(m) * k);
  bcol.resize(static_cast<std::size_t>(n) * k);
  for (int i = 0; i < m; ++i) {
    for (int kk = 0; kk < k; ++kk) {
      const long long idx = g.transa == CUBLAS_OP_N ? i + static_cast<long long>(kk) * g.lda
                                                    : kk + static_cast<long long>(i) * g.lda;
      arow[static_cast<std::size_t>(i) * k + kk] = load(g.a, g.atype, idx);
    }
  }
  for (int j = 0; j < n; ++j) {
    for (int kk = 0; kk < k; ++kk) {
      const long long idx = g.transb == CUBLAS_OP_N ? kk + static_cast<long long>(j) * g.ldb
                                                    : j + static_cast<long long>(kk) * g.ldb;
      bcol[static_cast<std::size_t>(j) * k + kk] = load(g.b, g.btype, idx);
    }
  }
  const auto finish = [&](int i, int j, double acc) {
    const long long ci = i + static_cast<long long>(j) * g.ldc;
    const double prior = g.beta == 0.0f ? 0.0 : double{g.beta} * load(g.c, g.ctype, ci);
    store(g.c, g.ctype, ci, static_cast<float>(g.alpha * acc + prior));
  };
  const int splits = std::max(1, std::min(g.splits, std::max(k, 1)));
  const auto part_begin = [&](int p) { return p * (k / splits) + std::min(p, k % splits); };
  // Column j's sums for rows i (four columns at a time where four remain).
  const auto columns = [&](int j, int width) {
    const float* b[4];
    for (int c = 0; c < 4; ++c) {
      b[c] = bcol.data() + static_cast<std::size_t>(j + std::min(c, width - 1)) * k;
    }
    for (int i = 0; i < m; ++i) {
      const float* ai = arow.data() + static_cast<std::size_t>(i) * k;
      double sum[4] = {0, 0, 0, 0};
      if (splits == 1) {
        dot4(ai, b[0], b[1], b[2], b[3], 0, k, sum);
      } else {
        float total[4] = {0, 0, 0, 0};
        for (int p = 0; p < splits; ++p) {
          double part[4];
          dot4(ai, b[0], b[1], b[2], b[3], part_begin(p), part_begin(p + 1), part);
          for (int c = 0; c < 4; ++c) total[c] += static_cast<float>(part[c]);
        }
        for (int c = 0; c < 4; ++c) sum[c] = total[c];
      }
      for (int c = 0; c < width; ++c) finish(i, j + c, sum[c]);
    }
  };
  int j = 0;
  for (; j + 4 <= n; j += 4) columns(j, 4);
  for (; j < n; ++j) columns(j, 1);
}

}  // namespace servelab_emu
