#include "sim/sim_backend.h"

#include <algorithm>

namespace servelab {

StepResult SimBackend::execute(const StepPlan& plan) {
  StepResult r;
  execute_into(plan, r);
  return r;
}

TimeNs SimBackend::tier_loads(const StepPlan& plan) {
  double s = 0;
  for (const TierLoad& l : plan.tier_loads) s += tier_load_s_[static_cast<std::size_t>(l.tier)];
  const TimeNs ns = seconds_to_ns(s);
  tier_load_ns_ += ns;
  return ns;
}

void SimBackend::execute_into(const StepPlan& plan, StepResult& result) {
  const TimeNs loads = plan.tier_loads.empty() ? 0 : tier_loads(plan);
  if (plan.num_steps > 1) [[unlikely]] {
    // A multi-step round: N passes, the host part once; N tokens per entry.
    result.duration_ns = std::max<TimeNs>(1, cost_.round_time(plan) + loads);
    result.sampled_tokens.assign(plan.requests.size() * static_cast<std::size_t>(plan.num_steps),
                                 0);
    result.fork_tokens.assign(static_cast<std::size_t>(plan.num_fork_tokens), 0);
    return;
  }
  result.duration_ns = std::max<TimeNs>(1, cost_.step_time(plan) + loads);
  result.sampled_tokens.assign(plan.requests.size(), 0);
  result.fork_tokens.assign(static_cast<std::size_t>(plan.num_fork_tokens), 0);
}

}  // namespace servelab
