// run_cluster_simulation (declared in sim/run.h): an experiment with a `cluster:` section.
//
// Each pool's model, hardware, KV capacity and cost model are built once and shared by its
// replicas; each replica has its own backend, block pool, KV manager and scheduler. A calibrated
// cost model applies to the pools of the experiment's own model and hardware, the roofline to
// the others (a calibrated profile, measured on one device, refuses a pool of several GPUs).
// A pool's `parallel:` shards its model over its replicas' GPUs (serving/parallel_config.h): KV
// capacity per GPU, step times with the collectives over the pool's topology (or at the
// replica's place on `cluster.topology`, whose routes then carry the P/D transfers). The
// prefix-cache counters of summary.json sum the unified and prefill replicas (a decode replica's
// lookups are for transferred prompts, not the workload's). P/D transfers queue on their links
// (DirectLinkKvTransfer, TopologyKvTransfer) or share them (SharedKvTransfer: kv_transfer.sharing).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "core/hooked_backend.h"
#include "serving/cluster_router.h"
#include "serving/cluster_summary.h"
#include "serving/direct_kv_links.h"
#include "serving/hardware_config.h"
#include "serving/kv_capacity.h"
#include "serving/kv_transfer.h"
#include "serving/model_config.h"
#include "serving/run_stage.h"
#include "serving/topology_kv_transfer.h"
#include "sim/calibrated_cost_model.h"
#include "sim/roofline_cost_model.h"
#include "sim/run.h"
#include "sim/shared_kv_transfer.h"
#include "sim/sim_backend.h"
#include "sim/swap_cost.h"
#include "sim/work_summary.h"
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

// Whether two placements of a replica price their collectives alike.
bool same_collectives(const ParallelConfig& a, const ParallelConfig& b) {
  const auto same = [](const CollectiveCost& x, const CollectiveCost& y) {
    return x.latency_s == y.latency_s && x.s_per_byte == y.s_per_byte;
  };
  return same(a.tp_all_reduce, b.tp_all_reduce) && same(a.stage_send, b.stage_send);
}

}  // namespace

