// Log probabilities of sampled tokens (core/step_plan.h TokenLogprobs) from a row of fp32 logits,
// on the host: CpuExecutor and CudaExecutor (which copies the rows that need them) both call it,
// so the two report the same numbers for the same logits.
#pragma once

#include <cstdint>
#include <span>

#include "core/step_plan.h"

namespace servelab {

// log softmax(logits)[token] (in double, max-subtracted), its rank (1 + the entries larger than
// logits[token]) and the `top_k` largest entries (ties: the lower id first). REQUIRES:
// !logits.empty(), 0 <= token < logits.size(), top_k >= 0.
TokenLogprobs token_logprobs(std::span<const float> logits, std::int32_t token, std::int32_t top_k);

}  // namespace servelab
