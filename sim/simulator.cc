#include "sim/simulator.h"

#include <stdexcept>
#include <string>

namespace servelab {

Replica::Replica(const SchedulerConfig& config, std::int32_t num_gpu_blocks, Backend& backend,
                 SchedulerObserver* observer)
    : pool_(num_gpu_blocks),
      kv_(pool_, config.block_size, config.max_model_len, config.enable_prefix_caching),
      scheduler_(config, kv_, observer),
      backend_(backend) {}

StepSnapshot Replica::snapshot() const {
  StepSnapshot s;
  s.num_usable_blocks = pool_.num_usable_blocks();
  s.kv_blocks_free = pool_.num_free_blocks();
  s.kv_blocks_used = s.num_usable_blocks - s.kv_blocks_free;
  s.kv_blocks_cached = pool_.num_free_cached_blocks();
  s.waiting = static_cast<std::int32_t>(scheduler_.num_waiting());
  s.running = static_cast<std::int32_t>(scheduler_.num_running());
  return s;
}

Simulator::Simulator(Workload& workload, Replica& replica, Recorder& recorder)
    : workload_(workload), replica_(replica), recorder_(recorder) {}

void Simulator::try_start_step(TimeNs now) {
  Replica& r = replica_;
  if (r.busy_) return;
  const StepPlan& plan = r.scheduler_.schedule(now);
  if (plan.empty()) {
    if (r.scheduler_.num_running() == 0 && r.scheduler_.num_waiting() > 0) {
      throw std::logic_error("simulator stalled at t=" + std::to_string(now) + " ns: " +
                             std::to_string(r.scheduler_.num_waiting()) +
                             " waiting requests and nothing can run");
    }
    return;
  }
  const StepSnapshot snap = r.snapshot();
  r.pending_ = r.backend_.execute(plan);
  recorder_.on_step(plan, now, r.pending_.duration_ns, snap);
  r.busy_ = true;
  ++totals_.num_steps;
  events_.push(now + r.pending_.duration_ns, EventKind::kStepEnd, 0);
}

SimulationTotals Simulator::run() {
  std::optional<RequestSpec> next = workload_.next();
  if (next) {
    totals_.first_arrival_ns = next->arrival_ns;
    events_.push(next->arrival_ns, EventKind::kArrival);
  }
  std::int64_t num_events = 0;
  while (!events_.empty()) {
    const Event ev = events_.pop();
    const TimeNs now = ev.time;
    if (ev.kind == EventKind::kArrival) {
      while (next && next->arrival_ns == now) {
        replica_.scheduler_.add_request(std::move(*next), now);
        ++totals_.num_arrivals;
        next = workload_.next();
        if (next && next->arrival_ns < now) {
          throw std::logic_error("workload yielded request " + std::to_string(next->id) +
                                 " out of arrival order");
        }
      }
      if (next) events_.push(next->arrival_ns, EventKind::kArrival);
      totals_.end_ns = std::max(totals_.end_ns, now);
    } else {
      replica_.busy_ = false;
      replica_.scheduler_.complete(replica_.pending_, now);
      totals_.end_ns = std::max(totals_.end_ns, now);
    }
    try_start_step(now);
    if (progress_ && ++num_events % progress_every_ == 0) progress_(totals_.num_arrivals, now);
  }
  if (replica_.scheduler_.has_unfinished()) {
    throw std::logic_error("simulation ended with unfinished requests");
  }
  return totals_;
}

}  // namespace servelab
