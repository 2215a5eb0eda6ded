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
// state around it (whether a step is in flight, and its result), so a cluster of replicas behind
// a router is a vector of replicas and of such states; this version drives one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/backend.h"
#include "serving/frontend.h"
#include "serving/recorder.h"
#include "serving/replica.h"
#include "serving/run_folder.h"
#include "serving/workload_feedback.h"
#include "sim/event_queue.h"
#include "traces/workload.h"

namespace servelab {

class Simulator {
 public:
  // Called every `progress_every` events with (arrivals so far, simulated now).
  using Progress = std::function<void(std::int64_t arrivals, TimeNs now)>;

  // All references must outlive the simulator. `frontend`: the front end's settings (disabled by
  // default); throws std::invalid_argument on invalid ones (see FrontEnd).
  Simulator(Workload& workload, Replica& replica, Recorder& recorder,
            const FrontendConfig& frontend = {});
  void set_progress(Progress fn, std::int64_t every) {
    progress_ = std::move(fn);
    progress_every_ = every;
  }

  // Runs until the workload is exhausted and every request has finished or been rejected.
  // Throws std::logic_error if the scheduler stalls with unfinished requests and nothing to run,
  // Interrupted (core/interrupt.h) soon after SIGINT or SIGTERM.
  SimulationTotals run();

 private:
  void try_start_step(TimeNs now);
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
  Replica& replica_;
  bool busy_ = false;   // a step of the replica is in flight
  StepResult pending_;  // its result, applied at the step end
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
};

}  // namespace servelab
