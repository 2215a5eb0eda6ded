#include "engine/engine_cluster.h"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/router.h"
#include "engine/engine_loop.h"
#include "engine/idle_wait.h"
#include "engine/run_support.h"
#include "serving/cluster_router.h"
#include "serving/cluster_summary.h"
#include "serving/frontend.h"
#include "serving/interrupt.h"
#include "serving/recorder.h"
#include "serving/replica.h"
#include "serving/run_stage.h"
#include "serving/workload_feedback.h"

namespace servelab {

namespace {

// Recursive: a replica thread holding the lock while it admits requests reports rejections
// through the LockedObserver, which takes it again.
using Mutex = std::recursive_mutex;
using Lock = std::unique_lock<Mutex>;

// The longest the routing thread sleeps before looking again (arrivals released by a dependent
// workload, a signal).
constexpr TimeNs kMaxIdleSleepNs = 100'000'000;

// Unwinds a replica thread when the run stops (another thread failed).
struct Stopped {};

// Every event of a replica's scheduler takes the run's lock before it reaches the shared
// observers, so the replica threads report one at a time.
class LockedObserver : public ForwardingObserver {
 public:
  LockedObserver(SchedulerObserver& downstream, Mutex& mu)
      : ForwardingObserver(downstream), mu_(mu) {}
  void on_reject(const Request& req, TimeNs now) override {
    std::lock_guard<Mutex> l(mu_);
    ForwardingObserver::on_reject(req, now);
  }
  void on_token(const Request& req, TimeNs prev_token_ns, TimeNs now) override {
    std::lock_guard<Mutex> l(mu_);
    ForwardingObserver::on_token(req, prev_token_ns, now);
  }
  void on_step_tokens(std::span<const Request* const> requests,
                      std::span<const TimeNs> prev_token_ns, TimeNs now) override {
    std::lock_guard<Mutex> l(mu_);
    ForwardingObserver::on_step_tokens(requests, prev_token_ns, now);
  }
  void on_preempt(const Request& req, TimeNs now) override {
    std::lock_guard<Mutex> l(mu_);
    ForwardingObserver::on_preempt(req, now);
  }
  void on_finish(const Request& req, TimeNs now) override {
    std::lock_guard<Mutex> l(mu_);
    ForwardingObserver::on_finish(req, now);
  }
  void on_sample_end(const Request& sample, TimeNs now) override {
    std::lock_guard<Mutex> l(mu_);
    ForwardingObserver::on_sample_end(sample, now);
  }

 private:
  Mutex& mu_;
};

// One replica as the cluster drives it. Guarded by the run's lock, except `totals` (its thread's
// loop counters, read after the join).
struct Lane {
  std::unique_ptr<Replica> replica;
  std::vector<RequestSpec> inbox;  // routed, not yet in its scheduler
  // Its scheduler's state at its thread's last admission or step end: the router's view.
  std::int32_t waiting = 0, running = 0, blocks_used = 0, blocks_usable = 1;
  bool unfinished = false;
  ReplicaStats stats;
  SimulationTotals totals;
};

class ClusterRun {
 public:
  ClusterRun(const ExperimentConfig& config, const EngineOptions& options, Workload& workload,
             Recorder& recorder, SchedulerObserver& observers, std::unique_ptr<Router> router,
             const ReplyTokens* replies)
      : options_(options),
        feed_(workload, replies),
        dependent_(workload.dependent()),
        frontend_on_(config.frontend.enabled()),
        frontend_(config.frontend),
        recorder_(recorder),
        router_(std::move(router)),
        locked_(observers, mu_) {}

  std::vector<Lane>& lanes() { return lanes_; }
  // What each replica's scheduler reports to: `observers` behind the run's lock.
  SchedulerObserver& observer() { return locked_; }

