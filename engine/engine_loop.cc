#include "engine/engine_loop.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace servelab {

void run_engine_loop(Replica& replica, WorkSource& source, const WallClock& clock,
                     const StepHook& on_step, SimulationTotals& totals,
                     const BeforeStepHook& before_step) {
  Scheduler& scheduler = replica.scheduler();
  Backend& backend = replica.backend();
  while (true) {
    const TimeNs now = clock.now();
    source.admit(now, scheduler);
    const StepPlan& plan = scheduler.schedule(now);
    if (plan.empty()) {
      if (scheduler.num_running() == 0 && scheduler.num_waiting() > 0) {
        throw std::logic_error("engine stalled: " + std::to_string(scheduler.num_waiting()) +
                               " waiting requests and nothing can run");
      }
      if (!source.wait_for_work(now, scheduler)) break;
      continue;
    }
    const StepSnapshot snap = replica.snapshot();
    if (before_step) before_step(scheduler, plan);
    const StepResult result = backend.execute(plan);
    // The step lasts from the plan to the end of execution: scheduling overhead is real time.
    const TimeNs end = std::max(clock.now(), now + 1);
    if (on_step) on_step(plan, now, end - now, snap);
    ++totals.num_steps;
    scheduler.complete(result, end);
    totals.end_ns = std::max(totals.end_ns, end);
    source.after_step(end);
  }
}

}  // namespace servelab
