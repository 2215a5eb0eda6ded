// Scheduler: continuous batching with vLLM v1 semantics (vllm/v1/core/sched/scheduler.py).
//
// Each iteration: schedule(now) forms a StepPlan, a backend executes it, complete(result, t)
// applies the sampled tokens at the step's end time t. schedule():
// 1. Running requests first, in list order, under one token budget (max_num_batched_tokens):
//    n = min(remaining, long_prefill_token_threshold if set, budget). A request that cannot get
//    slots preempts the last running request (by recompute: blocks freed tail first with their
//    hashes kept, num_computed_tokens reset, outputs kept, back to the head of the waiting
//    queue), repeatedly, until it fits or it has preempted itself. A request given 0 tokens keeps
//    its place.
// 2. If nothing was preempted, waiting requests in queue order while the budget lasts and
//    running < max_num_seqs: prefix lookup (first admission or resume), n = remaining after the
//    hit (threshold-capped); with chunking off a request over the budget stops admission; a
//    request that cannot get blocks stops admission (no skipping).
// 3. Every scheduled request's num_computed_tokens advances by its n.
// Requests whose prompt + output exceed max_model_len, or that could never fit in the whole
// cache, are rejected at arrival (counted, never scheduled). So are empty prompts, requests for
// no output, and, with chunked prefill off, requests that might one day need more tokens in one
// step than max_num_batched_tokens allows (vLLM refuses such configurations outright; here a
// request like that would block the queue forever).
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
  // block size or prefix-caching switch that disagrees with `kv`'s.
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv, SchedulerObserver* observer);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler();

  // Queues a request that arrived at `now` (or rejects it; see above).
  void add_request(RequestSpec spec, TimeNs now);

  // Forms the next plan. The returned reference stays valid until complete() or the next
  // schedule(). The plan is empty when there is nothing to run. REQUIRES: the previous plan was
  // completed.
  const StepPlan& schedule(TimeNs now);

  // Applies the result of the last plan at time `now` (the step's end): appends sampled tokens,
  // finishes requests that reached their output length and frees their blocks.
  void complete(const StepResult& result, TimeNs now);

  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  std::size_t num_waiting() const { return waiting_.size(); }
  std::size_t num_running() const { return running_.size(); }
  const std::vector<Request*>& running() const { return running_; }
  const std::deque<Request*>& waiting() const { return waiting_; }
  const SchedulerCounters& counters() const { return counters_; }
  const SchedulerConfig& config() const { return config_; }
  KvCacheManager& kv() { return kv_; }

 private:
  // The reason a request must be refused at arrival, or "" if it can be queued.
  std::string rejection_reason(const RequestSpec& spec) const;
  void preempt(Request& victim, TimeNs now);
  // Appends r's entry (n tokens from r.num_computed_tokens) and advances r's progress.
  void add_to_plan(Request& r, std::int32_t n, std::int32_t cached_now, TimeNs now);
  // Marks r finished, frees its blocks and reports it; the caller unlinks and deletes it.
  void finish(Request& r, TimeNs now);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  SchedulerObserver* observer_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;
  StepPlan plan_;
  std::vector<Request*> plan_requests_;  // the Request behind each plan entry
  std::int64_t next_step_ = 0;
  bool plan_pending_ = false;  // a non-empty plan awaits complete()
  SchedulerCounters counters_;
};

}  // namespace servelab
