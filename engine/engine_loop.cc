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
  const bool async = scheduler.config().async_scheduling;
  // Async scheduling: the executed step whose tokens the scheduler has not seen yet.
  bool pending = false;
  StepResult pending_result;
  while (true) {
    const TimeNs now = clock.now();
    source.admit(now, scheduler);
    const StepPlan& plan = scheduler.schedule(now);
    // The state the plan was formed in (with async scheduling, before the previous step's
    // tokens are applied below).
    const StepSnapshot snap = replica.snapshot();
    if (before_step && !plan.empty()) before_step(scheduler, plan);
    if (pending) {
      // vLLM's order: the plan above was formed before the previous step's tokens were applied.
      const TimeNs end = std::max(clock.now(), now + 1);
      scheduler.complete(pending_result, end);
      pending = false;
      totals.end_ns = std::max(totals.end_ns, end);
      source.after_step(end);
      if (plan.empty()) continue;  // what the applied tokens finished may let others in
    }
    if (plan.empty()) {
      if (scheduler.num_running() == 0 && scheduler.num_waiting() > 0) {
        throw std::logic_error("engine stalled: " + std::to_string(scheduler.num_waiting()) +
                               " waiting requests and nothing can run (batch formation '" +
                               std::string(scheduler.batch_formation().name()) +
                               "' scheduled nothing)");
      }
      if (!source.wait_for_work(now, scheduler)) break;
      continue;
    }
    StepResult result = backend.execute(plan);
    // The step lasts from the plan to the end of execution: scheduling overhead is real time.
    const TimeNs end = std::max(clock.now(), now + 1);
    if (on_step) on_step(plan, now, end - now, snap);
    ++totals.num_steps;
    if (async) {
      pending_result = std::move(result);
      pending = true;
      continue;
    }
    scheduler.complete(result, end);
    totals.end_ns = std::max(totals.end_ns, end);
    source.after_step(end);
  }
}

}  // namespace servelab
