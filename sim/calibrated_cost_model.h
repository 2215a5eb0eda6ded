// CalibratedCostModel: the roofline's operator structure with coefficients fitted to step times
// the engine measured (`engine profile` -> `sim calibrate` -> cost.yaml).
//
// A step's duration is a non-negative combination of the same operator counts the roofline uses
// (StepFeatures), in seconds:
//
//   step_s                                  fixed, per non-empty step
// + per_sequence_s       * entries          per scheduled request (input preparation, sampling
//                                           bookkeeping, per-entry kernel setup)
// + per_token_s          * T                GEMMs and elementwise kernels, by token count
// + per_token_above_knee_s * max(0, T - knee_tokens)
//                                           the GEMMs' second slope: memory-bound (weights
//                                           streamed once) below the knee, compute-bound above
// + prefill_pair_s       * P_pre            prefill attention, by causal (query, key) pairs
// + decode_context_token_s * C_dec          decode attention, by KV tokens read
// + decode_context_token_above_knee_s * max(0, C_dec - decode_context_knee_tokens)
//                                           the second slope once the step's KV no longer fits
//                                           in a cache (CPU: L2/L3; 0 where there is no knee)
// + sampled_sequence_s   * S                LM head (and sampling), by sequences sampled
// + swap_byte_s          * (W_out + W_in) * block_bytes     swap over the host link
// + copy_byte_s          * W_copy * block_bytes             copy-on-write in device memory
// + lora_token_rank_s    * T_lora * R + lora_adapter_rank_s * L * R
//                                           LoRA (optional coefficients): tokens under an adapter
//                                           and distinct adapters of the step, at the padded rank
//                                           R = max_lora_rank
// + prefill_critical_key_s * K_crit + prefill_merge_step_s * M_crit
//                                           the prefill attention launch's critical paths
//                                           (optional coefficients, with the `prefill_launch` they
//                                           are computed over; core/prefill_launch.h): K_crit, the
//                                           keys of the longest CTA or of an average CTA slot,
//                                           whichever is more, from the launch's split plan
//                                           (plan_prefill_splits, the engine's own); M_crit, the
//                                           split-KV merge's dependent steps, kv_splits x the
//                                           rows a merge CTA walks. A short chunk after a long
//                                           cached prefix runs few CTAs: its time follows its
//                                           longest CTA and its merge, not its (query, key)
//                                           pairs, which price it 10-16x too cheap per pair
//
// An empty plan takes 0. Every coefficient is >= 0 (fitted by NNLS), so adding work never
// shortens a step. The file format is in docs/validation.md and serving/calibration_profile.h; the
// fit in sim/calibration.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/request_state.h"
#include "serving/calibration_profile.h"
#include "sim/cost_model.h"

namespace servelab {

class CalibratedCostModel final : public CostModel {
 public:
  // `block_size`: the simulated KV block size; swap and copy bytes scale from the profile's
  // block_bytes per token. `lora_rank` > 0: LoRA is on with adapters padded to that rank (the
  // profile must then have its LoRA coefficients). Throws ConfigError when block_size < 1, or
  // lora_rank > 0 with a profile without LoRA coefficients.
  CalibratedCostModel(CalibratedProfile profile, std::int32_t block_size,
                      std::int32_t lora_rank = 0);

  TimeNs step_time(const StepPlan& plan) const override;
  // The terms above by operator: overhead (the host part) = step_s + per_sequence_s * entries;
  // gemm = the per-token terms; prefill_attention = the pair and critical-path terms;
  // decode_attention = the decode-context terms; lm_head = the sampled-sequence term; swap and
  // copy; lora = the LoRA terms; no FLOPs or bytes.
  // total() equals seconds() up to rounding.
  StepCostBreakdown breakdown(const StepPlan& plan) const override;
  TimeNs swap_time(std::int64_t num_blocks) const override;
  std::string_view name() const override { return "calibrated"; }
  // The profile's wake_up_s (serving/calibration_profile.h), rounded to ns.
  TimeNs wake_up_ns() const override;

  // The plan's features, with the critical paths of its prefill launch when the profile has one.
  CalibrationFeatures features(const StepPlan& plan) const;
  // Predicted seconds for a step with these features (0 for an empty one).
  double seconds(const CalibrationFeatures& f) const;
  const CalibratedProfile& profile() const { return profile_; }
  double block_bytes() const { return block_bytes_; }

 private:
  CalibratedProfile profile_;
  double block_bytes_;  // at the simulated block size
  double lora_rank_;    // 0: LoRA off
};

// Seconds of the step `f` under `c` with blocks of `block_bytes` (the fit uses this too).
// lora_rank: the padded adapter rank (0: LoRA off, no LoRA term).
double calibrated_seconds(const CalibratedCoefficients& c, const CalibrationFeatures& f,
                          double block_bytes, double lora_rank = 0);

// The `auto` preemption oracle under a calibrated model (as sim/swap_cost.h for the roofline):
// swap when two transfers of the victim's blocks cost less than the marginal prefill of its
// computed tokens.
bool calibrated_swap_is_cheaper(const CalibratedCostModel& cost, const Request& victim);

}  // namespace servelab
