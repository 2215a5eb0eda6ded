#include "sim/run.h"

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "core/output_file.h"
#include "policies/queue_order.h"
#include "sim/calibrated_cost_model.h"
#include "sim/hardware_config.h"
#include "sim/kv_capacity.h"
#include "sim/model_config.h"
#include "sim/roofline_cost_model.h"
#include "sim/sim_backend.h"
#include "sim/swap_cost.h"
#include "traces/workload.h"

namespace servelab {

namespace fs = std::filesystem;

namespace {

// The files a run folder may hold; anything else means the folder is not ours to overwrite.
const std::set<std::string>& run_files() {
  static const std::set<std::string> files = {
      "summary.json", "requests.csv", "steps.csv",  "schedule.csv", "config.yaml",
      "tokens.jsonl", "events.csv",   "blocks.csv", "figures"};  // figures/: `sim plot`
  return files;
}

}  // namespace

void check_out_dir(const std::string& dir) {
  refuse_symlink(dir);
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dir, ec))) {
    if (!fs::is_directory(dir, ec)) {
      throw ConfigError(dir + ": output path exists and is not a directory");
    }
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (!run_files().count(name)) {
        throw ConfigError(dir + ": refusing to write here: it holds '" + name +
                          "', which is not a ServeLab run output (choose another --out)");
      }
      if (entry.is_symlink()) {
        throw ConfigError(entry.path().string() +
                          ": is a symlink; refusing to replace a run folder holding one");
      }
    }
    if (ec) throw_io_error(dir, "listing", ec.value());
  }
}

void check_group_dir(const std::string& dir, const std::string& index_file, const std::string& what,
                     const std::vector<std::string>& runs) {
  refuse_symlink(dir);
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dir, ec))) {
    if (!fs::is_directory(dir, ec)) {
      throw ConfigError(dir + ": output path exists and is not a directory");
    }
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name != index_file && !entry.is_directory()) {
        throw ConfigError(dir + ": refusing to write here: it holds '" + name +
                          "', which is not a ServeLab " + what + " output (choose another --out)");
      }
    }
    if (ec) throw_io_error(dir, "listing", ec.value());
    refuse_symlink(dir + "/" + index_file);
    for (const std::string& run : runs) check_out_dir(dir + "/" + run);
  }
}

SchedulerConfig scheduler_config_with_policies(const ExperimentConfig& config) {
  SchedulerConfig sc = config.scheduler;
  // The queue again: its maker is bound to the seed, which --seed may have changed.
  PolicyTarget target{&sc, nullptr, config.seed};
  build_policy(PolicyKind::kQueue, config.policies.queue, target);
  return sc;
}

KvCacheOptions kv_cache_options_for(const ExperimentConfig& config) {
  KvCacheOptions kv_cache_options;
  SchedulerConfig scratch;  // the scheduler side was built when the experiment was loaded
  PolicyTarget target{&scratch, &kv_cache_options, config.seed};
  build_policy(PolicyKind::kPrefixCache, config.policies.prefix_cache, target);
  build_policy(PolicyKind::kAllocation, config.policies.allocation, target);
  return kv_cache_options;
}

static void write_text(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw_io_error(path, "writing", errno);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) throw_io_error(path, "writing", ok ? errno : err);
}

void fill_batch_slots(const ExperimentConfig& config, RunSummary& summary) {
  summary.slot_efficiency = summary.batch_seqs_mean / config.scheduler.max_num_seqs;
}

void write_run_outputs(const ExperimentConfig& config, const Recorder& recorder,
                       const RunMeta& meta, RunOutput& out) {
  fill_batch_slots(config, out.summary);
  if (config.outputs.steps_csv) out.files.push_back("steps.csv");
  if (config.outputs.record_schedule) out.files.push_back("schedule.csv");
  if (config.outputs.record_events && recorder.records_events()) out.files.push_back("events.csv");
  if (config.outputs.record_blocks && recorder.records_blocks()) out.files.push_back("blocks.csv");
  const std::vector<std::pair<std::string, std::string>> summary_meta = {
      {"experiment", config.name},
      {"backend", meta.backend},
      {"seed", std::to_string(config.seed)},
      {"model", meta.model},
      {"hardware", meta.hardware},
      {"workload", out.workload},
      {"num_gpu_blocks", std::to_string(out.num_gpu_blocks)},
      {"block_size", std::to_string(config.scheduler.block_size)},
  };
  write_summary_json(out.out_dir + "/summary.json", out.summary, summary_meta);
  out.files.insert(out.files.begin(), "summary.json");
  if (config.outputs.requests_csv) {
    recorder.write_requests_csv(out.out_dir + "/requests.csv");
    out.files.insert(out.files.begin() + 1, "requests.csv");
  }
  write_text(out.out_dir + "/config.yaml",
             resolved_config_yaml(config, {{"num_gpu_blocks", std::to_string(out.num_gpu_blocks)},
                                           {"block_bytes", std::to_string(out.block_bytes)},
                                           {"workload", out.workload}}));
  out.files.push_back("config.yaml");
}

