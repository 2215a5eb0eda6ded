// Simulator: the discrete-event loop that replays a workload through a serving replica.
//
// Events are arrivals (pulled lazily from the Workload, one pending at a time, so a
// million-request trace is never held in memory) and step ends. A dependent workload (sessions)
// learns of finished requests through WorkloadFeedback and may then release new ones; the
// simulator re-reads its next known arrival after every event. An idle replica starts a step
// as soon as work arrives; a busy one picks up new arrivals at its next step, as a real engine
// loop does. All arrivals with the same timestamp are queued before the replica schedules.
// With a front end (serving.frontend, serving/frontend.h) an arrival enters the FrontEnd instead
// and reaches the scheduler at its ready time (a kReady event; all requests ready at the same
// instant are queued before the replica schedules); its arrival time stays the request's. With
// the front end disabled (both costs 0) arrivals go straight to the scheduler, as before.
// The Replica (serving/replica.h) owns the serving state; the simulator owns only the event
// state around it (whether a step is in flight, and its result).
//
// A cluster (ClusterSetup) is a vector of replicas on the same virtual clock and event queue,
// each with its own scheduler, KV pool, backend and cost model; step-end events name their
// replica, and events keep the (time, insertion sequence) order, so a cluster run is as
// deterministic as a single one. A request that leaves the front end (or arrives, without one)
// is routed at that instant: the Router (core/router.h) sees a load view of the unified and
// prefill replicas and picks one. Prefill/decode disaggregation: a request routed to a prefill
// replica runs there with max_output_tokens 1 (PrefillHandoff); when its first token is out the
// decode router picks a decode replica from a view of the decode replicas, the KvTransferModel
// books the transfer of its prompt's KV blocks (ceil(prompt_len / block_size) blocks of the
// source replica's block bytes; with layer-wise transfers, ClusterSetup::layerwise_transfers,
// as pieces per layer of each of the request's prefill steps, which the handoff hears of as each
// step is launched: serving/kv_transfer.h; or, with ClusterSetup::shared_transfer, starts it
// on the links it shares with the transfers in flight, sim/shared_kv_transfer.h, whose ends the
// simulator learns at a wake-up event re-armed as transfers start and end), and when the
// transfer ends (a kTransfer event) the
// request joins that replica's waiting queue holding its first token
// (Scheduler::add_prefilled_request); it decodes once blocks were allocated for it there, so a full
// decode replica queues it. Requests that cannot be split (parallel sampling, a single output
// token) run whole on the prefill replica. Every replica that got work at an instant tries to start
// a step after all the instant's arrivals were routed.
//
// Async scheduling (a replica whose SchedulerConfig::async_scheduling is on; docs/cost-model.md
// "Async scheduling"): at a step's end the replica first forms the next plan (pipelined: it does
// not see the ended step's tokens), launches it, then completes the ended step at the same
// instant; the launched step lasts SimBackend::pipelined_time (its host part overlapped the ended
// step). A step started on an idle replica costs its full time, as without async scheduling.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/idle_session_offload.h"
#include "core/router.h"
#include "serving/cluster_summary.h"
#include "sim/run_scoped_error.h"

namespace servelab {
// The run could not go on: requests remained that no step would ever serve (a batch formation
// that scheduled nothing while they waited, or left running requests out of every step). An
// internal error for the built-in policies; the Python module reports it as the Python policy's
// (servelab.PolicyError) when one is registered. A compare or sweep names its run in front.
class SimulationStalled : public RunScopedError {
 public:
  using RunScopedError::RunScopedError;
  [[noreturn]] void rethrow_with_prefix(const std::string& prefix) const override {
    throw SimulationStalled(prefix + what());
  }
};
}  // namespace servelab
#include "serving/frontend.h"
#include "serving/kv_transfer.h"
#include "serving/recorder.h"
#include "serving/replica.h"
#include "serving/run_folder.h"
#include "serving/workload_feedback.h"
#include "sim/event_queue.h"
#include "sim/prefill_handoff.h"
#include "sim/shared_kv_transfer.h"
#include "traces/workload.h"

