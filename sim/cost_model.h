// CostModel: predicts how long a backend takes to execute one StepPlan.
//
// The simulator asks a CostModel for every step's duration, so step_time() is on the hot path:
// implementations must be O(plan entries), must not allocate, and must be pure (same plan, same
// answer; no state changes), which keeps simulations deterministic.
//
// Every cost model prices the same operator structure, StepFeatures (core/step_features.h).
//
// A multi-step round (StepPlan::num_steps N > 1, vLLM v0.6's multi-step scheduling) runs the
// plan's forward pass N times but its host work once: round_time() is
//   N x (total - overhead - swap - copy) + overhead + swap + copy
// of breakdown(plan), where `overhead` is the host-side time of a step (scheduling, input
// preparation, launches, sampling bookkeeping) and the block moves (swap, copy-on-write) happen
// once, before the first pass (docs/cost-model.md, "Host time per round").
#pragma once

#include <cstdint>
#include <string_view>

#include "core/step_features.h"
#include "core/step_plan.h"
#include "core/time.h"

namespace servelab {

// Predicted seconds per operator for one step. total() is their sum.
struct StepCostBreakdown {
  double gemm = 0;               // q, k, v, o, gate, up, down projections, all layers
  double elementwise = 0;        // embedding, RMSNorm + residual, RoPE, SiLU-mul (memory-bound)
  double prefill_attention = 0;  // causal attention of prefill chunks, all layers
  double decode_attention = 0;   // attention of decode tokens over their KV, all layers
  double lm_head = 0;            // logits for the sampled sequences
  double swap = 0;               // swap out + swap in over the host link
  double copy = 0;               // copy-on-write block copies in device memory
  double overhead = 0;           // host-side time of a non-empty step
  // Model parallelism (0 on one GPU): tensor-parallel all-reduces and stage-to-stage sends of
  // the first micro-batch, and the wait for the remaining micro-batches behind the slowest
  // stage (serving/parallel_config.h, docs/cost-model.md "Parallelism").
  double communication = 0;
  double pipeline = 0;
  // LoRA adapters (Punica/S-LoRA shrink and expand GEMMs of every LoRA-enabled projection for
  // the tokens under an adapter; 0 without LoRA; docs/cost-model.md "LoRA adapters").
  double lora = 0;
  double flops = 0;  // total FLOPs of the step, all GPUs of the replica (for MFU)
  double bytes = 0;  // total device-memory bytes of the step, all GPUs (for bandwidth use)

  double total() const {
    return gemm + elementwise + prefill_attention + decode_attention + lm_head + swap + copy +
           overhead + communication + pipeline + lora;
  }
};

class CostModel {
 public:
  virtual ~CostModel();
  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;

  // Duration of the step, integer nanoseconds (rounded once from seconds). An empty plan
  // (no entries, no swaps) takes 0. Never negative; never decreases when work is added.
  virtual TimeNs step_time(const StepPlan& plan) const = 0;
  // Seconds per operator of one forward pass of `plan` (zeros for an empty plan);
  // seconds_to_ns(total()) is step_time(plan), up to the order in which a model sums its terms
  // (1 ns). Pure, like step_time.
  virtual StepCostBreakdown breakdown(const StepPlan& plan) const = 0;
  // Duration of the whole round of `plan` (see above), integer ns rounded once; step_time(plan)
  // when plan.num_steps == 1.
  TimeNs round_time(const StepPlan& plan) const;
  // Time to move num_blocks KV blocks one way over the host link. REQUIRES: num_blocks >= 0.
  virtual TimeNs swap_time(std::int64_t num_blocks) const = 0;
  // Short identifier ("roofline", "calibrated") for logs and run summaries.
  virtual std::string_view name() const = 0;
  // The engine's latency from an arrival at an idle replica to the step that starts on it (its
  // loop's wake-up): the simulator starts such a step this long after the event (sim/
  // simulator.h). 0 (the default): at the event itself. Never negative.
  virtual TimeNs wake_up_ns() const { return 0; }

 protected:
  CostModel() = default;
};

}  // namespace servelab
