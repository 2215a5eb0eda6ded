// Internal to the decode launcher (kernels/attention_decode.cu): the pipelined kernel's entry
// points (kernels/attention_decode_pipelined.cu). CUDA-only; never included by host-only code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention.h"

namespace servelab::kernels::detail {

// Launches the pipelined kernel (and its merge when a.plan.split()). REQUIRES: `a` passed the
// checks of paged_decode_attention.
void launch_pipelined_decode(const DecodeAttentionArgs& a, cudaStream_t stream);
// Resident CTAs of the pipelined kernel per SM (its dynamic shared memory included), of the fp8
// instance when `fp8`.
std::int32_t pipelined_decode_ctas_per_sm(std::int32_t head_dim, bool fp8);

}  // namespace servelab::kernels::detail
