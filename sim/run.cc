#include "sim/run.h"

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "core/hooked_backend.h"
#include "policies/queue_order.h"
#include "serving/hardware_config.h"
#include "serving/kv_capacity.h"
#include "serving/machine.h"
#include "serving/memory_tiers_config.h"
#include "serving/model_config.h"
#include "serving/run_stage.h"
#include "sim/calibrated_cost_model.h"
#include "sim/roofline_cost_model.h"
#include "sim/sim_backend.h"
#include "sim/swap_cost.h"
#include "sim/work_summary.h"
#include "traces/mix_workload.h"
#include "traces/workload.h"

namespace servelab {

std::unique_ptr<SimSpeculation> make_sim_speculation(
    const ExperimentConfig& config, const RooflineCostModel& target, const HardwareConfig& hardware,
    const ParallelConfig& parallel, const std::string& catalog, std::uint64_t seed) {
  const SpeculativeConfig& sp = config.scheduler.speculative;
  if (!sp.enabled()) return nullptr;
  const std::string at = config.speculative_location + ": key 'serving.speculative_config";
  if (sp.acceptance_rates.empty()) {
    throw ConfigError(at +
                      "': the simulator needs acceptance_rate (the probability that a "
                      "draft token is accepted: one value, or one per draft position)");
  }
  std::unique_ptr<RooflineCostModel> draft;
  if (sp.method == SpecMethod::kDraftModel) {
    try {
      const ModelConfig draft_model = load_model(sp.draft_model, catalog);
      // Expert parallelism places a mixture's experts; a dense draft has none and runs under the
      // same tensor parallelism (it was refused: "expert parallelism needs a mixture").
      ParallelConfig draft_parallel = parallel;
      if (!draft_model.is_moe()) {
        draft_parallel.expert = false;
        draft_parallel.redundant_experts = 0;
      }
      draft = std::make_unique<RooflineCostModel>(draft_model, hardware,
                                                  config.scheduler.block_size, draft_parallel);
    } catch (const ConfigError& e) {
      throw ConfigError(at + ".model': " + e.what());
    }
  } else if (sp.method == SpecMethod::kEagle && target.model().quantization != "none") {
    // The EAGLE head keeps its weights in the dtype (vLLM's speculative_config.quantization is
    // unset by default: the draft is not quantized), whatever the target's quantization.
    ModelConfig head = target.model();
    head.quantization = "none";
    draft =
        std::make_unique<RooflineCostModel>(head, hardware, config.scheduler.block_size, parallel);
  }
  return std::make_unique<SimSpeculation>(sp, seed, target, std::move(draft));
}

std::unique_ptr<const CalibratedCostModel> make_calibrated_cost_model(
    const ExperimentConfig& config, const ModelConfig& model) {
  if (!config.cost_model.calibrated) return nullptr;
  const CalibratedProfile& p = *config.cost_model.calibrated;
  check_profile_storage(p, model, config.file);
  // A CPU calibration predicts the CPU engine, which runs on this host: say so when this host's
  // CPU is not the one it was measured on (a CUDA calibration is never warned about here).
  if (p.machine && p.machine->kind == "cpu") {
    warn_if_calibrated_elsewhere(p.file, p.machine, this_machine("cpu"),
                                 CalibrationUse::kSimulation);
  }
  const LoraConfig& lora = config.scheduler.lora;
  try {
    return std::make_unique<const CalibratedCostModel>(p, config.scheduler.block_size,
                                                       lora.enabled() ? lora.max_lora_rank : 0);
  } catch (const ConfigError& e) {
    throw ConfigError(config.lora_location + ": key 'serving.lora': " + e.what());
  }
}

void set_lora_loads(const ExperimentConfig& config, const RooflineCostModel& roofline,
                    SimBackend& backend) {
  if (!config.scheduler.lora.enabled()) return;
  backend.set_lora_loads(config.scheduler.lora.max_loras, roofline.lora_load_seconds(1));
}

KvCapacity kv_capacity_for(const ExperimentConfig& config, const ModelConfig& model,
                           const HardwareConfig& hardware, const ParallelConfig& parallel) {
  KvCapacityOptions kv_options;
  kv_options.block_size = config.scheduler.block_size;
  kv_options.gpu_memory_utilization = config.gpu_memory_utilization;
  if (config.activation_reserve_gb) {
    kv_options.activation_reserve_bytes =
        static_cast<std::int64_t>(*config.activation_reserve_gb * (1LL << 30));
  }
  kv_options.max_num_batched_tokens = config.scheduler.max_num_batched_tokens;
  kv_options.max_num_seqs = config.scheduler.max_num_seqs;
  kv_options.num_gpu_blocks = config.num_gpu_blocks;
  // Swap space only where a preemption mode can use it (a recompute-only run allocates none, and
  // a size it could not hold is no error there).
  kv_options.swap_space_gib =
      config.scheduler.preemption != nullptr && config.scheduler.preemption->uses_host_memory()
          ? config.swap_space_gb
          : 0.0;
  // Model parallelism (`parallel:`, `topology:`): checked against the model and the topology
  // by the caller (resolve_parallel); the default is one GPU.
  kv_options.tensor_parallel = parallel.tensor;
  kv_options.pipeline_parallel = parallel.pipeline;
  kv_options.redundant_experts = parallel.redundant_experts;
  // vLLM's LoRA slots (max_loras at max_lora_rank) take device memory from the KV cache.
  if (config.scheduler.lora.enabled()) {
    kv_options.lora_slots = config.scheduler.lora.max_loras;
    kv_options.lora_rank = config.scheduler.lora.max_lora_rank;
  }
  // The drafter beside the target (vLLM loads it and gives its layers KV in every block): a
  // draft model whole; an EAGLE head as one decoder layer of the target's shape.
  const SpeculativeConfig& sp = config.scheduler.speculative;
  if (sp.enabled() && sp.method == SpecMethod::kDraftModel) {
    const ModelConfig draft = [&] {
      try {
        return load_model(sp.draft_model, default_catalog_dir());
      } catch (const ConfigError& e) {
        throw ConfigError(config.speculative_location +
                          ": key 'serving.speculative_config.model': " + e.what());
      }
    }();
    kv_options.draft_weight_bytes = draft.weight_bytes();
    kv_options.draft_block_bytes = kv_block_bytes(draft, kv_options.block_size);
  } else if (sp.enabled() && sp.method == SpecMethod::kEagle) {
    ModelConfig head = model;  // one layer of the target, unquantized (as make_sim_speculation)
    head.quantization = "none";
    kv_options.draft_weight_bytes = head.layer_weight_bytes();
    kv_options.draft_block_bytes = kv_block_bytes(model, kv_options.block_size) / model.num_layers;
  }
  if (config.parallel.set && config.cost_model.calibrated) {
    throw ConfigError(config.parallel.where + ": a calibrated cost model was measured on one " +
                      "device and has no communication terms; use the roofline (no cost_model) " +
                      "with parallel, or leave parallel out");
  }
  const KvCapacity capacity = [&] {
    if (!config.parallel.set) return compute_kv_capacity(model, hardware, kv_options);
    try {
      return compute_kv_capacity(model, hardware, kv_options);
    } catch (const ConfigError& e) {
      throw ConfigError(config.parallel.where + ": " + e.what());
    }
  }();
  if (config.scheduler.max_model_len > model.max_position_embeddings) {
    // vLLM refuses this too: positions beyond the model's range are undefined.
    throw ConfigError(
        (config.max_model_len_location.empty() ? config.file : config.max_model_len_location) +
        ": key 'serving.max_model_len': expected at most the model's " +
        "max_position_embeddings (" + std::to_string(model.max_position_embeddings) + "), got " +
        std::to_string(config.scheduler.max_model_len));
  }
  return capacity;
}

std::function<void(std::int64_t, TimeNs)> progress_printer() {
  const auto start = std::chrono::steady_clock::now();
  // At most about once per second of wall time.
  return [start, next = 1.0](std::int64_t arrivals, TimeNs now) mutable {
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (wall < next) return;
    next = wall + 1.0;
    std::fprintf(stderr, "\r  %lld requests arrived, simulated %.1f s, wall %.1f s   ",
                 static_cast<long long>(arrivals), ns_to_s(now), wall);
    std::fflush(stderr);
  };
}

RunOutput run_simulation(const ExperimentConfig& config, const RunOptions& options) {
  if (config.cluster.set) return run_cluster_simulation(config, options);
  RunOutput out;
  const std::string catalog = default_catalog_dir();
  ModelConfig model = load_model(config.model, catalog);
  apply_model_storage(config, model);
  const HardwareConfig hardware =
      config.cost_model.with_host_time(load_hardware(config.hardware, catalog));
  const ParallelConfig parallel = resolve_parallel(config.parallel, model, hardware);
  const KvCapacity capacity = [&] {
    if (config.parallel.set) return kv_capacity_for(config, model, hardware, parallel);
    try {
      return kv_capacity_for(config, model, hardware, parallel);
    } catch (const ConfigError& e) {
      // Name the experiment (with parallel, its section is named already; a key set with --set
      // or a variant is named by that).
      const std::string what = e.what();
      if (what.starts_with(config.file) || what.starts_with("--set ")) throw;
      throw ConfigError(config.file + ": " + what);
    }
  }();
  out.num_gpu_blocks = capacity.num_gpu_blocks;
  out.block_bytes = capacity.block_bytes;
  std::unique_ptr<Workload> workload =
      limit_workload(make_workload(config.workload_section(), config.seed, config.base_dir),
                     config.max_requests, config.max_duration_ns, config.file);
  out.workload = workload->describe();

  RunStage run_stage(config, {.out_dir = options.out_dir, .write_files = options.write_files});
  out.out_dir = run_stage.dir();
  Recorder& recorder = run_stage.recorder();
  const RooflineCostModel roofline(
      model, hardware, config.scheduler.block_size, parallel,
      config.scheduler.lora.enabled() ? config.scheduler.lora.max_lora_rank : 0);
  // A calibrated profile (cost_model: {type: calibrated, file: ...}) replaces the roofline.
  const std::unique_ptr<const CalibratedCostModel> calibrated =
      make_calibrated_cost_model(config, model);
  const CostModel& cost = calibrated ? static_cast<const CostModel&>(*calibrated)
                                     : static_cast<const CostModel&>(roofline);
  SimBackend sim_backend(cost);
  // FLOPs, bytes and energy per step from the roofline (docs/metrics.md, "Energy and
  // utilization"); with the roofline as the cost model its breakdown also gives the time.
  const PowerModel power = PowerModel::of(hardware, model, parallel);
  sim_backend.set_work_model(&roofline, &power);
  const std::unique_ptr<SimSpeculation> speculation =
      make_sim_speculation(config, roofline, hardware, parallel, catalog, config.seed);
  sim_backend.set_speculation(speculation.get());
  sim_backend.set_stop_conditions(workload_gives(config.workload_section(), "sampling"));
  // The hook sees the replica's scheduler, which exists only once the replica is built.
  const Scheduler* hooked_scheduler = nullptr;
  std::optional<HookedBackend> hooked;
  if (options.before_step) {
    hooked.emplace(sim_backend,
                   [&](const StepPlan& plan) { options.before_step(*hooked_scheduler, plan); });
  }
  Backend& backend = hooked ? static_cast<Backend&>(*hooked) : sim_backend;
  WorkloadFeedback feedback(*workload, recorder);
  KvCacheOptions kv_cache_options = kv_cache_options_for(config);
  // KV offload tiers behind the pool (`kv_offload:`), their loads charged by the backend.
  std::unique_ptr<KvOffloadTiers> offload;
  if (config.kv_offload.set) {
    offload = make_offload_tiers(config.kv_offload, capacity.block_bytes);
    kv_cache_options.offload = offload.get();
    sim_backend.set_tier_load_seconds(
        offload_load_seconds(config.kv_offload, hardware, capacity.gpu_block_bytes));
  }
  set_lora_loads(config, roofline, sim_backend);
  SchedulerConfig sc = scheduler_config_with_policies(config);
  // The cost oracle of the `auto` preemption mode (the other modes never ask it).
  {
    if (calibrated) {
      sc.prefer_swap = [&c = *calibrated](const Request& r) {
        return calibrated_swap_is_cheaper(c, r);
      };
    } else {
      sc.prefer_swap = [&roofline](const Request& r) { return swap_is_cheaper(roofline, r); };
    }
  }
  // Host swap blocks only where a preemption mode can use them.
  const auto cpu_blocks = static_cast<std::int32_t>(
      sc.preemption == nullptr || !sc.preemption->uses_host_memory()
          ? 0
          : std::min<std::int64_t>(capacity.num_cpu_blocks, std::int64_t{1} << 30));
  // Only a dependent workload (sessions) needs to hear of finishes; otherwise the recorder
  // listens directly (one virtual call less per generated token).
  SchedulerObserver* observer =
      workload->dependent() ? static_cast<SchedulerObserver*>(&feedback) : &recorder;
  // Idle-session offload (kv_offload.idle_offload_s) hears finishes before them.
  std::optional<IdleSessionOffload> idle;
  if (offload && config.kv_offload.idle_offload_s > 0) {
    idle.emplace(*observer, seconds_to_ns(config.kv_offload.idle_offload_s));
    observer = &*idle;
  }
  Replica replica(sc, static_cast<std::int32_t>(capacity.num_gpu_blocks), backend, observer,
                  kv_cache_options, cpu_blocks);

  hooked_scheduler = &replica.scheduler();
  // Pinned prefixes (`prefix_cache.pinned`): computed before t = 0, each priced as one prefill
  // step by the cost model (reported, not on the timeline).
  const std::vector<RequestSpec> pinned =
      pin_prefixes(config.prefix_cache, config.seed, replica.kv());
  double pinned_prefill_s = 0;
  for (const RequestSpec& spec : pinned) {
    StepPlan warm;
    ScheduledRequest e;
    e.spec = &spec;
    e.num_tokens = spec.prompt_len;
    e.is_prefill = true;
    e.samples = true;
    warm.requests.push_back(e);
    warm.num_prefill_tokens = spec.prompt_len;
    pinned_prefill_s += ns_to_s(cost.step_time(warm));
  }
  Simulator sim(*workload, replica, recorder, config.frontend);
  if (idle) sim.set_idle_offload(&*idle);
  sim.set_wake_up_ns(cost.wake_up_ns());
  if (options.progress) sim.set_progress(progress_printer(), 1 << 14);
  out.totals = sim.run();
  if (options.progress) std::fputs("\r\033[K", stderr);
  recorder.finalize(out.totals.first_arrival_ns, out.totals.end_ns, replica.kv().stats());
  out.summary = recorder.summary();
  out.summary.skipped_trace_rows = workload->skipped_rows();
  fill_batch_slots(config, out.summary);
  const SimBackend* const measured[] = {&sim_backend};
  fill_work_summary(measured, out.summary.duration_s, out.summary);
  if (config.scheduler.speculative.enabled()) {
    add_spec_decode(out.summary, replica.scheduler().counters());
  }
  if (!config.prefix_cache.pinned.empty()) {
    out.summary.pinned_blocks = replica.kv().num_pinned_blocks();
    out.summary.pinned_prefill_s = pinned_prefill_s;
  }
  if (offload) {
    fill_offload_summary(*offload, replica.kv().stats(), ns_to_s(sim_backend.tier_load_ns()),
                         out.summary);
    if (idle) {
      out.summary.idle_offload_s = config.kv_offload.idle_offload_s;
      out.summary.idle_offloaded_sessions = idle->sessions_offloaded();
      out.summary.idle_offloaded_blocks = replica.kv().stats().idle_offloaded_blocks;
      out.summary.idle_store_s = static_cast<double>(out.summary.idle_offloaded_blocks) *
                                 offload_store_seconds(hardware, capacity.gpu_block_bytes);
    }
  }
  fill_overload_flag(config, out.summary);
  fill_lora_report(config, out.summary);
  if (!options.write_files) return out;

  write_run_outputs(config, recorder, {"sim", model.name, hardware.name}, out);
  out.out_dir = run_stage.commit();
  return out;
}

}  // namespace servelab
