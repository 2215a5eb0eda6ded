// Stand-in for NVIDIA's <cublasLt.h> in the CUDA emulator build: the subset kernels/gemm_lt.cc
// uses (handle, matmul descriptor with TRANSA/TRANSB, matrix layouts, a preference with the
// workspace limit, the heuristic query, the algorithm's ID / tile / split-K attributes, and
// cublasLtMatmul with C == D), with the enum values of the real header.
// The heuristic offers kEmuLtAlgos algorithms in order; algorithm i sums the k dimension in i + 1
// consecutive parts, each in double, rounded to float and added in order (a split-K with a
// float reduction), so algorithm 0 equals the emulated cublasGemmEx bit for bit and the others
// differ from it in the last bits, as real algorithms do. Algorithm i > 0 asks for i KiB of
// workspace (the heuristic leaves out those the preference's limit cannot hold).
#pragma once

#include <cstdint>

#include "cublas_v2.h"

inline constexpr int kEmuLtAlgos = 3;

using cublasLtHandle_t = struct cublasLtContext*;
using cublasLtMatmulDesc_t = struct cublasLtMatmulDescEmu*;
using cublasLtMatrixLayout_t = struct cublasLtMatrixLayoutEmu*;
using cublasLtMatmulPreference_t = struct cublasLtMatmulPreferenceEmu*;

struct cublasLtMatmulAlgo_t {
  std::uint64_t data[8];
};

enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
};
enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,  // uint32_t; accepted, not modelled
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};
enum cublasLtMatmulAlgoConfigAttributes_t {
  CUBLASLT_ALGO_CONFIG_ID = 0,
  CUBLASLT_ALGO_CONFIG_TILE_ID = 1,
  CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 2,
};

struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  std::size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
const char* cublasLtGetStatusString(cublasStatus_t status);
std::size_t cublasLtGetVersion();  // the emulator's: 130000

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              std::size_t bytes);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          std::uint64_t rows, std::uint64_t cols, std::int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, std::size_t bytes);

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned);
cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr,
                                                    void* buf, std::size_t bytes,
                                                    std::size_t* written);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t adesc, const void* b,
                              cublasLtMatrixLayout_t bdesc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t cdesc, void* d, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream);
