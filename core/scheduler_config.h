// Serving limits the scheduler enforces (the `serving:` section of an experiment), plus the
// policy hooks chosen in the `policies:` section (built by policies/, core only sees the
// interfaces).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/lora_config.h"
#include "core/speculative_config.h"

namespace servelab {

class AdmissionPolicy;
class BatchFormation;
class LengthCap;
class PreemptionMode;
class VictimRule;
class WaitingQueue;
class Request;

struct SchedulerConfig {
  std::int32_t max_num_batched_tokens = 8192;  // token budget per step
  std::int32_t max_num_seqs = 256;             // cap on running requests
  std::int32_t max_model_len = 8192;           // prompt + output cap; longer requests are rejected
  std::int32_t long_prefill_token_threshold = 0;  // cap on one request's tokens per step (0: off)
  bool enable_chunked_prefill = true;
  bool enable_prefix_caching = true;
  std::int32_t block_size = 16;
  // vLLM v0.6's multi-step scheduling (`serving.num_scheduler_steps`, docs/policies.md): a plan
  // every entry of which decodes a running request that already has an output token, in a step
  // that admitted nobody, runs as one round of this many forward passes (StepPlan::num_steps),
  // with the slots reserved up front (lookahead). 1: every plan is one forward pass (vLLM v1).
  std::int32_t num_scheduler_steps = 1;
  // vLLM v1's async scheduling (`serving.async_scheduling`, docs/policies.md "Async scheduling"):
  // the next plan is formed while the previous one runs, before its sampled tokens are known
  // (output placeholders); see core/scheduler.h. Off: every plan is formed after the previous
  // one completed.
  bool async_scheduling = false;
  // vLLM's speculative decoding (`serving.speculative_config`; core/speculative_config.h and the
  // Scheduler's file comment). Off by default.
  SpeculativeConfig speculative;
  // vLLM's LoRA limits (`serving.lora`; core/lora_config.h). Off by default.
  LoraConfig lora;
  // The policy objects (plugins built by policies/registry; core only sees the interfaces).
  // Null means vLLM v1's choice, which core provides itself: VllmBatchFormation,
  // LastRunningVictim, RecomputePreemption. They are immutable, so copies of a config share them.
  std::shared_ptr<const BatchFormation> batch;
  std::shared_ptr<const VictimRule> victim;
  // A mode that uses host memory needs a batch formation that resumes swapped requests and a
  // host pool in the KV cache manager; a victim whose KV the host pool cannot take is
  // recomputed instead (see core/scheduler.h).
  std::shared_ptr<const PreemptionMode> preemption;
  // A request preempted more than this many times is aborted (0: no cap).
  std::int32_t max_preemptions = 0;
  // The `auto` preemption mode's cost oracle: true when swapping this victim out and back in is
  // cheaper than recomputing its num_computed_tokens. A function rather than cost coefficients so
  // core/ needs nothing of sim/ and the simulator can ask its full cost model (sim/run.cc sets it
  // from the RooflineCostModel). Empty: `auto` recomputes every victim (vLLM v0's auto choice for a
  // single-sequence request).
  std::function<bool(const Request&)> prefer_swap;
  // Builds the waiting queue (a queue-order plugin). Empty: FCFS.
  std::function<std::unique_ptr<WaitingQueue>()> make_waiting_queue;
  // Overload control (core/admission_policy.h, core/length_cap.h): which arrivals are shed, and
  // whose max_output_tokens is lowered. Null: every request is admitted as asked (the default).
  std::shared_ptr<const AdmissionPolicy> admission;
  std::shared_ptr<const LengthCap> length_cap;
};

}  // namespace servelab
