// The linear layer of a decode step (kernels/gemm_skinny.cu): the contract of Gemm::linear,
//   y[T][out] = x[T][in] * w[out][in]^T (+ beta * y), bf16 in, fp32 accumulation, fp32 or bf16 y,
// for 1 <= T <= kSkinnyMaxTokens (kernels/gemm_kernel.h) tokens, where a step reads every weight
// once and its time is the weights' bytes over the memory bandwidth. The kernel swaps the
// operands of mma.sync m16n8k16 (16 weight rows as A, 8 tokens as B), so a token count of 1 wastes
// tensor-core work, not bytes. A CTA owns 128 output rows (a 16-row tile per warp) and a range of
// `in` (kernels/skinny_plan.h: how many CTAs split a row block's `in`, from a model of the
// device); weights and token values stream through a 6-stage cp.async pipeline in shared memory
// (each lane its own weight slots, the token values shared by the CTA's warps). With one split a
// CTA writes y; with several, each writes an fp32 partial tile to `partials` and the last to
// finish (a row-block counter) sums them in split order and writes y, then zeroes the counter.
// Deterministic: the same inputs and plan give the same bits, whichever CTA finishes last (not
// cuBLAS's bits: another summation order; the plan depends on the device's SM count).
//
// swiglu: x is the fused gate/up projection [T][2 * in] (gate columns first) and the kernel
// multiplies by silu(gate) * up, each rounded to bf16 as silu_mul (kernels/activation.h) rounds
// it, so down_proj(silu_mul(gate_up)) and this give the same bits, without the intermediate.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/device.h"
#include "kernels/skinny_plan.h"

namespace servelab::kernels {

struct SkinnyGemmArgs {
  const Bf16* x;  // [tokens][in], or [tokens][2 * in] with swiglu; 16-byte aligned
  const Bf16* w;  // [out][in] (nn.Linear's layout); 16-byte aligned
  void* y;        // [tokens][out]: fp32 when y_f32, else bf16
  bool y_f32;
  std::int32_t tokens;
  std::int32_t in;
  std::int32_t out;
  float beta;  // y = x w^T + beta * y; beta == 0 never reads y (it may hold NaN)
  bool swiglu;
  // The split plans' workspace: fp32 partial tiles (any content) and row-block counters that
  // are zero before a launch and left zero after it (zero them once: cudaMemset). Without
  // them (null or too small for the plan: kernels/skinny_plan.h) every row block is one CTA.
  // One launch at a time may use them (launches on one stream are).
  float* partials = nullptr;
  std::size_t partial_bytes = 0;
  unsigned* counters = nullptr;
  std::int32_t counter_count = 0;
  std::int32_t sm_count = 0;       // the plan's SMs; 0: the current device's
  std::int32_t forced_splits = 0;  // > 0: this many splits (plan_skinny's forced_splits)
};

// True when the kernel takes the shape: 1 <= tokens <= kSkinnyMaxTokens, in > 0 and a multiple
// of 32, out > 0.
bool skinny_shape_fits(std::int32_t tokens, std::int32_t in, std::int32_t out);
// True when skinny_linear takes these arguments: the shape fits, x and w 16-byte aligned.
bool skinny_gemm_fits(const SkinnyGemmArgs& a);

// The plan skinny_linear launches `a` with (kernels/skinny_plan.h, the device's SM count unless
// a.sm_count); it reads the shape, swiglu and the workspace fields only. REQUIRES
// skinny_shape_fits(a.tokens, a.in, a.out).
SkinnyPlan skinny_plan_for(const SkinnyGemmArgs& a);

// Launches the kernel on `stream` (grid: row blocks x splits, 256 threads). Throws
// std::invalid_argument when !skinny_gemm_fits(a), std::runtime_error on a launch error.
void skinny_linear(const SkinnyGemmArgs& a, Stream stream);

}  // namespace servelab::kernels
