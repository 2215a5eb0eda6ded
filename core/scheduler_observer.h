// Hooks through which the Scheduler reports request lifecycle facts (the Recorder implements
// them; tests may too). Each call happens at the time it names; the Request is in its new state.
#pragma once

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
  // req was preempted while forming a plan at time now.
  virtual void on_preempt(const Request& req, TimeNs now) { (void)req, (void)now; }
  // req finished (kFinished) or was aborted (kAborted); it is destroyed after this call.
  virtual void on_finish(const Request& req, TimeNs now) { (void)req, (void)now; }
};

}  // namespace servelab
