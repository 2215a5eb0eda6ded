#include "sim/simulator.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/stop_conditions.h"
#include "serving/config_node.h"
#include "serving/interrupt.h"

namespace servelab {

namespace {

// A P/D transfer into `stats`: its prefill ended at `prefill_end`, its first piece could leave
// at `ready`, the link started moving it at `begin`, its last byte arrived at `finish`.
void count_transfer(TransferStats& stats, std::int64_t bytes, TimeNs prefill_end, TimeNs ready,
                    TimeNs begin, TimeNs finish) {
  ++stats.count;
  stats.bytes += bytes;
  stats.wait_ns += static_cast<double>(begin - ready);
  stats.transfer_ns += static_cast<double>(finish - begin);
  stats.exposed_ns += static_cast<double>(finish - prefill_end);
  stats.max_ns = std::max(stats.max_ns, finish - prefill_end);
}

}  // namespace

Simulator::Simulator(Workload& workload, Replica& replica, Recorder& recorder,
                     const FrontendConfig& frontend)
    : workload_(workload),
      dependent_(workload.dependent()),
      replicas_{SimReplica{&replica, ReplicaRole::kUnified, 0}},
      state_(1),
      cluster_(false),
      arrival_candidates_{0},
      arrival_loads_(1),
      stale_{0},
      recorder_(recorder),
      frontend_on_(frontend.enabled()),
      frontend_(frontend) {}

Simulator::Simulator(Workload& workload, ClusterSetup cluster, Recorder& recorder,
                     const FrontendConfig& frontend)
    : workload_(workload),
      dependent_(workload.dependent()),
      replicas_(std::move(cluster.replicas)),
      state_(replicas_.size()),
      cluster_(true),
      router_(std::move(cluster.router)),
      decode_router_(std::move(cluster.decode_router)),
      transfer_(cluster.transfer),
      shared_(cluster.shared_transfer),
      handoff_(cluster.handoff),
      layerwise_(cluster.layerwise_transfers),
      stats_(replicas_.size()),
      recorder_(recorder),
      frontend_on_(frontend.enabled()),
      frontend_(frontend) {
  bool prefill = false;
  for (std::uint32_t i = 0; i < replicas_.size(); ++i) {
    if (replicas_[i].replica == nullptr) throw std::invalid_argument("Simulator: null replica");
    std::vector<std::uint32_t>& list =
        replicas_[i].role == ReplicaRole::kDecode ? decode_candidates_ : arrival_candidates_;
    state_[i].view_slot = static_cast<std::uint32_t>(list.size());
    list.push_back(i);
    prefill = prefill || replicas_[i].role == ReplicaRole::kPrefill;
    stale_.push_back(i);
  }
  arrival_loads_.resize(arrival_candidates_.size());
  decode_loads_.resize(decode_candidates_.size());
  if (arrival_candidates_.empty()) {
    throw std::invalid_argument("Simulator: a cluster needs a unified or prefill replica");
  }
  if (arrival_candidates_.size() > 1 && router_ == nullptr) {
    throw std::invalid_argument("Simulator: several replicas and no router");
  }
  if (!decode_candidates_.empty() &&
      ((transfer_ == nullptr) == (shared_ == nullptr) ||
       (decode_candidates_.size() > 1 && decode_router_ == nullptr))) {
    throw std::invalid_argument("Simulator: decode replicas need one transfer model and a router");
  }
  if (shared_ != nullptr && layerwise_) {
    throw std::invalid_argument("Simulator: shared transfers are not layer-wise");
  }
  if (prefill && (handoff_ == nullptr || decode_candidates_.empty())) {
    throw std::invalid_argument("Simulator: prefill replicas need a handoff and decode replicas");
  }
}

void Simulator::touch(std::uint32_t i) {
  if (state_[i].touched) return;
  state_[i].touched = true;
  touched_.push_back(i);
}

std::span<const ReplicaLoad> Simulator::view(bool decode) {
  for (const std::uint32_t i : stale_) {
    ReplicaState& st = state_[i];
    st.load_stale = false;
    Replica& r = *replicas_[i].replica;
    ReplicaLoad& l =
        (replicas_[i].role == ReplicaRole::kDecode ? decode_loads_ : arrival_loads_)[st.view_slot];
    l.replica = i;
    l.waiting =
        static_cast<std::int32_t>(r.scheduler().num_waiting() + r.scheduler().num_swapped());
    l.running = static_cast<std::int32_t>(r.scheduler().num_running());
    l.outstanding = l.waiting + l.running + st.incoming;
    l.kv_blocks_usable = std::max<std::int32_t>(1, r.pool().num_usable_blocks());
    l.kv_blocks_used = r.pool().num_usable_blocks() - r.kv().num_free_blocks();
  }
  stale_.clear();
  if (decode) return decode_loads_;
  return arrival_loads_;
}

void Simulator::dispatch(RequestSpec spec, TimeNs now) {
  if (!cluster_) {
    replicas_[0].replica->scheduler().add_request(std::move(spec), now);
    return;
  }
  std::uint32_t i = arrival_candidates_[0];
  if (arrival_candidates_.size() > 1) {
    const std::size_t k = router_->route(spec, view(false));
    if (k >= arrival_candidates_.size()) throw std::logic_error("router chose no candidate");
    i = arrival_candidates_[k];
  }
  recorder_.on_route(spec.id, i, now, "route");
  ++stats_[i].routed;
  // Split unless the request cannot be (parallel sampling, one token) or ends at its first token
  // (the simulated model samples EOS or a stop token there: it finishes here, "stop", as on a
  // unified replica). A split request is admitted with its real length (refused whole, with the
  // reason, before any work is done; capped by the length cap at its arrival), then runs to its
  // first token here and continues on a decode replica unless the cap left it one token.
  Scheduler& sched = replicas_[i].replica->scheduler();
  if (replicas_[i].role == ReplicaRole::kPrefill && spec.n == 1 && spec.max_output_tokens >= 2 &&
      !(spec.stop != nullptr &&
        check_stop(spec, {sim_sampled_token(spec, 0)}) == StopReason::kStop)) {
    const RequestId id = spec.id;
    const std::int32_t continues = sched.add_prefill_only_request(std::move(spec), now);
    if (continues >= 2) handoff_->expect(id, continues);
  } else {
    sched.add_request(std::move(spec), now);
  }
  load_changed(i);
  touch(i);
}

bool Simulator::arrive(RequestSpec spec, TimeNs now) {
  if (idle_ != nullptr) idle_->on_arrival(spec.session);
  if (!frontend_on_) {
    dispatch(std::move(spec), now);
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
    dispatch(std::move(spec), now);
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

// Inlined into try_start_step, the hot path of every run (one call per step).
[[gnu::always_inline]] inline void Simulator::launch(std::uint32_t i, const StepPlan& plan,
                                                     TimeNs now, StepResult& result) {
  ReplicaState& st = state_[i];
  Replica& r = *replicas_[i].replica;
  const StepSnapshot snap = r.snapshot();
  r.backend().execute_into(plan, result);
  recorder_.on_step(plan, now, result.duration_ns, snap, i);
  if (layerwise_ && replicas_[i].role == ReplicaRole::kPrefill) {
    for (const ScheduledRequest& e : plan.requests) {
      handoff_->on_chunk(e.id, e.num_tokens, now, now + result.duration_ns);
    }
  }
  st.busy = true;
  ++totals_.num_steps;
  if (cluster_) stats_[i].add_step(plan, result.duration_ns, snap);
  events_.push(now + result.duration_ns, EventKind::kStepEnd, i);
}

void Simulator::try_start_step(std::uint32_t i, TimeNs now) {
  ReplicaState& st = state_[i];
  if (st.busy || st.waking) return;
  if (st.idle && replicas_[i].wake_up_ns > 0) {  // the engine's loop wakes up first
    st.idle = false;
    st.waking = true;
    events_.push(now + replicas_[i].wake_up_ns, EventKind::kWake, i);
    return;
  }
  Replica& r = *replicas_[i].replica;
  load_changed(i);
  const StepPlan& plan = r.scheduler().schedule(now);
  if (plan.empty()) {
    if (r.scheduler().num_running() == 0 && r.scheduler().num_waiting() > 0) {
      throw SimulationStalled(
          "simulator stalled at t=" + std::to_string(now) + " ns: " +
          std::to_string(r.scheduler().num_waiting()) + " waiting requests and nothing can run" +
          (cluster_ ? " on replica " + std::to_string(i) : std::string()) + " (batch formation '" +
          std::string(r.scheduler().batch_formation().name()) + "' scheduled nothing)");
    }
    st.idle = true;
    return;
  }
  st.idle = false;
  launch(i, plan, now, st.pending);
}

void Simulator::end_pipelined_step(std::uint32_t i, TimeNs now) {
  ReplicaState& st = state_[i];
  Scheduler& scheduler = replicas_[i].replica->scheduler();
  // vLLM's engine core with a batch queue of two: the next plan was formed while this step ran,
  // before its tokens were known; it starts on the device as this one ends.
  const StepPlan& plan = scheduler.schedule(now);
  if (plan.empty()) {
    st.busy = false;
    scheduler.complete(st.pending, now);
    return;
  }
  launch(i, plan, now, st.next);
  scheduler.complete(st.pending, now);
  std::swap(st.pending, st.next);
}

void Simulator::start_transfers(std::uint32_t src, TimeNs now) {
  std::vector<PrefillHandoff::Handed>& handed = handoff_->handed();
  for (PrefillHandoff::Handed& h : handed) {
    std::uint32_t dst = decode_candidates_[0];
    if (decode_candidates_.size() > 1) {
      const std::size_t k = decode_router_->route(h.spec, view(true));
      if (k >= decode_candidates_.size()) throw std::logic_error("router chose no candidate");
      dst = decode_candidates_[k];
    }
    recorder_.on_route(h.spec.id, dst, now, "route_decode");
    ++stats_[dst].routed;
    const std::int32_t block = replicas_[src].replica->kv().block_size();
    const std::int64_t blocks = (h.spec.prompt_len + block - 1) / block;
    const std::int64_t bytes = blocks * replicas_[src].block_bytes;
    if (shared_ != nullptr) {
      // Its end depends on the transfers that start while it moves: recorded when it ends.
      // Its in-flight slot is its id there.
      shared_->start(now, add_in_flight(InFlight{std::move(h), dst, src, bytes, now}), bytes, src,
                     dst);
      continue;
    }
    KvTransferTimes t;
    TimeNs ready = now;  // when its first piece could leave
    if (layerwise_) {
      const std::vector<KvPiece> pieces =
          layerwise_kv_pieces(bytes, h.spec.prompt_len, h.chunks, replicas_[src].num_layers, now);
      ready = pieces.front().ready;
      t = transfer_->transfer_pieces(pieces, src, dst);
    } else {
      t = transfer_->transfer(bytes, src, dst, now);
    }
    if (t.begin < ready || t.finish < std::max(now, t.begin)) {
      throw std::logic_error("KV transfer ends in the past");
    }
    recorder_.on_transfer(h.spec.id, src, dst, bytes, now, ready, t.begin, t.finish);
    // Pushed first: a finish past the clock's horizon is refused before it is counted.
    events_.push(t.finish, EventKind::kTransfer, add_in_flight(InFlight{std::move(h), dst}));
    count_transfer(transfer_stats_, bytes, now, ready, t.begin, t.finish);
  }
  handed.clear();
  if (transfer_ != nullptr) {
    transfer_->forget_before(layerwise_ ? handoff_->earliest_step_start(now) : now);
  }
  if (shared_ != nullptr) arm_shared(now);
}

std::uint32_t Simulator::add_in_flight(InFlight f) {
  const std::uint32_t dst = f.dst;
  ++state_[dst].incoming;
  load_changed(dst);
  ++num_in_flight_;
  if (!free_slots_.empty()) {
    const std::uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    in_flight_[slot] = std::move(f);
    return slot;
  }
  in_flight_.push_back(std::move(f));
  return static_cast<std::uint32_t>(in_flight_.size() - 1);
}

void Simulator::arm_shared(TimeNs now) {
  // A start can bring the next possible finish forward (a short transfer) or push it back (it
  // slows the others): a wake-up is queued whenever the next one is earlier than the one
  // queued; one that finds shared_armed_ moved elsewhere is stale and ignored.
  const std::optional<TimeNs> next = shared_->next_finish();
  if (!next || (shared_armed_ && *shared_armed_ <= *next)) return;
  if (*next < now) throw std::logic_error("KV transfer ends in the past");
  events_.push(*next, EventKind::kTransfer, kSharedTick);
  shared_armed_ = *next;
}

void Simulator::end_shared_transfers(TimeNs now) {
  if (!shared_armed_ || *shared_armed_ != now) return;  // stale
  shared_armed_.reset();
  for (const FinishedTransfer& f : shared_->advance(now)) {
    const auto slot = static_cast<std::uint32_t>(f.id);
    const InFlight& x = in_flight_[slot];
    recorder_.on_transfer(x.request.spec.id, x.src, x.dst, x.bytes, now, x.start, x.start,
                          f.finish_ns);
    count_transfer(transfer_stats_, x.bytes, x.start, x.start, x.start, f.finish_ns);
    end_transfer(slot, now);
    totals_.end_ns = std::max(totals_.end_ns, now);
  }
  arm_shared(now);
}

void Simulator::end_transfer(std::uint32_t slot, TimeNs now) {
  InFlight& f = in_flight_[slot];
  --state_[f.dst].incoming;
  load_changed(f.dst);
  --num_in_flight_;
  replicas_[f.dst].replica->scheduler().add_prefilled_request(std::move(f.request.spec),
                                                              f.request.state, now);
  touch(f.dst);
  free_slots_.push_back(slot);
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

bool Simulator::any_unfinished() const {
  if (num_in_flight_ > 0 || !frontend_.empty()) return true;
  for (const SimReplica& r : replicas_) {
    if (r.replica->scheduler().has_unfinished()) return true;
  }
  return false;
}

SimulationTotals Simulator::run() {
  for (std::size_t i = 0; i < replicas_.size(); ++i) {
    state_[i].async = replicas_[i].replica->scheduler().config().async_scheduling;
  }
  if (const std::optional<TimeNs> first = peek_arrival()) totals_.first_arrival_ns = *first;
  arm_arrival(totals_.first_arrival_ns);
  std::int64_t num_events = 0;
  while (!events_.empty()) {
    const Event ev = events_.pop();
    const TimeNs now = ev.time;
    // Sessions idle long enough lose their device cache to the host tier before anything at
    // `now` happens (core/idle_session_offload.h).
    if (idle_ != nullptr) idle_->offload_due(now, replicas_[0].replica->kv());
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
    } else if (ev.kind == EventKind::kStepEnd) {
      ReplicaState& st = state_[ev.target];
      if (st.async) [[unlikely]] {
        end_pipelined_step(ev.target, now);
      } else {
        st.busy = false;
        replicas_[ev.target].replica->scheduler().complete(st.pending, now);
      }
      load_changed(ev.target);
      totals_.end_ns = std::max(totals_.end_ns, now);
      if (cluster_) {
        if (replicas_[ev.target].role == ReplicaRole::kPrefill) start_transfers(ev.target, now);
        touch(ev.target);
      }
    } else if (ev.kind == EventKind::kWake) {
      state_[ev.target].waking = false;
      if (cluster_) touch(ev.target);
    } else if (ev.target == kSharedTick) {  // kTransfer of the shared model
      end_shared_transfers(now);
    } else {  // kTransfer
      end_transfer(ev.target, now);
      totals_.end_ns = std::max(totals_.end_ns, now);
    }
    arm_arrival(now);
    if (!cluster_) {
      if (start) try_start_step(0, now);
    } else {
      // Every replica that got work (or finished a step) at this event, in the order they did.
      for (std::size_t k = 0; k < touched_.size(); ++k) {
        state_[touched_[k]].touched = false;
        try_start_step(touched_[k], now);
      }
      touched_.clear();
    }
    ++num_events;
    if ((num_events & 1023) == 0) throw_if_interrupted();  // SIGINT/SIGTERM: unwind cleanly
    if (progress_ && num_events % progress_every_ == 0) progress_(totals_.num_arrivals, now);
  }
  if (any_unfinished()) {
    std::int64_t waiting = 0, running = 0;
    for (const SimReplica& r : replicas_) {
      waiting += static_cast<std::int64_t>(r.replica->scheduler().num_waiting());
      running += static_cast<std::int64_t>(r.replica->scheduler().num_running());
    }
    throw SimulationStalled(
        "simulation ended with unfinished requests (" + std::to_string(waiting) + " waiting, " +
        std::to_string(running) + " running, " + std::to_string(num_in_flight_) +
        " in transfer; batch formation '" +
        std::string(replicas_.front().replica->scheduler().batch_formation().name()) + "')");
  }
  if (workload_.dependent() && !workload_.exhausted()) {
    throw ConfigError(workload_.describe() +
                      ": some requests were never released (their dependencies never finished)");
  }
  return totals_;
}

}  // namespace servelab
