// SiLU-and-multiply (SwiGLU) after the fused gate/up projection (kernels/elementwise.cu):
// gate_up [num_tokens][2 * width] bf16 (gate columns first, then up) -> out [num_tokens][width]
// bf16, out = silu(gate) * up computed in fp32, silu(g) = g / (1 + e^-g).
// Any num_tokens (a grid-stride loop over rows on grid.x, so more than 65,535 tokens work).
// Throws std::invalid_argument for a width that is not a multiple of 8 (16-byte accesses) or a
// negative size, std::runtime_error on a launch error.
#pragma once

#include <cstdint>

#include "kernels/device.h"

namespace servelab::kernels {

void silu_mul(const Bf16* gate_up, Bf16* out, std::int32_t num_tokens, std::int32_t width,
              Stream stream);

}  // namespace servelab::kernels
