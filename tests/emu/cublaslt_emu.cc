// The CUDA emulator's cuBLASLt subset (contract: tests/emu/include/cublasLt.h).
#include <cublasLt.h>

#include <cstring>

#include "blas_emu.h"

struct cublasLtMatmulDescEmu {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale_type = CUDA_R_32F;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
};
struct cublasLtMatrixLayoutEmu {
  cudaDataType_t type = CUDA_R_32F;
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
};
struct cublasLtMatmulPreferenceEmu {
  std::uint64_t max_workspace = 0;
};

namespace {

struct Context {};

// An emulated algorithm: data[0] its index, data[1] this marker (so that a zeroed or foreign
// descriptor is refused, as the real library refuses an uninitialised one).
constexpr std::uint64_t kAlgoMarker = 0x5e7e1ab0a1900000ull;

std::size_t workspace_needed(int index) { return static_cast<std::size_t>(index) * 1024; }

bool valid_algo(const cublasLtMatmulAlgo_t* algo) {
  return algo != nullptr && algo->data[1] == kAlgoMarker && algo->data[0] < kEmuLtAlgos;
}

// The GEMM a descriptor and its layouts describe (C == D), or false when they disagree.
bool describe(const cublasLtMatmulDescEmu* d, const cublasLtMatrixLayoutEmu* a,
              const cublasLtMatrixLayoutEmu* b, const cublasLtMatrixLayoutEmu* c,
              const cublasLtMatrixLayoutEmu* dd, servelab_emu::BlasGemm* g) {
  if (d == nullptr || a == nullptr || b == nullptr || c == nullptr || dd == nullptr) return false;
  if (d->compute != CUBLAS_COMPUTE_32F || d->scale_type != CUDA_R_32F) return false;
  if (c->type != dd->type || c->rows != dd->rows || c->cols != dd->cols || c->ld != dd->ld) {
    return false;
  }
  const std::uint64_t m = d->transa == CUBLAS_OP_N ? a->rows : a->cols;
  const std::uint64_t ka = d->transa == CUBLAS_OP_N ? a->cols : a->rows;
  const std::uint64_t kb = d->transb == CUBLAS_OP_N ? b->rows : b->cols;
  const std::uint64_t n = d->transb == CUBLAS_OP_N ? b->cols : b->rows;
  if (ka != kb || c->rows != m || c->cols != n) return false;
  g->transa = d->transa;
  g->transb = d->transb;
  g->m = static_cast<int>(m);
  g->n = static_cast<int>(n);
  g->k = static_cast<int>(ka);
  g->atype = a->type;
  g->lda = static_cast<int>(a->ld);
  g->btype = b->type;
  g->ldb = static_cast<int>(b->ld);
  g->ctype = c->type;
  g->ldc = static_cast<int>(c->ld);
  return servelab_emu::blas_gemm_valid(*g) && a->ld >= static_cast<std::int64_t>(a->rows) &&
         b->ld >= static_cast<std::int64_t>(b->rows);
}

// The descriptors' create and destroy calls: a new T{args...} into *out, and its deletion.
template <typename T, typename... Args>
cublasStatus_t make(T** out, Args... args) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *out = new T{args...};
  return CUBLAS_STATUS_SUCCESS;
}
template <typename T>
cublasStatus_t release(T* p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T>
cublasStatus_t set_value(T* field, const void* buf, std::size_t bytes) {
  if (buf == nullptr || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasLtHandle_t>(new Context);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete reinterpret_cast<Context*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }
std::size_t cublasLtGetVersion() { return 130000; }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  return make(desc, compute, scale_type, CUBLAS_OP_N, CUBLAS_OP_N);
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { return release(desc); }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              std::size_t bytes) {
  if (desc == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  std::int32_t op = 0;
  const cublasStatus_t st = set_value(&op, buf, bytes);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA) {
    desc->transa = static_cast<cublasOperation_t>(op);
  } else if (attr == CUBLASLT_MATMUL_DESC_TRANSB) {
    desc->transb = static_cast<cublasOperation_t>(op);
  } else {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          std::uint64_t rows, std::uint64_t cols, std::int64_t ld) {
  return make(layout, type, rows, cols, ld);
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return release(layout);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return make(pref);
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return release(pref);
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, std::size_t bytes) {
  if (pref == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    return set_value(&pref->max_workspace, buf, bytes);
  }
  std::uint32_t value = 0;
  const cublasStatus_t st = set_value(&value, buf, bytes);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE) {  // best fit (0) only
    return value == 0 ? st : CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES &&
      attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {  // a power of two
    return value != 0 && (value & (value - 1)) == 0 ? st : CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  servelab_emu::BlasGemm g;
  if (requested <= 0 || results == nullptr || returned == nullptr || pref == nullptr ||
      !describe(desc, a, b, c, d, &g)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  int n = 0;
  for (int i = 0; i < kEmuLtAlgos && n < requested; ++i) {
    if (workspace_needed(i) > pref->max_workspace) continue;
    cublasLtMatmulHeuristicResult_t& r = results[n++];
    r = {};
    r.algo.data[0] = static_cast<std::uint64_t>(i);
    r.algo.data[1] = kAlgoMarker;
    r.workspaceSize = workspace_needed(i);
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
  }
  *returned = n;
  return n > 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    void* buf, std::size_t bytes,
                                                    std::size_t* written) {
  if (!valid_algo(algo) || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  // ID: the index; TILE_ID: 0 (undefined); SPLITK_NUM: the parts k is summed in.
  const auto index = static_cast<std::int32_t>(algo->data[0]);
  std::int32_t value = attr == CUBLASLT_ALGO_CONFIG_ID           ? index
                       : attr == CUBLASLT_ALGO_CONFIG_SPLITK_NUM ? index + 1
                                                                 : 0;
  if (attr != CUBLASLT_ALGO_CONFIG_ID && attr != CUBLASLT_ALGO_CONFIG_TILE_ID &&
      attr != CUBLASLT_ALGO_CONFIG_SPLITK_NUM) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (bytes != sizeof(value)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, &value, sizeof(value));
  if (written != nullptr) *written = sizeof(value);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t adesc, const void* b,
                              cublasLtMatrixLayout_t bdesc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t cdesc, void* d, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t* algo, void*, std::size_t workspace_bytes,
                              cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  servelab_emu::BlasGemm g;
  if (alpha == nullptr || beta == nullptr || c != d ||
      !describe(desc, adesc, bdesc, cdesc, ddesc, &g)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // No heuristic-free calls: the emulated library always takes an algorithm it offered.
  if (!valid_algo(algo) || workspace_needed(static_cast<int>(algo->data[0])) > workspace_bytes) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  g.alpha = *static_cast<const float*>(alpha);
  g.beta = *static_cast<const float*>(beta);
  g.a = a;
  g.b = b;
  g.c = d;
  g.splits = static_cast<int>(algo->data[0]) + 1;
  return servelab_emu::enqueue(stream, [g] { servelab_emu::run_blas_gemm(g); })
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_NOT_SUPPORTED;
}
