// The `sim` command. Exit codes: 0 success, 2 bad input or usage (the message names the file,
// line or key), 1 an internal error.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "policies/policies_cli.h"
#include "serving/cli.h"
#include "serving/config_node.h"
#include "serving/experiment.h"
#include "sim/bench.h"
#include "sim/compare.h"
#include "sim/plot.h"
#include "sim/run.h"
#include "sim/sweep.h"
#include "sim/validate.h"
#include "traces/trace_stats.h"

namespace {

using servelab::ConfigError;

constexpr const char* kUsage =
    "usage: sim <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  run EXP.yaml [--out DIR] [--seed N] [--set key.path=value]... [--record-schedule]\n"
    "             [--record-events] [--record-blocks] [--progress] [--quiet]\n"
    "      simulate one experiment; writes summary.json, requests.csv, steps.csv, config.yaml\n"
    "      (and schedule.csv, events.csv, blocks.csv when asked) to DIR (default\n"
    "      out/<experiment name>/)\n"
    "  compare EXP.yaml [--out DIR] [--seed N] [--set key.path=value]...\n"
    "             [--variant NAME:key=value,key=value]... [--record-schedule] [--record-events]\n"
    "             [--record-blocks] [--progress] [--quiet]\n"
    "      run the variants of the experiment's `compare:` section (or those given with\n"
    "      --variant) on the same workload and seed; prints a table, writes DIR/compare.csv\n"
    "      and DIR/<variant>/ (default DIR: out/<experiment name>-compare)\n"
    "  sweep EXP.yaml [--out DIR] [--jobs N] [--seed N] [--set key.path=value]... [--no-plot]\n"
    "             [--record-schedule] [--record-events] [--record-blocks] [--progress]\n"
    "             [--quiet] [--mpi]\n"
    "      run every point of the experiment's `sweep:` grid (key.path: [values]) on N threads\n"
    "      (default: all cores); writes DIR/sweep.csv, DIR/<point>/ and DIR/figures/ (default\n"
    "      DIR: out/<experiment name>-sweep); the files do not depend on N; with --mpi, under\n"
    "      `mpirun -np P`, the points are shared among P processes (N threads each, default 1)\n"
    "  plot RUN_DIR... [-o DIR] [--format png|svg|pdf] [--quiet]\n"
    "      figures from run, compare or sweep folders: latency CDFs, throughput and KV usage\n"
    "      over time, batch composition, request Gantt (needs schedule.csv), KV block map\n"
    "      (needs blocks.csv), curves and bars per variant, predicted against measured step\n"
    "      time (`sim validate` folders); default DIR: RUN_DIR/figures\n"
    "  calibrate PROFILE.csv -o COST.yaml [--engine-run ENGINE_DIR [--between-steps] |\n"
    "             --host-overhead-from EARLIER.yaml] [--holdout N] [--force] [--quiet]\n"
    "      fit the calibrated cost model to an `engine profile` (NNLS over the roofline's\n"
    "      operators), plus the engine loop's host overhead from an engine run folder recorded\n"
    "      with --record-schedule (or as an earlier calibration of the model fitted it); prints\n"
    "      the fit error per shape family (--holdout N: fits all but every N-th shape of each\n"
    "      family and reports the error on those); use it with\n"
    "      `--set cost_model.file=COST.yaml` (docs/validation.md)\n"
    "  calibrate PROFILE.csv --power --hardware NAME [--model NAME|PATH] [-o ENTRY.yaml]\n"
    "             [--holdout N] [--force]\n"
    "      fit the hardware entry's power model (idle, compute and memory watts) to a CUDA\n"
    "      profile's board power readings, with the error on held-out shapes; -o writes the\n"
    "      entry with the fitted `power:` (docs/validation.md, \"Power\")\n"
    "  calibrate --vidur MLP.csv... --hardware NAME [--held-out MLP.csv...] [-o ENTRY.yaml]\n"
    "             [--force]\n"
    "      fit a hardware entry's kernel parameters to Vidur operator profiles of one GPU,\n"
    "      holding out every other token count and the --held-out profiles (docs/cost-model.md)\n"
    "  validate SIM_DIR ENGINE_DIR [--out DIR] [--cost-model COST.yaml] [--force] [--quiet]\n"
    "      compare a sim run with the engine's run of the same experiment: step-time, per-request\n"
    "      and aggregate errors, schedules step by step; writes DIR/validation.json and\n"
    "      DIR/replay.csv (each engine step measured and replayed; default DIR:\n"
    "      SIM_DIR-validation; a previous report there is replaced only with --force)\n"
    "  bench EXP.yaml --url URL [--out DIR] [--model NAME] [--max-concurrency N] [--seed N]\n"
    "             [--timeout S] [--lora-modules NAME=ID[:RANK]...] [--set key.path=value]...\n"
    "             [--progress] [--quiet]\n"
    "      replay the experiment's workload against an OpenAI-compatible server (streaming\n"
    "      /v1/completions at the arrival times), measure TTFT, ITL, TPOT and E2E as vLLM's\n"
    "      benchmark_serving does, and write summary.json and requests.csv like `sim run` "
    "(default\n"
    "      DIR: out/<experiment name>-bench/), for `sim validate SIM_DIR DIR` (docs/serving.md)\n"
    "  policies   list the policy plugins, their origins and parameters (docs/policies.md)\n"
    "  trace stats FILE [--format F]\n"
    "      requests, span, rate, inter-arrival CV, length percentiles and, where content is\n"
    "      known, the repeated-block fraction of a trace (F: azure, mooncake, burstgpt, vidur,\n"
    "      servelab; detected when omitted)\n"
    "  trace convert IN OUT [--format F] [--force]\n"
    "      rewrite any supported trace in ServeLab's own CSV format (an existing OUT is\n"
    "      replaced only with --force, and never when it is IN)\n"
    "  help       this text; `sim COMMAND --help` lists a command's options\n"
    "\n"
    "Experiment files are described in docs/experiments.md; metrics in docs/metrics.md.\n";

using servelab::UsageError;

int cmd_run(const std::vector<std::string>& args) {
  const servelab::ExperimentArgs a = servelab::parse_experiment_args(
      args, "sim run", {},
      "Simulate one experiment; writes summary.json, requests.csv, steps.csv, config.yaml (and "
      "schedule.csv, events.csv, blocks.csv when asked) to the run folder (default "
      "out/<experiment name>/).");
  servelab::ExperimentConfig config = servelab::load_experiment(a.experiment, a.overrides, a.seed);
  if (a.record_schedule) config.outputs.record_schedule = true;
  if (a.record_events) config.outputs.record_events = true;
  if (a.record_blocks) config.outputs.record_blocks = true;
  servelab::RunOptions options;
  options.out_dir = a.out_dir;
  const bool quiet = a.quiet;
  options.progress = a.show_progress();
  const auto start = std::chrono::steady_clock::now();
  const servelab::RunOutput run = servelab::run_simulation(config, options);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!quiet) {
    servelab::print_summary(stdout, config, run);
    std::printf("  wall time %.3f s\n", wall);
  }
  return 0;
}

