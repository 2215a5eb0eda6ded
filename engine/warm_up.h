// Warm-up before a CUDA engine takes its first request, as vLLM runs dummy forward passes and
// captures its graphs before serving: a few untimed steps so that the GPU's one-time costs (lazy
// kernel loading, cuBLAS's set-up and kernel choice per GEMM shape, the eager pass before a
// decode bucket's first graph capture) are paid before the run's clock starts. On an H200 a cold
// first step of an 8B model took 100-170 ms more than the same step warm (docs/validation.md,
// GPU section), which delayed every request of the first burst and made the simulator's TTFT
// look 30 % optimistic.
//
// The plans (WarmUpPlans): prefills of one request each of T, T/4, T/16 and T/64 tokens (those of
// at least 16), T = min(max_num_batched_tokens, max_model_len, (num_blocks - 1) * block_size),
// rounded down to whole blocks, each sampling its last token; then one decode step for every
// CUDA-graph batch bucket B (kernels::decode_graph_buckets) up to min(max_num_seqs, T /
// block_size): B sequences at context block_size, sequence i in block 1 + i, which the largest
// prefill wrote (its keys are finite), so no two rows write one slot. Those steps do not split,
// so the CUDA executor captures them at the bucket's minimum table width
// (kernels/decode_graph_plan.h decode_graph_shape), the key of every unsplit decode step of the
// run whose contexts fit in it: the run replays the warm-up's graphs. With lora_rank > 0 (the
// run serves LoRA adapters), each such decode step is followed by the same step with every
// sequence under the warm-up adapter kWarmUpLoraId of rank lora_rank, so that the adapted
// decode graphs (DecodeGraphKey::lora) are captured before the run too. That adapter stays on
// the device (an 8B model's at rank 16: 84 MB), as vLLM reserves its LoRA slots.
// Contract: the plans use blocks 1 .. T / block_size only (block 0, the null block, is never
// touched) and request ids counting down from 2^kSampleIdShift - 1 (above every workload id).
// Their KV is garbage to the run: warm up before anything the run keeps is computed into the
// cache (pinned prefixes). A run's sampled tokens do not depend on it (every executor writes a
// block's KV before reading it, and samples from per-(seed, request, index) random streams).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "core/backend.h"
#include "core/request.h"
#include "core/request_state.h"
#include "core/step_plan.h"

namespace servelab {

struct WarmUpShape {
  std::int32_t max_num_batched_tokens = 0;
  std::int32_t max_model_len = 0;
  std::int32_t max_num_seqs = 0;
  std::int64_t num_blocks = 0;  // device KV blocks, block 0 included
  std::int32_t block_size = 16;
  std::int32_t lora_rank = 0;  // 0: no LoRA decode steps
};

// The adapter id the LoRA warm-up steps run under (above any workload's ids, 1 .. adapters).
inline constexpr std::uint32_t kWarmUpLoraId = 0xffffffffU;

// The plans above and what their spans point into (so neither copyable nor movable). Empty when
// the shape leaves less than one block of 16 tokens: nothing to warm up with.
// Throws std::invalid_argument for a non-positive field.
class WarmUpPlans {
 public:
  explicit WarmUpPlans(const WarmUpShape& shape);
  WarmUpPlans(const WarmUpPlans&) = delete;
  WarmUpPlans& operator=(const WarmUpPlans&) = delete;

  const std::vector<StepPlan>& plans() const { return plans_; }

 private:
  RequestSpec& add_request(std::int32_t prompt_len);
  // A decode step of `bucket` rows at context bs, under the warm-up adapter if lora_rank > 0.
  void add_decode_step(std::int32_t bucket, std::int32_t bs, std::int32_t lora_rank);

  std::deque<RequestSpec> specs_;
  std::deque<std::vector<BlockId>> tables_;
  std::vector<StepPlan> plans_;
  RequestId next_id_ = (RequestId{1} << kSampleIdShift) - 1;
};

// Runs every plan on `backend` in order; returns the wall seconds they took.
double run_warm_up(Backend& backend, const WarmUpPlans& plans);

}  // namespace servelab
