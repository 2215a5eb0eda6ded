#include "sim/event_queue.h"

#include <stdexcept>
#include <string>

#include "core/config_error.h"
#include "core/strings.h"

namespace servelab {

void EventQueue::past_event() {
  throw std::logic_error("EventQueue::push: event scheduled in the past");
}

void EventQueue::past_horizon() const {
  throw ConfigError(format_text(
      "at simulated time %.6g s, a step, KV transfer or wait would end past the end of the "
      "simulator's clock (2^62 ns, about 146 years): the hardware's rates or link bandwidths are "
      "too slow for this workload",
      ns_to_s(now_)));
}

}  // namespace servelab
