#include "sim/speculation.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "core/stop_conditions.h"

namespace servelab {

SimSpeculation::SimSpeculation(const SpeculativeConfig& config, std::uint64_t seed,
                               const RooflineCostModel& target,
                               std::unique_ptr<RooflineCostModel> draft)
    : config_(config),
      rng_(Rng::stream(seed, "speculation")),
      target_(target),
      draft_(std::move(draft)) {
  if (!config_.enabled() || config_.acceptance_rates.empty()) {
    throw std::invalid_argument("SimSpeculation: needs speculation on and an acceptance rate");
  }
  if (config_.method == SpecMethod::kDraftModel && draft_ == nullptr) {
    throw std::invalid_argument("SimSpeculation: method draft_model needs the draft model");
  }
}

DraftWork SimSpeculation::draft_work(std::int64_t sequences, std::int64_t context_tokens) const {
  DraftWork w;
  if (sequences <= 0 || config_.method == SpecMethod::kNgram) return w;
  const std::int32_t k = config_.num_speculative_tokens;
  for (std::int32_t j = 0; j < k; ++j) {
    // Pass j: one token per sequence, attending to its context plus the j drafts before it.
    StepFeatures f;
    f.num_tokens = sequences;
    f.decode_tokens = sequences;
    f.decode_context_tokens = context_tokens + j * sequences;
    f.decode_pairs = f.decode_context_tokens;
    f.num_sampled = sequences;
    if (config_.method == SpecMethod::kDraftModel) {
      const StepCostBreakdown b = draft_->breakdown(f);
      w.seconds += b.total() - b.overhead;  // the step's host time is the target step's
      w.flops += b.flops;
      w.bytes += b.bytes;
    } else {  // EAGLE: one target layer (unquantized: draft_, when given), then the LM head
      const RooflineCostModel& head = draft_ != nullptr ? *draft_ : target_;
      const StepCostBreakdown b = head.breakdown(f);
      const double s =
          (b.gemm + b.elementwise + b.decode_attention) / head.model().num_layers + b.lm_head;
      const double device = b.total() - b.overhead;
      const double share = device > 0 ? s / device : 0.0;
      w.seconds += s;
      w.flops += b.flops * share;
      w.bytes += b.bytes * share;
    }
  }
  return w;
}

DraftWork SimSpeculation::apply(const StepPlan& plan, StepResult& result) {
  const std::size_t entries = plan.requests.size();
  const std::vector<double>& rates = config_.acceptance_rates;
  if (plan.num_draft_tokens > 0) {
    result.num_accepted.assign(entries, 0);
    for (std::size_t k = 0; k < entries; ++k) {
      const auto d = static_cast<std::int32_t>(plan.drafts_of(k).size());
      std::int32_t a = 0;
      while (a < d) {
        const double p = rates[std::min(static_cast<std::size_t>(a), rates.size() - 1)];
        if (rng_.uniform() >= p) break;
        ++a;
      }
      result.num_accepted[k] = a;
    }
  } else {
    result.num_accepted.clear();
  }
  const std::int32_t k = config_.num_speculative_tokens;
  result.num_proposed.assign(entries, 0);
  result.proposed_tokens.clear();
  std::int64_t sequences = 0;
  std::int64_t context = 0;
  for (std::size_t i = 0; i < entries; ++i) {
    const ScheduledRequest& e = plan.requests[i];
    if (!e.samples) continue;
    result.num_proposed[i] = k;
    ++sequences;
    context += e.context_len();
  }
  // The proposals are the tokens the simulated model will sample at those positions (its EOS
  // where the request's stop conditions put one): an accepted draft is the target's token, so
  // the outputs, stops included, are those of a run without speculation.
  result.proposed_tokens.assign(static_cast<std::size_t>(sequences * k), kSimOtherToken);
  std::size_t at = 0;
  for (std::size_t i = 0; i < entries; ++i) {
    const ScheduledRequest& e = plan.requests[i];
    if (!e.samples) continue;
    if (e.spec != nullptr && e.spec->stop != nullptr) {
      // Outputs after this step: those before it, the accepted drafts and the verifier's token.
      const std::size_t after = sim_output_index(e, plan.drafts_of(i).size()) +
                                static_cast<std::size_t>(accepted_of(result, i)) + 1;
      for (std::int32_t j = 0; j < k; ++j) {
        result.proposed_tokens[at + static_cast<std::size_t>(j)] =
            sim_sampled_token(*e.spec, after + static_cast<std::size_t>(j));
      }
    }
    at += static_cast<std::size_t>(k);
  }
  return draft_work(sequences, context);
}

}  // namespace servelab