namespace servelab {

// One replica of a cluster as the simulator drives it.
struct SimReplica {
  Replica* replica = nullptr;
  ReplicaRole role = ReplicaRole::kUnified;
  std::int64_t block_bytes = 0;  // KV bytes per block (the size of a P/D transfer)
  std::int32_t num_layers = 1;   // the model's layers (the pieces of a layer-wise transfer)
  // Its cost model's wake_up_ns(): a step on the replica after it went idle (its last attempt to
  // schedule found nothing to run; it starts idle) starts this long after the event that gave it
  // work, and what arrives in between is in that step, as in the engine, whose loop sleeps
  // while idle. 0: at the event.
  TimeNs wake_up_ns = 0;
};

// A cluster to drive. Unified and prefill replicas receive arrivals through `router`; decode
// replicas receive prefilled requests through `decode_router` over `transfer`. The prefill
// replicas' observer must be `handoff` (whose downstream is the other replicas' observer).
// Routers may be null when they would only ever see one candidate.
struct ClusterSetup {
  std::vector<SimReplica> replicas;
  std::unique_ptr<Router> router;
  std::unique_ptr<Router> decode_router;  // required with decode replicas (when > 1)
  KvTransferModel* transfer = nullptr;    // with decode replicas: this or shared_transfer
  // Transfers that share their links while they overlap (cluster.kv_transfer.sharing: fair,
  // sim/shared_kv_transfer.h) instead of `transfer`'s bookings; not with layerwise_transfers.
  SharedKvTransfer* shared_transfer = nullptr;
  PrefillHandoff* handoff = nullptr;  // required with prefill replicas
  // The KV leaves layer by layer as each prefill step computes it (cluster.kv_transfer.
  // layerwise) instead of after the whole prefill.
  bool layerwise_transfers = false;
};

// ReplicaStats and TransferStats (what a cluster run reports) are in serving/cluster_summary.h.

class Simulator {
 public:
  // Called every `progress_every` events with (arrivals so far, simulated now).
  using Progress = std::function<void(std::int64_t arrivals, TimeNs now)>;

  // All references must outlive the simulator. `frontend`: the front end's settings (disabled by
  // default); throws std::invalid_argument on invalid ones (see FrontEnd).
  Simulator(Workload& workload, Replica& replica, Recorder& recorder,
            const FrontendConfig& frontend = {});
  // A cluster (see above): throws std::invalid_argument when it has no replica, no unified or
  // prefill replica, or decode replicas without one transfer model (or more than one without a
  // decode router), or prefill replicas without a handoff, or several candidates and no router.
  Simulator(Workload& workload, ClusterSetup cluster, Recorder& recorder,
            const FrontendConfig& frontend = {});
  // Idle-session KV offload (kv_offload.idle_offload_s; single-replica runs): told of every
  // arrival, and asked to offload what is due before each event is handled. Null: none.
  void set_idle_offload(IdleSessionOffload* idle) { idle_ = idle; }
  // Single-replica runs: the replica's wake-up latency (SimReplica::wake_up_ns; cluster runs set
  // it in ClusterSetup). REQUIRES: ns >= 0, before run().
  void set_wake_up_ns(TimeNs ns) { replicas_[0].wake_up_ns = ns; }
  void set_progress(Progress fn, std::int64_t every) {
    progress_ = std::move(fn);
    progress_every_ = every;
  }

  // Runs until the workload is exhausted and every request has finished or been rejected.
  // Throws SimulationStalled if the scheduler stalls with unfinished requests and nothing to run,
  // Interrupted (core/interrupt.h) soon after SIGINT or SIGTERM.
  SimulationTotals run();

  // Cluster runs: per replica (cluster order) and the transfers. Empty / zero otherwise.
  const std::vector<ReplicaStats>& replica_stats() const { return stats_; }
  const TransferStats& transfer_stats() const { return transfer_stats_; }

 private:
  struct ReplicaState {
    bool busy = false;          // a step is in flight
    bool idle = true;           // its last schedule() found nothing to run (SimReplica::wake_up_ns)
    bool waking = false;        // a kWake event is pending
    bool touched = false;       // got work at the current instant (cluster runs)
    std::int32_t incoming = 0;  // KV transfers in flight towards it
    bool load_stale = true;     // its ReplicaLoad in the views needs refreshing (in stale_)
    std::uint32_t view_slot = 0;  // its index in arrival_loads_ or decode_loads_
    StepResult pending;           // the in-flight step's result, applied at its end
    // Async scheduling (SchedulerConfig::async_scheduling): at a step's end the next plan is
    // formed and launched before the ended step's result is applied; `next` receives its result.
    bool async = false;
    StepResult next;
  };
  struct InFlight {  // a KV transfer (P/D)
    PrefillHandoff::Handed request;
    std::uint32_t dst = 0;
    std::uint32_t src = 0;   // shared transfers: recorded at the end
    std::int64_t bytes = 0;  // shared transfers
    TimeNs start = 0;        // shared transfers: the prefill's end
  };

