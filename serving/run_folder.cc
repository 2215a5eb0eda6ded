#include "serving/run_folder.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/strings.h"
#include "serving/figures_folder.h"
#include "serving/interrupt.h"
#include "serving/output_file.h"

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

// Calls `check(entry)` for each entry of `dir` when it exists (after refusing a symlinked `dir`
// and a `dir` that is not a folder); returns whether it exists.
template <typename Check>
bool check_existing_dir(const std::string& dir, Check check) {
  refuse_symlink(dir);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) return false;
  if (!fs::is_directory(dir, ec)) {
    throw ConfigError(dir + ": output path exists and is not a directory");
  }
  for (const auto& entry : fs::directory_iterator(dir, ec)) check(entry);
  if (ec) throw_io_error(dir, "listing", ec.value());
  return true;
}

// The start of the header line of a group folder's index file.
std::string index_header_prefix(const std::string& index_file) {
  return index_file == "sweep.csv" ? "point," : "variant,overrides,";
}

// Whether `path`, when it exists, is a CSV file whose header line `fits`.
template <typename Fits>
bool absent_or_header_fits(const std::string& path, Fits fits) {
  if (!fs::exists(path)) return true;
  // A folder under the name is no index (reading one throws from the stream buffer).
  if (!fs::is_regular_file(path)) return false;
  std::ifstream in(path, std::ios::binary);
  std::string header;
  std::getline(in, header);
  return in && fits(header);
}

}  // namespace

std::optional<std::string> run_backend(const std::string& dir) {
  const fs::path summary = fs::path(dir) / "summary.json";
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(summary, ec))) return std::nullopt;
  std::ifstream in(summary, std::ios::binary);
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto run = j.find("run");
  if (run == j.end() || !run->is_object()) return std::nullopt;
  const auto backend = run->find("backend");
  if (backend == run->end() || !backend->is_string()) return std::nullopt;
  return backend->get<std::string>();
}

void check_out_dir(const std::string& dir) {
  // The run replaces its folder whole (StagedDir::commit): never the current folder or one
  // holding it, which would leave the shell in a deleted folder.
  std::error_code cwd_ec;
  const fs::path cwd = fs::current_path(cwd_ec);
  if (!cwd_ec && path_within(cwd.string(), dir)) {
    throw ConfigError(dir +
                      ": is the current folder (or holds it), which the run would replace "
                      "whole; run from outside it (choose another --out)");
  }
  std::string first;  // the first entry, for the message when the folder is not a run's
  const bool exists = check_existing_dir(dir, [&](const fs::directory_entry& entry) {
    const std::string name = entry.path().filename().string();
    if (!run_files().count(name)) {
      throw ConfigError(dir + ": refusing to write here: it holds '" + name +
                        "', which is not a ServeLab run output (choose another --out)");
    }
    if (entry.is_symlink()) {
      throw ConfigError(entry.path().string() +
                        ": is a symlink; refusing to replace a run folder holding one");
    }
    // Replacing the run removes its figures: only those `sim plot` wrote.
    if (name == "figures") {
      check_figures_dir(entry.path().string(),
                        "refusing to replace the run folder (choose another --out, or move it)");
    } else if (!entry.is_regular_file()) {  // a folder of the user's under a run file's name
      throw ConfigError(entry.path().string() +
                        ": is not a file, so the folder is not a previous run's; refusing to "
                        "replace it (choose another --out, or move it)");
    }
    if (first.empty() || name < first) first = name;
  });
  // Names alone do not make a previous run: a folder of the user's own steps.csv or figures/
  // is kept unless ServeLab's summary.json says a run wrote it.
  if (exists && !first.empty() && !run_backend(dir)) {
    throw ConfigError(dir + ": refusing to write here: it holds '" + first +
                      "' but no summary.json of a ServeLab run, so it is not a previous run's "
                      "folder (choose another --out, or remove it)");
  }
}

namespace {

// The first column of a group folder's index file (its runs' folder names); empty when absent.
std::vector<std::string> index_runs(const fs::path& index) {
  std::vector<std::string> names;
  std::ifstream in(index, std::ios::binary);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    const std::size_t comma = line.find(',');
    std::string name = line.substr(0, comma);
    if (!name.empty() && name.front() == '"') continue;  // never a run's folder name
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

// Removes `path` (a previous group's run or figures folder) or throws naming it.
void remove_previous(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) throw_io_error(path.string(), "removing", ec.value());
}

}  // namespace

