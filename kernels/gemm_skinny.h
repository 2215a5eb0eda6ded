// The linear layer of a decode step (kernels/gemm_skinny.cu): the contract of Gemm::linear,
//   y[T][out] = x[T][in] * w[out][in]^T (+ beta * y), bf16 in, fp32 accumulation, fp32 or bf16 y,
// for 1 <= T <= kSkinnyMaxTokens (kernels/gemm_kernel.h) tokens, where a step reads every weight
// once and its time is the weights' bytes over the memory bandwidth. The kernel swaps the
// operands of mma.sync m16n8k16 (16 weight rows as A, 8 tokens as B), so a token count of 1 wastes
// tensor-core work, not bytes; each lane streams its weight rows with 16-byte loads straight into
// A fragments (no shared memory), four 32-column chunks ahead; the 8 warps of a CTA split `in`
// and sum their partial tiles in shared memory in a fixed order. Deterministic: the same inputs
// give the same bits, whatever the launch (not cuBLAS's bits: another summation order).
//
// swiglu: x is the fused gate/up projection [T][2 * in] (gate columns first) and the kernel
// multiplies by silu(gate) * up, each rounded to bf16 as silu_mul (kernels/activation.h) rounds
// it, so down_proj(silu_mul(gate_up)) and this give the same bits, without the intermediate.
#pragma once

#include <cstdint>

#include "kernels/device.h"

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
};

// True when skinny_linear takes these arguments: 1 <= tokens <= kSkinnyMaxTokens, in > 0 and a
// multiple of 32, out > 0, x and w 16-byte aligned.
bool skinny_gemm_fits(const SkinnyGemmArgs& a);

// Launches the kernel on `stream` (one CTA of 256 threads per 32 output rows). Throws
// std::invalid_argument when !skinny_gemm_fits(a), std::runtime_error on a launch error.
void skinny_linear(const SkinnyGemmArgs& a, Stream stream);

}  // namespace servelab::kernels
