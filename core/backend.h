// The Backend interface: executes StepPlans. The simulator times them with a cost model; the
// engine runs them on a device. Neither reads scheduler state.
#pragma once

#include <string_view>

#include "core/step_plan.h"

namespace servelab {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Executes one plan and reports its duration and sampled tokens. REQUIRES: !plan.empty().
  // May throw std::runtime_error on a device failure.
  virtual StepResult execute(const StepPlan& plan) = 0;
  // The same into `result` (overwritten): a backend that can reuse result's buffers overrides
  // this, which spares the simulator an allocation per step.
  virtual void execute_into(const StepPlan& plan, StepResult& result) { result = execute(plan); }
};

}  // namespace servelab
