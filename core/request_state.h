// A request as the scheduler tracks it while it lives: progress, blocks, timestamps.
//
// Owned by the Scheduler from arrival to finish; backends never see it (they get a StepPlan).
// Token positions: [0, prompt_len) are the prompt, then output_tokens in order. The scheduler
// advances num_computed_tokens when it schedules tokens (vLLM v1), not when the step ends.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/block_hash.h"
#include "core/request.h"
#include "core/time.h"

namespace servelab {

using BlockId = std::int32_t;

enum class RequestStatus : std::uint8_t {
  kWaiting,    // queued, never admitted
  kRunning,    // admitted: holds blocks, scheduled in steps
  kPreempted,  // preempted by recompute: back in the waiting queue, holds no blocks
  kSwapped,    // preempted by swap: its KV is in host blocks
  kFinished,   // produced all its tokens
  kRejected,   // never admitted: too long, or could never fit (finish_reason says why)
  kAborted,    // admitted but given up (e.g. preemption cap); finish_reason says why
  kShed,       // refused at arrival by the admission policy (overload); finish_reason says why
};

const char* to_string(RequestStatus s);

class Request;

// The samples of a request with spec.n > 1 after its fork (parallel sampling). Sample 0 is the
// request itself; samples[k] is sample k. Every sample points at the group; a finished sample
// stays alive (holding no blocks) until the last one finishes, when the group is reported once
// through sample 0 and all are deleted.
struct SampleGroup {
  std::vector<Request*> samples;
  std::int32_t unfinished = 0;  // samples not yet finished or aborted
};

// A request inside the scheduler. The public members are its observable state (what observers,
// backends' drivers and the Recorder read). Two parts are private to the classes that keep them:
// the KV cache manager's bookkeeping (hash chain, registered blocks, slot accounting, swapped-out
// blocks, copy-on-write flag) and the scheduler's notes (the furthest point ever computed, the
// total ever scheduled, and the undo notes of the plan being formed). Read-only accessors expose
// them for tests and diagnostics.
//
// Token counters, one meaning each: num_computed_tokens is progress (tokens whose KV is, or is
// being, computed; it falls back after a preemption by recompute); num_recomputed_tokens counts
// tokens computed again after a preemption (a metric); num_computed_total() counts every token
// ever scheduled; max_computed_tokens() is the furthest progress ever reached, which tells the
// scheduler which scheduled tokens are recomputations.
class Request {
 public:
  explicit Request(RequestSpec s) : spec(std::move(s)) {}
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // Data members keep the order they had as a plain struct (the scheduler's hot loop reads the
  // first cache lines); access alternates accordingly.
  RequestSpec spec;
  RequestStatus status = RequestStatus::kWaiting;
  // Async scheduling (vLLM's num_output_placeholders): tokens that plans already formed will
  // sample but whose values are not known yet (one per in-flight plan that samples this
  // request). Always 0 without async scheduling. (16 bits: it fits the padding after status.)
  std::int16_t num_output_placeholders = 0;
  // Async scheduling: aborted by max_preemptions while a plan in flight named it; that plan's
  // complete() keeps its token, as the synchronous loop had, then reports the finish.
  bool abort_awaits_plan = false;
  std::int32_t num_computed_tokens = 0;     // tokens whose KV is (or is being) computed
  std::vector<std::int32_t> output_tokens;  // sampled token values, in order
  std::vector<BlockId> block_table;         // physical blocks, position order

 private:
  friend class KvCacheManager;
  friend class Scheduler;
  // KvCacheManager's. Hashes of the first blocks (by token identity, so known before the tokens
  // are computed): every full block, and the block being filled once the block before it was
  // registered, if the request will fill it (the manager hashes one block ahead).
  std::vector<BlockHash> block_hashes_;
  std::int32_t num_cached_blocks_ = 0;    // leading blocks of block_table registered in the cache
  std::int32_t kv_accounted_tokens_ = 0;  // slot accounting

 public:
  std::int32_t num_cached_tokens = -1;  // prefix hit at first admission (-1: not admitted yet)
  std::int32_t num_preemptions = 0;
  std::int64_t num_recomputed_tokens = 0;  // tokens computed again after a preemption
  // The max_output_tokens the request asked for when a length cap (core/length_cap.h) lowered
  // spec.max_output_tokens at arrival; 0 when it was not capped.
  std::int32_t capped_from_tokens = 0;

