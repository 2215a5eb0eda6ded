#include "sim/simulator.h"

#include <stdexcept>
#include <string>

#include "serving/config_node.h"
#include "serving/interrupt.h"

namespace servelab {

Simulator::Simulator(Workload& workload, Replica& replica, Recorder& recorder,
                     const FrontendConfig& frontend)
    : workload_(workload),
      dependent_(workload.dependent()),
      replica_(replica),
      recorder_(recorder),
      frontend_on_(frontend.enabled()),
      frontend_(frontend) {}

bool Simulator::arrive(RequestSpec spec, TimeNs now) {
  if (!frontend_on_) {
    replica_.scheduler().add_request(std::move(spec), now);
    return true;
  }
  frontend_.push(std::move(spec));
  return hand_over_ready(now);  // a request with no front-end time is ready at once
}

bool Simulator::hand_over_ready(TimeNs now) {
  bool any = false;
  for (std::optional<TimeNs> t = frontend_.next_ready(); t && *t <= now;
       t = frontend_.next_ready()) {
    RequestSpec spec = frontend_.pop();
    if (recorder_.records_events()) recorder_.on_ready(spec.id, spec.arrival_ns, now);
    replica_.scheduler().add_request(std::move(spec), now);
    any = true;
  }
  // One event at the earliest ready time (an earlier one may come with a later arrival when
  // several requests are in the front end at once; a stale later event then finds nothing).
  const std::optional<TimeNs> next = frontend_.next_ready();
  if (next && (!ready_armed_ || *next < *ready_armed_)) {
    events_.push(*next, EventKind::kReady);
    ready_armed_ = next;
  }
  return any;
}

void Simulator::try_start_step(TimeNs now) {
  Replica& r = replica_;
  if (busy_) return;
  const StepPlan& plan = r.scheduler().schedule(now);
  if (plan.empty()) {
    if (r.scheduler().num_running() == 0 && r.scheduler().num_waiting() > 0) {
      throw std::logic_error("simulator stalled at t=" + std::to_string(now) +
                             " ns: " + std::to_string(r.scheduler().num_waiting()) +
                             " waiting requests and nothing can run");
    }
    return;
  }
  const StepSnapshot snap = r.snapshot();
  r.backend().execute_into(plan, pending_);
  recorder_.on_step(plan, now, pending_.duration_ns, snap);
  busy_ = true;
  ++totals_.num_steps;
  events_.push(now + pending_.duration_ns, EventKind::kStepEnd, 0);
}

std::optional<TimeNs> Simulator::peek_arrival() {
  if (dependent_) return workload_.next_arrival();
  if (!buffered_ && !independent_done_) {
    buffered_ = workload_.next();
    if (!buffered_) {
      independent_done_ = true;
    } else if (buffered_->arrival_ns < last_arrival_) {
      throw std::logic_error("workload yielded request " + std::to_string(buffered_->id) +
                             " out of arrival order");
    }
  }
  return buffered_ ? std::optional<TimeNs>(buffered_->arrival_ns) : std::nullopt;
}

RequestSpec Simulator::take_arrival() {
  if (dependent_) {
    std::optional<RequestSpec> r = workload_.next();
    if (!r) throw std::logic_error("dependent workload announced an arrival it did not yield");
    return std::move(*r);
  }
  RequestSpec r = std::move(*buffered_);
  buffered_.reset();
  last_arrival_ = r.arrival_ns;
  return r;
}

void Simulator::arm_arrival(TimeNs now) {
  // An independent workload's next arrival changes only when the armed one is taken (its event
  // clears armed_ first), so while one is armed there is nothing to do.
  if (!dependent_ && armed_) return;
  const std::optional<TimeNs> t = peek_arrival();
  if (!t || (armed_ && *armed_ <= *t)) return;
  if (*t < now) throw std::logic_error("workload released a request in the past");
  events_.push(*t, EventKind::kArrival);
  armed_ = *t;
}

SimulationTotals Simulator::run() {
  if (const std::optional<TimeNs> first = peek_arrival()) totals_.first_arrival_ns = *first;
  arm_arrival(totals_.first_arrival_ns);
  std::int64_t num_events = 0;
  while (!events_.empty()) {
    const Event ev = events_.pop();
    const TimeNs now = ev.time;
    // With the front end on, an event that gave the scheduler nothing new starts no step (its
    // plan would be the same as the last one's).
    bool start = true;
    if (ev.kind == EventKind::kArrival) {
      if (armed_ && *armed_ == now) armed_.reset();
      // Every request due by now is queued before the replica schedules.
      bool handed = false;
      for (std::optional<TimeNs> t = peek_arrival(); t && *t <= now; t = peek_arrival()) {
        handed = arrive(take_arrival(), now) || handed;
        ++totals_.num_arrivals;
      }
      totals_.end_ns = std::max(totals_.end_ns, now);
      start = handed || !frontend_on_;
    } else if (ev.kind == EventKind::kReady) {
      if (ready_armed_ && *ready_armed_ == now) ready_armed_.reset();
      start = hand_over_ready(now);  // false for a stale event
      totals_.end_ns = std::max(totals_.end_ns, now);
    } else {
      busy_ = false;
      replica_.scheduler().complete(pending_, now);
      totals_.end_ns = std::max(totals_.end_ns, now);
    }
    arm_arrival(now);
    if (start) try_start_step(now);
    ++num_events;
    if ((num_events & 1023) == 0) throw_if_interrupted();  // SIGINT/SIGTERM: unwind cleanly
    if (progress_ && num_events % progress_every_ == 0) progress_(totals_.num_arrivals, now);
  }
  if (replica_.scheduler().has_unfinished() || !frontend_.empty()) {
    throw std::logic_error("simulation ended with unfinished requests (" +
                           std::to_string(replica_.scheduler().num_waiting()) + " waiting, " +
                           std::to_string(replica_.scheduler().num_running()) + " running)");
  }
  if (workload_.dependent() && !workload_.exhausted()) {
    throw ConfigError(workload_.describe() +
                      ": some requests were never released (their dependencies never finished)");
  }
  return totals_;
}

}  // namespace servelab