  void try_start_step(std::uint32_t i, TimeNs now);
  // Executes `plan` on replica i at `now` into `result`, records it and books its end event.
  void launch(std::uint32_t i, const StepPlan& plan, TimeNs now, StepResult& result);
  // Async scheduling: the step end of replica i (see ReplicaState::async).
  void end_pipelined_step(std::uint32_t i, TimeNs now);
  // Queues a request that is ready for a scheduler: replica 0, or the router's choice.
  void dispatch(RequestSpec spec, TimeNs now);
  void touch(std::uint32_t i);
  // Replica i's scheduler, KV pool or incoming transfers changed: its load is recomputed before
  // the next view. Every such change must call it (the views are never rebuilt whole).
  void load_changed(std::uint32_t i) {
    if (state_[i].load_stale) return;
    state_[i].load_stale = true;
    stale_.push_back(i);
  }
  // The loads of the arrival candidates (decode: the decode candidates), up to date. Only the
  // replicas changed since the last view are read again: with a thousand replicas, reading every
  // replica's scheduler and pool at each arrival dominated the run.
  std::span<const ReplicaLoad> view(bool decode);
  // After a prefill replica's step end: routes and books the transfer of each handed request.
  void start_transfers(std::uint32_t src, TimeNs now);
  void end_transfer(std::uint32_t slot, TimeNs now);
  // A slot for a transfer in flight; shared transfers: the wake-up at the model's next possible
  // finish (a kTransfer event of target kSharedTick), and the transfers ended by `now`.
  std::uint32_t add_in_flight(InFlight f);  // also counts it towards its decode replica
  void arm_shared(TimeNs now);
  void end_shared_transfers(TimeNs now);
  static constexpr std::uint32_t kSharedTick = 0xffffffffu;
  bool any_unfinished() const;
  // The next known arrival time, buffering one request of an independent workload.
  std::optional<TimeNs> peek_arrival();
  RequestSpec take_arrival();
  // Makes sure an arrival event is queued for the next known arrival.
  void arm_arrival(TimeNs now);
  // A request arrived: straight to the scheduler, or into the front end (then the requests ready
  // by `now` go on to the scheduler). Returns whether the scheduler got a request.
  bool arrive(RequestSpec spec, TimeNs now);
  // Hands every front-end request ready by `now` to the scheduler and arms the next ready event;
  // returns whether there was one.
  bool hand_over_ready(TimeNs now);

  Workload& workload_;
  const bool dependent_;  // workload_.dependent(), asked once
  std::vector<SimReplica> replicas_;
  std::vector<ReplicaState> state_;
  const bool cluster_;  // driven as a cluster (router, per-replica stats, replica columns)
  std::unique_ptr<Router> router_, decode_router_;
  KvTransferModel* transfer_ = nullptr;
  SharedKvTransfer* shared_ = nullptr;
  std::optional<TimeNs> shared_armed_;  // the shared model's queued wake-up
  PrefillHandoff* handoff_ = nullptr;
  const bool layerwise_ = false;
  std::vector<std::uint32_t> arrival_candidates_, decode_candidates_;
  std::vector<ReplicaLoad> arrival_loads_, decode_loads_;  // by candidate index
  std::vector<std::uint32_t> stale_;                       // replicas whose load_stale is set
  std::vector<std::uint32_t> touched_;
  std::vector<InFlight> in_flight_;  // by slot; free slots listed in free_slots_
  std::vector<std::uint32_t> free_slots_;
  std::int64_t num_in_flight_ = 0;
  std::vector<ReplicaStats> stats_;
  TransferStats transfer_stats_;
  Recorder& recorder_;
  EventQueue events_;
  SimulationTotals totals_;
  std::optional<RequestSpec> buffered_;
  bool independent_done_ = false;
  std::optional<TimeNs> armed_;  // time of the earliest queued arrival event
  const bool frontend_on_;       // the front end is enabled
  FrontEnd frontend_;
  std::optional<TimeNs> ready_armed_;  // time of the earliest queued kReady event
  TimeNs last_arrival_ = 0;
  Progress progress_;
  std::int64_t progress_every_ = 0;
  IdleSessionOffload* idle_ = nullptr;
};

}  // namespace servelab
