// Scheduler: continuous batching with vLLM v1 semantics (vllm/v1/core/sched/scheduler.py).
//
// Each iteration: schedule(now) forms a StepPlan, a backend executes it, complete(result, t)
// applies the sampled tokens at the step's end time t. schedule():
// 1. Running requests first, in list order, under one token budget (max_num_batched_tokens):
//    n = min(remaining, long_prefill_token_threshold if set, budget). A request that cannot get
//    slots preempts a victim (by recompute: blocks freed tail first with their hashes kept,
//    num_computed_tokens reset, outputs kept, back to the waiting queue with push_front),
//    repeatedly, until it fits or it has preempted itself. The victim is the last running
//    request, or with PreemptionVictim::kLowestPriority the max over running of (priority,
//    arrival), first in list order on ties; if that one was already scheduled in this step its
//    plan entry is removed, its tokens go back to the budget and its progress is undone (vLLM
//    v1 priority mode). A request given 0 tokens keeps its place.
// 2. If nothing was preempted, waiting requests in the WaitingQueue's order (FCFS unless
//    config.make_waiting_queue says otherwise) while the budget lasts and
//    running < max_num_seqs: prefix lookup (first admission or resume), n = remaining after the
//    hit (threshold-capped); with chunking off a request over the budget stops admission; a
//    request that cannot get blocks stops admission (no skipping).
// 3. Every scheduled request's num_computed_tokens advances by its n.
// Other batch formations (config.batch_formation, the `batch` plugin; see docs/policies.md):
// - kStatic: when nothing runs, a batch is formed from the head of the waiting queue (up to
//   max_num_seqs, each with blocks for prompt + max_output_tokens reserved at admission); its
//   prompts are prefilled chunk by chunk under the budget (members whose prompt is done wait),
//   then all members decode in lockstep; finished members leave, nobody joins until all end.
// - kOrca: every running request decodes each step; then waiting requests join in queue order
//   while their whole prompt fits the remaining budget (no chunking, head-of-line) and blocks for
//   prompt + max_output_tokens can be reserved. Never preempts.
// - kSarathi: decodes first (1 token each, preempting a victim when one cannot get a slot), then
//   ongoing partial prefills, then new admissions while the whole prompt's blocks fit above the
//   watermark; prefills get min(remaining, tau - used) with tau = sarathi_chunk_size.
// - kPrefillFirst: if the head of the waiting queue can be admitted (whole prompt in the budget,
//   blocks above the watermark, a free seat), the step is prefill-only (admit while they fit);
//   otherwise it decodes every running request, preempting victims as needed.
// Victims (config.preemption_victim): last running, lowest priority, SGLang's retract order
// (fewest outputs, then longest prompt) or most blocks; a victim already in this step's plan is
// refunded. With config.max_preemptions > 0, a request preempted more than that many times is
// aborted (kAborted, reported through on_finish, then deleted).
// Swap (config.preemption_mode kSwap, or kAuto when config.prefer_swap(victim) is true; vLLM v0
// preemption_mode=swap), kVllm formation only: a victim whose device blocks the host pool can
// take (kv.can_swap_out) is swapped out instead of recomputed: its moves go to plan.swap_out,
// it becomes kSwapped, keeps num_computed_tokens and joins the swapped list (FIFO). When the
// host pool is short the victim is recomputed instead (vLLM v0 aborts the request with "lack of
// CPU swap space"; a fallback keeps the run going and is what a real engine would rather do).
// A victim past the preemption cap is aborted without being swapped. In a step that preempted
// nothing, after the running phase and before any admission, swapped requests are resumed in
// FIFO order: while the budget and a seat last and kv.can_swap_in(r, n) holds for its next n
// tokens, r is swapped in (plan.swap_in) and scheduled; the first that does not fit stops the
// pass (head-of-line). While any request remains swapped nobody is admitted from the waiting
// queue (vLLM v0: swapped requests go before new prefills). So a request is never swapped in
// and out in the same step, and no step both swaps in and swaps out.
// Requests whose prompt + output exceed max_model_len, or that could never fit in the whole
// cache, are rejected at arrival (counted, never scheduled). So are empty prompts, requests for
// no output, and, with chunked prefill off, requests that might one day need more tokens in one
// step than max_num_batched_tokens allows (vLLM refuses such configurations outright; here a
// request like that would block the queue forever).
//
// Parallel sampling (RequestSpec::n > 1; kVllm, kSarathi and kPrefillFirst with paged
// allocation; rejected at arrival otherwise): a request is prefilled once; the step that samples
// its first token draws n tokens (ScheduledRequest::num_samples) and the request forks into n
// samples (sample 0 is the request itself, sample k has id sample_request_id(id, k)) that share
// its blocks (KvCacheManager::fork, copy-on-write of the shared partial block into
// plan.copies). Each sample is then a sequence of its own in running_ (a seat each; a request
// that will fork is admitted only with n seats free, and keeps n - 1 of them reserved until it
// forks). A victim that is a sample takes its whole group with it: every running sample is
// preempted (recomputed: back to the waiting queue one by one, each resuming on its own with
// prefix hits on the shared prompt; or swapped, each with its own host copy of the blocks),
// except the requester itself when the victim is its own sibling. The request finishes when its
// last sample does and is reported once, through sample 0.
//
// Ownership: the scheduler allocates a Request per arrival and deletes it right after
// observer->on_finish (or on_reject); the destructor frees the blocks of what remains.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/kv_cache_manager.h"
#include "core/scheduler_config.h"
#include "core/scheduler_observer.h"
#include "core/step_plan.h"
#include "core/waiting_queue.h"

