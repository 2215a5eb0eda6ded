// Registers core's vLLM v1 defaults as plugins: batch `vllm` (VllmBatchFormation,
// core/vllm_batch_formation.h), preemption `recompute` (RecomputePreemption,
// core/preemption_mode.h) and victim `last-running` (LastRunningVictim, core/victim_rule.h).
// The classes live in core because a default SchedulerConfig must be vLLM v1's scheduler; here
// they get their names, documentation and factories like every other plugin.
#include "core/preemption_mode.h"
#include "core/victim_rule.h"
#include "core/vllm_batch_formation.h"
#include "policies/registry.h"

namespace servelab {
namespace {

const PolicyRegistrar kVllm({PolicyKind::kBatch,
                             "vllm",
                             "continuous batching: running requests first, then waiting ones, "
                             "under one token budget with chunked prefill",
                             "vLLM v1 Scheduler.schedule() (vllm/v1/core/sched/scheduler.py)",
                             {},
                             batch_factory<VllmBatchFormation>(),
                             /*rank=*/0});

const PolicyRegistrar kRecompute({PolicyKind::kPreemption, "recompute",
                                  "free the victim's KV (full blocks stay cached) and recompute "
                                  "prompt + outputs on resume",
                                  "vLLM v1 _preempt_request (recompute only)", preemption_params(),
                                  preemption_factory<RecomputePreemption>(),
                                  /*rank=*/0});

const PolicyRegistrar kLastRunning({PolicyKind::kVictim,
                                    "last-running",
                                    "the most recently admitted running request (vLLM FCFS)",
                                    "vLLM v1 FCFS scheduling (self.running.pop())",
                                    {},
                                    victim_factory<LastRunningVictim>(),
                                    /*rank=*/0});

}  // namespace
}  // namespace servelab
