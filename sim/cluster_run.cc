// run_cluster_simulation (declared in sim/run.h): an experiment with a `cluster:` section.
//
// Each pool's model, hardware, KV capacity and cost model are built once and shared by its
// replicas; each replica has its own backend, block pool, KV manager and scheduler. A calibrated
// cost model applies to the pools of the experiment's own model and hardware, the roofline to
// the others. The prefix-cache counters of summary.json sum the unified and prefill replicas
// (a decode replica's lookups are for transferred prompts, not the workload's).
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/hooked_backend.h"
#include "serving/hardware_config.h"
#include "serving/kv_capacity.h"
#include "serving/kv_transfer.h"
#include "serving/model_config.h"
#include "serving/output_file.h"
#include "sim/calibrated_cost_model.h"
#include "sim/roofline_cost_model.h"
#include "sim/run.h"
#include "sim/run_stage.h"
#include "sim/sim_backend.h"
#include "sim/swap_cost.h"
#include "traces/workload.h"

namespace servelab {

namespace {

// What the replicas of one pool share.
struct Pool {
  const PoolConfig* config = nullptr;
  ModelConfig model;
  HardwareConfig hardware;
  KvCapacity capacity;
  std::unique_ptr<RooflineCostModel> roofline;
  std::unique_ptr<const CalibratedCostModel> calibrated;
  const CostModel* cost = nullptr;
  SchedulerConfig scheduler;
  std::int32_t cpu_blocks = 0;
};

void add_sums(PrefixCacheStats& a, const PrefixCacheStats& b) {
  a.lookups += b.lookups;
  a.queried_tokens += b.queried_tokens;
  a.hit_tokens += b.hit_tokens;
  a.preempted_lookups += b.preempted_lookups;
  a.preempted_queried_tokens += b.preempted_queried_tokens;
  a.preempted_hit_tokens += b.preempted_hit_tokens;
  a.cow_copies += b.cow_copies;
  a.blocks_saved_by_sharing += b.blocks_saved_by_sharing;
}

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

RunOutput run_cluster_simulation(const ExperimentConfig& config, const RunOptions& options) {
  if (config.scheduler.speculative.enabled()) {
    throw ConfigError(config.speculative_location +
                      ": key 'serving.speculative_config': speculative decoding is not wired "
                      "into cluster runs yet (run one replica)");
  }
  RunOutput out;
  const ClusterConfig& cl = config.cluster;
  const std::string catalog = default_catalog_dir();
  const KvCacheOptions kv_cache_options = kv_cache_options_for(config);
  std::vector<std::unique_ptr<Pool>> pools;
  for (const PoolConfig& pc : cl.pools) {
    auto p = std::make_unique<Pool>();
    p->config = &pc;
    p->model = load_model(pc.model, catalog);
    apply_model_storage(config, p->model);
    p->hardware = config.cost_model.with_host_time(load_hardware(pc.hardware, catalog));
    try {
      p->capacity = kv_capacity_for(config, p->model, p->hardware);
    } catch (const ConfigError& e) {
      throw ConfigError(pc.location + ": key 'cluster.pools' (pool '" + pc.name +
                        "'): " + e.what());
    }
    p->roofline = std::make_unique<RooflineCostModel>(
        p->model, p->hardware, config.scheduler.block_size, ParallelConfig{},
        config.scheduler.lora.enabled() ? config.scheduler.lora.max_lora_rank : 0);
    if (pc.model == config.model && pc.hardware == config.hardware) {
      p->calibrated = make_calibrated_cost_model(config, p->model);
    }
    p->cost = p->calibrated ? static_cast<const CostModel*>(p->calibrated.get())
                            : static_cast<const CostModel*>(p->roofline.get());
    p->scheduler = scheduler_config_with_policies(config);
    if (p->calibrated) {
      p->scheduler.prefer_swap = [&c = *p->calibrated](const Request& r) {
        return calibrated_swap_is_cheaper(c, r);
      };
    } else {
      p->scheduler.prefer_swap = [&r = *p->roofline](const Request& q) {
        return swap_is_cheaper(r, q);
      };
    }
    p->cpu_blocks = static_cast<std::int32_t>(
        p->scheduler.preemption == nullptr || !p->scheduler.preemption->uses_host_memory()
            ? 0
            : std::min<std::int64_t>(p->capacity.num_cpu_blocks, std::int64_t{1} << 30));
    out.num_gpu_blocks += p->capacity.num_gpu_blocks * pc.count;
    pools.push_back(std::move(p));
  }
  out.block_bytes = pools.front()->capacity.block_bytes;

  std::unique_ptr<Workload> workload =
      limit_workload(make_workload(config.workload_section(), config.seed, config.base_dir),
                     config.max_requests, config.max_duration_ns, config.file);
  out.workload = workload->describe();

  RunStage run_stage(config, options, out.out_dir);
  const std::string& steps_path = run_stage.steps_path;
  const std::string& schedule_path = run_stage.schedule_path;
  Recorder recorder(config.slo, steps_path, schedule_path, /*replica_column=*/true);
  if (options.write_files && config.outputs.record_events) {
    recorder.record_events(out.out_dir + "/events.csv");
  }
  if (options.write_files && config.outputs.record_blocks) {
    recorder.record_blocks(out.out_dir + "/blocks.csv");
  }
  WorkloadFeedback feedback(*workload, recorder);
  SchedulerObserver& downstream =
      workload->dependent() ? static_cast<SchedulerObserver&>(feedback) : recorder;
  PrefillHandoff handoff(downstream);

  // The replicas, pool by pool in file order: that order is the cluster's replica numbering.
  std::vector<std::unique_ptr<SimBackend>> backends;
  // With RunOptions::before_step, each replica's backend shows its plans to the hook first.
  std::vector<std::unique_ptr<HookedBackend>> hooked;
  std::vector<std::unique_ptr<Replica>> replicas;
  std::vector<const Pool*> pool_of;
  ClusterSetup setup;
  std::int32_t num_arrival = 0, num_decode = 0;
  for (const auto& p : pools) {
    for (std::int32_t k = 0; k < p->config->count; ++k) {
      backends.push_back(std::make_unique<SimBackend>(*p->cost));
      backends.back()->set_stop_conditions(config.workload_section().has("sampling"));
      Backend* backend = backends.back().get();
      if (options.before_step) {
        const std::size_t index = replicas.size();
        hooked.push_back(std::make_unique<HookedBackend>(
            *backend, [&options, &replicas, index](const StepPlan& plan) {
              options.before_step(replicas[index]->scheduler(), plan);
            }));
        backend = hooked.back().get();
      }
      const ReplicaRole role = p->config->role;
      SchedulerObserver* observer =
          role == ReplicaRole::kPrefill ? static_cast<SchedulerObserver*>(&handoff) : &downstream;
      replicas.push_back(std::make_unique<Replica>(
          p->scheduler, static_cast<std::int32_t>(p->capacity.num_gpu_blocks), *backend, observer,
          kv_cache_options, p->cpu_blocks));
      setup.replicas.push_back({replicas.back().get(), role, p->capacity.block_bytes});
      pool_of.push_back(p.get());
      (role == ReplicaRole::kDecode ? num_decode : num_arrival) += 1;
    }
  }
  SchedulerConfig scratch;
  RouterMaker maker;
  PolicyTarget target{&scratch, nullptr, config.seed, &maker};
  build_policy(PolicyKind::kRouter, cl.router, target, config.file + ": cluster.router");
  setup.router =
      maker({num_arrival, config.scheduler.block_size, mix64(config.seed ^ name_hash("router"))});
  std::unique_ptr<PairLinkKvTransfer> transfer;
  if (num_decode > 0) {
    if (cl.decode_router) {
      build_policy(PolicyKind::kRouter, *cl.decode_router, target,
                   config.file + ": cluster.decode_router");
    }
    setup.decode_router = maker(
        {num_decode, config.scheduler.block_size, mix64(config.seed ^ name_hash("router-decode"))});
    const double fixed = cl.kv_transfer.bandwidth_gb_s * 1e9;
    transfer = std::make_unique<PairLinkKvTransfer>(
        [fixed, &pool_of](std::uint32_t src, std::uint32_t dst) {
          if (fixed > 0) return fixed;
          const auto link = [](const HardwareConfig& h) {
            return h.host_link_bandwidth * h.host_link_efficiency;
          };
          return std::min(link(pool_of[src]->hardware), link(pool_of[dst]->hardware));
        },
        seconds_to_ns(cl.kv_transfer.latency_us * 1e-6));
    setup.transfer = transfer.get();
    setup.handoff = &handoff;
  }
  Simulator sim(*workload, std::move(setup), recorder, config.frontend);
  if (options.progress) sim.set_progress(progress_printer(), 1 << 14);
  out.totals = sim.run();
  if (options.progress) std::fputs("\r\033[K", stderr);
  PrefixCacheStats prefix;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    if (pool_of[i]->config->role != ReplicaRole::kDecode)
      add_sums(prefix, replicas[i]->kv().stats());
  }
  recorder.finalize(out.totals.first_arrival_ns, out.totals.end_ns, prefix);
  out.summary = recorder.summary();
  out.summary.skipped_trace_rows = workload->skipped_rows();
  fill_batch_slots(config, out.summary);
  fill_overload_flag(config, out.summary);
  fill_lora_report(config, out.summary);

