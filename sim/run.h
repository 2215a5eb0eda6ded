// run_simulation(): one experiment, end to end — workload, cost model, replica, simulator,
// recorder — and the run folder it writes (summary.json, requests.csv, steps.csv,
// schedule.csv when asked, config.yaml). The `sim run` command is a thin wrapper around it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/recorder.h"
#include "sim/calibrated_cost_model.h"
#include "sim/experiment.h"
#include "sim/model_config.h"
#include "sim/simulator.h"

namespace servelab {

struct RunOptions {
  std::string out_dir;      // empty: out/<experiment name>
  bool progress = false;    // progress line on stderr (callers pass isatty(stderr))
  bool write_files = true;  // false: compute the summary only (benchmarks, compare)
};

struct RunOutput {
  RunSummary summary;
  SimulationTotals totals;
  std::string out_dir;
  std::vector<std::string> files;  // written, in order
  std::int64_t num_gpu_blocks = 0;
  std::int64_t block_bytes = 0;
  std::string workload;         // the workload's one-line description
  std::string backend = "sim";  // summary.json run.backend: "sim", "engine-cpu"
};

// Throws ConfigError for bad input and I/O failures (exit code 2 in the commands), Interrupted on
// SIGINT/SIGTERM. Refuses (ConfigError) to write into an existing directory that holds files
// other than a previous run's outputs, so nothing a user put there is overwritten. The run is
// written to a temporary sibling folder (.NAME.tmp-PID) that replaces the run folder only when
// the run completed: on any error or interrupt the previous folder (if any) is left as it was.
RunOutput run_simulation(const ExperimentConfig& config, const RunOptions& options);

// The pieces run_simulation shares with the engine driver (engine/engine_driver.h), so both
// backends build the same scheduler and write the same run folder.

// Checks that `dir` may receive a run: absent, or a folder holding only a previous run's outputs
// (ConfigError otherwise, and for a symlinked folder or a symlink inside it). Creates nothing:
// the run is written to a StagedDir (core/output_file.h) that replaces `dir` at the end.
void check_out_dir(const std::string& dir);
// The same for a folder of runs (`sim compare`, `sim sweep`): an existing one may hold only
// `index_file` and sub-folders, and those named in `runs` only run outputs; `what` names the
// output in the error ("comparison", "sweep").
void check_group_dir(const std::string& dir, const std::string& index_file, const std::string& what,
                     const std::vector<std::string>& runs);
// The scheduler settings with the policy choices applied: the queue order is built with the
// experiment seed (parse_policies already set the preemption victim).
SchedulerConfig scheduler_config_with_policies(const ExperimentConfig& config);
// The KV allocation policy (paged or contiguous, and the contiguous reservation).
KvCacheOptions kv_cache_options_for(const ExperimentConfig& config);

struct RunMeta {
  std::string backend;   // summary.json run.backend
  std::string model;     // model name
  std::string hardware;  // hardware name, or the device the engine ran on
};
// Writes summary.json, requests.csv (when configured) and config.yaml into out.out_dir from the
// finalized `recorder`, out.summary, out.workload, out.num_gpu_blocks and out.block_bytes, and
// lists them, with the streamed steps.csv / schedule.csv, in out.files (fixed order). Throws
// ConfigError on I/O failure.
void write_run_outputs(const ExperimentConfig& config, const Recorder& recorder,
                       const RunMeta& meta, RunOutput& out);
// Sets summary.slot_efficiency from batch_seqs_mean and serving.max_num_seqs (write_run_outputs
// calls it, so every backend's summary.json has it).
void fill_batch_slots(const ExperimentConfig& config, RunSummary& summary);

// The calibrated cost model the experiment asks for (cost_model.type calibrated), or null for
// the roofline. Throws ConfigError when the profile was calibrated for another model.
std::unique_ptr<const CalibratedCostModel> make_calibrated_cost_model(
    const ExperimentConfig& config, const ModelConfig& model);

// The short human summary `sim run` prints.
void print_summary(std::FILE* out, const ExperimentConfig& config, const RunOutput& run);

}  // namespace servelab
