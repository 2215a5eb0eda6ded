// N-gram (prompt lookup) proposals for speculative decoding (serving.speculative_config with
// method ngram; vLLM's NgramProposer semantics, written here from its description): the longest
// suffix of the request's tokens, from max_n down to min_n tokens, that also occurs earlier in
// them proposes the (up to) k tokens that followed its most recent earlier occurrence. No match:
// no proposal. Pure function of the tokens; runs on the host.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace servelab {

// Appends the proposal for `tokens` to `out` and returns how many tokens it appended (0 to k).
// REQUIRES: 1 <= min_n <= max_n, k >= 0.
std::int32_t ngram_propose(std::span<const std::int32_t> tokens, std::int32_t min_n,
                           std::int32_t max_n, std::int32_t k, std::vector<std::int32_t>& out);

}  // namespace servelab