  // summary.json's `cluster` object (docs/metrics.md, "Cluster runs").
  const double duration_s =
      ns_to_s(std::max<TimeNs>(0, out.totals.end_ns - out.totals.first_arrival_ns));
  nlohmann::ordered_json j;
  j["router"] = format_policy_spec(cl.router);
  if (cl.disaggregated())
    j["decode_router"] = format_policy_spec(cl.decode_router.value_or(cl.router));
  j["replicas"] = replicas.size();
  nlohmann::ordered_json pools_json = nlohmann::ordered_json::array();
  std::uint32_t index = 0;
  for (const auto& p : pools) {
    ReplicaStats sum;
    nlohmann::ordered_json members = nlohmann::ordered_json::array();
    for (std::int32_t k = 0; k < p->config->count; ++k, ++index) {
      const ReplicaStats& s = sim.replica_stats()[index];
      sum.routed += s.routed;
      sum.steps += s.steps;
      sum.busy_ns += s.busy_ns;
      sum.prefill_tokens += s.prefill_tokens;
      sum.decode_tokens += s.decode_tokens;
      sum.usage_time += s.usage_time;
      sum.waiting_time += s.waiting_time;
      members.push_back(replica_json(index, s, duration_s));
    }
    nlohmann::ordered_json pj;
    pj["name"] = p->config->name;
    pj["role"] = to_string(p->config->role);
    pj["model"] = p->model.name;
    pj["hardware"] = p->hardware.name;
    pj["count"] = p->config->count;
    pj["num_gpu_blocks"] = p->capacity.num_gpu_blocks;
    pj["requests_routed"] = sum.routed;
    pj["steps"] = sum.steps;
    pj["busy_fraction"] =
        duration_s > 0 ? ns_to_s(sum.busy_ns) / (duration_s * p->config->count) : 0.0;
    pj["prefill_tokens"] = sum.prefill_tokens;
    pj["decode_tokens"] = sum.decode_tokens;
    pj["kv_usage_mean"] = ratio(sum.usage_time, sum.busy_ns);
    pj["waiting_mean"] = ratio(sum.waiting_time, sum.busy_ns);
    pj["replicas"] = std::move(members);
    pools_json.push_back(std::move(pj));
  }
  j["pools"] = std::move(pools_json);
  if (cl.disaggregated()) {
    const TransferStats& t = sim.transfer_stats();
    const double n = t.count > 0 ? static_cast<double>(t.count) : 1.0;
    j["kv_transfers"] = {{"count", t.count},
                         {"bytes", t.bytes},
                         {"wait_mean_ms", static_cast<double>(t.wait_ns) / n / 1e6},
                         {"transfer_mean_ms", static_cast<double>(t.transfer_ns) / n / 1e6},
                         {"max_ms", static_cast<double>(t.max_ns) / 1e6}};
  }
  out.cluster_json = j.dump();
  if (!options.write_files) return out;

  write_run_outputs(config, recorder, {"sim", config.model, config.hardware}, out);
  run_stage.stage->commit();
  out.out_dir = run_stage.stage->final_path();
  return out;
}

}  // namespace servelab
