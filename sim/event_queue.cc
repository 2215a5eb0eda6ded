#include "sim/event_queue.h"

#include <stdexcept>

namespace servelab {

void EventQueue::past_event() {
  throw std::logic_error("EventQueue::push: event scheduled in the past");
}

}  // namespace servelab
