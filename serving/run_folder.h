// Run folders, as both drivers write them: summary.json, requests.csv, steps.csv, schedule.csv
// (when asked), events.csv and blocks.csv (when asked), config.yaml; docs/metrics.md defines
// every column. The folder is staged (serving/output_file.h StagedDir) and replaces an existing
// one only when the run completed; check_out_dir() refuses a folder holding anything that is not
// a previous run's output, so nothing a user put there is overwritten.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/metrics.h"
#include "core/time.h"
#include "serving/experiment.h"
#include "serving/output_file.h"
#include "serving/recorder.h"

namespace servelab {

// What a driver's loop counted.
struct SimulationTotals {
  TimeNs first_arrival_ns = 0;
  TimeNs end_ns = 0;  // the later of the last step end and the last arrival
  std::int64_t num_arrivals = 0;
  std::int64_t num_steps = 0;
};

// One run's results and where they went.
struct RunOutput {
  RunSummary summary;
  SimulationTotals totals;
  std::string out_dir;
  std::vector<std::string> files;  // written, in order
  std::int64_t num_gpu_blocks = 0;
  std::int64_t block_bytes = 0;
  std::string workload;         // the workload's one-line description
  std::string backend = "sim";  // summary.json run.backend: "sim", "engine-cpu"
  std::string cluster_json;     // a cluster run's summary.json `cluster` object (JSON text)
};

// Checks that `dir` may receive a run: absent, empty, or a folder holding only a previous run's
// outputs, recognised by their names and by a summary.json of ServeLab's (a JSON object with a
// `run.backend`), whose figures/ holds only what `sim plot` wrote (serving/figures_folder.h);
// ConfigError otherwise, and for a symlinked folder or a symlink inside it (a folder of the
// user's own steps.csv or figures is never replaced). Creates nothing:
// the run is written to a StagedDir (serving/output_file.h) that replaces `dir` at the end.
void check_out_dir(const std::string& dir);
// run.backend of the run folder `dir`'s summary.json ("sim", "engine-cpu", "bench", ...); nullopt
// when it holds none that a ServeLab run wrote (no file, not a JSON object, no run.backend).
std::optional<std::string> run_backend(const std::string& dir);
// The same for a folder of runs (`sim compare`, `sim sweep`): an existing one may hold only
// `index_file` whose header is ours (compare.csv's starts "variant,overrides,", sweep.csv's
// "point,"), a kGroupClassesFile whose header has kGroupClassesColumns (not a file of the user's
// by those names) and sub-folders, those named in `runs` only run outputs and figures/ only
// `sim plot`'s;
// `what` names the output in the error ("comparison", "sweep").
void check_group_dir(const std::string& dir, const std::string& index_file, const std::string& what,
                     const std::vector<std::string>& runs);
// A folder of runs' per-class table (sim/class_table.h), when its runs have request classes.
inline constexpr const char* kGroupClassesFile = "classes.csv";
// Its columns after those naming the run (sim/class_table.h writes them).
inline constexpr const char* kGroupClassesColumns =
    ",class,completed,rejected,aborted,shed,requests_per_s,output_tokens_per_s,ttft_p50_ms,"
    "ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,itl_p50_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms,"
    "queueing_p50_ms,goodput_requests_per_s,slo_attainment,preemptions,recomputed_tokens";
// Moves a folder of runs' staged entries into it (StagedDir::commit_entries). What a previous
// group left that the new one does not replace is removed first, so that the folder never mixes
// two groups' results: its kGroupClassesFile, the run folders its index file named (those that
// are runs' folders), and its figures/ (only `sim plot`'s: serving/figures_folder.h). Other
// folders of the user's stay.
void commit_group(StagedDir& stage);
// The same after writing kGroupClassesFile (`classes_header` then `class_rows`) into the stage
// when `class_rows` is not empty (a group whose runs have no request classes has none).
void commit_group(StagedDir& stage, const std::string& classes_header,
                  const std::string& class_rows);

struct RunMeta {
  std::string backend;   // summary.json run.backend
  std::string model;     // model name
  std::string hardware;  // hardware name, or the device the engine ran on ("cuda: NAME")
  // The run measured a server it knows nothing of (`sim bench`): summary.json has no `gpus`.
  bool gpus_unknown = false;
  // More of config.yaml's `derived:` record: what the run depended on beyond the experiment
  // (`engine run`'s --kv-memory-gb and --weights), to be given again to reproduce it.
  std::vector<std::pair<std::string, std::string>> derived = {};
};
// Writes summary.json, requests.csv (when configured) and config.yaml into out.out_dir from the
// finalized `recorder`, out.summary (whose gpus it sets: ExperimentConfig::num_gpus, or 0 when
// meta.gpus_unknown), out.workload, out.num_gpu_blocks and out.block_bytes, and
// lists them, with the streamed steps.csv / schedule.csv, in out.files (fixed order). Throws
// ConfigError on I/O failure.
void write_run_outputs(const ExperimentConfig& config, const Recorder& recorder,
                       const RunMeta& meta, RunOutput& out);
// Sets summary.slot_efficiency from batch_seqs_mean and serving.max_num_seqs (write_run_outputs
// calls it, so every backend's summary.json has it).
void fill_batch_slots(const ExperimentConfig& config, RunSummary& summary);
// Sets summary.report_overload when the experiment chose an admission or length_cap plugin
// (write_run_outputs calls it; the shed and capped counts are then in summary.json).
void fill_overload_flag(const ExperimentConfig& config, RunSummary& summary);
// Sets summary.report_lora and max_loras when the experiment turned LoRA on (serving.lora).
void fill_lora_report(const ExperimentConfig& config, RunSummary& summary);

// The short human summary `sim run` prints.
void print_summary(std::FILE* out, const ExperimentConfig& config, const RunOutput& run);

}  // namespace servelab
