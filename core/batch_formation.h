// BatchFormation: how one step's batch is formed (the `batch` plugin kind).
//
// The Scheduler calls fill() once per schedule() (and again, with admit = false, when a
// preemption left the plan empty while requests still run). fill() appends the step's entries
// through the Scheduler's step-building operations (core/scheduler.h, "Step building"):
// make_room() to get slots (preempting victims chosen by the VictimRule), add_to_plan() /
// add_entry() to schedule tokens, admit_waiting() for the one admission loop, swap_in_phase()
// to resume swapped requests. It never touches the waiting queue or the running list directly,
// so every formation keeps the scheduler's invariants (budget, seats, plan totals).
//
// Contract of every implementation:
// - Immutable after construction (fill is const): one object may serve several schedulers at
//   once (`sim sweep` runs points on threads with a shared configuration).
// - Deterministic: decisions depend only on the scheduler's state, never on addresses.
// - With admit == false it admits nobody (a plan that preempted admits nobody).
// - The plan's tokens stay within config().max_num_batched_tokens and the running requests
//   within max_num_seqs.
//
// The vLLM v1 default (VllmBatchFormation, core/vllm_batch_formation.h) lives in core so that
// a default SchedulerConfig is vLLM v1's scheduler; the alternatives (static, orca, sarathi,
// prefill-first) are plugins in policies/ (docs/policies.md, "Adding a policy").
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/time.h"

namespace servelab {

class Scheduler;
class Request;

// A formation's mutable state for one scheduler (e.g. SGLang's new_token_ratio): made by
// make_state() when the Scheduler is built, owned by it, read in fill() through
// Scheduler::batch_state(). The formation object itself stays immutable and shareable.
class BatchFormationState {
 public:
  virtual ~BatchFormationState() = default;
};

class BatchFormation {
 public:
  virtual ~BatchFormation() = default;

  // The registry name ("vllm", "sarathi", ...), for messages.
  virtual std::string_view name() const = 0;
  // Forms this step's plan through `s` (see above).
  virtual void fill(Scheduler& s, TimeNs now, bool admit) const = 0;
  // The state one scheduler keeps for this formation (null: none, the default).
  virtual std::unique_ptr<BatchFormationState> make_state() const { return nullptr; }
  // Whether this formation resumes swapped-out requests (Scheduler::swap_in_phase), so that
  // the swap and auto preemption modes may be used with it. A formation that never preempts
  // may answer true: swapping is then a no-op.
  virtual bool resumes_swapped() const { return false; }
  // Whether requests with n > 1 samples can run (they need on-demand allocation).
  virtual bool supports_parallel_sampling() const { return true; }
  // Whether this formation compares running and waiting requests by the queue order's rank
  // (WaitingQueue::ranks_before), so that the scheduler refuses queue orders that do not rank.
  virtual bool needs_ranked_queue() const { return false; }
  // Whether this formation reserves a decode's lookahead slots (Scheduler::decode_lookahead), so
  // that its decode-only plans can run as multi-step rounds (num_scheduler_steps > 1). The
  // scheduler refuses num_scheduler_steps > 1 with a formation that answers false.
  virtual bool supports_multi_step() const { return false; }
  // The formation's own reason to refuse `r` at arrival ("" if none), checked after the
  // scheduler's common checks (length, cache capacity): a request this formation could never
  // schedule would otherwise block the queue forever.
  virtual std::string rejection_reason(const Request& r, const Scheduler& s) const {
    (void)r;
    (void)s;
    return {};
  }
};

}  // namespace servelab
