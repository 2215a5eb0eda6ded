// Simulator: the discrete-event loop that replays a workload through a serving replica.
//
// Events are arrivals (pulled lazily from the Workload, one pending at a time, so a
// million-request trace is never held in memory) and step ends. A dependent workload (sessions)
// learns of finished requests through WorkloadFeedback and may then release new ones; the
// simulator re-reads its next known arrival after every event. An idle replica starts a step
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
#include "core/host_block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/recorder.h"
#include "core/scheduler.h"
#include "sim/event_queue.h"
#include "traces/workload.h"

namespace servelab {

class Replica {
 public:
  // `backend` and `observer` must outlive the replica. REQUIRES: num_gpu_blocks >= 2,
  // num_cpu_blocks >= 0. `kv_options` selects contiguous allocation. The replica owns a host
  // pool of num_cpu_blocks swap blocks and hands it to its KV manager when num_cpu_blocks > 0
  // (else kv_options.host_pool, if any, which must then outlive the replica).
  Replica(const SchedulerConfig& config, std::int32_t num_gpu_blocks, Backend& backend,
          SchedulerObserver* observer, const KvCacheOptions& kv_options = {},
          std::int32_t num_cpu_blocks = 0);
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  BlockPool& pool() { return pool_; }
  HostBlockPool& host_pool() { return host_pool_; }
  KvCacheManager& kv() { return kv_; }
  Scheduler& scheduler() { return scheduler_; }
  Backend& backend() { return backend_; }
  StepSnapshot snapshot() const;

 private:
  friend class Simulator;
  BlockPool pool_;
  HostBlockPool host_pool_;  // before kv_, which points at it
  KvCacheManager kv_;
  Scheduler scheduler_;
  Backend& backend_;
  bool busy_ = false;
  StepResult pending_;
};

// Forwards every scheduler event to `downstream` (the Recorder) and tells a dependent workload
// (sessions) when each of its requests finishes, is rejected or aborted, so it can release the
// requests that wait on them. Both references must outlive it.
class WorkloadFeedback : public SchedulerObserver {
 public:
  WorkloadFeedback(Workload& workload, SchedulerObserver& downstream)
      : workload_(workload), downstream_(downstream), notify_(workload.dependent()) {}
  void on_reject(const Request& req, TimeNs now) override;
  void on_token(const Request& req, TimeNs prev_token_ns, TimeNs now) override {
    downstream_.on_token(req, prev_token_ns, now);
  }
  void on_step_tokens(std::span<const Request* const> requests,
                      std::span<const TimeNs> prev_token_ns, TimeNs now) override {
    downstream_.on_step_tokens(requests, prev_token_ns, now);
  }
  void on_preempt(const Request& req, TimeNs now) override { downstream_.on_preempt(req, now); }
  void on_finish(const Request& req, TimeNs now) override;

 private:
  Workload& workload_;
  SchedulerObserver& downstream_;
  bool notify_;
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

  Workload& workload_;
  const bool dependent_;  // workload_.dependent(), asked once
  Replica& replica_;
  Recorder& recorder_;
  EventQueue events_;
  SimulationTotals totals_;
  std::optional<RequestSpec> buffered_;
  bool independent_done_ = false;
  std::optional<TimeNs> armed_;  // time of the earliest queued arrival event
  TimeNs last_arrival_ = 0;
  Progress progress_;
  std::int64_t progress_every_ = 0;
};

}  // namespace servelab
