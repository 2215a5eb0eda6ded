// check_scheduler_invariants(): the scheduler's state and the plan it just formed, checked
// against the rules every policy must keep. Meant for runs where a policy written outside the
// project (a Python plugin, servelab.register_queue_order) drives the scheduler, so a broken
// policy stops the run with a message instead of corrupting it. It costs O(requests in the
// scheduler + plan entries), so a driver can call it after every step; the KV pool's own
// invariants (KvCacheManager::check_invariants) cost O(blocks) and are the caller's to check as
// often as it can afford.
//
// Checked: at most max_num_seqs running requests; every running request is kRunning, holds a
// device table covering its computed tokens and no host table; every waiting request is
// kWaiting or kPreempted and holds no blocks; every swapped request is kSwapped and holds a host
// table; no request is in two of the waiting queue, the running list and the swapped list, or
// twice in one; the waiting queue's size matches its contents; with LoRA on, at most max_loras
// distinct adapters among the running and swapped requests. For the plan: at most
// max_num_batched_tokens tokens, each entry scheduled once with at least one token, for a
// running request, its block table covering its context, and its prefill/decode token totals
// matching the plan's counters.
#pragma once

#include <string>

#include "core/scheduler.h"
#include "core/step_plan.h"

namespace servelab {

// Throws std::logic_error naming the broken rule and the request (or block) concerned.
// REQUIRES: called between schedule() (which returned `plan`) and complete().
void check_scheduler_invariants(const Scheduler& scheduler, const StepPlan& plan);

}  // namespace servelab
