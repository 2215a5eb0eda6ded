#include "serving/frontend.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace servelab {

TimeNs FrontendConfig::service_ns(std::int32_t prompt_len) const {
  return seconds_to_ns((per_request_us + per_prompt_token_us * prompt_len) * 1e-6);
}

FrontEnd::FrontEnd(const FrontendConfig& config) : config_(config) {
  if (config_.concurrency < 0 || !(config_.per_request_us >= 0) ||
      !(config_.per_prompt_token_us >= 0) || !std::isfinite(config_.per_request_us) ||
      !std::isfinite(config_.per_prompt_token_us)) {
    throw std::invalid_argument(
        "FrontEnd: costs must be finite and >= 0, concurrency >= 0 (0: unbounded)");
  }
}

TimeNs FrontEnd::push(RequestSpec spec) {
  const TimeNs arrival = spec.arrival_ns;
  if (arrival < last_arrival_) {
    throw std::logic_error("FrontEnd: request " + std::to_string(spec.id) +
                           " pushed out of arrival order");
  }
  last_arrival_ = arrival;
  TimeNs start = arrival;
  if (config_.concurrency > 0) {
    // FIFO over k servers: the request takes the server that frees up first.
    if (free_at_.size() == static_cast<std::size_t>(config_.concurrency)) {
      start = std::max(start, free_at_.top());
      free_at_.pop();
    }
  }
  const TimeNs ready = start + config_.service_ns(spec.prompt_len);
  if (config_.concurrency > 0) free_at_.push(ready);
  pending_.push_back(Pending{ready, next_seq_++, std::move(spec)});
  std::push_heap(pending_.begin(), pending_.end(), Later{});
  return ready;
}

RequestSpec FrontEnd::pop() {
  std::pop_heap(pending_.begin(), pending_.end(), Later{});
  RequestSpec spec = std::move(pending_.back().spec);
  pending_.pop_back();
  return spec;
}

}  // namespace servelab
