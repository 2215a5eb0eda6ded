#include "sim/sim_backend.h"

#include <algorithm>
#include <stdexcept>

#include "core/stop_conditions.h"

namespace servelab {

StepResult SimBackend::execute(const StepPlan& plan) {
  StepResult r;
  execute_into(plan, r);
  return r;
}

TimeNs SimBackend::tier_loads(const StepPlan& plan) {
  double s = 0;
  for (const TierLoad& l : plan.tier_loads) s += tier_load_s_[static_cast<std::size_t>(l.tier)];
  const TimeNs ns = seconds_to_ns(s);
  tier_load_ns_ += ns;
  return ns;
}

void SimBackend::set_lora_loads(std::int32_t max_loras, double seconds_per_rank) {
  if (!(seconds_per_rank >= 0)) {
    throw std::invalid_argument("SimBackend::set_lora_loads: seconds_per_rank must be >= 0");
  }
  lora_slots_.emplace(max_loras);
  lora_load_s_per_rank_ = seconds_per_rank;
}

TimeNs SimBackend::charge_lora_loads(const StepPlan& plan) {
  step_adapters(plan, step_adapters_);
  lora_slots_->place(step_adapters_, placed_);
  std::int64_t ranks = 0;
  for (std::size_t i = 0; i < placed_.size(); ++i) {
    if (!placed_[i].load) continue;
    // The rank of the adapter's first entry (every entry of one adapter has the same).
    for (const ScheduledRequest& e : plan.requests) {
      if (e.spec != nullptr && e.spec->lora_id == step_adapters_[i]) {
        ranks += e.spec->lora_rank;
        break;
      }
    }
  }
  const TimeNs ns = seconds_to_ns(static_cast<double>(ranks) * lora_load_s_per_rank_);
  lora_load_ns_ += ns;
  return ns;
}

namespace {

// The host part overlaps the device part of the step before: the period is the longer one.
TimeNs pipelined_period(const StepCostBreakdown& b) {
  return seconds_to_ns(std::max(b.total() - b.overhead, b.overhead));
}

}  // namespace

TimeNs SimBackend::pipelined_time(const StepPlan& plan) const {
  return pipelined_period(cost_.breakdown(plan));
}

void SimBackend::set_work_model(const CostModel* work, const PowerModel* power) {
  work_ = work;
  power_ = power;
}

void SimBackend::count_work(double flops, double bytes, TimeNs duration) {
  work_totals_.flops += flops;
  work_totals_.bytes += bytes;
  work_totals_.busy_ns += duration;
  if (power_ != nullptr)
    work_totals_.joules += power_->step_joules(flops, bytes, ns_to_s(duration));
}

void SimBackend::execute_into(const StepPlan& plan, StepResult& result) {
  // Each part saturates at the clock's horizon (core/time.h), and so do their sums.
  const TimeNs loads =
      add_saturated(plan.tier_loads.empty() ? 0 : tier_loads(plan),
                    lora_slots_ && plan.num_loras > 0 ? charge_lora_loads(plan) : 0);
  if (plan.num_steps > 1) [[unlikely]] {
    // A multi-step round: N passes, the host part once; N tokens per entry.
    result.duration_ns = std::max<TimeNs>(1, add_saturated(cost_.round_time(plan), loads));
    if (work_ != nullptr) {
      const StepCostBreakdown b = work_->breakdown(plan);
      const auto n = static_cast<double>(plan.num_steps);
      count_work(b.flops * n, b.bytes * n, result.duration_ns);
    }
    result.sampled_tokens.assign(plan.requests.size() * static_cast<std::size_t>(plan.num_steps),
                                 0);
    result.fork_tokens.assign(static_cast<std::size_t>(plan.num_fork_tokens), 0);
    const std::size_t entries = plan.requests.size();
    for (std::size_t k = 0; k < entries; ++k) {
      const ScheduledRequest& e = plan.requests[k];
      if (e.spec == nullptr || e.spec->stop == nullptr) continue;
      for (std::size_t p = 0; p < static_cast<std::size_t>(plan.num_steps); ++p) {
        result.sampled_tokens[p * entries + k] =
            sim_sampled_token(*e.spec, e.output_tokens.size() + p);
      }
    }
    return;
  }
  // Speculative decoding: acceptance drawn, drafts proposed and their cost (sim/speculation.h).
  const DraftWork draft = spec_ != nullptr ? spec_->apply(plan, result) : DraftWork{};
  const TimeNs draft_ns = seconds_to_ns(draft.seconds);
  // With a work model, one breakdown for the work and, when it is the cost model itself, the
  // time (RooflineCostModel's step_time is seconds_to_ns of its breakdown's total).
  const bool counting = work_ != nullptr;
  const StepCostBreakdown b = counting ? work_->breakdown(plan) : StepCostBreakdown{};
  TimeNs t;
  if (counting && work_ == &cost_) {
    t = plan.pipelined ? pipelined_period(b) : seconds_to_ns(b.total());
  } else {
    t = plan.pipelined ? pipelined_time(plan) : cost_.step_time(plan);
  }
  result.duration_ns = std::max<TimeNs>(1, add_saturated(add_saturated(t, loads), draft_ns));
  // The draft passes' work with the target step's: they run on the same GPUs in the step's time.
  if (counting) count_work(b.flops + draft.flops, b.bytes + draft.bytes, result.duration_ns);
  result.sampled_tokens.assign(plan.requests.size(), kSimOtherToken);
  result.fork_tokens.assign(static_cast<std::size_t>(plan.num_fork_tokens), kSimOtherToken);
  // The simulated model's EOS (core/stop_conditions.h), for requests with stop conditions.
  if (!stops_) return;
  std::size_t fork_at = 0;
  for (std::size_t k = 0; k < plan.requests.size(); ++k) {
    const ScheduledRequest& e = plan.requests[k];
    if (e.spec != nullptr && e.spec->stop != nullptr && e.samples) {
      // Output number context_len - prompt_len: outputs.size(), or one more for an entry of a
      // pipelined plan that starts at the previous plan's token (async scheduling); after a
      // verify, the position past its accepted drafts.
      const std::int32_t token =
          sim_sampled_token(*e.spec, sim_output_index(e, plan.drafts_of(k).size()) +
                                         static_cast<std::size_t>(accepted_of(result, k)));
      result.sampled_tokens[k] = token;
      for (std::size_t s = 1; s < e.num_samples; ++s) result.fork_tokens[fork_at + s - 1] = token;
    }
    fork_at += e.num_samples - 1U;
  }
}

}  // namespace servelab
