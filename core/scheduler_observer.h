// Hooks through which the Scheduler reports request lifecycle facts (the Recorder implements
// them; tests may too). Each call happens at the time it names; the Request is in its new state.
#pragma once

#include <span>
#include <string_view>

#include "core/request_state.h"
#include "core/time.h"

namespace servelab {

class SchedulerObserver {
 public:
  virtual ~SchedulerObserver() = default;
  // A request was refused at arrival; req.status is kRejected and finish_reason says why.
  virtual void on_reject(const Request& req, TimeNs now) { (void)req, (void)now; }
  // A token was appended to req at time now; prev_token_ns is the previous token's time (or -1).
  virtual void on_token(const Request& req, TimeNs prev_token_ns, TimeNs now) {
    (void)req, (void)prev_token_ns, (void)now;
  }
  // The tokens a completed step appended, all at time now, in plan order: requests[i] got one
  // token, its previous one at prev_token_ns[i] (-1 for a first token). Reported before any of
  // the step's finishes. The default calls on_token for each; an observer that only needs the
  // times overrides this (one virtual call per step rather than one per token). A multi-step
  // round (StepPlan::num_steps N > 1) calls it once per pass, in pass order, every call at the
  // round's end: a request's tokens of one round after its first have prev_token_ns == now.
  virtual void on_step_tokens(std::span<const Request* const> requests,
                              std::span<const TimeNs> prev_token_ns, TimeNs now) {
    for (std::size_t i = 0; i < requests.size(); ++i) on_token(*requests[i], prev_token_ns[i], now);
  }
  // req was preempted while forming a plan at time now.
  virtual void on_preempt(const Request& req, TimeNs now) { (void)req, (void)now; }
  // req finished (kFinished) or was aborted (kAborted); it is destroyed after this call.
  virtual void on_finish(const Request& req, TimeNs now) { (void)req, (void)now; }
  // Parallel sampling (n > 1): `sample` (one of a group's requests, sample 0 included) finished
  // or was given up and freed its blocks at time now. Its group is reported once, through
  // on_finish of sample 0, when the last sample ends (after that sample's on_sample_end).
  virtual void on_sample_end(const Request& sample, TimeNs now) { (void)sample, (void)now; }
};

// Passes every event on to `downstream`, which must outlive it. An observer that sits between the
// scheduler and another one (WorkloadFeedback, the engine's token capture) derives from it,
// overrides the events it also acts on and calls the base version first, so the downstream
// observer sees every event exactly once and in order.
class ForwardingObserver : public SchedulerObserver {
 public:
  explicit ForwardingObserver(SchedulerObserver& downstream) : downstream_(downstream) {}
  void on_reject(const Request& req, TimeNs now) override { downstream_.on_reject(req, now); }
  void on_token(const Request& req, TimeNs prev_token_ns, TimeNs now) override {
    downstream_.on_token(req, prev_token_ns, now);
  }
  void on_step_tokens(std::span<const Request* const> requests,
                      std::span<const TimeNs> prev_token_ns, TimeNs now) override {
    downstream_.on_step_tokens(requests, prev_token_ns, now);
  }
  void on_preempt(const Request& req, TimeNs now) override { downstream_.on_preempt(req, now); }
  void on_finish(const Request& req, TimeNs now) override { downstream_.on_finish(req, now); }
  void on_sample_end(const Request& sample, TimeNs now) override {
    downstream_.on_sample_end(sample, now);
  }

 private:
  SchedulerObserver& downstream_;
};

}  // namespace servelab
