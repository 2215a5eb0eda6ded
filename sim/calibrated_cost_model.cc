#include "sim/calibrated_cost_model.h"

#include <algorithm>
#include <utility>

#include "serving/config_node.h"

namespace servelab {

namespace {

// Every term of the calibrated model for one step, each computed once (both the total and the
// breakdown read them).
struct Terms {
  double step, sequences, tokens, tokens_above_knee, prefill_pairs, decode_context,
      decode_context_above_knee, sampled, swap, copy;
};

Terms terms(const CalibratedCoefficients& c, const CalibrationFeatures& f, double block_bytes) {
  const StepFeatures& s = f.step;
  const double t = static_cast<double>(s.num_tokens);
  const double dc = static_cast<double>(s.decode_context_tokens);
  const auto above = [](double x, std::int64_t knee) {
    return knee > 0 ? std::max(0.0, x - static_cast<double>(knee)) : 0.0;
  };
  return {c.step_s, c.per_sequence_s * static_cast<double>(f.num_entries), c.per_token_s * t,
          c.per_token_above_knee_s * above(t, c.knee_tokens),
          c.prefill_pair_s * static_cast<double>(s.prefill_pairs), c.decode_context_token_s * dc,
          c.decode_context_token_above_knee_s * above(dc, c.decode_context_knee_tokens),
          // Verify passes (speculative decoding) compute logits for their draft tokens too, and
          // prompt log probabilities for their prompt rows.
          c.sampled_sequence_s *
              static_cast<double>(s.num_sampled + s.draft_tokens + s.prompt_logprob_rows),
          c.swap_byte_s * static_cast<double>(s.swap_out_blocks + s.swap_in_blocks) * block_bytes,
          c.copy_byte_s * static_cast<double>(s.copy_blocks) * block_bytes};
}

// The prefill launch's critical-path terms (0 without a launch, whose features are 0).
double critical_path_term(const CalibratedCoefficients& c, const CalibrationFeatures& f) {
  return c.prefill_critical_key_s * static_cast<double>(f.prefill_critical_keys) +
         c.prefill_merge_step_s * static_cast<double>(f.prefill_merge_steps);
}

// The LoRA terms of a step (0 without adapter tokens).
double lora_term(const CalibratedCoefficients& c, const StepFeatures& s, double lora_rank) {
  if (s.lora_tokens == 0 || lora_rank == 0) return 0.0;
  return (c.lora_token_rank_s * static_cast<double>(s.lora_tokens) +
          c.lora_adapter_rank_s * static_cast<double>(s.num_loras)) *
         lora_rank;
}

}  // namespace

double calibrated_seconds(const CalibratedCoefficients& c, const CalibrationFeatures& f,
                          double block_bytes, double lora_rank) {
  if (f.empty()) return 0.0;
  const Terms x = terms(c, f, block_bytes);
  // This summation order is the one the fitted profiles' predictions were recorded with.
  const double s = x.step + x.sequences + x.tokens + x.decode_context_above_knee +
                   x.tokens_above_knee + x.prefill_pairs + x.decode_context + x.sampled + x.swap +
                   x.copy;
  // Added last, and only when there is a launch to price, so that a file without the
  // critical-path terms prices every step exactly as before they existed.
  const double t =
      f.prefill_critical_keys == 0 && f.prefill_merge_steps == 0 ? s : s + critical_path_term(c, f);
  return f.step.lora_tokens == 0 ? t : t + lora_term(c, f.step, lora_rank);
}

CalibratedCostModel::CalibratedCostModel(CalibratedProfile profile, std::int32_t block_size,
                                         std::int32_t lora_rank)
    : profile_(std::move(profile)), lora_rank_(lora_rank) {
  if (block_size < 1) {
    throw ConfigError("block_size must be at least 1, got " + std::to_string(block_size));
  }
  if (lora_rank > 0 && !profile_.coefficients.lora_set) {
    throw ConfigError(
        (profile_.file.empty() ? std::string("the calibrated profile") : profile_.file) +
        ": has no LoRA coefficients (lora_token_rank_s, lora_adapter_rank_s) to price the "
        "adapters of serving.lora; add them to its coefficients or use the roofline");
  }
  block_bytes_ = static_cast<double>(profile_.block_bytes) / profile_.block_size * block_size;
}

CalibrationFeatures CalibratedCostModel::features(const StepPlan& plan) const {
  const std::optional<PrefillLaunch>& launch = profile_.coefficients.prefill_launch;
  return CalibrationFeatures::from_plan(plan, launch ? &*launch : nullptr);
}

double CalibratedCostModel::seconds(const CalibrationFeatures& f) const {
  return calibrated_seconds(profile_.coefficients, f, block_bytes_, lora_rank_);
}

TimeNs CalibratedCostModel::step_time(const StepPlan& plan) const {
  return seconds_to_ns(seconds(features(plan)));
}

StepCostBreakdown CalibratedCostModel::breakdown(const StepPlan& plan) const {
  StepCostBreakdown b;
  const CalibrationFeatures f = features(plan);
  if (f.empty()) return b;
  const Terms x = terms(profile_.coefficients, f, block_bytes_);
  b.overhead = x.step + x.sequences;
  b.gemm = x.tokens + x.tokens_above_knee;
  b.prefill_attention = x.prefill_pairs + critical_path_term(profile_.coefficients, f);
  b.decode_attention = x.decode_context + x.decode_context_above_knee;
  b.lm_head = x.sampled;
  b.swap = x.swap;
  b.copy = x.copy;
  b.lora = lora_term(profile_.coefficients, f.step, lora_rank_);
  return b;
}

TimeNs CalibratedCostModel::wake_up_ns() const {
  return seconds_to_ns(profile_.coefficients.wake_up_s);
}

TimeNs CalibratedCostModel::swap_time(std::int64_t num_blocks) const {
  return seconds_to_ns(static_cast<double>(num_blocks) * block_bytes_ *
                       profile_.coefficients.swap_byte_s);
}

bool calibrated_swap_is_cheaper(const CalibratedCostModel& cost, const Request& victim) {
  const std::optional<PrefillLaunch>& launch = cost.profile().coefficients.prefill_launch;
  auto prefill = [&](std::int64_t c) {
    CalibrationFeatures f;
    f.num_entries = 1;
    f.step.num_tokens = c;
    f.step.prefill_tokens = c;
    f.step.prefill_pairs = c * (c + 1) / 2;
    f.step.prefill_context_tokens = c;
    if (launch) {
      PrefillLaunchCost l(*launch);
      l.add(0, c);
      const PrefillCriticalPath path = l.critical_path();
      f.prefill_critical_keys = path.keys;
      f.prefill_merge_steps = path.merge_steps;
    }
    return cost.seconds(f);
  };
  const std::int64_t tokens = victim.num_computed_tokens;
  const double recompute = tokens <= 1 ? 0.0 : prefill(tokens) - prefill(1);
  const double swap =
      2.0 * ns_to_s(cost.swap_time(static_cast<std::int64_t>(victim.block_table.size())));
  return swap < recompute;
}

}  // namespace servelab
