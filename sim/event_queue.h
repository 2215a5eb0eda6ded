// EventQueue: the simulator's agenda, ordered by (time, insertion sequence).
//
// Two events at the same time come out in the order they were pushed, so a run never depends
// on heap tie-breaking or addresses (ns-3 / OMNeT++ convention). now() is the time of the last
// popped event; pushing an event before now() is a logic error.
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

#include "core/time.h"

namespace servelab {

enum class EventKind : std::uint8_t {
  kArrival,   // the workload's next request reaches the router
  kStepEnd,   // a replica's running step finishes
  kReady,     // a request leaves the front end (serving.frontend) for the scheduler
  kTransfer,  // a prefilled request's KV arrived at its decode replica (P/D disaggregation)
  kWake,      // an idle replica's wake-up latency after the event that gave it work has passed
};

struct Event {
  TimeNs time = 0;
  std::uint64_t seq = 0;
  EventKind kind = EventKind::kArrival;
  std::uint32_t target = 0;  // replica index for kStepEnd, transfer slot for kTransfer
};

class EventQueue {
 public:
  // REQUIRES: time >= now() (throws std::logic_error otherwise). Throws ConfigError when time is
  // at or past kTimeHorizonNs: a step, transfer or wait of the experiment's rates that the
  // clock cannot hold (core/time.h).
  void push(TimeNs time, EventKind kind, std::uint32_t target = 0) {
    if (time < now_) [[unlikely]]
      past_event();
    if (time >= kTimeHorizonNs) [[unlikely]]
      past_horizon();
    heap_.push(Event{time, next_seq_++, kind, target});
  }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  // Removes and returns the earliest event, advancing now(). REQUIRES: !empty().
  Event pop() {
    const Event e = heap_.top();
    heap_.pop();
    now_ = e.time;
    return e;
  }
  TimeNs now() const { return now_; }

 private:
  [[noreturn]] static void past_event();
  [[noreturn]] void past_horizon() const;
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  std::uint64_t next_seq_ = 0;
  TimeNs now_ = 0;
};

}  // namespace servelab