  // Starts the clock at the first arrival, routes and drives everything until the workload is
  // done and every replica has finished; rethrows the first failure of any thread after stopping
  // and joining the others.
  SimulationTotals run() {
    totals_.first_arrival_ns = feed_.peek().value_or(0);
    clock_.emplace(totals_.first_arrival_ns);
    std::vector<std::thread> threads;
    std::exception_ptr failure;
    try {
      Lock l(mu_);
      // Everything that arrived before the replicas start is routed first: with all arrivals at
      // one instant, no routing decision depends on a replica thread's progress.
      route_due(clock_->now());
      l.unlock();
      // Eigen's own one-time initialisation before several threads call it (its documented
      // requirement for multithreaded applications).
      Eigen::initParallel();
      threads.reserve(lanes_.size());
      for (std::uint32_t i = 0; i < lanes_.size(); ++i) {
        threads.emplace_back([this, i] { drive(i); });
      }
      l.lock();
      route_until_done(l);
    } catch (...) {
      failure = std::current_exception();
    }
    {
      Lock l(mu_);
      if (failure) stop_ = true;
      closed_ = true;
      work_cv_.notify_all();
    }
    for (std::thread& t : threads) t.join();
    if (failure) std::rethrow_exception(failure);
    if (error_) std::rethrow_exception(error_);
    for (const Lane& lane : lanes_) {
      totals_.num_steps += lane.totals.num_steps;
      totals_.end_ns = std::max(totals_.end_ns, lane.totals.end_ns);
    }
    return totals_;
  }

 private:
  // A replica thread's work source: its inbox.
  class LaneSource : public WorkSource {
   public:
    LaneSource(ClusterRun& run, std::uint32_t i) : run_(run), i_(i) {}
    void admit(TimeNs now, Scheduler& scheduler) override {
      throw_if_interrupted();
      Lock l(run_.mu_);
      if (run_.stop_) throw Stopped{};
      Lane& lane = run_.lanes_[i_];
      for (RequestSpec& spec : lane.inbox) scheduler.add_request(std::move(spec), now);
      lane.inbox.clear();
      run_.publish(i_);
    }
    bool wait_for_work(TimeNs /*now*/, const Scheduler& /*scheduler*/) override {
      Lock l(run_.mu_);
      Lane& lane = run_.lanes_[i_];
      run_.publish(i_);
      run_.route_cv_.notify_all();
      run_.work_cv_.wait(l, [&] { return run_.stop_ || run_.closed_ || !lane.inbox.empty(); });
      if (run_.stop_) throw Stopped{};
      return !lane.inbox.empty();
    }
    void after_step(TimeNs /*end*/) override {
      Lock l(run_.mu_);
      run_.publish(i_);
      if (run_.dependent_) run_.route_cv_.notify_all();
    }

   private:
    ClusterRun& run_;
    const std::uint32_t i_;
  };

  // Replica i's thread.
  void drive(std::uint32_t i) {
    try {
      LaneSource source(*this, i);
      Lane& lane = lanes_[i];
      BeforeStepHook before;
      if (options_.before_step) {
        before = [this](const Scheduler& s, const StepPlan& plan) {
          std::lock_guard<Mutex> l(mu_);
          if (stop_) throw Stopped{};  // another replica failed since this plan was admitted
          try {
            options_.before_step(s, plan);
          } catch (...) {
            // Raised while the lock is held: no other replica starts a step after this one
            // failed (a first throw can take milliseconds to unwind).
            stop_ = true;
            throw;
          }
        };
      }
      run_engine_loop(
          *lane.replica, source, *clock_,
          [this, i](const StepPlan& plan, TimeNs start, TimeNs duration, const StepSnapshot& snap) {
            std::lock_guard<Mutex> l(mu_);
            recorder_.on_step(plan, start, duration, snap, i);
            lanes_[i].stats.add_step(plan, duration, snap);
          },
          lane.totals, before);
    } catch (const Stopped&) {
    } catch (...) {
      stop_ = true;  // before the lock: see stop_
      Lock l(mu_);
      if (!error_) error_ = std::current_exception();
      stop_ = true;
      work_cv_.notify_all();
      route_cv_.notify_all();
    }
  }

  // Under the lock: replica i's state for the router.
  void publish(std::uint32_t i) {
    Lane& lane = lanes_[i];
    Replica& r = *lane.replica;
    const Scheduler& s = r.scheduler();
    lane.waiting = static_cast<std::int32_t>(s.num_waiting() + s.num_swapped());
    lane.running = static_cast<std::int32_t>(s.num_running());
    lane.blocks_usable = std::max<std::int32_t>(1, r.pool().num_usable_blocks());
    lane.blocks_used = r.pool().num_usable_blocks() - r.kv().num_free_blocks();
    lane.unfinished = s.has_unfinished();
  }

