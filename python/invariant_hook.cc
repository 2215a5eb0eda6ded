#include "python/invariant_hook.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/scheduler_invariants.h"
#include "python/python_policy_error.h"

namespace servelab::python {

StepHook invariant_hook() {
  return [](const Scheduler& scheduler, const StepPlan& plan) {
    try {
      check_scheduler_invariants(scheduler, plan);
      // The pool's full check is O(blocks) (about 0.1 us per block): every max(1024, blocks)
      // steps, so it adds about 0.1 us per step. A policy reaches the pool only through the
      // scheduler, whose invariants are checked every step.
      const std::int64_t every = std::max<std::int64_t>(1024, scheduler.kv().pool().num_blocks());
      if (plan.step_index % every == 0) scheduler.kv().check_invariants();
    } catch (const std::logic_error& e) {
      throw PythonPolicyError(std::string(e.what()) +
                              " (a Python policy is active: batch formation '" +
                              std::string(scheduler.batch_formation().name()) + "', queue order '" +
                              scheduler.waiting_queue().name() + "', victim rule '" +
                              std::string(scheduler.victim_rule().name()) + "')");
    }
  };
}

}  // namespace servelab::python
