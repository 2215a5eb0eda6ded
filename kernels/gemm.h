// Linear layers through cuBLAS (kernels/gemm.cc): y[T][out] = x[T][in] * w[out][in]^T (+ beta *
// y), bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F), output fp32 or bf16. Weights keep the
// Hugging Face nn.Linear layout; row-major W[out][in] is column-major W^T, so this is
// cublasGemmEx(OP_T, OP_N, out, T, in, W, lda=in, X, ldb=in, Y, ldc=out).
// beta = 1 with an fp32 y adds the projection into the residual stream (o_proj, down_proj).
#pragma once

#include <cstdint>

#include "kernels/device.h"

namespace servelab::kernels {

class Gemm {
 public:
  enum class Out { kF32, kBf16 };
  Gemm();
  // Destroy before the streams linear() was called with (the handle stays bound to the last).
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void linear(const Bf16* x, const Bf16* w, void* y, Out out_type, std::int32_t tokens,
              std::int32_t in, std::int32_t out, float beta, Stream stream);

 private:
  void* handle_ = nullptr;  // cublasHandle_t
};

}  // namespace servelab::kernels
