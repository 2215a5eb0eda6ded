#include "engine/serve_queue.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace servelab {

void RequestChannel::admitted() {
  std::lock_guard lock(mu_);
  if (state_ == State::kPending) state_ = State::kAdmitted;
  cv_.notify_all();
}

void RequestChannel::rejected(const std::string& reason, bool shed) {
  std::lock_guard lock(mu_);
  state_ = State::kRejected;
  reason_ = reason;
  shed_ = shed;
  cv_.notify_all();
}

void RequestChannel::token(std::int32_t sample, std::int32_t value,
                           std::optional<TokenLogprobs> logprobs) {
  std::lock_guard lock(mu_);
  tokens_.push_back({sample, value, std::move(logprobs)});
  cv_.notify_all();
}

void RequestChannel::prompt_logprobs(std::vector<TokenLogprobs> values) {
  std::lock_guard lock(mu_);
  prompt_logprobs_ = std::make_shared<std::vector<TokenLogprobs>>(std::move(values));
}

bool RequestChannel::finished(RequestStatus status, const std::string& reason,
                              std::vector<std::string> sample_reasons) {
  std::lock_guard lock(mu_);
  state_ = status == RequestStatus::kFinished ? State::kFinished : State::kAborted;
  reason_ = reason;
  sample_reasons_ = std::move(sample_reasons);
  cv_.notify_all();
  return stop_string_;
}

RequestChannel::State RequestChannel::wait_admission(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return state_ != State::kPending; });
  return state_;
}

RequestChannel::Update RequestChannel::take(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] {
    return !tokens_.empty() || state_ == State::kFinished || state_ == State::kAborted ||
           state_ == State::kRejected;
  });
  Update u;
  u.tokens.swap(tokens_);
  u.prompt_logprobs = std::move(prompt_logprobs_);
  u.state = state_;
  u.reason = reason_;
  u.sample_reasons = sample_reasons_;
  return u;
}

ServeQueue::ServeQueue(std::size_t max_in_flight, const WallClock& clock)
    : max_in_flight_(max_in_flight), clock_(clock) {
  if (max_in_flight < 1) throw std::invalid_argument("ServeQueue: max_in_flight must be >= 1");
}

ServeQueue::Submit ServeQueue::submit(RequestSpec spec, std::shared_ptr<RequestChannel> channel,
                                      RequestId* id) {
  std::lock_guard lock(mu_);
  if (draining_) return Submit::kDraining;
  if (in_flight_ >= max_in_flight_) return Submit::kFull;
  ++in_flight_;
  spec.id = next_id_++;
  spec.arrival_ns = clock_.now();
  *id = spec.id;
  submitted_.push_back({std::move(spec), std::move(channel)});
  cv_.notify_all();
  return Submit::kAccepted;
}

void ServeQueue::abort(RequestId id) {
  std::lock_guard lock(mu_);
  aborts_.push_back(id);
  cv_.notify_all();
}

void ServeQueue::stop_sample(RequestId sample_id) {
  std::lock_guard lock(mu_);
  sample_stops_.push_back(sample_id);
  cv_.notify_all();
}

std::optional<bool> ServeQueue::reset_prefix_cache(std::chrono::milliseconds timeout) {
  auto done = std::make_shared<std::promise<bool>>();
  std::future<bool> answer = done->get_future();
  {
    std::lock_guard lock(mu_);
    if (draining_) return false;
    resets_.push_back(std::move(done));
    cv_.notify_all();
  }
  if (answer.wait_for(timeout) != std::future_status::ready) return std::nullopt;
  return answer.get();
}

void ServeQueue::drain() {
  std::lock_guard lock(mu_);
  draining_ = true;
  cv_.notify_all();
}

bool ServeQueue::draining() const {
  std::lock_guard lock(mu_);
  return draining_;
}

std::size_t ServeQueue::in_flight() const {
  std::lock_guard lock(mu_);
  return in_flight_;
}

void ServeQueue::admit(TimeNs now, Scheduler& scheduler) {
  std::deque<Pending> submitted;
  std::vector<RequestId> aborts, sample_stops;
  std::vector<std::shared_ptr<std::promise<bool>>> resets;
  {
    std::lock_guard lock(mu_);
    submitted.swap(submitted_);
    aborts.swap(aborts_);
    sample_stops.swap(sample_stops_);
    resets.swap(resets_);
  }
  for (Pending& p : submitted) {
    const RequestId id = p.spec.id;
    // Stamped by a handler after the loop read `now`: it arrived no later than this step.
    p.spec.arrival_ns = std::min(p.spec.arrival_ns, now);
    live_[id] = p.channel;
    // A rejection is reported (and done() called) inside add_request.
    scheduler.add_request(std::move(p.spec), now);
    p.channel->admitted();
  }
  bool aborted = false;
  for (const RequestId id : sample_stops) {
    if (live_.count(base_request_id(id)) != 0) aborted = scheduler.stop_sample(id, now) || aborted;
  }
  for (const RequestId id : aborts) {
    if (live_.count(id) != 0) aborted = scheduler.abort(id, now, "client disconnected") || aborted;
  }
  // Aborts are rare and free blocks outside the usual paths: check the pool and cache after
  // them (std::logic_error ends the server rather than serving from a corrupt cache).
  if (aborted) scheduler.kv().check_invariants();
  for (const auto& r : resets) r->set_value(scheduler.reset_prefix_cache());
  if (!resets.empty()) scheduler.kv().check_invariants();
}

bool ServeQueue::wait_for_work(TimeNs /*now*/, const Scheduler& /*scheduler*/) {
  std::unique_lock lock(mu_);
  if (draining_ && in_flight_ == 0 && submitted_.empty()) return false;
  // Bounded, so that a state the loop must look at again is never missed for long.
  cv_.wait_for(lock, std::chrono::milliseconds(100), [&] {
    return !submitted_.empty() || !aborts_.empty() || !sample_stops_.empty() || !resets_.empty() ||
           draining_;
  });
  return !(draining_ && in_flight_ == 0 && submitted_.empty());
}

RequestChannel* ServeQueue::channel(RequestId id) {
  const auto it = live_.find(id);
  return it == live_.end() ? nullptr : it->second.get();
}

void ServeQueue::done(RequestId id) {
  live_.erase(id);
  std::lock_guard lock(mu_);
  --in_flight_;
  cv_.notify_all();
}

void ServeQueue::abandon(const std::string& reason) {
  for (auto& [id, channel] : live_) channel->finished(RequestStatus::kAborted, reason);
  live_.clear();
  std::lock_guard lock(mu_);
  for (Pending& p : submitted_) p.channel->rejected(reason);
  submitted_.clear();
  for (const auto& r : resets_) r->set_value(false);
  resets_.clear();
  in_flight_ = 0;
  draining_ = true;
  cv_.notify_all();
}

}  // namespace servelab
