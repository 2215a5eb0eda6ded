#include "sim/event_queue.h"

#include <stdexcept>

namespace servelab {

void EventQueue::push(TimeNs time, EventKind kind, std::uint32_t target) {
  if (time < now_) throw std::logic_error("EventQueue::push: event scheduled in the past");
  heap_.push(Event{time, next_seq_++, kind, target});
}

Event EventQueue::pop() {
  Event e = heap_.top();
  heap_.pop();
  now_ = e.time;
  return e;
}

}  // namespace servelab
