#include "serving/cluster_summary.h"

#include <nlohmann/json.hpp>

#include "policies/registry.h"

namespace servelab {

namespace {

double ratio(long double num, long double den) {
  return den > 0 ? static_cast<double>(num / den) : 0.0;
}

nlohmann::ordered_json replica_json(std::uint32_t index, const ReplicaStats& s, double duration_s) {
  nlohmann::ordered_json j;
  j["replica"] = index;
  j["requests_routed"] = s.routed;
  j["steps"] = s.steps;
  j["busy_fraction"] = duration_s > 0 ? ns_to_s(s.busy_ns) / duration_s : 0.0;
  j["prefill_tokens"] = s.prefill_tokens;
  j["decode_tokens"] = s.decode_tokens;
  j["kv_usage_mean"] = ratio(s.usage_time, s.busy_ns);
  j["waiting_mean"] = ratio(s.waiting_time, s.busy_ns);
  return j;
}

}  // namespace

void ReplicaStats::add_step(const StepPlan& plan, TimeNs duration, const StepSnapshot& snap) {
  ++steps;
  busy_ns += duration;
  prefill_tokens += plan.num_prefill_tokens;
  decode_tokens += static_cast<std::int64_t>(plan.num_decode_tokens) * plan.num_steps;
  if (snap.num_usable_blocks > 0) {
    usage_time += static_cast<long double>(snap.kv_blocks_used) / snap.num_usable_blocks * duration;
  }
  waiting_time += static_cast<long double>(snap.waiting) * duration;
}

void ReplicaStats::add(const ReplicaStats& o) {
  routed += o.routed;
  steps += o.steps;
  busy_ns += o.busy_ns;
  prefill_tokens += o.prefill_tokens;
  decode_tokens += o.decode_tokens;
  usage_time += o.usage_time;
  waiting_time += o.waiting_time;
}

void add_prefix_cache_stats(PrefixCacheStats& a, const PrefixCacheStats& b) {
  a.lookups += b.lookups;
  a.queried_tokens += b.queried_tokens;
  a.hit_tokens += b.hit_tokens;
  a.preempted_lookups += b.preempted_lookups;
  a.preempted_queried_tokens += b.preempted_queried_tokens;
  a.preempted_hit_tokens += b.preempted_hit_tokens;
  a.external_hit_tokens += b.external_hit_tokens;
  a.cow_copies += b.cow_copies;
  a.blocks_saved_by_sharing += b.blocks_saved_by_sharing;
}

std::string cluster_summary_json(const ClusterConfig& cl, const std::vector<PoolSummary>& pools,
                                 const std::vector<ReplicaStats>& stats,
                                 const TransferStats* transfers, double duration_s) {
  nlohmann::ordered_json j;
  j["router"] = format_policy_spec(cl.router);
  if (cl.disaggregated())
    j["decode_router"] = format_policy_spec(cl.decode_router.value_or(cl.router));
  j["replicas"] = stats.size();
  j["gpus"] = cl.num_gpus();
  nlohmann::ordered_json pools_json = nlohmann::ordered_json::array();
  std::uint32_t index = 0;
  for (const PoolSummary& p : pools) {
    ReplicaStats sum;
    nlohmann::ordered_json members = nlohmann::ordered_json::array();
    for (std::int32_t k = 0; k < p.config->count; ++k, ++index) {
      const ReplicaStats& s = stats.at(index);
      sum.add(s);
      members.push_back(replica_json(index, s, duration_s));
    }
    nlohmann::ordered_json pj;
    pj["name"] = p.config->name;
    pj["role"] = to_string(p.config->role);
    pj["model"] = p.model;
    pj["hardware"] = p.hardware;
    pj["count"] = p.config->count;
    pj["tensor"] = p.config->parallel.tensor;
    pj["pipeline"] = p.config->parallel.pipeline;
    pj["gpus"] = std::int64_t{p.config->count} * p.config->num_gpus();
    pj["num_gpu_blocks"] = p.num_gpu_blocks;
    pj["requests_routed"] = sum.routed;
    pj["steps"] = sum.steps;
    pj["busy_fraction"] =
        duration_s > 0 ? ns_to_s(sum.busy_ns) / (duration_s * p.config->count) : 0.0;
    pj["prefill_tokens"] = sum.prefill_tokens;
    pj["decode_tokens"] = sum.decode_tokens;
    pj["kv_usage_mean"] = ratio(sum.usage_time, sum.busy_ns);
    pj["waiting_mean"] = ratio(sum.waiting_time, sum.busy_ns);
    pj["replicas"] = std::move(members);
    pools_json.push_back(std::move(pj));
  }
  j["pools"] = std::move(pools_json);
  if (transfers != nullptr) {
    const TransferStats& t = *transfers;
    const double n = t.count > 0 ? static_cast<double>(t.count) : 1.0;
    j["kv_transfers"] = {{"count", t.count},
                         {"bytes", t.bytes},
                         {"wait_mean_ms", t.wait_ns / n / 1e6},
                         {"transfer_mean_ms", t.transfer_ns / n / 1e6},
                         {"exposed_mean_ms", t.exposed_ns / n / 1e6},
                         {"max_ms", static_cast<double>(t.max_ns) / 1e6}};
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace servelab
