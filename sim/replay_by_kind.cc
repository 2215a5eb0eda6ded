#include "sim/replay_by_kind.h"

#include <array>
#include <string_view>

namespace servelab {

namespace {

const char* kind_of(const ReplayedStep& s) {
  if (s.prefill_tokens > 0) return s.decode_tokens > 0 ? "mixed" : "prefill";
  return s.decode_tokens > 0 ? "decode" : "other";
}

// The figures of one kind from its steps (in step order).
StepKindError summarise(const std::string& kind, const std::vector<const ReplayedStep*>& steps) {
  StepKindError k;
  k.kind = kind;
  k.steps = static_cast<std::int64_t>(steps.size());
  std::vector<double> errors;
  errors.reserve(steps.size());
  double fast_measured = 0, fast_predicted = 0;
  for (const ReplayedStep* s : steps) {
    k.measured_s += s->measured_s;
    k.predicted_s += s->predicted_s;
    errors.push_back((s->predicted_s - s->measured_s) / s->measured_s);
    if (s->measured_s > kSlowStepFactor * s->predicted_s) {
      ++k.slow_steps;
      k.slow_measured_s += s->measured_s;
    } else {
      fast_measured += s->measured_s;
      fast_predicted += s->predicted_s;
    }
  }
  k.time_weighted = (k.predicted_s - k.measured_s) / k.measured_s;
  k.error = error_stats(errors);
  if (k.slow_steps < k.steps) {
    k.time_weighted_without_slow = (fast_predicted - fast_measured) / fast_measured;
  }
  return k;
}

}  // namespace

std::vector<StepKindError> replay_by_kind(std::span<const ReplayedStep> steps) {
  static constexpr std::array<const char*, 4> kKinds = {"decode", "prefill", "mixed", "other"};
  std::vector<StepKindError> out;
  if (steps.empty()) return out;
  std::vector<const ReplayedStep*> all;
  all.reserve(steps.size());
  for (const ReplayedStep& s : steps) all.push_back(&s);
  for (const char* kind : kKinds) {
    std::vector<const ReplayedStep*> of_kind;
    for (const ReplayedStep* s : all) {
      if (std::string_view(kind_of(*s)) == kind) of_kind.push_back(s);
    }
    if (!of_kind.empty()) out.push_back(summarise(kind, of_kind));
  }
  out.push_back(summarise("all", all));
  return out;
}

}  // namespace servelab
