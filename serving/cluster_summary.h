// What a cluster run reports beyond a single replica's metrics: per-replica counters
// (ReplicaStats), the KV transfers of a P/D run (TransferStats), and summary.json's `cluster`
// object built from them (docs/metrics.md, "Cluster runs"). Both drivers fill them the same way:
// the simulator from its virtual-time steps, the engine from its replicas' measured steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/step_plan.h"
#include "core/time.h"
#include "serving/experiment.h"
#include "serving/recorder.h"

namespace servelab {

// What one replica of a cluster did.
struct ReplicaStats {
  std::int64_t routed = 0;  // requests routed to it (arrivals, or prefilled ones for decode)
  std::int64_t steps = 0;
  TimeNs busy_ns = 0;  // sum of its step durations
  std::int64_t prefill_tokens = 0, decode_tokens = 0;
  long double usage_time = 0;    // sum of KV usage * step duration
  long double waiting_time = 0;  // sum of waiting requests * step duration

  // Counts one executed step: its plan, duration and the state it ran in.
  void add_step(const StepPlan& plan, TimeNs duration, const StepSnapshot& snap);
  // Adds another replica's counters (a pool's sums).
  void add(const ReplicaStats& other);
};

// Adds `more`'s prefix-cache counters to `sum` (the cluster's counters are its replicas' sums).
void add_prefix_cache_stats(PrefixCacheStats& sum, const PrefixCacheStats& more);

// The KV transfers of a P/D run.
struct TransferStats {
  std::int64_t count = 0, bytes = 0;
  // Sums over transfers, each below the simulated clock's horizon but their sum not always
  // (doubles: exact below 2^53 ns, 104 days, and never an overflow).
  double wait_ns = 0;      // summed time the first byte waited for its link
  double transfer_ns = 0;  // summed time from the first byte's start to the last byte's arrival
  double exposed_ns = 0;   // summed time from the prefill's end to the last byte's arrival
  TimeNs max_ns = 0;       // the longest of the latter
};

// One pool as summary.json names it. Its replicas are consecutive in cluster order, pool by pool
// in file order.
struct PoolSummary {
  const PoolConfig* config = nullptr;
  std::string model, hardware;      // the loaded model's and hardware's names
  std::int64_t num_gpu_blocks = 0;  // per replica
};

// The `cluster` object's JSON text: the router(s), the replica and GPU counts, each pool with its
// parallelism, its summed counters and its replicas' own, and (when `transfers` is not null) the
// KV transfers.
// `stats` has one entry per replica (cluster order); `duration_s` is the run's duration.
std::string cluster_summary_json(const ClusterConfig& cluster,
                                 const std::vector<PoolSummary>& pools,
                                 const std::vector<ReplicaStats>& stats,
                                 const TransferStats* transfers, double duration_s);

}  // namespace servelab
