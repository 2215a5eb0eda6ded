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
};

const char* to_string(RequestStatus s);

struct Request;

// The samples of a request with spec.n > 1 after its fork (parallel sampling). Sample 0 is the
// request itself; samples[k] is sample k. Every sample points at the group; a finished sample
// stays alive (holding no blocks) until the last one finishes, when the group is reported once
// through sample 0 and all are deleted.
struct SampleGroup {
  std::vector<Request*> samples;
  std::int32_t unfinished = 0;  // samples not yet finished or aborted
};

struct Request {
  explicit Request(RequestSpec s) : spec(std::move(s)) {}
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  RequestSpec spec;
  RequestStatus status = RequestStatus::kWaiting;
  std::int32_t num_computed_tokens = 0;     // tokens whose KV is (or is being) computed
  std::vector<std::int32_t> output_tokens;  // sampled token values, in order
  std::vector<BlockId> block_table;         // physical blocks, position order
  // Hashes of the first blocks (by token identity, so known before the tokens are computed):
  // every full block, and the block being filled once the block before it was registered, if the
  // request will fill it (KvCacheManager hashes one block ahead).
  std::vector<BlockHash> block_hashes;
  std::int32_t num_cached_blocks = 0;    // leading blocks of block_table registered in the cache
  std::int32_t kv_accounted_tokens = 0;  // KvCacheManager's slot accounting (its own use)
  std::int32_t num_cached_tokens = -1;   // prefix hit at first admission (-1: not admitted yet)
  std::int32_t num_preemptions = 0;
  std::int64_t num_recomputed_tokens = 0;  // tokens computed again after a preemption
  std::int64_t num_computed_total = 0;     // all tokens scheduled for this request, ever
  std::int32_t max_computed_tokens = 0;    // furthest num_computed_tokens ever reached: tokens
                                           // scheduled below it after a preemption are recomputed
  TimeNs first_scheduled_ns = -1;
  // The Scheduler's note of what this request's entry in the plan being formed changed, so that
  // a refund (a priority preemption after it was scheduled) can undo it exactly: the values of
  // max_computed_tokens and first_scheduled_ns before the entry. Meaningless otherwise.
  std::int32_t undo_max_computed_tokens = 0;
  TimeNs undo_first_scheduled_ns = -1;
  TimeNs first_token_ns = -1;
  TimeNs last_token_ns = -1;
  TimeNs finish_ns = -1;
  std::string finish_reason;
  std::vector<BlockId> host_block_table;  // host blocks holding the KV while swapped out
  // Parallel sampling: null until a request with spec.n > 1 forks (and always for n == 1).
  std::shared_ptr<SampleGroup> group;
  // The last block of the table may be shared with a sibling sample and not full: the next
  // append must copy it first if it is still shared (KvCacheManager, copy-on-write).
  bool cow_tail = false;

  RequestId id() const { return spec.id; }
  std::int32_t num_output_tokens() const { return static_cast<std::int32_t>(output_tokens.size()); }
  // Output tokens of the request: its own, or with parallel sampling those of all its samples.
  std::int32_t num_total_output_tokens() const;
  // Whether this request will fork into spec.n samples when it samples its first token.
  bool will_fork() const { return spec.n > 1 && group == nullptr; }
  // Tokens known so far: prompt plus outputs.
  std::int32_t num_tokens() const { return spec.prompt_len + num_output_tokens(); }
};

}  // namespace servelab
