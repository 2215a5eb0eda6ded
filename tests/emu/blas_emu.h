// The emulated cuBLAS family's one GEMM (tests/emu/blas_emu.cc), shared by the emulated
// cublasGemmEx (cublas_emu.cc) and cublasLtMatmul (cublaslt_emu.cc):
// C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C, op(A) m x k, op(B) k x n, A and B
// bf16 or fp32, C fp32 or bf16. k is summed in `splits` consecutive parts (the first k % splits
// one element longer): each part in double; with one part the double sum is used as it is,
// with more each part is rounded to float and the parts added in float, in order. beta = 0 never
// reads C (it may hold NaN), as cuBLAS. Nothing is checked here: the callers validate.
#pragma once

#include <cublas_v2.h>

namespace servelab_emu {

struct BlasGemm {
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* a = nullptr;
  cudaDataType_t atype = CUDA_R_32F;
  int lda = 0;
  const void* b = nullptr;
  cudaDataType_t btype = CUDA_R_32F;
  int ldb = 0;
  void* c = nullptr;
  cudaDataType_t ctype = CUDA_R_32F;
  int ldc = 0;
  int splits = 1;
};

// True for the types and leading dimensions cuBLAS accepts for `g` (sizes >= 0).
bool blas_gemm_valid(const BlasGemm& g);
// Computes `g` now, on the calling thread.
void run_blas_gemm(const BlasGemm& g);

}  // namespace servelab_emu
