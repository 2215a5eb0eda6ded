// SimBackend: a Backend that executes nothing and asks a CostModel how long the step takes.
//
// Sampled tokens are placeholders (kSimOtherToken, 0): block hashes never depend on token values
// (core/request.h). A request with stop conditions gets the simulated model's EOS, kSimEosToken,
// from its output token sim_eos_at on (core/stop_conditions.h), so the scheduler's stop check
// ends it as an engine's would; others stop at their output length.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/backend.h"
#include "core/kv_offload_tiers.h"
#include "core/lora_slots.h"
#include "sim/cost_model.h"
#include "sim/power_model.h"
#include "sim/speculation.h"

namespace servelab {

class SimBackend : public Backend {
 public:
  // `cost` must outlive the backend.
  explicit SimBackend(const CostModel& cost) : cost_(cost) {}
  std::string_view name() const override { return "sim"; }
  // Duration = the cost model's prediction, at least 1 ns so simulated time always advances; for
  // a multi-step round (plan.num_steps > 1) CostModel::round_time, with num_steps placeholder
  // tokens per entry; for a pipelined plan (async scheduling, StepPlan::pipelined)
  // pipelined_time().
  StepResult execute(const StepPlan& plan) override;
  // Async scheduling (docs/cost-model.md, "Async scheduling"): a plan formed while the previous
  // one ran overlaps its host part (the breakdown's overhead: scheduling, input preparation,
  // sampling bookkeeping, detokenization) with the previous step's device part, so the time from
  // the previous step's end to its own is max(total - overhead, overhead) of its breakdown,
  // integer ns rounded once. (The simulator starts it when the previous step ends.)
  TimeNs pipelined_time(const StepPlan& plan) const;
  // Reuses result's token vectors (no allocation once they have grown to the largest plan).
  void execute_into(const StepPlan& plan, StepResult& result) override;
  // Speculative decoding (sim/speculation.h): acceptance, proposals and the draft time, added to
  // the step's duration (each rounded to ns). `spec` must outlive the backend; null: off.
  void set_speculation(SimSpeculation* spec) { spec_ = spec; }
  // Whether requests may carry stop conditions (the workload's `sampling:` key): then each
  // sampled token is the simulated model's (EOS at RequestSpec::stop->sim_eos_at); without,
  // every token is kSimOtherToken and the plan's entries are not visited. Default: true.
  void set_stop_conditions(bool on) { stops_ = on; }

  // KV offload: seconds to bring one block back from each tier (docs/cost-model.md, "KV offload
  // tiers"). A plan's tier_loads are charged in its step, before the forward pass, like a swap-in
  // (not overlapped with it): duration += sum of the loads' seconds, rounded once.
  void set_tier_load_seconds(const std::array<double, kMaxOffloadTiers>& s) { tier_load_s_ = s; }
  // Total time charged for tier loads so far.
  TimeNs tier_load_ns() const { return tier_load_ns_; }

  // LoRA slots (serving.lora; core/lora_slots.h): each step places its adapters (step_adapters)
  // in `max_loras` slots, and each adapter that was in none is loaded before the forward pass,
  // as vLLM copies it from its CPU cache: duration += its rank x `seconds_per_rank`
  // (RooflineCostModel::lora_load_seconds(1)), summed over the step's loads and rounded once.
  // REQUIRES: max_loras >= 1, seconds_per_rank >= 0.
  void set_lora_loads(std::int32_t max_loras, double seconds_per_rank);
  // Total time charged for adapter loads so far, and their number.
  TimeNs lora_load_ns() const { return lora_load_ns_; }
  std::int64_t lora_loads() const { return lora_slots_ ? lora_slots_->loads() : 0; }

  // Work and energy (docs/metrics.md, "Energy and utilization"): from now on every executed
  // step adds its duration to work().busy_ns and its FLOPs and device-memory bytes (`work`'s
  // breakdown of the plan, times num_steps for a multi-step round; speculative drafts are not
  // counted) to work().flops and .bytes, and with `power` (null: none) its energy
  // (PowerModel::step_joules over the whole duration) to work().joules. `work` is the
  // replica's roofline (a calibrated model's breakdown has no FLOPs); when it is the backend's
  // own cost model its breakdown also gives the step's duration, so it is computed once and
  // every duration stays what it was. REQUIRES: `work` and `power` outlive the backend.
  void set_work_model(const CostModel* work, const PowerModel* power);
  struct WorkTotals {
    double flops = 0, bytes = 0, joules = 0;
    TimeNs busy_ns = 0;
  };
  const WorkTotals& work() const { return work_totals_; }
  const PowerModel* power() const { return power_; }

 private:
  TimeNs tier_loads(const StepPlan& plan);
  TimeNs charge_lora_loads(const StepPlan& plan);
  void count_work(double flops, double bytes, TimeNs duration);

  const CostModel& cost_;
  std::array<double, kMaxOffloadTiers> tier_load_s_ = {};
  TimeNs tier_load_ns_ = 0;
  std::optional<LoraSlots> lora_slots_;
  double lora_load_s_per_rank_ = 0;
  TimeNs lora_load_ns_ = 0;
  std::vector<std::uint32_t> step_adapters_;  // scratch
  std::vector<LoraSlots::Placement> placed_;  // scratch
  SimSpeculation* spec_ = nullptr;
  bool stops_ = true;
  const CostModel* work_ = nullptr;
  const PowerModel* power_ = nullptr;
  WorkTotals work_totals_;
};

}  // namespace servelab
