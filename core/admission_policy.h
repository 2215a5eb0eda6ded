// AdmissionPolicy: whether a request that arrives is let into the waiting queue or shed (refused
// at once) because the server is overloaded (the `policies.admission` plugins; registered as
// PolicyKind::kAdmission). A shed request is never scheduled: it ends with status kShed, its
// finish_reason says which bound it crossed, and observers hear of it through on_reject.
//
// The scheduler asks shed_reason() in add_request(), after the checks that reject a request
// outright (too long, could never fit: kRejected), with an AdmissionLoad that describes the
// queue the request would join. Requests handed over by another replica
// (Scheduler::add_prefilled_request) are not asked: their prefill was already paid for.
//
// Contract: deterministic (a function of the spec and the load only), immutable after
// construction (one object may serve several schedulers at once). A null policy in
// SchedulerConfig admits every request (the default, and what every shipped experiment did
// before overload control existed).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/request.h"
#include "core/time.h"

namespace servelab {

// What the scheduler knows about its load when a request arrives (before the request is queued).
struct AdmissionLoad {
  TimeNs now = 0;
  std::int64_t num_waiting = 0;  // requests in the waiting queue (new and preempted ones)
  std::int64_t num_running = 0;  // requests holding a seat
  // Tokens the waiting requests must compute before they all have run once: for each, its prompt
  // plus the outputs it already has (a preempted request recomputes them), less tokens another
  // replica computed for it.
  std::int64_t waiting_tokens = 0;
  // The recent prefill throughput in tokens per second: an exponentially weighted mean (weight
  // 1/4 for the newest) over completed steps that computed prefill tokens, of the step's prefill
  // tokens over the step's duration (schedule() to complete(), so time spent on the step's
  // decodes counts: it is the rate at which queued prompts actually drained). 0 until such a step
  // completed, and always 0 without an admission policy or length cap (only they read it, so
  // the scheduler's step loop does not keep it then).
  double prefill_tokens_per_s = 0;
};

class AdmissionPolicy {
 public:
  virtual ~AdmissionPolicy() = default;
  // The registry name ("queue-length", ...), for messages.
  virtual std::string_view name() const = 0;
  // "" admits `spec`; anything else sheds it, and is its finish_reason (requests.csv `reason`).
  virtual std::string shed_reason(const RequestSpec& spec, const AdmissionLoad& load) const = 0;
};

}  // namespace servelab
