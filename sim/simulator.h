// Simulator: the discrete-event loop that replays a workload through a serving replica.
//
// Events are arrivals (pulled lazily from the Workload, one pending at a time, so a
// million-request trace is never held in memory) and step ends. An idle replica starts a step
// as soon as work arrives; a busy one picks up new arrivals at its next step, as a real engine
// loop does. All arrivals with the same timestamp are queued before the replica schedules.
// A Replica bundles what one serving instance owns (block pool, KV manager, scheduler, backend),
// so a cluster of replicas behind a router is a vector of them; this version drives one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/backend.h"
#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/recorder.h"
#include "core/scheduler.h"
#include "sim/event_queue.h"
#include "traces/workload.h"

namespace servelab {

class Replica {
 public:
  // `backend` and `observer` must outlive the replica. REQUIRES: num_gpu_blocks >= 2.
  Replica(const SchedulerConfig& config, std::int32_t num_gpu_blocks, Backend& backend,
          SchedulerObserver* observer);
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  BlockPool& pool() { return pool_; }
  KvCacheManager& kv() { return kv_; }
  Scheduler& scheduler() { return scheduler_; }
  Backend& backend() { return backend_; }
  StepSnapshot snapshot() const;

 private:
  friend class Simulator;
  BlockPool pool_;
  KvCacheManager kv_;
  Scheduler scheduler_;
  Backend& backend_;
  bool busy_ = false;
  StepResult pending_;
};

struct SimulationTotals {
  TimeNs first_arrival_ns = 0;
  TimeNs end_ns = 0;  // the later of the last step end and the last arrival
  std::int64_t num_arrivals = 0;
  std::int64_t num_steps = 0;
};

class Simulator {
 public:
  // Called every `progress_every` events with (arrivals so far, simulated now).
  using Progress = std::function<void(std::int64_t arrivals, TimeNs now)>;

  // All references must outlive the simulator.
  Simulator(Workload& workload, Replica& replica, Recorder& recorder);
  void set_progress(Progress fn, std::int64_t every) {
    progress_ = std::move(fn);
    progress_every_ = every;
  }

  // Runs until the workload is exhausted and every request has finished or been rejected.
  // Throws std::logic_error if the scheduler stalls with unfinished requests and nothing to run.
  SimulationTotals run();

 private:
  void try_start_step(TimeNs now);

  Workload& workload_;
  Replica& replica_;
  Recorder& recorder_;
  EventQueue events_;
  SimulationTotals totals_;
  Progress progress_;
  std::int64_t progress_every_ = 0;
};

}  // namespace servelab