 private:
  // Scheduler's.
  std::int64_t num_computed_total_ = 0;   // all tokens scheduled for this request, ever
  std::int32_t max_computed_tokens_ = 0;  // furthest num_computed_tokens ever reached: tokens
                                          // scheduled below it after a preemption are recomputed

 public:
  TimeNs first_scheduled_ns = -1;

 private:
  // Scheduler's: what this request's entry in the plan being formed changed, so that a refund (a
  // priority preemption after it was scheduled) can undo it exactly: the values of
  // max_computed_tokens_ and first_scheduled_ns before the entry. Meaningless otherwise.
  std::int32_t undo_max_computed_tokens_ = 0;
  TimeNs undo_first_scheduled_ns_ = -1;
  // Scheduler's: leading tokens whose KV another replica computed and transferred here (P/D
  // disaggregation, Scheduler::add_prefilled_request); they count as computed at the first
  // admission and are forgotten then (a preemption by recompute recomputes them here).
  std::int32_t external_tokens_ = 0;
  // Scheduler's: what this request adds to the waiting queue's token count while it is queued
  // (AdmissionLoad::waiting_tokens), as counted when it was queued.
  std::int64_t queued_tokens_ = 0;

 public:
  TimeNs first_token_ns = -1;
  TimeNs last_token_ns = -1;
  TimeNs finish_ns = -1;
  std::string finish_reason;

 private:
  std::vector<BlockId> host_block_table_;  // KvCacheManager's: host blocks holding a swapped KV

 public:
  // Parallel sampling: null until a request with spec.n > 1 forks (and always for n == 1).
  std::shared_ptr<SampleGroup> group;

 private:
  // KvCacheManager's: the last block of the table may be shared with a sibling sample and not
  // full: the next append must copy it first if it is still shared (copy-on-write).
  bool cow_tail_ = false;

 public:
  // Speculative decoding (core/speculative_config.h): the draft tokens proposed after the
  // request's last step, which its next step verifies (vLLM's spec_token_ids); empty otherwise.
  // Cleared by a preemption; capped so the verify step never produces more than the request's
  // remaining outputs.
  std::vector<std::int32_t> spec_token_ids;

  // A multi-level feedback queue's notes on this request (queue order mlfq; untouched by the
  // others): its level (-1: not placed yet), the step time it has received at that level, and
  // when it last ran (its arrival until it has run), which starvation prevention measures from.
  struct QueueLevel {
    std::int32_t level = -1;
    TimeNs service_ns = 0;
    TimeNs last_run_ns = -1;
  };
  QueueLevel queue_level;

  RequestId id() const { return spec.id; }
  std::int32_t num_output_tokens() const { return static_cast<std::int32_t>(output_tokens.size()); }
  // Output tokens of the request: its own, or with parallel sampling those of all its samples.
  std::int32_t num_total_output_tokens() const;
  // Whether this request will fork into spec.n samples when it samples its first token.
  bool will_fork() const { return spec.n > 1 && group == nullptr; }
  // Tokens known so far: prompt plus outputs.
  std::int32_t num_tokens() const { return spec.prompt_len + num_output_tokens(); }
  // Known tokens plus the draft tokens awaiting verification (vLLM's num_tokens_with_spec).
  std::int32_t num_tokens_with_spec() const {
    return num_tokens() + static_cast<std::int32_t>(spec_token_ids.size());
  }

  // The KV cache manager's state, read-only.
  const std::vector<BlockHash>& block_hashes() const { return block_hashes_; }
  std::int32_t num_cached_blocks() const { return num_cached_blocks_; }
  std::int32_t kv_accounted_tokens() const { return kv_accounted_tokens_; }
  const std::vector<BlockId>& host_block_table() const { return host_block_table_; }
  bool cow_tail() const { return cow_tail_; }
  // The scheduler's counters, read-only.
  std::int64_t num_computed_total() const { return num_computed_total_; }
  std::int32_t max_computed_tokens() const { return max_computed_tokens_; }
};

}  // namespace servelab
