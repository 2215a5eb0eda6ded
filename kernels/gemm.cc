#include "kernels/gemm.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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
  const bool skinny = kernel == GemmKernel::kSkinny || kernel == GemmKernel::kAuto;
  if (skinny && skinny_counters_.get() == nullptr) {
    skinny_counters_ = DeviceBuffer(sizeof(unsigned) * kSkinnyCounters);
    fill_bytes(skinny_counters_.get(), 0, skinny_counters_.bytes());
    synchronize();
    sm_count_ = device_info().sm_count;
  }
  if (gemm_kernel_tunes(kernel) && !lt_) {
    lt_ = std::make_unique<LtGemm>();
    lt_->set_workspace(workspace_, workspace_bytes_);
  }
}

void Gemm::set_lt_tokens(std::vector<std::int32_t> counts) {
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  lt_tokens_ = std::move(counts);
}

void Gemm::reserve_tuning(std::size_t scratch_bytes) {
  if (lt_) lt_->reserve(scratch_bytes);
}

std::vector<LtChoice> Gemm::lt_choices() const {
  return lt_ ? lt_->choices() : std::vector<LtChoice>{};
}

bool Gemm::takes_lt(std::int32_t tokens) const {
  if (!gemm_kernel_tunes(kernel_) || !lt_) return false;
  if (lt_tokens_.empty()) return tokens <= kLtDefaultMaxTokens;
  return std::binary_search(lt_tokens_.begin(), lt_tokens_.end(), tokens);
}

void Gemm::linear(const Bf16* x, const Bf16* w, void* y, Out out_type, std::int32_t tokens,
                  std::int32_t in, std::int32_t out, float beta, Stream stream) {
  if (tokens == 0 ||
      ran_skinny({x, w, y, out_type == Out::kF32, tokens, in, out, beta, false}, stream)) {
    return;
  }
  if (takes_lt(tokens)) {
    if (kernel_ == GemmKernel::kAuto) {
      run_auto(x, nullptr, nullptr, w, y, out_type, tokens, in, out, beta, stream);
      return;
    }
    if (lt_->run({tokens, in, out, out_type == Out::kF32, beta != 0.0f}, x, w, y, beta, stream)) {
      return;
    }
  }
  linear_strided(x, in, w, y, out_type, out, tokens, in, out, beta, stream);
}

void Gemm::run_auto(const Bf16* input, const Bf16* gate_up, Bf16* act, const Bf16* w, void* y,
                    Out out_type, std::int32_t tokens, std::int32_t in, std::int32_t out,
                    float beta, Stream stream) {
  const bool swiglu = gate_up != nullptr;
  const Bf16* x = swiglu ? act : input;
  const LtShape shape{tokens, in, out, out_type == Out::kF32, beta != 0.0f, swiglu, true};
  // silu_mul into x (the `act` of swiglu_linear) where the kernel does not fuse it.
  const auto prologue = [=](Stream s) {
    if (swiglu) silu_mul(gate_up, act, tokens, in, s);
  };
  const auto cublas = [=, this](void* target, Stream s) {
    linear_strided(x, in, w, target, out_type, out, tokens, in, out, beta, s);
  };
  SkinnyGemmArgs a{
      swiglu ? gate_up : input, w, y, out_type == Out::kF32, tokens, in, out, beta, swiglu};
  const bool skinny_fits = skinny_gemm_fits(a);
  if (skinny_fits) add_skinny_workspace(a);
  LtAlternatives alt;  // built only for a shape this object has not planned: then timed
  if (!lt_->planned(shape)) {
    alt.prologue = prologue;
    alt.kernels.push_back({TunedKernel::kCublas, 0, [=](void* target, Stream s) {
                             prologue(s);
                             cublas(target, s);
                           }});
    if (skinny_fits) {
      // The plan's own split count and kSkinnySplitSeries's, each once (the plan clamps a forced
      // count to what the shape and the workspace allow).
      std::vector<std::int32_t> counts;
      for (const std::int32_t forced : kSkinnySplitSeries) {
        SkinnyGemmArgs f = a;
        f.forced_splits = forced;
        const std::int32_t splits = skinny_plan_for(f).splits;
        if (std::find(counts.begin(), counts.end(), splits) != counts.end()) continue;
        counts.push_back(splits);
        f.forced_splits = splits;
        alt.kernels.push_back({TunedKernel::kSkinny, splits, [f](void* target, Stream s) {
                                 SkinnyGemmArgs t = f;
                                 t.y = target;
                                 skinny_linear(t, s);
                               }});
      }
    }
  }
  const LtChoice choice = lt_->decide_auto(shape, x, w, y, beta, stream, alt);
  if (choice.kernel == TunedKernel::kSkinny && skinny_fits) {
    a.forced_splits = choice.skinny_splits;
    skinny_linear(a, stream);
    return;
  }
  prologue(stream);
  if (choice.kernel == TunedKernel::kCublasLt && lt_->run(shape, x, w, y, beta, stream)) return;
  cublas(y, stream);
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
  if (kernel_ == GemmKernel::kAuto && takes_lt(tokens)) {
    run_auto(nullptr, gate_up, act, w, y, out_type, tokens, in, out, beta, stream);
    return;
  }
  silu_mul(gate_up, act, tokens, in, stream);
  linear(act, w, y, out_type, tokens, in, out, beta, stream);
}

}  // namespace servelab::kernels
