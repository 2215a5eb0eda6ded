// CostModel: predicts how long a backend takes to execute one StepPlan.
//
// The simulator asks a CostModel for every step's duration, so step_time() is on the hot path:
// implementations must be O(plan entries), must not allocate, and must be pure (same plan, same
// answer; no state changes), which keeps simulations deterministic.
//
// StepFeatures is the operator structure every cost model shares (the roofline, and the
// calibrated model that fits coefficients to the same features): how many tokens the GEMMs see,
// how many (query, context) pairs attention computes, how much KV it reads, how many sequences
// the LM head samples, how many blocks move.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/step_plan.h"
#include "core/time.h"

namespace servelab {

struct StepFeatures {
  std::int64_t num_tokens = 0;  // rows of every GEMM: sum of num_tokens over all entries

  // Over prefill entries (is_prefill) and decode entries (the rest) separately.
  // A chunk of n tokens starting at position p attends causally to n*p + n*(n+1)/2 (query, key)
  // pairs and reads the K/V of its p + n context tokens.
  std::int64_t prefill_tokens = 0;
  std::int64_t prefill_pairs = 0;
  std::int64_t prefill_context_tokens = 0;  // sum of context_len()
  std::int64_t decode_tokens = 0;
  std::int64_t decode_pairs = 0;
  std::int64_t decode_context_tokens = 0;

  std::int64_t num_sampled = 0;  // entries with samples: rows of the LM head
  std::int64_t swap_out_blocks = 0;
  std::int64_t swap_in_blocks = 0;
  std::int64_t copy_blocks = 0;  // device-to-device copy-on-write

  // From the plan's totals when it carries them (plan.totals.valid, as Scheduler plans do), else
  // one pass over the entries; no allocation.
  static StepFeatures from_plan(const StepPlan& plan);
};

// Predicted seconds per operator for one step. total() is their sum.
struct StepCostBreakdown {
  double gemm = 0;               // q, k, v, o, gate, up, down projections, all layers
  double elementwise = 0;        // embedding, RMSNorm + residual, RoPE, SiLU-mul (memory-bound)
  double prefill_attention = 0;  // causal attention of prefill chunks, all layers
  double decode_attention = 0;   // attention of decode tokens over their KV, all layers
  double lm_head = 0;            // logits for the sampled sequences
  double swap = 0;               // swap out + swap in over the host link
  double copy = 0;               // copy-on-write block copies in device memory
  double overhead = 0;           // fixed per non-empty step
  double flops = 0;              // total FLOPs of the step (for MFU)
  double bytes = 0;              // total device-memory bytes of the step (for bandwidth use)

  double total() const {
    return gemm + elementwise + prefill_attention + decode_attention + lm_head + swap + copy +
           overhead;
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
  // Time to move num_blocks KV blocks one way over the host link. REQUIRES: num_blocks >= 0.
  virtual TimeNs swap_time(std::int64_t num_blocks) const = 0;
  // Short identifier ("roofline", "calibrated") for logs and run summaries.
  virtual std::string_view name() const = 0;

 protected:
  CostModel() = default;
};

}  // namespace servelab