namespace servelab {

struct SchedulerCounters {
  std::int64_t num_arrived = 0;
  std::int64_t num_rejected = 0;
  std::int64_t num_finished = 0;
  std::int64_t num_aborted = 0;
  std::int64_t num_preemptions = 0;
  std::int64_t num_recomputed_tokens = 0;
};

class Scheduler {
 public:
  // `kv` and `observer` (may be null) must outlive the scheduler. Throws std::invalid_argument
  // on a config with a budget, seat count or max_model_len below 1, a negative threshold, or a
  // block size or prefix-caching switch that disagrees with `kv`'s. The waiting queue is
  // `waiting` if given, else config.make_waiting_queue() if set, else FCFS.
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv, SchedulerObserver* observer,
            std::unique_ptr<WaitingQueue> waiting = nullptr);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler();

  // Queues a request that arrived at `now` (or rejects it; see above).
  void add_request(RequestSpec spec, TimeNs now);

  // Forms the next plan. The returned reference stays valid until complete() or the next
  // schedule(). The plan is empty when there is nothing to run. REQUIRES: the previous plan was
  // completed.
  const StepPlan& schedule(TimeNs now);

  // Applies the result of the last plan at time `now` (the step's end): appends sampled tokens
  // (reported to the observer together, through on_step_tokens, in plan order), then finishes
  // requests that reached their output length and frees their blocks (on_finish, plan order).
  void complete(const StepResult& result, TimeNs now);

  bool has_unfinished() const {
    return !waiting_->empty() || !running_.empty() || !swapped_.empty();
  }
  std::size_t num_waiting() const { return waiting_->size(); }
  std::size_t num_running() const { return running_.size(); }
  std::size_t num_swapped() const { return swapped_.size(); }
  // The swapped-out requests in resume order (oldest swap-out first).
  const std::deque<Request*>& swapped() const { return swapped_; }
  const std::vector<Request*>& running() const { return running_; }
  // The waiting requests in admission order (a copy: O(n), for tests and inspection).
  std::vector<Request*> waiting() const { return waiting_->snapshot(); }
  const WaitingQueue& waiting_queue() const { return *waiting_; }
  const SchedulerCounters& counters() const { return counters_; }
  const SchedulerConfig& config() const { return config_; }
  KvCacheManager& kv() { return kv_; }

