// IdleSessionOffload: offloads the KV of multi-turn sessions that went idle (issue 22: "offload
// KV for long-idling sessions"), so that their next turn finds it in the host tier instead of
// having lost it to an eviction.
//
// A session (RequestSpec::session != 0) is idle from the moment one of its requests finishes
// until its next request arrives. When it has been idle for idle_ns (kv_offload.idle_offload_s),
// offload_due() hands the block hashes of its finished requests to
// KvCacheManager::offload_idle_blocks: each block still cached on the device and held by nobody
// is stored down to the host tier and dropped from the device cache (a plain free block
// afterwards, reused first). A request of the session arriving before that (on_arrival) cancels
// it. Requests without a session, and those that did not finish normally (rejected, shed,
// aborted), are never tracked.
//
// The driver (the simulator) calls offload_due(now) before it handles each event at `now`, so an
// offload whose time came between two events happens before the later event's arrivals are
// queued: the outcome is that of an offload at its exact time, and the churn it causes is
// reported with the next step.
//
// Determinism: sessions are found by probing a hash map, never by iterating it; due offloads
// run in finish order (the deadlines of a FIFO queue grow with time).
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "core/block_hash.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler_observer.h"
#include "core/time.h"

namespace servelab {

class IdleSessionOffload : public ForwardingObserver {
 public:
  // `downstream` must outlive this object. REQUIRES: idle_ns > 0 (throws
  // std::invalid_argument otherwise).
  IdleSessionOffload(SchedulerObserver& downstream, TimeNs idle_ns);
  IdleSessionOffload(const IdleSessionOffload&) = delete;
  IdleSessionOffload& operator=(const IdleSessionOffload&) = delete;

  // Records a finished request of a session (its hashes join the session's, its finish restarts
  // the idle time), after passing the event on.
  void on_finish(const Request& req, TimeNs now) override;
  // A request of `session` arrived: the session is not idle (nothing happens for session 0).
  void on_arrival(std::uint64_t session);
  // Offloads every session idle for at least idle_ns at `now` from `kv` (the manager of the
  // scheduler reporting to this observer; REQUIRES: it has offload tiers, else
  // KvCacheManager::offload_idle_blocks throws). Returns the blocks stored.
  std::int64_t offload_due(TimeNs now, KvCacheManager& kv);

  TimeNs idle_ns() const { return idle_ns_; }
  // Sessions whose blocks were offloaded (a session idle twice counts twice).
  std::int64_t sessions_offloaded() const { return sessions_offloaded_; }

 private:
  struct Pending {
    TimeNs due = 0;                 // last finish + idle_ns
    std::vector<BlockHash> hashes;  // of the session's requests finished since its last arrival
  };
  struct Deadline {
    TimeNs due;
    std::uint64_t session;
  };

  TimeNs idle_ns_;
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::deque<Deadline> deadlines_;  // one per finish, in due order; stale ones are skipped
  std::int64_t sessions_offloaded_ = 0;
};

}  // namespace servelab
