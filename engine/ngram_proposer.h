// N-gram (prompt lookup) proposals for speculative decoding (serving.speculative_config with
// method ngram; vLLM's NgramProposer semantics, written here from its description): the longest
// suffix of the request's tokens, from max_n down to min_n tokens, that also occurs earlier in
// them proposes the (up to) k tokens that followed its earliest occurrence (vLLM v1 keeps the
// earliest of the longest matches; until 2026-12-07 this took the most recent). No match: no
// proposal. Pure function of the tokens; runs on the host.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/speculative_config.h"
#include "core/step_plan.h"

namespace servelab {

// Appends the proposal for `tokens` to `out` and returns how many tokens it appended (0 to k).
// REQUIRES: 1 <= min_n <= max_n, k >= 0.
std::int32_t ngram_propose(std::span<const std::int32_t> tokens, std::int32_t min_n,
                           std::int32_t max_n, std::int32_t k, std::vector<std::int32_t>& out);

// The proposal an executor returns after a step for plan entry `e` (CpuExecutor and
// CudaExecutor): ngram_propose with `config`'s lookup range and k over the request's tokens after
// the step: its prompt (prompt_token_value over `vocab_size`), its outputs before the step, the
// drafts the step accepted and the token it sampled. `history` is scratch space.
std::int32_t propose_after_step(const ScheduledRequest& e,
                                std::span<const std::int32_t> accepted_drafts, std::int32_t sampled,
                                std::int32_t vocab_size, const SpeculativeConfig& config,
                                std::vector<std::int32_t>& history, std::vector<std::int32_t>& out);

}  // namespace servelab
