// The CUDA emulator's cuBLAS subset (contract: tests/emu/include/cublas_v2.h).
#include <cublas_v2.h>

#include <string>
#include <vector>

namespace {

struct Handle {
  cudaStream_t stream = nullptr;
};

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

// C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C, op(A) m x k, op(B) k x n.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType_t atype, int lda, const void* b,
                            cudaDataType_t btype, int ldb, const void* beta, void* c,
                            cudaDataType_t ctype, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || !known(atype) || !known(btype) || !known(ctype) ||
      compute != CUBLAS_COMPUTE_32F) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (lda < (transa == CUBLAS_OP_N ? m : k) || ldb < (transb == CUBLAS_OP_N ? k : n) || ldc < m) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  auto op = [=] {
    // op(A) rows and op(B) columns widened to float once, each contiguous in k, into buffers
    // reused between calls; then one double-precision dot product per element of C, summed in k
    // order. Four columns of C at a time (four independent sums, each still in k order: the
    // same results, without one serial chain of additions bounding the speed).
    thread_local std::vector<float> arow, bcol;
    arow.resize(static_cast<std::size_t>(m) * k);
    bcol.resize(static_cast<std::size_t>(n) * k);
    for (int i = 0; i < m; ++i) {
      for (int kk = 0; kk < k; ++kk) {
        const long long idx = transa == CUBLAS_OP_N ? i + static_cast<long long>(kk) * lda
                                                    : kk + static_cast<long long>(i) * lda;
        arow[static_cast<std::size_t>(i) * k + kk] = load(a, atype, idx);
      }
    }
    for (int j = 0; j < n; ++j) {
      for (int kk = 0; kk < k; ++kk) {
        const long long idx = transb == CUBLAS_OP_N ? kk + static_cast<long long>(j) * ldb
                                                    : j + static_cast<long long>(kk) * ldb;
        bcol[static_cast<std::size_t>(j) * k + kk] = load(b, btype, idx);
      }
    }
    const auto finish = [&](int i, int j, double acc) {
      const long long ci = i + static_cast<long long>(j) * ldc;
      // beta = 0 never reads C (it may hold NaN), as cuBLAS.
      const double prior = be == 0.0f ? 0.0 : double{be} * load(c, ctype, ci);
      store(c, ctype, ci, static_cast<float>(al * acc + prior));
    };
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      const float* b0 = bcol.data() + static_cast<std::size_t>(j) * k;
      const float *b1 = b0 + k, *b2 = b1 + k, *b3 = b2 + k;
      for (int i = 0; i < m; ++i) {
        const float* ai = arow.data() + static_cast<std::size_t>(i) * k;
        double acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
        for (int kk = 0; kk < k; ++kk) {
          const double x = ai[kk];
          acc0 += x * b0[kk];
          acc1 += x * b1[kk];
          acc2 += x * b2[kk];
          acc3 += x * b3[kk];
        }
        finish(i, j, acc0);
        finish(i, j + 1, acc1);
        finish(i, j + 2, acc2);
        finish(i, j + 3, acc3);
      }
    }
    for (; j < n; ++j) {
      const float* bj = bcol.data() + static_cast<std::size_t>(j) * k;
      for (int i = 0; i < m; ++i) {
        const float* ai = arow.data() + static_cast<std::size_t>(i) * k;
        double acc = 0;
        for (int kk = 0; kk < k; ++kk) acc += double{ai[kk]} * bj[kk];
        finish(i, j, acc);
      }
    }
  };
  return servelab_emu::enqueue(reinterpret_cast<Handle*>(handle)->stream, op)
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_NOT_SUPPORTED;
}
