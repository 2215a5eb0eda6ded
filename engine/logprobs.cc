#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace servelab {

TokenLogprobs token_logprobs(std::span<const float> logits, std::int32_t token,
                             std::int32_t top_k) {
  const float max = *std::max_element(logits.begin(), logits.end());
  const float own = logits[static_cast<std::size_t>(token)];
  double sum = 0;
  std::int32_t above = 0;
  for (const float l : logits) {
    sum += std::exp(static_cast<double>(l) - max);
    above += l > own ? 1 : 0;
  }
  const double log_total = static_cast<double>(max) + std::log(sum);
  const auto logprob = [&](std::int32_t t) {
    return static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(t)]) - log_total);
  };
  TokenLogprobs out;
  out.logprob = logprob(token);
  out.rank = above + 1;
  const auto k = std::min<std::size_t>(static_cast<std::size_t>(top_k), logits.size());
  if (k == 0) return out;
  std::vector<std::int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                    [&](std::int32_t a, std::int32_t b) {
                      const float la = logits[static_cast<std::size_t>(a)];
                      const float lb = logits[static_cast<std::size_t>(b)];
                      return la > lb || (la == lb && a < b);
                    });
  out.top.reserve(k);
  for (std::size_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], logprob(ids[i]));
  return out;
}

}  // namespace servelab
