// `sim sweep`: one experiment over a grid of settings, run in parallel.
//
// The grid is the experiment's `sweep:` section: each key is a dotted key path (as for --set)
// and its value a non-empty list of values for that key,
//   sweep:
//     workload.arrival.rate: [2, 4, 8]
//     policies.batch: [vllm, sarathi]
// and the points are the cartesian product, first key slowest (here 6 points). Every point is
// validated before any runs (workload included), so a typo costs nothing; errors name the sweep
// key's FILE:LINE:COL. Points run on `jobs` std::thread workers, each into its own run folder
// OUT/<point>/; OUT/sweep.csv has one row per point in grid order. Every file is independent
// of the number of workers (each point is a deterministic function of its configuration, and
// rows are written after all points finished).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "sim/run.h"
#include "sim/variant_loader.h"

namespace servelab {

struct SweepAxis {
  std::string key;                  // dotted key path
  std::vector<std::string> values;  // YAML flow text of each value, in file order
  std::string location;             // FILE:LINE:COL of the key in the sweep section
};

struct SweepPoint {
  std::string name;                    // the run folder's name: index and values
  std::vector<std::string> values;     // one per axis
  std::vector<std::string> overrides;  // "key=value", one per axis
};

struct SweepResult {
  SweepPoint point;
  RunOutput run;
};

// The axes of the experiment's `sweep:` section. Throws ConfigError (file, line, key) for a
// missing or malformed section: not a mapping, a value that is not a non-empty list, a key that
// is not a dotted path of names or that names the `sweep`/`compare` sections.
std::vector<SweepAxis> sweep_from_experiment(const ExperimentSource& source);

// The cartesian product of `axes`, first axis slowest. REQUIRES: !axes.empty().
std::vector<SweepPoint> sweep_points(const std::vector<SweepAxis>& axes);

// Runs every point of `source`'s sweep (with `base_overrides` applied first) on `jobs` workers
// (>= 1) and writes OUT/<point>/ and OUT/sweep.csv (OUT defaults to out/<name>-sweep).
// `before_step` is each run's RunOptions::before_step (called from the workers: it must be
// thread-safe). Throws ConfigError for bad input.
std::vector<SweepResult> run_sweep(const ExperimentSource& source,
                                   const std::vector<std::string>& base_overrides,
                                   std::string out_dir, int jobs, bool progress,
                                   const StepHook& before_step = {});

// The table `sim sweep` prints.
void print_sweep_table(std::FILE* out, const std::vector<SweepAxis>& axes,
                       const std::vector<SweepResult>& results);

// `sim sweep EXP.yaml [--out DIR] [--jobs N] [--seed N] [--set k=v]... [--no-plot] [--quiet]`.
int sweep_command(const std::vector<std::string>& args);

}  // namespace servelab
