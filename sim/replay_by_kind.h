// Where a replayed step-time error comes from (`sim validate`, docs/validation.md "Replayed step
// time by kind"): the engine's steps as the cost model priced them, split by what each step ran.
//
// A run's TPOT is mostly the duration of its decode and mixed steps, its TTFT the queue of
// prefill and mixed steps ahead of a request, so the time-weighted error of each kind says what a
// latency error is made of: (sum of predicted - sum of measured) / sum of measured over the
// kind's steps. A model can be right on the median step and still fast in time if a few steps
// take far longer than it can price (a CUDA-graph capture, a cold kernel, a host stall): those
// are the *slow* steps, measured > kSlowStepFactor x predicted, counted with their share of the
// kind's measured time, and the time-weighted error is given again without them. That is a
// diagnosis of the run, not a second accuracy figure: the slow steps are real engine time.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sim/error_stats.h"

namespace servelab {

// One engine step priced by the cost model (a row of replay.csv). measured_s > 0.
struct ReplayedStep {
  std::int64_t step = 0;  // the engine's step index (steps.csv)
  std::int64_t num_seqs = 0, prefill_tokens = 0, decode_tokens = 0, decode_context_tokens = 0;
  double measured_s = 0, predicted_s = 0;
};

// A step is slow when its measured duration exceeds this multiple of its predicted one.
inline constexpr double kSlowStepFactor = 1.5;

struct StepKindError {
  // "decode" (decode tokens only), "prefill" (prompt tokens only), "mixed" (both), "other"
  // (neither: a step that only swaps), "all" (every step).
  std::string kind;
  std::int64_t steps = 0;
  double measured_s = 0, predicted_s = 0;  // sums over the kind's steps
  double time_weighted = 0;                // (predicted_s - measured_s) / measured_s, signed
  ErrorStats error;                        // of the per-step relative errors
  std::int64_t slow_steps = 0;
  double slow_measured_s = 0;  // their measured time (a share of measured_s)
  // time_weighted over the kind's steps that are not slow; none when every step is.
  std::optional<double> time_weighted_without_slow;
};

// The kinds present among `steps`, in the order decode, prefill, mixed, other, then "all"
// (absent, like every kind, when `steps` is empty). Deterministic: sums in step order.
std::vector<StepKindError> replay_by_kind(std::span<const ReplayedStep> steps);

}  // namespace servelab