std::unique_ptr<const CalibratedCostModel> make_calibrated_cost_model(
    const ExperimentConfig& config, const ModelConfig& model) {
  if (!config.cost_model.calibrated) return nullptr;
  const CalibratedProfile& p = *config.cost_model.calibrated;
  if (p.model != model.name) {
    throw ConfigError(config.file + ": key 'cost_model.file': " + p.file +
                      " was calibrated for model '" + p.model + "', but the experiment runs '" +
                      model.name + "'");
  }
  return std::make_unique<const CalibratedCostModel>(p, config.scheduler.block_size);
}

RunOutput run_simulation(const ExperimentConfig& config, const RunOptions& options) {
  RunOutput out;
  const std::string catalog = default_catalog_dir();
  const ModelConfig model = load_model(config.model, catalog);
  const HardwareConfig hardware = load_hardware(config.hardware, catalog);
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
  kv_options.swap_space_gib = config.swap_space_gb;
  const KvCapacity capacity = compute_kv_capacity(model, hardware, kv_options);
  out.num_gpu_blocks = capacity.num_gpu_blocks;
  out.block_bytes = capacity.block_bytes;
  if (capacity.num_gpu_blocks > (1LL << 30)) {
    throw ConfigError(config.file + ": " + std::to_string(capacity.num_gpu_blocks) +
                      " KV blocks is more than ServeLab supports (2^30)");
  }
  if (config.scheduler.max_model_len > model.max_position_embeddings) {
    // vLLM refuses this too: positions beyond the model's range are undefined.
    throw ConfigError(config.file + ": key 'serving.max_model_len': expected at most the model's " +
                      "max_position_embeddings (" + std::to_string(model.max_position_embeddings) +
                      "), got " + std::to_string(config.scheduler.max_model_len));
  }
  std::unique_ptr<Workload> workload =
      limit_workload(make_workload(config.workload_section(), config.seed, config.base_dir),
                     config.max_requests, config.max_duration_ns, config.file);
  out.workload = workload->describe();

  std::string steps_path, schedule_path;
  // The run is written into a temporary sibling folder and moved into place once complete, so
  // an existing run folder is replaced only by a whole new run (never by a partial one).
  std::optional<StagedDir> stage;
  if (options.write_files) {
    const std::string final_dir = options.out_dir.empty() ? "out/" + config.name : options.out_dir;
    check_out_dir(final_dir);
    stage.emplace(final_dir);
    out.out_dir = stage->temp_path();
    if (config.outputs.steps_csv) steps_path = out.out_dir + "/steps.csv";
    if (config.outputs.record_schedule) schedule_path = out.out_dir + "/schedule.csv";
  }
  const RooflineCostModel roofline(model, hardware, config.scheduler.block_size);
  // A calibrated profile (cost_model: {type: calibrated, file: ...}) replaces the roofline.
  const std::unique_ptr<const CalibratedCostModel> calibrated =
      make_calibrated_cost_model(config, model);
  const CostModel& cost = calibrated ? static_cast<const CostModel&>(*calibrated)
                                     : static_cast<const CostModel&>(roofline);
  SimBackend backend(cost);
  Recorder recorder(config.slo, steps_path, schedule_path);
  if (options.write_files && config.outputs.record_events) {
    recorder.record_events(out.out_dir + "/events.csv");
  }
  if (options.write_files && config.outputs.record_blocks) {
    recorder.record_blocks(out.out_dir + "/blocks.csv");
  }
  WorkloadFeedback feedback(*workload, recorder);
  const KvCacheOptions kv_cache_options = kv_cache_options_for(config);
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
  Replica replica(sc, static_cast<std::int32_t>(capacity.num_gpu_blocks), backend, observer,
                  kv_cache_options, cpu_blocks);
  Simulator sim(*workload, replica, recorder);
  if (options.progress) {
    const auto start = std::chrono::steady_clock::now();
    // At most about once per second of wall time.
    sim.set_progress(
        [start, next = 1.0](std::int64_t arrivals, TimeNs now) mutable {
          const double wall =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (wall < next) return;
          next = wall + 1.0;
          std::fprintf(stderr, "\r  %lld requests arrived, simulated %.1f s, wall %.1f s   ",
                       static_cast<long long>(arrivals), ns_to_s(now), wall);
          std::fflush(stderr);
        },
        1 << 14);
  }
  out.totals = sim.run();
  if (options.progress) std::fputs("\r\033[K", stderr);
  recorder.finalize(out.totals.first_arrival_ns, out.totals.end_ns, replica.kv().stats());
  out.summary = recorder.summary();
  out.summary.skipped_trace_rows = workload->skipped_rows();
  fill_batch_slots(config, out.summary);
  if (!options.write_files) return out;

  write_run_outputs(config, recorder, {"sim", model.name, hardware.name}, out);
  stage->commit();
  out.out_dir = stage->final_path();
  return out;
}

