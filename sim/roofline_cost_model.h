// RooflineCostModel: step time from FLOPs over peak and bytes over bandwidth, per operator.
//
// For each operator of a step (GEMMs, prefill attention, decode attention, LM head) the time is
//   max(FLOPs / (peak_flops * flops_efficiency), bytes / (hbm_bandwidth * bandwidth_efficiency))
// and the step adds elementwise kernels (norms, RoPE, SiLU-mul: bytes over bandwidth), swap (bytes
// over the host link), copy-on-write copies (bytes over HBM) and a fixed per-step overhead. Every
// formula, with a worked example, is in docs/cost-model.md.
//
// The constructor folds the model and hardware into a handful of per-unit coefficients, so
// step_time() is one pass over the plan's entries plus a few multiplications; it allocates
// nothing. The object is immutable after construction and safe to share between threads.
#pragma once

#include <cstdint>
#include <string_view>

#include "serving/hardware_config.h"
#include "serving/model_config.h"
#include "sim/cost_model.h"

namespace servelab {

class RooflineCostModel final : public CostModel {
 public:
  // Throws ConfigError when model or hardware fail validate() (hardware.tensor_parallel must be
  // 1) or block_size < 1.
  RooflineCostModel(ModelConfig model, HardwareConfig hardware, std::int32_t block_size);

  TimeNs step_time(const StepPlan& plan) const override;
  TimeNs swap_time(std::int64_t num_blocks) const override;
  std::string_view name() const override { return "roofline"; }

  // Seconds per operator; step_time(plan) == seconds_to_ns(breakdown(plan).total()).
  StepCostBreakdown breakdown(const StepPlan& plan) const;
  StepCostBreakdown breakdown(const StepFeatures& features) const;

  const ModelConfig& model() const { return model_; }
  const HardwareConfig& hardware() const { return hardware_; }
  std::int32_t block_size() const { return block_size_; }
  // K and V of block_size tokens across all layers.
  std::int64_t block_bytes() const { return block_bytes_; }

 private:
  ModelConfig model_;
  HardwareConfig hardware_;
  std::int32_t block_size_;
  std::int64_t block_bytes_;

  // Seconds per FLOP or per byte at the effective rates.
  double s_per_gemm_flop_;
  double s_per_attention_flop_;
  double s_per_hbm_byte_;
  double s_per_host_byte_;

  // Work per unit, folded from the model's shape.
  double gemm_flops_per_token_;         // 2 * linear params * layers
  double gemm_weight_bytes_;            // linear params * layers * dtype bytes (read once a step)
  double gemm_act_bytes_per_token_;     // GEMM inputs read and outputs written per token
  double elementwise_bytes_per_token_;  // norms, residual adds, RoPE, SiLU-mul, embedding
  double attention_flops_per_pair_;     // 4 * head_dim * num_heads * layers
  double kv_bytes_per_token_;           // 2 * layers * kv_heads * head_dim * dtype bytes
  double qo_bytes_per_token_;           // Q read and O written by attention, all layers
  double lm_head_flops_per_seq_;        // 2 * hidden * vocab
  double lm_head_weight_bytes_;         // hidden * vocab * dtype bytes
  double lm_head_act_bytes_per_seq_;    // hidden read + vocab logits written
};

}  // namespace servelab