RunOutput run_cluster_simulation(const ExperimentConfig& config, const RunOptions& options) {
  RunOutput out;
  const ClusterConfig& cl = config.cluster;
  const std::string catalog = default_catalog_dir();
  const KvCacheOptions kv_cache_options = kv_cache_options_for(config);
  // With `cluster.topology`, every replica's GPUs in it (placed pool by pool, checked at load).
  std::optional<Topology> topology;
  if (cl.topology) {
    const HardwareConfig hw = load_hardware(config.hardware, catalog);
    topology = parse_topology(*cl.topology, hw.interconnect, hw.name);
  }
  const std::vector<std::int32_t> first_gpu = cl.first_gpus();
  // The collectives of a replica of `pc` from GPU `first` of the cluster topology.
  const auto placed = [&](const PoolConfig& pc, std::int32_t first) {
    ParallelConfig placed = place_replica(pc.parallel.tensor, pc.parallel.pipeline,
                                          pc.parallel.microbatches, *topology, first);
    apply_expert_parallel(pc.parallel, load_model(pc.model, catalog), placed);
    return placed;
  };
  const auto roofline_for = [&config](const Pool& p, const ParallelConfig& parallel) {
    return std::make_unique<RooflineCostModel>(
        p.model, p.hardware, config.scheduler.block_size, parallel,
        config.scheduler.lora.enabled() ? config.scheduler.lora.max_lora_rank : 0);
  };
  std::vector<std::unique_ptr<Pool>> pools;
  std::size_t pool_first = 0;  // cluster index of the pool's first replica
  for (const PoolConfig& pc : cl.pools) {
    auto p = std::make_unique<Pool>();
    p->config = &pc;
    p->model = load_model(pc.model, catalog);
    apply_model_storage(config, p->model);
    p->hardware = config.cost_model.with_host_time(load_hardware(pc.hardware, catalog));
    p->parallel = topology && pc.num_gpus() > 1
                      ? placed(pc, first_gpu[pool_first])
                      : resolve_parallel(pc.parallel, p->model, p->hardware);
    pool_first += static_cast<std::size_t>(pc.count);
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
    p->roofline = roofline_for(*p, p->parallel);
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
  std::vector<std::unique_ptr<PowerModel>> powers;  // each replica's (sim/power_model.h)
  // Replicas whose place in the cluster topology prices their collectives differently from their
  // pool's first (an explicit topology of unequal nodes or links) get a roofline of their own.
  std::vector<std::unique_ptr<RooflineCostModel>> own_rooflines;
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
      const RooflineCostModel* roofline = p->roofline.get();
      ParallelConfig parallel = p->parallel;
      if (topology && k > 0 && p->config->num_gpus() > 1) {
        parallel = placed(*p->config, first_gpu[replicas.size()]);
        if (!same_collectives(parallel, p->parallel)) {
          own_rooflines.push_back(roofline_for(*p, parallel));
          roofline = own_rooflines.back().get();
        }
      }
      // A calibrated cost model is refused for pools of several GPUs (above).
      backends.push_back(std::make_unique<SimBackend>(
          p->calibrated ? *p->cost : static_cast<const CostModel&>(*roofline)));
      powers.push_back(
          std::make_unique<PowerModel>(PowerModel::of(p->hardware, p->model, parallel)));
      backends.back()->set_work_model(roofline, powers.back().get());
      backends.back()->set_stop_conditions(workload_gives(config.workload_section(), "sampling"));
      set_lora_loads(config, *roofline, *backends.back());
      if (config.scheduler.speculative.enabled()) {
        const std::uint64_t index = replicas.size();
        speculations.push_back(make_sim_speculation(
            config, *roofline, p->hardware, parallel, catalog,
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
      setup.replicas.push_back({replicas.back().get(), role, p->capacity.block_bytes,
                                std::max(1, p->model.num_layers),
                                p->calibrated ? p->cost->wake_up_ns() : TimeNs{0}});
      pool_of.push_back(p.get());
      (role == ReplicaRole::kDecode ? num_decode : num_arrival) += 1;
    }
  }
  setup.router = make_cluster_router(config, RouterStage::kArrival, num_arrival);
  std::unique_ptr<KvTransferModel> transfer;
  std::unique_ptr<SharedKvTransfer> shared;
  const bool fair = cl.kv_transfer.sharing == KvTransferConfig::Sharing::kFair;
  const TimeNs transfer_latency = seconds_to_ns(cl.kv_transfer.latency_us * 1e-6);
  if (num_decode > 0 && topology) {
    // Over the cluster topology's routes, every GPU of a replica sending its share.
    std::vector<TopologyKvTransfer::Placement> at;
    for (std::size_t r = 0; r < replicas.size(); ++r) {
      at.push_back({first_gpu[r], pool_of[r]->config->num_gpus()});
    }
    if (fair) {
      shared = std::make_unique<SharedKvTransfer>(*topology, std::move(at), transfer_latency);
    } else {
      transfer = std::make_unique<TopologyKvTransfer>(*topology, std::move(at), transfer_latency);
    }
  } else if (num_decode > 0) {
    const double fixed = cl.kv_transfer.bandwidth_gb_s * 1e9;
    DirectKvLinks links(cl.kv_transfer.links == KvTransferConfig::Links::kPerPair
                            ? KvLinkLayout::kPerPair
                            : KvLinkLayout::kPerReplica,
                        [fixed, &pool_of](std::uint32_t r) {
                          if (fixed > 0) return fixed;
                          // Each GPU of a replica sends (or takes) its share of the KV over its
                          // own host link.
                          const Pool& p = *pool_of[r];
                          return p.hardware.host_link_bandwidth * p.hardware.host_link_efficiency *
                                 p.config->num_gpus();
                        });
    if (fair) {
      shared = std::make_unique<SharedKvTransfer>(std::move(links), transfer_latency);
    } else {
      transfer = std::make_unique<DirectLinkKvTransfer>(std::move(links), transfer_latency);
    }
  }
  if (num_decode > 0) {
    setup.decode_router = make_cluster_router(config, RouterStage::kDecode, num_decode);
    setup.transfer = transfer.get();
    setup.shared_transfer = shared.get();
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
  {
    std::vector<const SimBackend*> measured;
    for (const auto& b : backends) measured.push_back(b.get());
    fill_work_summary(measured, out.summary.duration_s, out.summary);
  }
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

  write_run_outputs(config, recorder, {"sim", served_model(config), served_hardware(config)}, out);
  out.out_dir = run_stage.commit();
  return out;
}

}  // namespace servelab
