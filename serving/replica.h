// Replica: what one serving instance owns (block pool, host swap pool, KV cache manager,
// scheduler, and a reference to the backend that executes its plans), built the same way by both
// drivers. It holds no driver state: the simulator keeps its event state beside it, the engine
// its clock. A cluster is a vector of replicas behind a router.
//
// scheduler_config_with_policies() and kv_cache_options_for() turn an experiment's policy choices
// into the settings a Replica is built with, so both drivers build the same scheduler.
#pragma once

#include <cstdint>

#include "core/backend.h"
#include "core/block_pool.h"
#include "core/host_block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "serving/experiment.h"

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
  const Scheduler& scheduler() const { return scheduler_; }
  StepSnapshot snapshot() const;

 private:
  BlockPool pool_;
  HostBlockPool host_pool_;  // before kv_, which points at it
  KvCacheManager kv_;
  Scheduler scheduler_;
  Backend& backend_;
};

// The scheduler settings with the policy choices applied: the queue order is built with the
// experiment seed (parse_policies already set the preemption victim).
SchedulerConfig scheduler_config_with_policies(const ExperimentConfig& config);
// The KV allocation policy (paged or contiguous, and the contiguous reservation).
KvCacheOptions kv_cache_options_for(const ExperimentConfig& config);

}  // namespace servelab
