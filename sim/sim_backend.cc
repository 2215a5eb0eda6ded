#include "sim/sim_backend.h"

#include <algorithm>

namespace servelab {

StepResult SimBackend::execute(const StepPlan& plan) {
  StepResult r;
  r.duration_ns = std::max<TimeNs>(1, cost_.step_time(plan));
  r.sampled_tokens.assign(plan.requests.size(), 0);
  for (const ScheduledRequest& e : plan.requests) {
    if (e.num_samples > 1) r.fork_tokens.insert(r.fork_tokens.end(), e.num_samples - 1, 0);
  }
  return r;
}

}  // namespace servelab
