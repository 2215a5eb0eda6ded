#include "sim/sim_backend.h"

#include <algorithm>

namespace servelab {

StepResult SimBackend::execute(const StepPlan& plan) {
  StepResult r;
  r.duration_ns = std::max<TimeNs>(1, cost_.step_time(plan));
  r.sampled_tokens.assign(plan.requests.size(), 0);
  if (plan.num_fork_tokens > 0) [[unlikely]] {
    r.fork_tokens.assign(static_cast<std::size_t>(plan.num_fork_tokens), 0);
  }
  return r;
}

}  // namespace servelab
