// SchedulerHarness<Observer>: a block pool, its KV cache manager and a scheduler reporting to an
// `Observer`, stepped by hand in scheduler tests. Each test file derives its own harness and
// decides what a step's result holds; this holds what they all repeat.
#pragma once

#include <cstdint>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/request.h"
#include "core/scheduler.h"
#include "core/step_plan.h"
#include "core/time.h"

namespace servelab::test_util {

template <class Observer>
struct SchedulerHarness {
  // `blocks` device blocks; the manager takes the config's block size, max_model_len and
  // prefix caching.
  SchedulerHarness(const SchedulerConfig& config, std::int32_t blocks)
      : pool(blocks),
        kv(pool, config.block_size, config.max_model_len, config.enable_prefix_caching),
        sched(config, kv, &obs) {}

  // Plans the step at `now` (kept in `plan`) and checks the pool.
  const StepPlan& Schedule(TimeNs now) {
    plan = &sched.schedule(now);
    pool.check_invariants();
    return *plan;
  }
  // Completes the planned step with `res` at `now`, then checks the pool and the manager.
  void Finish(const StepResult& res, TimeNs now) {
    sched.complete(res, now);
    pool.check_invariants();
    kv.check_invariants();
  }
  // The running request `id`, or null.
  const Request* Running(RequestId id) const {
    for (const Request* r : sched.running()) {
      if (r->id() == id) return r;
    }
    return nullptr;
  }

  Observer obs;
  BlockPool pool;
  KvCacheManager kv;
  Scheduler sched;
  const StepPlan* plan = nullptr;
};

}  // namespace servelab::test_util
