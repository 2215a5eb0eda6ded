#include "engine/previous_tokens.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace servelab {

std::vector<std::uint8_t> PreviousTokens::takers(const StepPlan& plan, std::string_view who) const {
  std::vector<std::uint8_t> out(plan.requests.size(), 0);
  if (!plan.pipelined) return out;
  for (std::size_t i = 0; i < plan.requests.size(); ++i) {
    const ScheduledRequest& e = plan.requests[i];
    if (e.first_token != e.spec->prompt_len + static_cast<std::int32_t>(e.output_tokens.size())) {
      continue;
    }
    if (token(e.id) < 0) {
      throw std::invalid_argument(std::string(who) + ": request " + std::to_string(e.id) +
                                  " starts at a token the previous plan did not sample");
    }
    out[i] = 1;
  }
  return out;
}

std::int32_t PreviousTokens::token(RequestId id) const {
  const auto it = std::lower_bound(
      tokens_.begin(), tokens_.end(), id,
      [](const std::pair<RequestId, std::int32_t>& p, RequestId v) { return p.first < v; });
  return it != tokens_.end() && it->first == id ? it->second : -1;
}

void PreviousTokens::record(const StepPlan& plan, const StepResult& result) {
  tokens_.clear();
  for (std::size_t i = 0; i < plan.requests.size(); ++i) {
    if (plan.requests[i].samples)
      tokens_.emplace_back(plan.requests[i].id, result.sampled_tokens[i]);
  }
  std::sort(tokens_.begin(), tokens_.end());
}

}  // namespace servelab
