// The engine's wall-clock scheduler loop, shared by `engine run` (an experiment's arrivals,
// engine/engine_driver.h) and `engine serve` (HTTP clients' requests, engine/server.h).
//
// Each iteration asks its WorkSource to hand over whatever reached the engine by `now` (new
// requests, and for the server aborts of requests whose client went away), forms a plan at
// `now`, executes it on the replica's backend and completes it at the measured end time
// (scheduling overhead included in the step). When the plan is empty the source decides how
// long to wait, or that the loop is over. The loop owns no request state: the Scheduler has it,
// and the source and the observers the replica was built with see every event.
//
// With async scheduling (SchedulerConfig::async_scheduling) the loop runs vLLM's pipelined
// order: a step's plan is executed, then the next plan is formed (without the executed step's
// tokens; the executor feeds them itself), then the executed step is completed at that time,
// then the new plan is executed. The executor runs one plan at a time, so nothing overlaps in
// wall time: the order, the placeholders and the late stops are vLLM's, the overlap is not.
// When the plan formed after a step is empty, the step is completed and the loop schedules again
// before it waits for work.
#pragma once

#include <chrono>
#include <functional>

#include "core/scheduler.h"
#include "core/step_plan.h"
#include "core/time.h"
#include "serving/recorder.h"
#include "serving/replica.h"
#include "serving/run_folder.h"

namespace servelab {

// Engine time: `origin` plus the steady_clock time since construction.
class WallClock {
 public:
  explicit WallClock(TimeNs origin = 0)
      : origin_(origin), start_(std::chrono::steady_clock::now()) {}
  TimeNs now() const {
    return origin_ + std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now() - start_)
                         .count();
  }
  std::chrono::steady_clock::time_point start() const { return start_; }

 private:
  TimeNs origin_;
  std::chrono::steady_clock::time_point start_;
};

// Where the loop's work comes from. All calls happen on the loop's thread.
class WorkSource {
 public:
  virtual ~WorkSource() = default;
  // Before every plan: adds to `scheduler` every request that reached the engine by `now` and
  // applies anything else that happened between steps (aborts). May throw (Interrupted).
  virtual void admit(TimeNs now, Scheduler& scheduler) = 0;
  // The plan formed at `now` was empty: waits until new work may be there and returns true, or
  // returns false when no work will ever come (the loop ends).
  virtual bool wait_for_work(TimeNs now, const Scheduler& scheduler) = 0;
  // After every executed step, at its end time.
  virtual void after_step(TimeNs end) { (void)end; }
};

// Called once per executed step with its plan, start, duration and the state it ran in (the
// Recorder's on_step for `engine run`).
using StepHook =
    std::function<void(const StepPlan& plan, TimeNs start, TimeNs duration, const StepSnapshot&)>;

// Called with the scheduler and every plan before the backend runs it (EngineOptions::
// before_step: invariant checks while a Python policy is active).
using BeforeStepHook = std::function<void(const Scheduler& scheduler, const StepPlan& plan)>;

// Runs the loop until source.wait_for_work() returns false. Counts steps in totals.num_steps
// and raises totals.end_ns to each step's end. Throws std::logic_error when the scheduler
// stalls (requests waiting, nothing running, nothing schedulable); whatever the source, the
// backend or the hooks throw passes through.
void run_engine_loop(Replica& replica, WorkSource& source, const WallClock& clock,
                     const StepHook& on_step, SimulationTotals& totals,
                     const BeforeStepHook& before_step = {});

}  // namespace servelab
