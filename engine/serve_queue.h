// The hand-over between `engine serve`'s HTTP handler threads and its scheduler loop thread.
//
// A handler submits a request (its RequestSpec without id or arrival) with a RequestChannel and
// then waits on the channel; the loop thread, between steps (ServeQueue is its WorkSource), adds
// submissions to the scheduler, applies aborts (a client that went away) and, through a
// SchedulerObserver (engine/server.cc), pushes each sampled token (with the sample that drew it,
// for parallel sampling) and the final outcome into the request's channel. The queue is bounded: at
// most `max_in_flight` requests are submitted and not yet finished, so overload is refused at the
// door (submit() says kFull) and memory stays bounded. drain() stops taking requests; the loop then
// ends once every in-flight request has finished.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/request.h"
#include "core/request_state.h"
#include "core/step_plan.h"
#include "engine/engine_loop.h"

namespace servelab {

// One request's results, from the loop thread (producer) to its handler thread (consumer).
class RequestChannel {
 public:
  enum class State { kPending, kAdmitted, kRejected, kFinished, kAborted };
  struct Token {
    std::int32_t sample = 0;  // which of the request's samples drew it (0 .. n - 1)
    std::int32_t value = 0;
    std::optional<TokenLogprobs> logprobs;  // when the request asked for them
  };
  struct Update {
    std::vector<Token> tokens;  // sampled since the previous take(), in the order drawn
    State state = State::kPending;
    std::string reason;  // rejection or abort reason; when finished, the request's finish reason
    // A finished request with parallel samples: each sample's finish reason (empty otherwise).
    std::vector<std::string> sample_reasons;
    // The prompt's log probabilities (RequestSpec::prompt_logprobs: positions 1 .. prompt_len -
    // 1), in the update that brings them, before its tokens; null in every other.
    std::shared_ptr<std::vector<TokenLogprobs>> prompt_logprobs;
  };

  // Loop side.
  void admitted();
  // `shed`: refused by the admission policy (overload; the handler answers 429), not invalid.
  void rejected(const std::string& reason, bool shed = false);
  void token(std::int32_t sample, std::int32_t value,
             std::optional<TokenLogprobs> logprobs = std::nullopt);
  // The prompt's log probabilities, once, before the first token.
  void prompt_logprobs(std::vector<TokenLogprobs> values);
  // Returns true when the handler found a stop string before (stopped_by_string()).
  bool finished(RequestStatus status, const std::string& reason,
                std::vector<std::string> sample_reasons = {});

  // Handler side: waits up to `timeout` for a change of admission state, returns the state.
  State wait_admission(std::chrono::milliseconds timeout);
  // Waits up to `timeout` for tokens or an end, then takes the tokens that arrived.
  Update take(std::chrono::milliseconds timeout);
  // Whether the rejection was a shed (see rejected()).
  bool shed() const {
    std::lock_guard lock(mu_);
    return shed_;
  }
  // The handler refused the whole request it belongs to (a later part of a batched prompt list was
  // refused: 429, 400): its abort is no request of the workload's and is not counted in /metrics.
  void withdraw() {
    std::lock_guard lock(mu_);
    withdrawn_ = true;
  }
  bool withdrawn() const {
    std::lock_guard lock(mu_);
    return withdrawn_;
  }
  // A stop string ended the output (engine/stop_strings.h); the handler then aborts the request
  // in the scheduler. Returns true when the loop had already reported the request finished for
  // another reason than "stop" (the model ran on past the stop string to max_tokens before the
  // handler saw it): the handler recounts it as "stop". Otherwise finished() returns true and
  // the observer counts it so: one of the two, whichever comes second, sees the other.
  bool stopped_by_string() {
    std::lock_guard lock(mu_);
    stop_string_ = true;
    return state_ == State::kFinished && reason_ != "stop";
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Token> tokens_;
  std::shared_ptr<std::vector<TokenLogprobs>> prompt_logprobs_;
  State state_ = State::kPending;
  std::string reason_;
  std::vector<std::string> sample_reasons_;
  bool shed_ = false;
  bool stop_string_ = false;
  bool withdrawn_ = false;
};

class ServeQueue : public WorkSource {
 public:
  enum class Submit { kAccepted, kFull, kDraining };

  // `clock` stamps arrivals and must outlive the queue. REQUIRES: max_in_flight >= 1.
  ServeQueue(std::size_t max_in_flight, const WallClock& clock);

  // Handler threads. On kAccepted `*id` is the request's id (arrival stamped now).
  Submit submit(RequestSpec spec, std::shared_ptr<RequestChannel> channel, RequestId* id);
  // Aborts request `id` at the loop's next turn (no-op when it finished meanwhile).
  void abort(RequestId id);
  // Ends one sample of a request with parallel samples at the loop's next turn, as a stop
  // condition would (Scheduler::stop_sample; a stop string found in its text). `sample_id`:
  // sample_request_id(id, k). A no-op when it finished meanwhile.
  void stop_sample(RequestId sample_id);
  // Asks the loop to reset the prefix cache at its next turn (Scheduler::reset_prefix_cache, after
  // that turn's submissions and aborts) and waits up to `timeout` for its answer: true when the
  // cache was reset, false while requests held blocks (or the loop gave up); nullopt on timeout.
  std::optional<bool> reset_prefix_cache(std::chrono::milliseconds timeout);
  // Stops accepting requests; the loop ends once the in-flight ones are done.
  void drain();
  bool draining() const;
  std::size_t in_flight() const;

  // Loop thread.
  void admit(TimeNs now, Scheduler& scheduler) override;
  bool wait_for_work(TimeNs now, const Scheduler& scheduler) override;
  // The channel of an in-flight request (null when unknown).
  RequestChannel* channel(RequestId id);
  // Request `id` left the scheduler (finished, aborted or rejected): forgets its channel.
  void done(RequestId id);
  // The loop failed and serves no more: every request in flight ends aborted (or rejected, if
  // not yet admitted) with `reason`, so no handler waits forever; new ones are refused.
  void abandon(const std::string& reason);

 private:
  struct Pending {
    RequestSpec spec;
    std::shared_ptr<RequestChannel> channel;
  };
  const std::size_t max_in_flight_;
  const WallClock& clock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> submitted_;
  std::vector<RequestId> aborts_;
  std::vector<RequestId> sample_stops_;                      // stop_sample() ids
  std::vector<std::shared_ptr<std::promise<bool>>> resets_;  // reset_prefix_cache() callers
  std::size_t in_flight_ = 0;
  RequestId next_id_ = 0;
  bool draining_ = false;
  // Loop thread only: the channels of requests in the scheduler.
  std::map<RequestId, std::shared_ptr<RequestChannel>> live_;
};

}  // namespace servelab