int cmd_compare(const std::vector<std::string>& args) {
  std::vector<std::string> variant_args;
  servelab::ExperimentArgs a = servelab::parse_experiment_args(
      args, "sim compare",
      [&](CLI::App& app) {
        app.add_option("--variant", variant_args,
                       "a variant: its name and overrides (repeatable; replaces the "
                       "experiment's compare: section)")
            ->type_name("NAME:key=value,...")
            ->allow_extra_args(false);
      },
      "Run the variants of the experiment's `compare:` section (or those given with --variant) "
      "on the same workload and seed; prints a table, writes OUT/compare.csv and OUT/<variant>/ "
      "(default OUT: out/<experiment name>-compare).");
  std::vector<servelab::Variant> variants;
  for (const std::string& v : variant_args) variants.push_back(servelab::parse_variant(v));
  const std::vector<std::string> overrides = a.all_overrides();
  const std::string* exp = &a.experiment;
  const std::string out_dir = a.out_dir;
  const bool quiet = a.quiet;
  if (variants.empty()) variants = servelab::variants_from_experiment(*exp);
  if (variants.empty()) {
    throw ConfigError(*exp + ": no variants: add a `compare:` section or pass --variant");
  }
  const auto results = servelab::run_compare(*exp, variants, overrides, out_dir, a.show_progress());
  if (!quiet) {
    servelab::print_compare_table(stdout, results);
    const std::string dir = std::filesystem::path(results.front().run.out_dir).parent_path();
    std::printf("wrote %s/compare.csv and %zu run folders\n", dir.c_str(), results.size());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return servelab::run_command(
      "sim", kUsage, argc, argv,
      [](const std::string& cmd, const std::vector<std::string>& args) -> std::optional<int> {
        if (cmd == "run") return cmd_run(args);
        if (cmd == "compare") return cmd_compare(args);
        if (cmd == "sweep") return servelab::sweep_command(args);
        if (cmd == "plot") return servelab::plot_command(args);
        if (cmd == "calibrate") return servelab::calibrate_command(args);
        if (cmd == "validate") return servelab::validate_command(args);
        if (cmd == "bench") return servelab::bench_command(args);
        if (cmd == "policies") return servelab::policies_command(args);
        if (cmd == "trace") return servelab::trace_command(args);
        return std::nullopt;
      });
}
