// SimBackend: a Backend that executes nothing and asks a CostModel how long the step takes.
//
// Sampled tokens are placeholders (kSimOtherToken, 0): block hashes never depend on token values
// (core/request.h). A request with stop conditions gets the simulated model's EOS, kSimEosToken,
// from its output token sim_eos_at on (core/stop_conditions.h), so the scheduler's stop check
// ends it as an engine's would; others stop at their output length.
#pragma once

#include "core/backend.h"
#include "sim/cost_model.h"

namespace servelab {

class SimBackend : public Backend {
 public:
  // `cost` must outlive the backend.
  explicit SimBackend(const CostModel& cost) : cost_(cost) {}
  std::string_view name() const override { return "sim"; }
  // Duration = the cost model's prediction, at least 1 ns so simulated time always advances; for
  // a multi-step round (plan.num_steps > 1) CostModel::round_time, with num_steps placeholder
  // tokens per entry.
  StepResult execute(const StepPlan& plan) override;
  // Reuses result's token vectors (no allocation once they have grown to the largest plan).
  void execute_into(const StepPlan& plan, StepResult& result) override;

 private:
  const CostModel& cost_;
};

}  // namespace servelab
