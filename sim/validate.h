// sim validate: how far a simulated run is from the engine's run of the same experiment.
//
// Inputs are two run folders (summary.json, requests.csv, steps.csv, config.yaml, and
// schedule.csv where recorded). Every error is defined in docs/validation.md; in short, with
// sim the simulator's figure and eng the engine's:
//   relative error  (sim - eng) / eng          (signed; tables show |.| unless marked)
//   step time       per step |sim - eng| / eng over steps both ran with the same shape (paired),
//                   and the sim's cost model replayed on every engine step (replay)
//   per request     |sim - eng| / eng of TTFT, TPOT, E2E, joined by request id over requests
//                   finished in both; summarised by mean, p50, p90, p99, max (+ signed mean)
//   aggregates      signed relative error of throughput, TTFT/TPOT/E2E p50 and p99, ...
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/step_plan.h"
#include "sim/calibrated_cost_model.h"
#include "sim/calibration.h"
#include "sim/error_stats.h"
#include "sim/latency_attribution.h"
#include "sim/replay_by_kind.h"

namespace servelab {

struct AggregateError {
  std::string metric;  // e.g. "throughput.output_tokens_per_s", "ttft_ms.p50"
  double sim = 0, engine = 0;
  std::optional<double> error;  // (sim - engine) / engine; none when engine is 0
};

struct ValidationReport {
  std::string sim_dir, engine_dir;
  // What produced the measured folder, from its summary.json "backend": "bench" for `sim bench`
  // against a server, "engine" otherwise (the JSON keys say "engine" for either).
  std::string measured_label = "engine";
  std::vector<std::string> warnings;  // configuration differences that do not prevent comparing
  std::int64_t sim_steps = 0, engine_steps = 0;

  // Schedules: "identical", "differ" or "not compared" (a folder lacks schedule.csv).
  std::string schedule = "not compared";
  std::optional<std::int64_t> first_differing_step;
  std::string schedule_detail;  // what differs at that step, or why it was not compared

  // Step time, paired: the k-th executed step of both runs (the k-th row of steps.csv), for
  // every k before the first executed step whose shape differs (`paired_basis`:
  // "schedule.csv" or "steps.csv shapes"). `first_differing_step` counts executed steps too
  // (step indices have gaps where an idle engine formed empty plans).
  ErrorStats step_paired;
  std::string paired_basis;
  // Step time, replayed: the simulator's cost model predicting every engine step (needs the
  // engine's schedule.csv and requests.csv).
  std::optional<ErrorStats> step_replay;
  std::string replay_cost_model;  // "calibrated (FILE)" or "roofline (HARDWARE)"
  // Each replayed engine step (the data of the predicted-against-measured figure, replay.csv).
  using ReplayedStep = servelab::ReplayedStep;
  std::vector<ReplayedStep> replayed;
  // The replayed error by step kind (sim/replay_by_kind.h); empty when nothing was replayed.
  std::vector<StepKindError> replayed_by_kind;

