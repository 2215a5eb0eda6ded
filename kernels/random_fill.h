// Random tensors generated on the device (kernels/random_fill.cu): dst[i] = counter_normal(params,
// i) for i in [0, n) (kernels/counter_normal.h), so a tensor filled here equals, element for
// element, the host's LlamaWeights::random tensor of the same parameters: exactly in fp32, and
// float_to_bf16 of it (round to nearest even) in bf16; with a `multiplier`, the bf16 element is
// float_to_bf16(multiplier * value), the product one fp32 multiplication (as the host's
// `float * float`; 1 leaves the value exact). One launch per call, grid-stride, on
// `stream`; no host memory is touched. Throws std::invalid_argument for n < 0 and
// std::runtime_error on a launch error.
#pragma once

#include <cstdint>

#include "kernels/counter_normal.h"
#include "kernels/device.h"

namespace servelab::kernels {

void fill_counter_normal(Bf16* dst, std::int64_t n, const CounterNormal& params, Stream stream,
                         float multiplier = 1.0f);
void fill_counter_normal(float* dst, std::int64_t n, const CounterNormal& params, Stream stream);

}  // namespace servelab::kernels
