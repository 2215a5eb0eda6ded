// run_simulation(): one experiment, end to end — workload, cost model, replica, simulator,
// recorder — and the run folder it writes (summary.json, requests.csv, steps.csv,
// schedule.csv when asked, config.yaml). The `sim run` command is a thin wrapper around it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/recorder.h"
#include "sim/experiment.h"
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
  std::string workload;  // the workload's one-line description
};

// Throws ConfigError for bad input (exit code 2 in the commands), std::runtime_error for I/O.
// Refuses (ConfigError) to write into an existing directory that holds files other than a
// previous run's outputs, so nothing a user put there is overwritten.
RunOutput run_simulation(const ExperimentConfig& config, const RunOptions& options);

// The short human summary `sim run` prints.
void print_summary(std::FILE* out, const ExperimentConfig& config, const RunOutput& run);

}  // namespace servelab
