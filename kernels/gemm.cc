#include "kernels/gemm.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/activation.h"
#include "kernels/gemm_skinny.h"

namespace servelab::kernels {

namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS ") + what + ": " + cublasGetStatusString(s));
  }
}

cublasHandle_t as_handle(void* h) { return static_cast<cublasHandle_t>(h); }

}  // namespace

void Gemm::add_skinny_workspace(SkinnyGemmArgs& a) const {
  if (workspace_ != nullptr) {
    a.partials = static_cast<float*>(workspace_);
    a.partial_bytes = workspace_bytes_;
    a.counters = skinny_counters_.as<unsigned>();
    a.counter_count = kSkinnyCounters;
  }
  a.sm_count = sm_count_;
}

bool Gemm::ran_skinny(SkinnyGemmArgs a, Stream stream) const {
  if (kernel_ != GemmKernel::kSkinny || !skinny_gemm_fits(a)) return false;
  add_skinny_workspace(a);
  skinny_linear(a, stream);
  return true;
}

std::optional<SkinnyPlan> Gemm::skinny_plan(std::int32_t tokens, std::int32_t in, std::int32_t out,
                                            bool swiglu) const {
  if (kernel_ != GemmKernel::kSkinny || !skinny_shape_fits(tokens, in, out)) return std::nullopt;
  SkinnyGemmArgs a{nullptr, nullptr, nullptr, true, tokens, in, out, 0.0f, swiglu};
  add_skinny_workspace(a);
  return skinny_plan_for(a);
}

Gemm::Gemm() {
  cublasHandle_t h = nullptr;
  check(cublasCreate(&h), "cublasCreate");
  handle_ = h;
}

Gemm::~Gemm() {
  lt_.reset();
  // A destructor cannot throw: a failure is reported, not raised.
  const cublasStatus_t st = cublasDestroy(as_handle(handle_));
  if (st != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "servelab: cuBLAS cublasDestroy: %s\n", cublasGetStatusString(st));
  }
}

void Gemm::set_workspace(void* workspace, std::size_t bytes) {
  workspace_ = workspace;
  workspace_bytes_ = workspace != nullptr ? bytes : 0;
  if (lt_) lt_->set_workspace(workspace_, workspace_bytes_);
}

void Gemm::set_kernel(GemmKernel kernel) {
  kernel_ = kernel;
  if (kernel == GemmKernel::kSkinny && skinny_counters_.get() == nullptr) {
    skinny_counters_ = DeviceBuffer(sizeof(unsigned) * kSkinnyCounters);
    fill_bytes(skinny_counters_.get(), 0, skinny_counters_.bytes());
    synchronize();
    sm_count_ = device_info().sm_count;
  }
  if (kernel == GemmKernel::kCublasLt && !lt_) {
    lt_ = std::make_unique<LtGemm>();
    lt_->set_workspace(workspace_, workspace_bytes_);
  }
}

void Gemm::set_lt_tokens(std::vector<std::int32_t> counts) {
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  lt_tokens_ = std::move(counts);
}

std::vector<LtChoice> Gemm::lt_choices() const {
  return lt_ ? lt_->choices() : std::vector<LtChoice>{};
}

bool Gemm::takes_lt(std::int32_t tokens) const {
  if (kernel_ != GemmKernel::kCublasLt || !lt_) return false;
  if (lt_tokens_.empty()) return tokens <= kLtDefaultMaxTokens;
  return std::binary_search(lt_tokens_.begin(), lt_tokens_.end(), tokens);
}

void Gemm::linear(const Bf16* x, const Bf16* w, void* y, Out out_type, std::int32_t tokens,
                  std::int32_t in, std::int32_t out, float beta, Stream stream) {
  if (tokens == 0 ||
      ran_skinny({x, w, y, out_type == Out::kF32, tokens, in, out, beta, false}, stream)) {
    return;
  }
  if (takes_lt(tokens) && lt_->run(x, w, y, out_type == Out::kF32, tokens, in, out, beta, stream)) {
    return;
  }
  linear_strided(x, in, w, y, out_type, out, tokens, in, out, beta, stream);
}

void Gemm::linear_strided(const Bf16* x, std::int32_t ldx, const Bf16* w, void* y, Out out_type,
                          std::int32_t ldy, std::int32_t tokens, std::int32_t in, std::int32_t out,
                          float beta, Stream stream) {
  if (tokens == 0) return;
  check(cublasSetStream(as_handle(handle_), static_cast<cudaStream_t>(stream)), "cublasSetStream");
  if (workspace_ != nullptr) {
    check(cublasSetWorkspace(as_handle(handle_), workspace_, workspace_bytes_),
          "cublasSetWorkspace");
  }
  const float alpha = 1.0f;
  const cudaDataType_t ctype = out_type == Out::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  check(cublasGemmEx(as_handle(handle_), CUBLAS_OP_T, CUBLAS_OP_N, out, tokens, in, &alpha, w,
                     CUDA_R_16BF, in, x, CUDA_R_16BF, ldx, &beta, y, ctype, ldy, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

void Gemm::swiglu_linear(const Bf16* gate_up, Bf16* act, const Bf16* w, void* y, Out out_type,
                         std::int32_t tokens, std::int32_t in, std::int32_t out, float beta,
                         Stream stream) {
  if (tokens == 0 ||
      ran_skinny({gate_up, w, y, out_type == Out::kF32, tokens, in, out, beta, true}, stream)) {
    return;
  }
  silu_mul(gate_up, act, tokens, in, stream);
  linear(act, w, y, out_type, tokens, in, out, beta, stream);
}

}  // namespace servelab::kernels