void check_group_dir(const std::string& dir, const std::string& index_file, const std::string& what,
                     const std::vector<std::string>& runs) {
  const bool exists = check_existing_dir(dir, [&](const fs::directory_entry& entry) {
    const std::string name = entry.path().filename().string();
    if (name != index_file && name != kGroupClassesFile && !entry.is_directory()) {
      throw ConfigError(dir + ": refusing to write here: it holds '" + name +
                        "', which is not a ServeLab " + what + " output (choose another --out)");
    }
    if (name == "figures") {
      check_figures_dir(entry.path().string(),
                        "refusing to replace the " + what + " (choose another --out, or move it)");
    }
  });
  if (exists) {
    refuse_symlink(dir + "/" + index_file);
    refuse_symlink(dir + "/" + kGroupClassesFile);
    const auto refuse = [&](const std::string& file) {
      throw ConfigError(dir + ": refusing to write here: its '" + file + "' is not a ServeLab " +
                        what + " output (choose another --out)");
    };
    if (!absent_or_header_fits(dir + "/" + index_file, [&](const std::string& h) {
          return h.starts_with(index_header_prefix(index_file));
        })) {
      refuse(index_file);
    }
    if (!absent_or_header_fits(dir + "/" + kGroupClassesFile, [](const std::string& h) {
          return ends_with(h, kGroupClassesColumns);
        })) {
      refuse(kGroupClassesFile);
    }
    for (const std::string& run : runs) check_out_dir(dir + "/" + run);
    // The previous group's runs that commit_group will remove: checked now, before any runs.
    std::error_code ec;
    for (const std::string& run : index_runs(fs::path(dir) / index_file)) {
      const fs::path old = fs::path(dir) / run;
      if (fs::is_directory(fs::symlink_status(old, ec)) && run_backend(old.string())) {
        check_out_dir(old.string());
      }
    }
  }
}

void commit_group(StagedDir& stage) {
  throw_if_interrupted();  // the group is committed whole or not at all
  const fs::path dir = stage.final_path(), temp = stage.temp_path();
  std::error_code ec;
  const fs::path classes = dir / kGroupClassesFile;
  if (!fs::exists(temp / kGroupClassesFile) &&
      fs::is_regular_file(fs::symlink_status(classes, ec))) {
    if (!fs::remove(classes, ec) && ec) throw_io_error(classes.string(), "removing", ec.value());
  }
  // A previous group's runs that the new one does not have, and its figures (check_group_dir
  // made sure they are `sim plot`'s), go too: the folder never mixes two groups' results.
  for (const char* index : {"compare.csv", "sweep.csv"}) {
    for (const std::string& run : index_runs(dir / index)) {
      const fs::path old = dir / run;
      if (run.find('/') == std::string::npos && run != "." && run != ".." &&
          !fs::exists(temp / run) && fs::is_directory(fs::symlink_status(old, ec)) &&
          run_backend(old.string())) {
        check_out_dir(old.string());
        remove_previous(old);
      }
    }
  }
  if (fs::is_directory(fs::symlink_status(dir / "figures", ec))) {
    check_figures_dir((dir / "figures").string(), "refusing to remove the old figures");
    remove_previous(dir / "figures");
  }
  stage.commit_entries();
}

