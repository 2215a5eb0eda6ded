// A constraint on the tokens a sequence may produce next: structured outputs (vLLM's
// structured_outputs, response_format, tool_choice "required"; engine/structured_output.h holds
// the grammar-based one). The executors ask it for each sampled row (engine/sample_stream.h
// row_constraint) and draw only among the tokens it allows (step 0 of core/sampling_params.h).
// The simulator ignores it: what a step costs does not depend on the token drawn.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/request.h"

namespace servelab {

// The tokens a row may draw: bit t % 32 of word t / 32 set for each allowed token t; words
// beyond the vector (ids at or above 32 x its size) are not allowed.
using TokenMask = std::vector<std::uint32_t>;

inline bool token_allowed(const TokenMask& mask, std::int32_t t) {
  const auto w = static_cast<std::size_t>(t) / 32;
  return t >= 0 && w < mask.size() && ((mask[w] >> (static_cast<unsigned>(t) % 32)) & 1u) != 0;
}

class OutputConstraint {
 public:
  virtual ~OutputConstraint() = default;
  // The tokens that may follow the outputs `earlier` then `later` of sequence `sequence` (the
  // request's id, or sample_request_id of one of its samples). Never empty: where the text so
  // far leaves no way on, only the end-of-sequence tokens; null where the constraint does not
  // hold this row (a reasoning model still thinking). Thread-safe; a sequence's calls may come
  // in any order (a verify row's drafts, a preempted sequence's recompute).
  virtual std::shared_ptr<const TokenMask> allowed(RequestId sequence,
                                                   std::span<const std::int32_t> earlier,
                                                   std::span<const std::int32_t> later) const = 0;
};

}  // namespace servelab