  std::int64_t requests_compared = 0;
  ErrorStats ttft, tpot, e2e;
  // The requests' TTFT and TPOT re-timed on the engine's schedule (sim/latency_attribution.h):
  // measured, steps back to back, steps as the cost model prices them, the simulator. Present
  // when the steps were replayed.
  std::optional<LatencyAttribution> latency;
  std::vector<AggregateError> aggregates;
};

// Throws ConfigError when a folder lacks a required file, a file is malformed, or the two
// config.yaml files describe different workloads (workload section, seed or model).
// `cost_model_file`: a cost.yaml for the replay instead of the one the sim run used.
ValidationReport validate_runs(const std::string& sim_dir, const std::string& engine_dir,
                               const std::string& cost_model_file = "");

void print_validation(std::FILE* out, const ValidationReport& report);
// validation.json (nlohmann ordered keys; fractions, not percent).
std::string validation_json(const ValidationReport& report);

// replay.csv: one row per replayed engine step with a positive measured duration (step,
// num_seqs, prefill_tokens, decode_tokens, decode_context_tokens, measured_ms, predicted_ms);
// the header alone when nothing was replayed.
std::string replay_csv(const ValidationReport& report);

// Checks `dir` as the folder of a validation report (sim validate --out, Python's
// Validation.save): absent, empty, or a previous report's (validation.json, replay.csv and the
// figures `sim plot` drew there), which it replaces only with `force`; never inside one of
// `inputs` (run folders) and never a symlink. Throws ConfigError naming the folder otherwise.
void check_validation_dir(const std::string& dir, const std::vector<std::string>& inputs,
                          bool force);

// Writes a report into `dir` after check_validation_dir(dir, inputs, force): creates the folder,
// removes the previous report's figures (they drew the report being replaced; `sim plot` draws
// the new one's), then writes validation.json and replay.csv (each atomically). Throws ConfigError.
void write_validation_dir(const std::string& dir, const std::vector<std::string>& inputs,
                          bool force, const std::string& json, const std::string& csv);

// `sim validate SIM_DIR ENGINE_DIR [--out DIR] [--cost-model FILE] [--quiet]`: writes
// DIR/validation.json and DIR/replay.csv; returns the exit code, throws UsageError /
// ConfigError.
int validate_command(const std::vector<std::string>& args);
// The engine's executed steps rebuilt from a run folder recorded with --record-schedule
// (schedule.csv, requests.csv, steps.csv): each step's plan (entries with positions, kinds and
// whether they sample; swap block counts) and its measured duration.
struct EngineStep {
  std::int64_t step = 0;  // the index in steps.csv
  StepPlan plan;          // entries carry their request ids
  double measured_s = 0;
  double start_s = 0;  // steps.csv start_s (0 where a hand-written file lacks the column)
};
std::vector<EngineStep> engine_steps(const std::string& engine_dir);

// Host overhead the profile cannot see (the engine loop's scheduling and bookkeeping around
// execute()): fits measured - predicted over an engine run's steps as step_s + per_sequence_s x
// entries (relative errors, Huber-weighted: sim/huber_nnls.h; both >= 0) and adds them to
// `profile`'s coefficients. With `between_steps`, a step's measured time is its period: its
// duration plus the time until the next step starts when the next continues one of its requests
// (the loop's work after a step; the gap before an idle spell is not known and not added).
HostOverhead fit_host_overhead(const std::string& engine_dir, CalibratedProfile& profile,
                               bool between_steps = false);

// What `sim calibrate` computes from a profile (its file is read here): the fit (every
// `holdout`-th shape of each family held out when holdout >= 2; 0 fits them all), the host
// overhead fitted on `engine_run` when not empty, and the cost.yaml text naming `profile_label`
// as its profile. Throws ConfigError for a bad profile or engine run.
struct ProfileCalibration {
  CalibrationResult result;
  std::optional<HostOverhead> host;
  std::string yaml;
};
// With `host_overhead_from` (an earlier cost.yaml of the profile's model) instead of an engine
// run, that file's host overhead is added as it was fitted (read_host_overhead). REQUIRES: not
// both.
ProfileCalibration calibrate_profile(const std::string& profile_path, int holdout,
                                     const std::string& engine_run,
                                     const std::string& profile_label,
                                     const std::string& host_overhead_from = "",
                                     bool between_steps = false);

// The host_overhead section of an earlier calibration of `model` (a cost.yaml that `sim calibrate
// --engine-run` wrote), marked carried: for refitting a profile whose engine run is not at hand
// (`sim calibrate --host-overhead-from`). Throws ConfigError naming the file and key for a
// missing file or section, another model, or a bad value (a negative time, a wrong type).
HostOverhead read_host_overhead(const std::string& cost_yaml, const std::string& model);
// What `sim calibrate` prints of it (without the "wrote" line).
void print_profile_calibration(std::FILE* out, const ProfileCalibration& c);

// `sim calibrate PROFILE.csv -o COST.yaml [--engine-run ENGINE_DIR] [--quiet]`.
int calibrate_command(const std::vector<std::string>& args);

}  // namespace servelab
