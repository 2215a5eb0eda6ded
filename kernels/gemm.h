// Linear layers through cuBLAS (kernels/gemm.cc): y[T][out] = x[T][in] * w[out][in]^T (+ beta *
// y), bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F), output fp32 or bf16. Weights keep the
// Hugging Face nn.Linear layout; row-major W[out][in] is column-major W^T, so this is
// cublasGemmEx(OP_T, OP_N, out, T, in, W, lda=in, X, ldb=in, Y, ldc=out).
// beta = 1 with an fp32 y adds the projection into the residual stream (o_proj, down_proj).
// With set_kernel(GemmKernel::kSkinny) (kernels/gemm_kernel.h) a call the skinny kernel takes
// (kernels/gemm_skinny.h skinny_gemm_fits: at most 32 tokens) runs it instead of cuBLAS: the same
// contract, another summation order; its split plans keep their partial tiles in the workspace
// set_workspace gives (cuBLAS's, which no other call uses meanwhile: calls on one stream run in
// turn) and their row-block counters in kSkinnyCounters counters this object allocates. With
// GemmKernel::kCublasLt a linear() call whose token count is one of the tuned counts
// (set_lt_tokens) runs cuBLASLt with the algorithm timed for its shape (kernels/gemm_lt.h: tuned on
// the shape's first call outside stream capture, then fixed). With GemmKernel::kAuto such a call
// runs whichever of cuBLAS, cuBLASLt's candidates and the skinny kernel (at the split counts of
// kSkinnySplitSeries, its plan's own included) was fastest on
// the shape's first call, timed as cuBLASLt's candidates are (kernels/gemm_lt.h, decide_auto);
// swiglu_linear's shapes are decided apart, silu_mul counted where the kernel does not fuse it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/device.h"
#include "kernels/gemm_kernel.h"
#include "kernels/gemm_lt.h"
#include "kernels/skinny_plan.h"

namespace servelab::kernels {

struct SkinnyGemmArgs;  // kernels/gemm_skinny.h

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

  // linear() through cuBLAS on row-strided operands: row t of x at x + t * ldx, of y at
  // y + t * ldy (elements; ldx >= in, ldy >= out), so y may be a column slice of a wider matrix
  // (LoRA's shrink and expand onto the fused QKV and gate/up outputs). Never the skinny kernel.
  void linear_strided(const Bf16* x, std::int32_t ldx, const Bf16* w, void* y, Out out_type,
                      std::int32_t ldy, std::int32_t tokens, std::int32_t in, std::int32_t out,
                      float beta, Stream stream);

  // The MLP's second half: linear(silu_mul(gate_up), w) with gate_up [tokens][2 * in] bf16
  // (kernels/activation.h). The skinny kernel reads gate_up itself (the same bits, one launch and
  // no intermediate); otherwise silu_mul writes `act` [tokens][in] and linear() reads it.
  void swiglu_linear(const Bf16* gate_up, Bf16* act, const Bf16* w, void* y, Out out_type,
                     std::int32_t tokens, std::int32_t in, std::int32_t out, float beta,
                     Stream stream);

  // With kSkinny: the plan (kernels/skinny_plan.h) linear() / swiglu_linear() would launch the
  // skinny kernel with for this shape, with this object's workspace and SM count; nullopt when
  // the skinny kernel would not run it (another kernel chosen, or a shape it does not take).
  std::optional<SkinnyPlan> skinny_plan(std::int32_t tokens, std::int32_t in, std::int32_t out,
                                        bool swiglu) const;

  // Throws std::runtime_error when kCublasLt is chosen and cuBLASLt cannot be initialised.
  void set_kernel(GemmKernel kernel);
  GemmKernel kernel() const { return kernel_; }

  // With kCublasLt or kAuto: the token counts whose calls run the tuned choice (the engine's
  // decode graph buckets: the shapes a decode step replays); other counts run cuBLAS, so a
  // prefill or mixed step of a new length is never timed. Unset: every count up to
  // kLtDefaultMaxTokens.
  void set_lt_tokens(std::vector<std::int32_t> counts);
  static constexpr std::int32_t kLtDefaultMaxTokens = 512;
  // With kCublasLt or kAuto: LtGemm::reserve (the tuning buffers, allocated now); else nothing.
  void reserve_tuning(std::size_t scratch_bytes);
  // The shapes planned so far with the process's decision for each (empty unless kCublasLt or
  // kAuto ran).
  std::vector<LtChoice> lt_choices() const;

  // Gives cuBLAS a fixed workspace (device memory the caller owns and keeps alive while this
  // object is used), re-applied after every cublasSetStream (which resets it). With one, no
  // GEMM allocates, which makes linear() legal inside CUDA-graph stream capture; without one
  // (nullptr) cuBLAS uses its own pool. cuBLAS recommends 32 MiB on Hopper.
  void set_workspace(void* workspace, std::size_t bytes);
  static constexpr std::size_t kRecommendedWorkspaceBytes = std::size_t{32} << 20;
  // Row blocks a skinny split plan may have (128 rows each: layers of up to 524,288 outputs).
  static constexpr std::int32_t kSkinnyCounters = 4096;
  // The skinny kernel's split counts kAuto times for a shape (0: its plan's own), each once
  // after clamping (kernels/skinny_plan.h).
  static constexpr std::int32_t kSkinnySplitSeries[] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32};

 private:
  bool takes_lt(std::int32_t tokens) const;

  // Runs `a` on the skinny kernel, with this object's workspace, counters and SM count, when
  // kSkinny is chosen and the kernel takes the shape; false otherwise (the caller runs cuBLAS).
  bool ran_skinny(SkinnyGemmArgs a, Stream stream) const;
  // `a` with this object's workspace, counters and SM count.
  void add_skinny_workspace(SkinnyGemmArgs& a) const;
  // kAuto, for a tuned token count: y = x w^T + beta y on the process's choice for the shape
  // (deciding it on first use), x being `input` (linear: gate_up and act null) or `act`, which
  // silu_mul writes from gate_up unless the skinny kernel, reading gate_up itself, runs
  // (swiglu_linear: input null).
  void run_auto(const Bf16* input, const Bf16* gate_up, Bf16* act, const Bf16* w, void* y,
                Out out_type, std::int32_t tokens, std::int32_t in, std::int32_t out, float beta,
                Stream stream);

  void* handle_ = nullptr;  // cublasHandle_t
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  GemmKernel kernel_ = GemmKernel::kCublas;
  std::unique_ptr<LtGemm> lt_;           // created by set_kernel(kCublasLt or kAuto)
  std::vector<std::int32_t> lt_tokens_;  // sorted; empty: up to kLtDefaultMaxTokens
  DeviceBuffer skinny_counters_;  // kSkinnyCounters zeros, made by set_kernel(kSkinny or kAuto)
  std::int32_t sm_count_ = 0;
};

}  // namespace servelab::kernels