  // Under the lock: the router's choice for `spec`, into that replica's inbox.
  void dispatch(RequestSpec spec, TimeNs now) {
    std::uint32_t i = 0;
    if (lanes_.size() > 1) {
      loads_.resize(lanes_.size());
      for (std::uint32_t k = 0; k < lanes_.size(); ++k) {
        const Lane& lane = lanes_[k];
        ReplicaLoad& v = loads_[k];
        v.replica = k;
        v.waiting = lane.waiting + static_cast<std::int32_t>(lane.inbox.size());
        v.running = lane.running;
        v.outstanding = v.waiting + v.running;
        v.kv_blocks_used = lane.blocks_used;
        v.kv_blocks_usable = lane.blocks_usable;
      }
      const std::size_t k = router_->route(spec, loads_);
      if (k >= lanes_.size()) throw std::logic_error("router chose no candidate");
      i = static_cast<std::uint32_t>(k);
    }
    recorder_.on_route(spec.id, i, now, "route");
    ++lanes_[i].stats.routed;
    lanes_[i].inbox.push_back(std::move(spec));
  }

  // Under the lock: routes every request that arrived (or left the front end) by `now`.
  void route_due(TimeNs now) {
    bool any = false;
    for (std::optional<TimeNs> t = feed_.peek(); t && *t <= now; t = feed_.peek()) {
      if (frontend_on_) {
        RequestSpec spec = feed_.take();
        // On the wall clock a session's next turn is released when this thread sees its previous
        // turn finish, which on a loaded machine can be after a later arrival went to the front
        // end; it serves in arrival order, so the turn arrives when it is seen, no earlier than
        // the last request pushed.
        spec.arrival_ns = std::max(spec.arrival_ns, frontend_.last_arrival());
        frontend_.push(std::move(spec));
      } else {
        dispatch(feed_.take(), now);
        any = true;
      }
      ++totals_.num_arrivals;
      totals_.end_ns = std::max(totals_.end_ns, now);
    }
    for (std::optional<TimeNs> t = frontend_.next_ready(); t && *t <= now;
         t = frontend_.next_ready()) {
      RequestSpec spec = frontend_.pop();
      if (recorder_.records_events()) recorder_.on_ready(spec.id, spec.arrival_ns, now);
      dispatch(std::move(spec), now);
      any = true;
    }
    if (any) work_cv_.notify_all();
  }

  // Under the lock `l`: the routing loop. Ends when no request will come any more: an
  // independent workload is exhausted, or a dependent one announces nothing while every
  // replica is idle (so no finish can release more).
  void route_until_done(Lock& l) {
    use_fine_timer_slack();
    auto last_progress = std::chrono::steady_clock::now();
    while (!stop_) {
      throw_if_interrupted();
      route_due(clock_->now());
      std::optional<TimeNs> next = feed_.peek();
      if (const std::optional<TimeNs> ready = frontend_.next_ready()) {
        next = next ? std::min(*next, *ready) : *ready;
      }
      if (options_.progress &&
          std::chrono::steady_clock::now() - last_progress > std::chrono::milliseconds(1000)) {
        last_progress = std::chrono::steady_clock::now();
        std::int64_t steps = 0;
        for (const Lane& lane : lanes_) steps += lane.stats.steps;
        std::fprintf(stderr, "\r  %lld requests arrived, %lld steps on %zu replicas   ",
                     static_cast<long long>(totals_.num_arrivals), static_cast<long long>(steps),
                     lanes_.size());
        std::fflush(stderr);
      }
      if (!next) {
        if (!dependent_ || all_idle()) return;
        route_cv_.wait_for(l, std::chrono::nanoseconds(kMaxIdleSleepNs));
        continue;
      }
      // To the arrival itself (engine/idle_wait.h): sleep until kIdleSpinNs before it, then
      // yield the lock and the core until it is due.
      const TimeNs wait = std::min(*next - clock_->now(), kMaxIdleSleepNs);
      if (wait > kIdleSpinNs) {
        route_cv_.wait_for(l, std::chrono::nanoseconds(wait - kIdleSpinNs));
      } else if (wait > 0) {
        l.unlock();
        std::this_thread::yield();
        l.lock();
      }
    }
  }

  bool all_idle() const {
    for (const Lane& lane : lanes_) {
      if (lane.unfinished || !lane.inbox.empty()) return false;
    }
    return true;
  }

  const EngineOptions& options_;
  ArrivalFeed feed_;
  const bool dependent_;
  const bool frontend_on_;
  FrontEnd frontend_;
  Recorder& recorder_;
  std::unique_ptr<Router> router_;
  std::optional<WallClock> clock_;  // engine time, from run()
  std::vector<ReplicaLoad> loads_;
  SimulationTotals totals_;

