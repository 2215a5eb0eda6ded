// RMSNorm with an optional fused residual add (kernels/elementwise.cu).
//
// For each i < num_rows, r = rows ? rows[i] : i:
//   if (delta) residual[r] += delta[r]          (fp32 residual stream, bf16 delta)
//   out[i] = bf16(residual[r] * rsqrt(mean(residual[r]^2) + eps) * weight)   (all in fp32)
// CpuExecutor's rms_norm (Hugging Face LlamaRMSNorm computed in fp32), rounded to bf16 once.
// `rows` selects a subset (the final norm before the LM head runs on sampled rows only).
// Grid: num_rows CTAs; deterministic (fixed reduction order). Tolerance vs the fp32 reference:
// one bf16 rounding, |err| <= 2^-8 |ref| + 1e-6.
#pragma once

#include <cstdint>

#include "kernels/device.h"

namespace servelab::kernels {

struct RmsNormArgs {
  float* residual = nullptr;           // [*][hidden]
  const Bf16* delta = nullptr;         // [*][hidden] or null
  const std::int32_t* rows = nullptr;  // device [num_rows] or null
  const float* weight = nullptr;       // [hidden]
  Bf16* out = nullptr;                 // [num_rows][hidden]
  std::int32_t num_rows = 0;
  std::int32_t hidden = 0;
  float eps = 1e-5f;
};
void rms_norm(const RmsNormArgs& args, Stream stream);

}  // namespace servelab::kernels
