#include "sim/sim_backend.h"

#include <algorithm>

namespace servelab {

StepResult SimBackend::execute(const StepPlan& plan) {
  StepResult r;
  execute_into(plan, r);
  return r;
}

void SimBackend::execute_into(const StepPlan& plan, StepResult& result) {
  if (plan.num_steps > 1) [[unlikely]] {
    // A multi-step round: N passes, the host part once; N tokens per entry.
    result.duration_ns = std::max<TimeNs>(1, cost_.round_time(plan));
    result.sampled_tokens.assign(plan.requests.size() * static_cast<std::size_t>(plan.num_steps),
                                 0);
    result.fork_tokens.assign(static_cast<std::size_t>(plan.num_fork_tokens), 0);
    return;
  }
  if (spec_ != nullptr) [[unlikely]] {
    const double draft_s = spec_->apply(plan, result);
    result.duration_ns = std::max<TimeNs>(1, cost_.step_time(plan) + seconds_to_ns(draft_s));
  } else {
    result.duration_ns = std::max<TimeNs>(1, cost_.step_time(plan));
  }
  result.sampled_tokens.assign(plan.requests.size(), 0);
  result.fork_tokens.assign(static_cast<std::size_t>(plan.num_fork_tokens), 0);
}

}  // namespace servelab