 private:
  // The reason a request must be refused at arrival, or "" if it can be queued.
  std::string rejection_reason(const Request& req) const;
  // Swaps the victim out to the swapped list or frees its KV and requeues it at the head (see
  // above for which), or aborts it past the preemption cap (the victim is then deleted).
  // REQUIRES: the victim was unlinked from running_ and unscheduled.
  void preempt(Request& victim, TimeNs now);
  // Whether preempt() would swap `victim` out rather than recompute it.
  bool should_swap(const Request& victim) const;
  // The resume pass over swapped_ (see above); returns the budget left.
  std::int32_t swap_in_phase(std::int32_t budget, TimeNs now);
  // Gives up on `r` (unlinked, no plan entry, blocks freed here): reports and deletes it.
  void abort_request(Request& r, TimeNs now);
  // One pass of the running phase, then (if `admit`) the waiting phase, appending to plan_.
  void fill_plan(TimeNs now, bool admit);
  // The batch formations other than vLLM's, one step each (see above); they append to plan_.
  void fill_plan_static(TimeNs now);
  void fill_plan_orca(TimeNs now);
  void fill_plan_sarathi(TimeNs now, bool admit);
  void fill_plan_prefill_first(TimeNs now, bool admit);
  // Allocates n slots for running_[i], preempting victims until it fits; a victim already in the
  // plan is refunded to `budget`, and i follows running_[i] when an earlier entry leaves. Returns
  // false when running_[i] preempted itself (it is gone; i then indexes the next request).
  bool make_room(std::size_t& i, std::int32_t n, std::int32_t& budget, TimeNs now);
  // Moves the waiting queue's front `r` (which just got its blocks for `hit`) to running_.
  void admit_front(Request& r, const PrefixHit& hit);
  // Blocks an admission must leave free (admission_watermark of the usable blocks).
  std::int32_t watermark_blocks() const;
  // Whether r still has prompt (or, after a preemption, prompt + outputs) to prefill.
  static bool prefill_pending(const Request& r) {
    return r.num_computed_tokens < r.spec.prompt_len || r.num_tokens() - r.num_computed_tokens > 1;
  }
  bool in_plan(const Request& r) const;
  // The index in running_ of the next preemption victim (see above).
  std::size_t pick_victim() const;
  // Removes the plan entry of `r` (scheduled earlier in this step), undoing its progress and
  // returning its tokens.
  std::int32_t unschedule(const Request& r);
  // Appends r's entry (n tokens from r.num_computed_tokens) and advances r's progress.
  void add_to_plan(Request& r, std::int32_t n, std::int32_t cached_now, TimeNs now);
  // add_to_plan with the entry's kind given: is_prefill = (end < known tokens || n > 1) and
  // samples = (end == known tokens), as add_to_plan derives them (a decode passes false, true).
  void add_entry(Request& r, std::int32_t n, std::int32_t cached_now, TimeNs now, bool is_prefill,
                 bool samples);
  // Marks r finished, frees its blocks and reports it; the caller unlinks and deletes it (a
  // forked sample: its group is reported and deleted when its last sample is done).
  void finish(Request& r, TimeNs now);

  // ---- Parallel sampling (spec.n > 1; see the file comment) ----
  // Seats in use: running requests plus the n - 1 seats reserved for each running request that
  // will fork.
  std::size_t seats_taken() const { return running_.size() + fork_seats_; }
  // Forks r into its group after its first-token step: samples 1 .. n-1 share r's blocks and
  // take their first tokens from `tokens` (n - 1 of them); they join running_ right after r.
  void fork_request(Request& r, const std::int32_t* tokens, TimeNs now);
  // The forks of the plan being completed (entries with num_samples > 1), before the tokens are
  // applied; returns whether a sample finished already (max_output_tokens 1).
  bool fork_pass(const StepResult& result, TimeNs now);
  // Preempts every running sample of victim's group (last sample first, so that sample 0 ends
  // up at the head of the waiting queue), refunding plan entries to `budget` and keeping `i`
  // on the same request. The requester `self` is spared while a sibling runs (see the .cc).
  // Returns whether `self` was preempted.
  bool preempt_group(Request& victim, std::size_t& i, std::int32_t& budget, const Request* self,
                     TimeNs now);
  // A forked sample finished or was aborted; when it was its group's last, the group is
  // reported through sample 0 and queued for deletion.
  void sample_done(Request& r, TimeNs now);
  // Deletes the samples of the groups sample_done completed.
  void release_done_groups();

  SchedulerConfig config_;
  KvCacheManager& kv_;
  SchedulerObserver* observer_;
  std::unique_ptr<WaitingQueue> waiting_;
  bool report_service_ = false;  // waiting_->counts_service(), asked once
  std::vector<Request*> running_;
  std::deque<Request*> swapped_;  // kSwapped requests, oldest swap-out first
  StepPlan plan_;
  std::vector<Request*> plan_requests_;  // the Request behind each plan entry
  // complete()'s scratch (sized to the largest plan): the requests that got a token and their
  // previous token times.
  std::vector<Request*> token_requests_;
  std::vector<TimeNs> token_prev_ns_;
  std::int64_t next_step_ = 0;
  bool plan_pending_ = false;  // a non-empty plan awaits complete()
  SchedulerCounters counters_;
  std::size_t fork_seats_ = 0;  // seats reserved for the samples of running unforked requests
  std::vector<std::shared_ptr<SampleGroup>> done_groups_;  // reported, awaiting deletion
};

}  // namespace servelab
