// WaitingQueue: the order in which the scheduler admits waiting requests (a queue-order plugin).
//
// The Scheduler owns one and never looks inside: it pushes new arrivals with push_back(),
// returns preempted victims with push_front(), admits front() then pop_front(), and reports
// every plan entry's tokens with on_tokens_scheduled() so fair-share orders can count service.
// Implementations live in policies/queue_order.cc; FcfsWaitingQueue is here because it is the
// scheduler's default (vLLM v1's FCFSRequestQueue).
//
// Contracts every implementation keeps:
// - Deterministic: the order depends only on request fields, the call sequence and the seed,
//   never on addresses or unordered-container iteration (ties end on the request id).
// - front() is stable: between two mutating calls it names the same request, so the scheduler
//   may look at it, try to allocate, and pop it only on success.
// - push_back/push_front/pop_front/front cost O(log n) or better; erase may be O(n) (it is only
//   used on the rare finish-while-preempted path).
// - The queue never owns the requests (the scheduler does) and holds each at most once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "core/block_hash.h"
#include "core/request_state.h"

namespace servelab {

// What a cache-aware order may ask about the prefix cache at the start of a step (the
// scheduler's KV cache manager behind it; SGLang's match_prefix). Neither call changes a
// reference count or the hit statistics; cached_blocks() refreshes the matched blocks' recency
// where the cache keeps SGLang's (the radix cache: PrefixCache::refresh), so a prefix a waiting
// request matches is not the next one evicted.
class PrefixProbe {
 public:
  virtual ~PrefixProbe() = default;
  virtual std::int32_t block_size() const = 0;
  // The hashes of r's full blocks a prefix hit could cover (all full blocks of its tokens but
  // the last token's: vLLM's cap), computed on first use and kept in r.
  virtual std::span<const BlockHash> hashes(Request& r) = 0;
  // How many of those, from the first, the device cache holds now (offload tiers not counted);
  // refreshes their recency (see above).
  virtual std::int32_t cached_blocks(Request& r) = 0;
};

class WaitingQueue {
 public:
  virtual ~WaitingQueue() = default;

  // The plugin name ("fcfs", "priority", ...), for messages.
  virtual const char* name() const = 0;
  // A new arrival.
  virtual void push_back(Request* r) = 0;
  // A preempted request returning. Orders with a notion of "head" put it there (vLLM's
  // appendleft); keyed orders re-insert it by its key (vLLM's heap has no front).
  virtual void push_front(Request* r) = 0;
  // The next request to admit. REQUIRES: !empty().
  virtual Request* front() const = 0;
  // Removes front(). REQUIRES: !empty().
  virtual void pop_front() = 0;
  virtual bool empty() const = 0;
  virtual std::size_t size() const = 0;
  // Removes `r` if queued; returns whether it was.
  virtual bool erase(Request* r) = 0;
  // The queued requests in admission order as things stand now (for tests and teardown; O(n)).
  virtual std::vector<Request*> snapshot() const = 0;
  // Whether on_tokens_scheduled() does anything: the scheduler asks once and skips the calls
  // otherwise, so orders that ignore service cost nothing per plan entry.
  virtual bool counts_service() const { return false; }
  // `r` got prefill/decode tokens in the plan being formed (negative when a preemption refunds
  // an entry). Called once per plan entry when counts_service(), so it must stay
  // O(log tenants) at most.
  virtual void on_tokens_scheduled(const Request& r, std::int32_t prefill_tokens,
                                   std::int32_t decode_tokens) {
    (void)r, (void)prefill_tokens, (void)decode_tokens;
  }
  // Whether reorder() does anything: asked once, like counts_service().
  virtual bool reorders() const { return false; }
  // Called at the start of every step with a non-empty queue, before any admission, with the
  // step's start time: orders that re-sort the whole queue per step (SGLang's schedule policies)
  // or whose keys change with time (edf's demotion of late requests) do it here. `probe` is null
  // when prefix caching is off. May cost O(n log n) plus the probe's lookups.
  virtual void reorder(PrefixProbe* probe, TimeNs now) { (void)probe, (void)now; }
  // Whether ranks_before() is defined: the order is a rank on requests themselves, so a running
  // request can be compared with a waiting one (what the preemptive batch formation needs), and
  // a request pushed back goes where its rank says. Orders that rank by the queue's own state
  // (fair's tenant counters), re-sort per step against the cache (SGLang's) or put preempted
  // requests at a head (fcfs) do not.
  virtual bool ranks() const { return false; }
  // Whether `a` goes before `b` in this order as things stand now: a strict weak order on any
  // requests, queued or running, that agrees with the admission order on queued ones (a running
  // request ranks by the key it would get if pushed now). REQUIRES: ranks().
  virtual bool ranks_before(const Request& a, const Request& b) const {
    (void)a, (void)b;
    return false;
  }
  // Whether on_step_completed() does anything: asked once, like counts_service().
  virtual bool times_service() const { return false; }
  // A step that started at `start` completed at `end` (a multi-step round: all its passes);
  // `ran` are the requests of its entries, in plan order, all still alive (before any of them
  // finishes), and `prefill_tokens` its prefill tokens. Orders that charge requests for the
  // time they ran (mlfq) do it here; none of `ran` is queued then. Not called with async
  // scheduling (overlapped steps have no duration of their own; such orders are refused).
  virtual void on_step_completed(std::span<Request* const> ran, std::int64_t prefill_tokens,
                                 TimeNs start, TimeNs end) {
    (void)ran, (void)prefill_tokens, (void)start, (void)end;
  }
};

// A deque in FCFS order (arrivals at the back, preempted victims at the head): the storage of
// fcfs, and of the orders that re-sort it at the start of each step (policies/).
class DequeWaitingQueue : public WaitingQueue {
 public:
  void push_back(Request* r) override { q_.push_back(r); }
  void push_front(Request* r) override { q_.push_front(r); }
  Request* front() const override { return q_.front(); }
  void pop_front() override { q_.pop_front(); }
  bool empty() const override { return q_.empty(); }
  std::size_t size() const override { return q_.size(); }
  bool erase(Request* r) override {
    for (auto it = q_.begin(); it != q_.end(); ++it) {
      if (*it == r) {
        q_.erase(it);
        return true;
      }
    }
    return false;
  }
  std::vector<Request*> snapshot() const override { return {q_.begin(), q_.end()}; }

 protected:
  std::deque<Request*> q_;
};

// First come, first served (vLLM v1 default).
// It does not rank (WaitingQueue::ranks): a victim returns to the head whatever its arrival, so
// no rank agrees with its order (`priority` with equal priorities ranks by arrival).
class FcfsWaitingQueue final : public DequeWaitingQueue {
 public:
  const char* name() const override { return "fcfs"; }
};

}  // namespace servelab
