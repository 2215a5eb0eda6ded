// SimSpeculation: speculative decoding in the simulator (serving.speculative_config).
//
// The simulator runs no model, so it models the two things that decide whether speculation pays:
// - acceptance: each draft token of a verify entry is accepted with the experiment's
//   acceptance_rate for its position (one value for all, or one per position; the last value
//   repeats), drawn i.i.d. from the run's seeded "speculation" stream, in plan order; acceptance
//   stops at the first rejection (what greedy or rejection-sampling verification does);
// - the draft cost, added to the step's time: n-gram lookup runs on the host and costs nothing
//   here; a draft model runs num_speculative_tokens decode passes of the small model (its
//   roofline on the same hardware) over the sequences that sampled; EAGLE runs one layer of the
//   target model plus its LM head per draft token over them (the layer unquantized, as vLLM
//   leaves a draft's weights unless speculative_config.quantization says otherwise).
// The verify pass itself is the target's step: the cost model prices its 1 + d tokens per entry
// (GEMM rows, causal attention pairs, LM head rows; docs/cost-model.md "Speculative decoding").
// Every sequence that sampled gets num_speculative_tokens proposals: the tokens the simulated
// model samples at those positions (sim_sampled_token: its EOS where the request's stop
// conditions put one, else 0), so an accepted draft is the target's token and a run's outputs
// and stops are those of a run without speculation; the scheduler keeps as many proposals as
// the request's remaining outputs allow.
#pragma once

#include <cstdint>
#include <memory>

#include "core/rng.h"
#include "core/speculative_config.h"
#include "core/step_plan.h"
#include "sim/roofline_cost_model.h"

namespace servelab {

// What drafting a step's proposals costs: its time, and the FLOPs and device bytes of the draft
// passes (for MFU, MBU and the power model: a draft pass streams the draft's weights as the
// target's step does).
struct DraftWork {
  double seconds = 0;
  double flops = 0;
  double bytes = 0;
};

class SimSpeculation {
 public:
  // `target` (the served model's roofline) must outlive this object; `draft` is the draft
  // model's roofline for method draft_model, for eagle the target's unquantized roofline when
  // the target is quantized (null otherwise: the target's layer). REQUIRES: config.enabled() and
  // config.acceptance_rates not empty (std::invalid_argument otherwise), and a draft roofline
  // for draft_model.
  SimSpeculation(const SpeculativeConfig& config, std::uint64_t seed,
                 const RooflineCostModel& target, std::unique_ptr<RooflineCostModel> draft);

  // Fills result.num_accepted (when the plan verifies drafts), num_proposed and
  // proposed_tokens for `plan`, and returns what drafting the step's proposals takes. Draws from
  // the stream: call once per executed plan, in order.
  DraftWork apply(const StepPlan& plan, StepResult& result);

  // The draft cost of proposing for `sequences` sequences whose contexts sum to
  // `context_tokens` (pure). EAGLE's head (one target layer and the LM head) is counted as that
  // share of the passes' time, of their FLOPs and bytes too.
  DraftWork draft_work(std::int64_t sequences, std::int64_t context_tokens) const;
  double draft_seconds(std::int64_t sequences, std::int64_t context_tokens) const {
    return draft_work(sequences, context_tokens).seconds;
  }

 private:
  SpeculativeConfig config_;
  Rng rng_;
  const RooflineCostModel& target_;
  std::unique_ptr<RooflineCostModel> draft_;
};

// The 0-based index of the first output entry `e` of a plan samples (its outputs so far): its
// context after the entry less the prompt and its `drafts` draft tokens. REQUIRES: e.spec.
inline std::size_t sim_output_index(const ScheduledRequest& e, std::size_t drafts) {
  return static_cast<std::size_t>(e.context_len() - e.spec->prompt_len) - drafts;
}

// The drafts entry `k` of a verify step had accepted (0 when the step verified none).
inline std::int32_t accepted_of(const StepResult& result, std::size_t k) {
  return k < result.num_accepted.size() ? result.num_accepted[k] : 0;
}

}  // namespace servelab
