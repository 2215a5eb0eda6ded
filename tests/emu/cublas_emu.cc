// The CUDA emulator's cuBLAS subset (contract: tests/emu/include/cublas_v2.h).
#include <cublas_v2.h>

#include "blas_emu.h"

namespace {

struct Handle {
  cudaStream_t stream = nullptr;
};

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = reinterpret_cast<cublasHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete reinterpret_cast<Handle*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  reinterpret_cast<Handle*>(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void*, std::size_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "unknown cuBLAS status";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType_t atype, int lda, const void* b,
                            cudaDataType_t btype, int ldb, const void* beta, void* c,
                            cudaDataType_t ctype, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const servelab_emu::BlasGemm g{transa,
                                 transb,
                                 m,
                                 n,
                                 k,
                                 *static_cast<const float*>(alpha),
                                 *static_cast<const float*>(beta),
                                 a,
                                 atype,
                                 lda,
                                 b,
                                 btype,
                                 ldb,
                                 c,
                                 ctype,
                                 ldc,
                                 1};
  if (compute != CUBLAS_COMPUTE_32F || !servelab_emu::blas_gemm_valid(g)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return servelab_emu::enqueue(reinterpret_cast<Handle*>(handle)->stream,
                               [g] { servelab_emu::run_blas_gemm(g); })
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_NOT_SUPPORTED;
}