void print_summary(std::FILE* f, const ExperimentConfig& config, const RunOutput& run) {
  const RunSummary& s = run.summary;
  std::fprintf(f, "%s: %lld requests (%lld completed, %lld rejected", config.name.c_str(),
               static_cast<long long>(s.num_requests), static_cast<long long>(s.completed),
               static_cast<long long>(s.rejected));
  if (s.aborted) std::fprintf(f, ", %lld aborted", static_cast<long long>(s.aborted));
  if (s.skipped_trace_rows) {
    std::fprintf(f, "; %lld malformed trace rows skipped",
                 static_cast<long long>(s.skipped_trace_rows));
  }
  std::fprintf(f, ") in %.3f s %s, %lld steps\n", s.duration_s,
               run.backend == "sim" ? "simulated" : "of wall time",
               static_cast<long long>(s.num_steps));
  std::fprintf(f, "  %s on %s, %lld KV blocks of %d tokens; workload: %s\n", config.model.c_str(),
               run.backend == "sim" ? config.hardware.c_str() : run.backend.c_str(),
               static_cast<long long>(run.num_gpu_blocks), config.scheduler.block_size,
               run.workload.c_str());
  std::fprintf(f, "  throughput  %.2f req/s   input %.0f tok/s   output %.0f tok/s\n",
               s.requests_per_s, s.input_tokens_per_s, s.output_tokens_per_s);
  std::fprintf(f, "  %-13s %10s %10s %10s %10s %10s\n", "latency (ms)", "mean", "p50", "p90", "p99",
               "max");
  auto row = [&](const char* name, const DistributionSummary& d) {
    std::fprintf(f, "  %-13s %10.2f %10.2f %10.2f %10.2f %10.2f\n", name, d.mean, d.p50, d.p90,
                 d.p99, d.max);
  };
  row("TTFT", s.ttft_ms);
  row("TPOT", s.tpot_ms);
  row("ITL", s.itl_ms);
  row("E2E", s.e2e_ms);
  row("queueing", s.queueing_ms);
  std::fprintf(f, "  goodput     %.2f req/s (%.1f %% of completed requests meet the SLOs)\n",
               s.goodput_requests_per_s, 100.0 * s.slo_attainment);
  std::fprintf(f,
               "  preemptions %lld (%lld tokens recomputed)   prefix-cache hit rate %.1f %%   "
               "KV usage mean %.1f %% max %.1f %%\n",
               static_cast<long long>(s.preemptions), static_cast<long long>(s.recomputed_tokens),
               100.0 * s.prefix_hit_rate, 100.0 * s.kv_usage_mean, 100.0 * s.kv_usage_max);
  if (!run.out_dir.empty()) {
    std::fprintf(f, "  wrote %s/{", run.out_dir.c_str());
    for (std::size_t i = 0; i < run.files.size(); ++i) {
      std::fprintf(f, "%s%s", i ? "," : "", run.files[i].c_str());
    }
    std::fputs("}\n", f);
  }
}

}  // namespace servelab
