// run_cluster_simulation (declared in sim/run.h): an experiment with a `cluster:` section.
//
// Each pool's model, hardware, KV capacity and cost model are built once and shared by its
// replicas; each replica has its own backend, block pool, KV manager and scheduler. A calibrated
// cost model applies to the pools of the experiment's own model and hardware, the roofline to
// the others (a calibrated profile, measured on one device, refuses a pool of several GPUs).
// A pool's `parallel:` shards its model over its replicas' GPUs (serving/parallel_config.h): KV
// capacity per GPU, step times with the collectives over the pool's topology. The prefix-cache
// counters of summary.json sum the unified and prefill replicas (a decode replica's lookups are for
// transferred prompts, not the workload's).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "core/hooked_backend.h"
#include "serving/cluster_router.h"
#include "serving/cluster_summary.h"
#include "serving/hardware_config.h"
#include "serving/kv_capacity.h"
#include "serving/kv_transfer.h"
#include "serving/model_config.h"
#include "serving/run_stage.h"
#include "sim/calibrated_cost_model.h"
#include "sim/roofline_cost_model.h"
#include "sim/run.h"
#include "sim/sim_backend.h"
#include "sim/swap_cost.h"
#include "traces/mix_workload.h"
#include "traces/workload.h"

namespace servelab {

namespace {

// What the replicas of one pool share.
struct Pool {
  const PoolConfig* config = nullptr;
  ModelConfig model;
  HardwareConfig hardware;
  ParallelConfig parallel;  // of each replica
  KvCapacity capacity;
  std::unique_ptr<RooflineCostModel> roofline;
  std::unique_ptr<const CalibratedCostModel> calibrated;
  const CostModel* cost = nullptr;
  SchedulerConfig scheduler;
  std::int32_t cpu_blocks = 0;
};

}  // namespace

RunOutput run_cluster_simulation(const ExperimentConfig& config, const RunOptions& options) {
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
    p->parallel = resolve_parallel(pc.parallel, p->model, p->hardware);
    const bool calibrated =
        pc.model == config.model && pc.hardware == config.hardware && config.cost_model.calibrated;
    if (calibrated && pc.num_gpus() > 1) {
      throw ConfigError(pc.parallel.where + " (pool '" + pc.name +
                        "'): a calibrated cost model was measured on one device and has no "
                        "communication terms; use the roofline (no cost_model) with parallel, "
                        "or give the pool one GPU");
    }
    try {
      p->capacity = kv_capacity_for(config, p->model, p->hardware, p->parallel);
    } catch (const ConfigError& e) {
      // A model that does not fit: name the pool's parallelism when it has one (more GPUs is
      // one of the ways out).
      throw ConfigError(
          (pc.parallel.set ? pc.parallel.where : pc.location + ": key 'cluster.pools'") +
          " (pool '" + pc.name + "'): " + e.what());
    }
    p->roofline = std::make_unique<RooflineCostModel>(
        p->model, p->hardware, config.scheduler.block_size, p->parallel,
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

  RunStage run_stage(
      config,
      {.out_dir = options.out_dir, .write_files = options.write_files, .replica_column = true});
  out.out_dir = run_stage.dir();
  Recorder& recorder = run_stage.recorder();
  WorkloadFeedback feedback(*workload, recorder);
  SchedulerObserver& downstream =
      workload->dependent() ? static_cast<SchedulerObserver&>(feedback) : recorder;
  PrefillHandoff handoff(downstream);

  // The replicas, pool by pool in file order: that order is the cluster's replica numbering.
  std::vector<std::unique_ptr<SimBackend>> backends;
  // Speculative decoding per replica (sim/speculation.h): each replica drafts and draws its
  // acceptance from a stream of its own (replica 0 from the experiment seed, as a one-replica
  // run), its pool's roofline pricing the drafts.
  std::vector<std::unique_ptr<SimSpeculation>> speculations;
  // With RunOptions::before_step, each replica's backend shows its plans to the hook first.
  std::vector<std::unique_ptr<HookedBackend>> hooked;
  std::vector<std::unique_ptr<Replica>> replicas;
  std::vector<const Pool*> pool_of;
  ClusterSetup setup;
  std::int32_t num_arrival = 0, num_decode = 0;
  for (const auto& p : pools) {
    for (std::int32_t k = 0; k < p->config->count; ++k) {
      backends.push_back(std::make_unique<SimBackend>(*p->cost));
      backends.back()->set_stop_conditions(workload_gives(config.workload_section(), "sampling"));
      set_lora_loads(config, *p->roofline, *backends.back());
      if (config.scheduler.speculative.enabled()) {
        const std::uint64_t index = replicas.size();
        speculations.push_back(make_sim_speculation(
            config, *p->roofline, p->hardware, p->parallel, catalog,
            index == 0 ? config.seed : mix64(config.seed ^ (name_hash("speculation") + index))));
        backends.back()->set_speculation(speculations.back().get());
      }
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
      setup.replicas.push_back(
          {replicas.back().get(), role, p->capacity.block_bytes, std::max(1, p->model.num_layers)});
      pool_of.push_back(p.get());
      (role == ReplicaRole::kDecode ? num_decode : num_arrival) += 1;
    }
  }
  setup.router = make_cluster_router(config, RouterStage::kArrival, num_arrival);
  std::unique_ptr<PairLinkKvTransfer> transfer;
  if (num_decode > 0) {
    setup.decode_router = make_cluster_router(config, RouterStage::kDecode, num_decode);
    const double fixed = cl.kv_transfer.bandwidth_gb_s * 1e9;
    transfer = std::make_unique<PairLinkKvTransfer>(
        [fixed, &pool_of](std::uint32_t src, std::uint32_t dst) {
          if (fixed > 0) return fixed;
          // Each GPU of a replica sends (or takes) its share of the KV over its own host link.
          const auto link = [](const Pool& p) {
            return p.hardware.host_link_bandwidth * p.hardware.host_link_efficiency *
                   p.config->num_gpus();
          };
          return std::min(link(*pool_of[src]), link(*pool_of[dst]));
        },
        seconds_to_ns(cl.kv_transfer.latency_us * 1e-6));
    setup.transfer = transfer.get();
    setup.layerwise_transfers = cl.kv_transfer.layerwise;
    setup.handoff = &handoff;
  }
  Simulator sim(*workload, std::move(setup), recorder, config.frontend);
  if (options.progress) sim.set_progress(progress_printer(), 1 << 14);
  out.totals = sim.run();
  if (options.progress) std::fputs("\r\033[K", stderr);
  PrefixCacheStats prefix;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    if (pool_of[i]->config->role != ReplicaRole::kDecode)
      add_prefix_cache_stats(prefix, replicas[i]->kv().stats());
  }
  recorder.finalize(out.totals.first_arrival_ns, out.totals.end_ns, prefix);
  out.summary = recorder.summary();
  out.summary.skipped_trace_rows = workload->skipped_rows();
  fill_batch_slots(config, out.summary);
  fill_overload_flag(config, out.summary);
  if (config.scheduler.speculative.enabled()) {
    for (const auto& r : replicas) add_spec_decode(out.summary, r->scheduler().counters());
  }
  fill_lora_report(config, out.summary);

  // summary.json's `cluster` object (docs/metrics.md, "Cluster runs").
  const double duration_s =
      ns_to_s(std::max<TimeNs>(0, out.totals.end_ns - out.totals.first_arrival_ns));
  std::vector<PoolSummary> pool_summaries;
  for (const auto& p : pools) {
    pool_summaries.push_back(
        {p->config, p->model.name, p->hardware.name, p->capacity.num_gpu_blocks});
  }
  out.cluster_json =
      cluster_summary_json(cl, pool_summaries, sim.replica_stats(),
                           cl.disaggregated() ? &sim.transfer_stats() : nullptr, duration_s);
  if (!options.write_files) return out;

  write_run_outputs(config, recorder, {"sim", config.model, config.hardware}, out);
  out.out_dir = run_stage.commit();
  return out;
}

}  // namespace servelab
