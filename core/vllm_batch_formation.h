// VllmBatchFormation: vLLM v1 continuous batching (vllm/v1/core/sched/scheduler.py
// Scheduler.schedule()), the scheduler's default batch formation (`batch: vllm`).
//
// One step: (1) running requests in list order under one token budget
// (max_num_batched_tokens), each getting min(remaining, long_prefill_token_threshold if set,
// budget) tokens, preempting victims when one cannot get slots (Scheduler::make_room); a
// request that preempts itself ends the phase (vLLM breaks out of its running loop); (2) if the
// step preempted nothing, swapped requests are resumed (Scheduler::swap_in_phase); (3) if it
// preempted nothing and nobody stays swapped, waiting requests are admitted in queue order
// (Scheduler::admit_waiting: chunked prefill, head-of-line blocking; with chunked prefill off a
// request over the budget waits). Semantics pinned by tests/scheduler_test.cc and the reference
// scenarios in ../shared/reference/schedulers.md.
//
// It lives in core (not policies/) because a default SchedulerConfig must be vLLM v1's
// scheduler; policies/registry registers it under the name "vllm" like any other plugin.
#pragma once

#include "core/batch_formation.h"

namespace servelab {

class VllmBatchFormation final : public BatchFormation {
 public:
  std::string_view name() const override { return "vllm"; }
  void fill(Scheduler& s, TimeNs now, bool admit) const override;
  bool resumes_swapped() const override { return true; }
  bool supports_multi_step() const override { return true; }
  // With chunked prefill off, a request that might one day need more tokens in one step than
  // max_num_batched_tokens allows (a resumed request asks for up to prompt + outputs - 1).
  std::string rejection_reason(const Request& r, const Scheduler& s) const override;
};

}  // namespace servelab
