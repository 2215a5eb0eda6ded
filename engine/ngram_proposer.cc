#include "engine/ngram_proposer.h"

#include <algorithm>

#include "core/request.h"

namespace servelab {

std::int32_t ngram_propose(std::span<const std::int32_t> tokens, std::int32_t min_n,
                           std::int32_t max_n, std::int32_t k, std::vector<std::int32_t>& out) {
  const auto len = static_cast<std::int64_t>(tokens.size());
  if (k <= 0) return 0;
  for (std::int64_t n = std::min<std::int64_t>(max_n, len - 1); n >= min_n; --n) {
    const std::span<const std::int32_t> suffix = tokens.subspan(static_cast<std::size_t>(len - n));
    // Earlier occurrences (they may overlap the suffix); the earliest one first, as vLLM v1's
    // _find_longest_matched_ngram_and_propose_tokens keeps the earliest of the longest matches.
    for (std::int64_t start = 0; start <= len - n - 1; ++start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const std::int64_t from = start + n;  // the token after the occurrence (< len)
      const std::int64_t count = std::min<std::int64_t>(k, len - from);
      out.insert(out.end(), tokens.begin() + from, tokens.begin() + from + count);
      return static_cast<std::int32_t>(count);
    }
  }
  return 0;
}

std::int32_t propose_after_step(const ScheduledRequest& e,
                                std::span<const std::int32_t> accepted_drafts, std::int32_t sampled,
                                std::int32_t vocab_size, const SpeculativeConfig& config,
                                std::vector<std::int32_t>& history,
                                std::vector<std::int32_t>& out) {
  history.clear();
  for (std::int32_t p = 0; p < e.spec->prompt_len; ++p) {
    history.push_back(prompt_token_value(*e.spec, p, vocab_size));
  }
  history.insert(history.end(), e.output_tokens.begin(), e.output_tokens.end());
  history.insert(history.end(), accepted_drafts.begin(), accepted_drafts.end());
  history.push_back(sampled);
  return ngram_propose(history, config.prompt_lookup_min, config.prompt_lookup_max,
                       config.num_speculative_tokens, out);
}

}  // namespace servelab
