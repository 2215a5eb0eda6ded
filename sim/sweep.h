// `sim sweep`: one experiment over a grid of settings, run in parallel.
//
// The grid is the experiment's `sweep:` section: each key is a dotted key path (as for --set)
// and its value a non-empty list of values for that key,
//   sweep:
//     workload.arrival.rate: [2, 4, 8]
//     policies.batch: [vllm, sarathi]
// and the points are the cartesian product, first key slowest (here 6 points). One axis may be
// `variant`, whose values name entries of the experiment's `compare:` section (or the string
// `all`: every entry, in order): a point on it applies that variant's whole `set:` mapping, so
// a grid can cross multi-key setups (a P/D split, a policy mix) with a load axis. Every point is
// validated before any runs (workload included), so a typo costs nothing; errors name the sweep
// key's FILE:LINE:COL. Points run on `jobs` std::thread workers, each into its own run folder
// OUT/<point>/; OUT/sweep.csv has one row per point in grid order. Every file is independent
// of the number of workers (each point is a deterministic function of its configuration, and
// rows are written after all points finished). With --mpi the points are shared among the
// processes of an MPI job instead, with the same files (sim/sweep_mpi.h).
#pragma once

#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "serving/cli.h"
#include "sim/optional_columns.h"
#include "sim/run.h"
#include "sim/variant_loader.h"

namespace servelab {

struct SweepAxis {
  std::string key;                  // dotted key path, or "variant"
  std::vector<std::string> values;  // YAML flow text of each value (variant names), in file order
  std::string location;             // FILE:LINE:COL of the key in the sweep section
  // Per value, in the order of `values`: the overrides it applies ("key=value": key=values[i]
  // on a key-path axis, the variant's `set:` on the `variant` axis) and where in the file each
  // was written (messages about a bad value name that place).
  std::vector<std::vector<std::string>> value_overrides;
  std::vector<std::vector<std::string>> value_locations;
};

struct SweepPoint {
  std::string name;                    // the run folder's name: index and values
  std::vector<std::string> values;     // one per axis
  std::vector<std::string> overrides;  // "key=value": each axis's value's, in axis order
  std::vector<std::string> locations;  // where each of `overrides` was written
};

struct SweepResult {
  SweepPoint point;
  RunOutput run;
};

// The axes of the experiment's `sweep:` section. Throws ConfigError (file, line, key) for a
// missing or malformed section: not a mapping, a value that is not a non-empty list, a key that
// is not a dotted path of names or that names the `sweep`/`compare` sections, a `variant` axis
// without a `compare:` section or naming a variant it does not have.
std::vector<SweepAxis> sweep_from_experiment(const ExperimentSource& source);

// The cartesian product of `axes`, first axis slowest. REQUIRES: !axes.empty().
std::vector<SweepPoint> sweep_points(const std::vector<SweepAxis>& axes);

// The pieces of run_sweep, which sim/sweep_mpi.cc also runs on several processes.
struct SweepPlan {
  std::vector<SweepAxis> axes;
  std::vector<SweepPoint> points;
  std::vector<ExperimentConfig> configs;  // one per point
  std::string out_dir;                    // OUT, the default filled in
  // The columns sweep.csv and the table add (sim/optional_columns.h), chosen from the points'
  // configurations before any runs (a point of several GPUs; a point with an admission or
  // length_cap plugin).
  OptionalColumns columns;
};
// Validates every value and every point (workloads included) and fills in OUT; touches no file.
// Throws ConfigError naming the sweep key or the point.
SweepPlan plan_sweep(const ExperimentSource& source, const std::vector<std::string>& base_overrides,
                     std::string out_dir);
// Throws ConfigError when OUT exists and holds anything but an earlier sweep's sweep.csv and run
// folders (serving/run_folder.h check_group_dir), or when an input of a point (its experiment or
// a workload file) is inside OUT: nothing of the user's is overwritten.
void check_sweep_dir(const SweepPlan& plan);
// Runs plan.points[i] for every i in `indices` on `jobs` (>= 1) std::thread workers, each into
// DIR/<point name>/; sets results[i], or errors[i] when that run threw (both are resized to the
// number of points; other entries are left as they were). After SIGINT/SIGTERM no further point
// starts, and it throws Interrupted (serving/interrupt.h) once the workers stopped.
void run_sweep_points(const SweepPlan& plan, const std::vector<std::size_t>& indices,
                      const std::string& dir, int jobs, bool progress, const StepHook& before_step,
                      std::vector<SweepResult>& results, std::vector<std::exception_ptr>& errors);
// Rethrows the first error in grid order, prefixed with "sweep point NAME: " where its type
// allows (sim/run_scoped_error.h); returns when there is none.
void rethrow_first_sweep_error(const SweepPlan& plan,
                               const std::vector<std::exception_ptr>& errors);
// OUT/sweep.csv is the header and one row per point in grid order; each ends with a newline.
// `columns`: SweepPlan::columns.
std::string sweep_csv_header(const std::vector<SweepAxis>& axes, const OptionalColumns& columns);
std::string sweep_csv_row(const SweepPoint& point, const RunSummary& summary,
                          const OptionalColumns& columns);
// OUT/classes.csv (sim/class_table.h), when some point has request classes: the header (the
// point, one column per sweep key, then the class's) and a point's rows (none without classes).
std::string sweep_classes_header(const std::vector<SweepAxis>& axes);
std::string sweep_classes_rows(const SweepPoint& point, const RunSummary& summary);
// The table `sim sweep` prints: two header lines, then one line per point, its name padded to
// `width` (sweep_name_width: the longest point name, at least 32).
int sweep_name_width(const std::vector<SweepPoint>& points);
std::string sweep_table_header(const OptionalColumns& columns, int width);
std::string sweep_table_row(const SweepPoint& point, const RunSummary& summary,
                            const OptionalColumns& columns, int width);

// Runs every point of `source`'s sweep (with `base_overrides` applied first) on `jobs` workers
// (>= 1) and writes OUT/<point>/ and OUT/sweep.csv (OUT defaults to out/<name>-sweep).
// `before_step` is each run's RunOptions::before_step (called from the workers: it must be
// thread-safe). Throws ConfigError for bad input.
std::vector<SweepResult> run_sweep(const ExperimentSource& source,
                                   const std::vector<std::string>& base_overrides,
                                   std::string out_dir, int jobs, bool progress,
                                   const StepHook& before_step = {});

// The table `sim sweep` prints (sweep_table_header and a row per result).
std::string sweep_table(const std::vector<SweepResult>& results);

// `sim sweep`'s command line.
struct SweepArgs {
  ExperimentArgs experiment;
  int jobs = 1;      // --jobs: threads (per process with --mpi); default all cores (1 with --mpi)
  bool plot = true;  // not --no-plot
  bool mpi = false;  // --mpi
};
// Throws UsageError for a misuse, HelpShown after --help.
SweepArgs parse_sweep_args(const std::vector<std::string>& args);
// What `sim sweep` prints once OUT (`dir`) is written: `table` (unless --quiet) and the "wrote"
// line, then the figures (unless --no-plot). Returns the exit code.
int report_sweep(const SweepArgs& args, const std::string& dir, const std::string& table,
                 std::size_t num_points);

// `sim sweep EXP.yaml [--out DIR] [--jobs N] [--seed N] [--set k=v]... [--no-plot] [--quiet]
// [--mpi]`. With --mpi (sim/sweep_mpi.h) the command runs as one process of an MPI job.
int sweep_command(const std::vector<std::string>& args);

}  // namespace servelab
