// SimBackend: a Backend that executes nothing and asks a CostModel how long the step takes.
//
// Sampled tokens are placeholders (0): the simulator's requests stop at their output length,
// and block hashes never depend on token values (core/request.h), so nothing downstream reads
// them.
#pragma once

#include "core/backend.h"
#include "sim/cost_model.h"
#include "sim/speculation.h"

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
  // Speculative decoding (sim/speculation.h): acceptance, proposals and the draft time, added to
  // the step's duration (each rounded to ns). `spec` must outlive the backend; null: off.
  void set_speculation(SimSpeculation* spec) { spec_ = spec; }

 private:
  const CostModel& cost_;
  SimSpeculation* spec_ = nullptr;
};

}  // namespace servelab