  Mutex mu_;
  std::condition_variable_any work_cv_;   // replica threads wait for their inbox
  std::condition_variable_any route_cv_;  // the routing thread waits for time or a step end
  bool closed_ = false;                   // nothing will be routed any more
  // A thread failed: every thread unwinds. Atomic so that a failing thread raises it before it
  // waits for the lock (the others, stepping fast, could hold it off for many steps); read under
  // the lock everywhere else.
  std::atomic<bool> stop_ = false;
  std::exception_ptr error_;  // the first replica thread's failure
  LockedObserver locked_;
  std::vector<Lane> lanes_;  // last: the replicas go before what they report to
};

}  // namespace

RunOutput run_engine_cluster(const ExperimentConfig& config, const EngineOptions& options) {
  EngineInstance engine = load_engine_cluster(config, options);
  const ClusterConfig& cl = config.cluster;
  RunOutput out;
  out.backend = "engine-" + options.device;
  out.num_gpu_blocks = engine.num_gpu_blocks * cl.num_replicas();
  out.block_bytes = engine.block_bytes;
  const ModelConfig& model = engine.llama.model;
  std::unique_ptr<Workload> workload = make_engine_workload(config, model);
  out.workload = workload->describe();
  // Written under a temporary sibling, moved into place when the run completed.
  RunStage run_stage(
      config, {.out_dir = options.out_dir, .default_suffix = "-engine", .replica_column = true});
  out.out_dir = run_stage.dir();
  Recorder& recorder = run_stage.recorder();
  TokenCapture capture(recorder, options.write_tokens);
  ReplyTokens replies(capture, model.vocab_size, workload->dependent());
  WorkloadFeedback feedback(*workload, replies);

  std::unique_ptr<Router> router;
  if (cl.num_replicas() > 1) {
    router = make_cluster_router(config, RouterStage::kArrival, cl.num_replicas());
  }
  ClusterRun run(config, options, *workload, recorder, feedback, std::move(router), &replies);
  // The replicas, pool by pool in file order (the cluster's replica numbering): replica 0 on
  // load_engine_cluster's `executor`, the others on `more_executors`.
  std::vector<Backend*> executors{engine.executor.get()};
  for (const auto& e : engine.more_executors) executors.push_back(e.get());
  const SchedulerConfig scheduler_config = scheduler_config_with_policies(config);
  const KvCacheOptions kv_options = kv_cache_options_for(config);
  run.lanes().resize(executors.size());
  for (std::size_t i = 0; i < executors.size(); ++i) {
    run.lanes()[i].replica = std::make_unique<Replica>(
        scheduler_config, static_cast<std::int32_t>(engine.num_gpu_blocks), *executors[i],
        &run.observer(), kv_options, static_cast<std::int32_t>(engine.num_cpu_blocks));
  }
  out.totals = run.run();
  if (options.progress) std::fputs("\r\033[K", stderr);

  for (const Lane& lane : run.lanes()) {
    if (lane.replica->scheduler().has_unfinished()) {
      throw std::logic_error("engine run ended with unfinished requests on a replica");
    }
  }
  if (workload->dependent() && !workload->exhausted()) {
    throw ConfigError(workload->describe() +
                      ": some requests were never released (their dependencies never finished)");
  }
  PrefixCacheStats prefix;
  std::vector<ReplicaStats> stats;
  for (const Lane& lane : run.lanes()) {
    add_prefix_cache_stats(prefix, lane.replica->kv().stats());
    stats.push_back(lane.stats);
  }
  recorder.finalize(out.totals.first_arrival_ns, out.totals.end_ns, prefix);
  out.summary = recorder.summary();
  out.summary.skipped_trace_rows = workload->skipped_rows();
  std::vector<PoolSummary> pools;
  for (const PoolConfig& p : cl.pools)
    pools.push_back({&p, model.name, engine.hardware, engine.num_gpu_blocks});
  const double duration_s =
      ns_to_s(std::max<TimeNs>(0, out.totals.end_ns - out.totals.first_arrival_ns));
  out.cluster_json = cluster_summary_json(cl, pools, stats, nullptr, duration_s);
  finish_engine_run(
      config,
      {out.backend, model.name, engine.hardware, false,
       engine_options_record(config, options.device, options.kv_memory_gib, options.weights)},
      capture, options.write_tokens, run_stage, out);
  return out;
}

}  // namespace servelab