void commit_group(StagedDir& stage, const std::string& classes_header,
                  const std::string& class_rows) {
  if (!class_rows.empty()) {
    write_file_atomically(stage.temp_path() + "/" + kGroupClassesFile, classes_header + class_rows);
  }
  commit_group(stage);
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

void fill_overload_flag(const ExperimentConfig& config, RunSummary& summary) {
  summary.report_overload =
      config.policies.admission.name != "admit-all" || config.policies.length_cap.name != "off";
}

void fill_lora_report(const ExperimentConfig& config, RunSummary& summary) {
  summary.report_lora = config.scheduler.lora.enabled();
  summary.max_loras = config.scheduler.lora.max_loras;
}

void write_run_outputs(const ExperimentConfig& config, const Recorder& recorder,
                       const RunMeta& meta, RunOutput& out) {
  fill_batch_slots(config, out.summary);
  fill_overload_flag(config, out.summary);
  fill_lora_report(config, out.summary);
  out.summary.gpus = meta.gpus_unknown ? 0 : config.num_gpus();
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
  write_summary_json(out.out_dir + "/summary.json", out.summary, summary_meta, out.cluster_json);
  out.files.insert(out.files.begin(), "summary.json");
  if (config.outputs.requests_csv) {
    recorder.write_requests_csv(out.out_dir + "/requests.csv");
    out.files.insert(out.files.begin() + 1, "requests.csv");
  }
  std::vector<std::pair<std::string, std::string>> derived = {
      {"num_gpu_blocks", std::to_string(out.num_gpu_blocks)},
      {"block_bytes", std::to_string(out.block_bytes)},
      {"workload", out.workload}};
  derived.insert(derived.end(), meta.derived.begin(), meta.derived.end());
  write_text(out.out_dir + "/config.yaml", resolved_config_yaml(config, derived));
  out.files.push_back("config.yaml");
}

namespace {

// A cluster run's pools (summary.json's `cluster` object): one line each, and the KV transfers.
void print_cluster(std::FILE* f, const std::string& cluster_json) {
  const nlohmann::json c = nlohmann::json::parse(cluster_json);
  std::size_t width = 4;
  for (const auto& p : c.at("pools"))
    width = std::max(width, p.at("name").get<std::string>().size());
  const int w = static_cast<int>(width);
  std::fprintf(f, "  %-*s %-8s %12s %5s %9s %8s %9s\n", w, "pool", "role", "replicas", "GPUs",
               "routed", "busy", "KV usage");
  for (const auto& p : c.at("pools")) {
    const std::string shape =
        std::to_string(p.at("count").get<long long>()) + " x TP" +
        std::to_string(p.at("tensor").get<int>()) +
        (p.at("pipeline").get<int>() > 1 ? " PP" + std::to_string(p.at("pipeline").get<int>())
                                         : "");
    std::fprintf(
        f, "  %-*s %-8s %12s %5lld %9lld %6.1f %% %7.1f %%\n", w,
        p.at("name").get<std::string>().c_str(), p.at("role").get<std::string>().c_str(),
        shape.c_str(), p.at("gpus").get<long long>(), p.at("requests_routed").get<long long>(),
        100.0 * p.at("busy_fraction").get<double>(), 100.0 * p.at("kv_usage_mean").get<double>());
  }
  if (c.contains("kv_transfers")) {
    const nlohmann::json& t = c.at("kv_transfers");
    const double n = std::max<double>(1, t.at("count").get<double>());
    std::fprintf(f,
                 "  KV transfers %lld, %.1f MB each: %.2f ms on the link, the decode waits %.2f "
                 "ms (max %.2f)\n",
                 t.at("count").get<long long>(), t.at("bytes").get<double>() / n / 1e6,
                 t.at("transfer_mean_ms").get<double>(), t.at("exposed_mean_ms").get<double>(),
                 t.at("max_ms").get<double>());
  }
}

}  // namespace

void print_summary(std::FILE* f, const ExperimentConfig& config, const RunOutput& run) {
  const RunSummary& s = run.summary;
  std::fprintf(f, "%s: %lld requests (%lld completed, %lld rejected", config.name.c_str(),
               static_cast<long long>(s.num_requests), static_cast<long long>(s.completed),
               static_cast<long long>(s.rejected));
  if (s.aborted) std::fprintf(f, ", %lld aborted", static_cast<long long>(s.aborted));
  if (s.report_overload) {
    std::fprintf(f, ", %lld shed, %lld capped", static_cast<long long>(s.shed),
                 static_cast<long long>(s.capped));
  }
  if (s.skipped_trace_rows) {
    std::fprintf(f, "; %lld malformed trace rows skipped",
                 static_cast<long long>(s.skipped_trace_rows));
  }
  std::fprintf(f, ") in %.3f s %s, %lld steps\n", s.duration_s,
               run.backend == "sim" ? "simulated" : "of wall time",
               static_cast<long long>(s.num_steps));
  std::fprintf(f, "  %s on %s, %lld KV blocks of %d tokens; workload: %s\n",
               served_model(config).c_str(),
               run.backend == "sim" ? served_hardware(config).c_str() : run.backend.c_str(),
               static_cast<long long>(run.num_gpu_blocks), config.scheduler.block_size,
               run.workload.c_str());
  std::fprintf(f, "  throughput  %.2f req/s   input %.0f tok/s   output %.0f tok/s\n",
               s.requests_per_s, s.input_tokens_per_s, s.output_tokens_per_s);
  std::fprintf(f, "  %-13s %10s %10s %10s %10s %10s\n", "latency (ms)", "mean", "p50", "p90", "p99",
               "max");
  // A distribution with no values (nothing completed; no request of two tokens for TPOT) prints
  // "-": its zeros in summary.json (count 0) would read as the best latency there is.
  auto row = [&](const char* name, const DistributionSummary& d) {
    std::fprintf(f, "  %-13s", name);
    for (const double v : {d.mean, d.p50, d.p90, d.p99, d.max}) {
      std::fprintf(f, " %10s", stat_text(d, v, "%.2f", "-").c_str());
    }
    std::fputc('\n', f);
  };
  row("TTFT", s.ttft_ms);
  row("TPOT", s.tpot_ms);
  row("ITL", s.itl_ms);
  row("E2E", s.e2e_ms);
  row("queueing", s.queueing_ms);
  std::fprintf(f, "  goodput     %.2f req/s (%.1f %% of completed requests meet the SLOs)\n",
               s.goodput_requests_per_s, 100.0 * s.slo_attainment);
  std::fprintf(f,
               "  preemptions %lld (%lld tokens recomputed)   KV usage mean %.1f %% max %.1f %%\n"
               "  prefix cache  %.1f %% of prompt tokens cached at admission   hit rate %.1f %% of "
               "lookups\n",
               static_cast<long long>(s.preemptions), static_cast<long long>(s.recomputed_tokens),
               100.0 * s.kv_usage_mean, 100.0 * s.kv_usage_max, 100.0 * s.prompt_hit_rate,
               100.0 * s.prefix_hit_rate);
  if (s.work) {
    std::fprintf(f, "  utilization GPUs busy %.1f %%   MFU %.1f %%   MBU %.1f %% (while busy)\n",
                 100.0 * s.busy_fraction(), 100.0 * s.mfu(), 100.0 * s.mbu());
  }
  if (s.has_energy()) {
    const double j = s.joules();
    const double scale = j >= 1e6 ? 1e6 : j >= 1e3 ? 1e3 : 1.0;
    const char* prefix = scale == 1e6 ? "M" : scale == 1e3 ? "k" : "";
    const std::string where =
        s.measured_joules
            ? std::string("measured by the board (NVML)")
            : format_text("%.1f %% idle", j > 0 ? 100.0 * s.work->idle_joules / j : 0.0);
    std::fprintf(f, "  energy      %.2f %sJ   %.3f J per output token   %.0f W average (%s)\n",
                 j / scale, prefix, s.joules_per_output_token(), s.average_power_w(),
                 where.c_str());
  }
  if (!s.classes.empty()) {
    std::size_t width = 5;
    for (const ClassSummary& c : s.classes) width = std::max(width, c.name.size());
    const int w = static_cast<int>(width);
    std::fprintf(f, "  %-*s %9s %10s %10s %10s %10s %10s %9s\n", w, "class", "completed",
                 "TTFT p50", "TTFT p99", "TPOT p50", "ITL p99", "E2E p99", "SLO met");
    for (const ClassSummary& c : s.classes) {
      const auto cell = [](const DistributionSummary& d, double v) {
        return stat_text(d, v, "%.2f", "-");
      };
      std::fprintf(f, "  %-*s %9lld %10s %10s %10s %10s %10s %7.1f %%\n", w, c.name.c_str(),
                   static_cast<long long>(c.completed), cell(c.ttft_ms, c.ttft_ms.p50).c_str(),
                   cell(c.ttft_ms, c.ttft_ms.p99).c_str(), cell(c.tpot_ms, c.tpot_ms.p50).c_str(),
                   cell(c.itl_ms, c.itl_ms.p99).c_str(), cell(c.e2e_ms, c.e2e_ms.p99).c_str(),
                   100.0 * c.slo_attainment);
    }
  }
  if (!run.cluster_json.empty()) print_cluster(f, run.cluster_json);
  if (s.spec_decode && s.spec_decode->num_drafts > 0) {
    const RunSummary::SpecDecode& d = *s.spec_decode;
    std::fprintf(
        f,
        "  speculation %lld drafts, %lld of %lld draft tokens accepted (%.1f %%), "
        "%.2f tokens per verify step\n",
        static_cast<long long>(d.num_drafts), static_cast<long long>(d.num_accepted_tokens),
        static_cast<long long>(d.num_draft_tokens),
        100.0 * static_cast<double>(d.num_accepted_tokens) /
            static_cast<double>(d.num_draft_tokens),
        1.0 + static_cast<double>(d.num_accepted_tokens) / static_cast<double>(d.num_drafts));
  }
  if (!run.out_dir.empty()) {
    std::fprintf(f, "  wrote %s/{", run.out_dir.c_str());
    for (std::size_t i = 0; i < run.files.size(); ++i) {
      std::fprintf(f, "%s%s", i ? "," : "", run.files[i].c_str());
    }
    std::fputs("}\n", f);
  }
}

}  // namespace servelab
