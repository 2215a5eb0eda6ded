// The `engine` command: runs an experiment for real on the CPU reference executor. Exit codes as
// for `sim`: 0 success, 2 bad input, usage or an unavailable device, 1 an internal error.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/config_node.h"
#include "engine/engine_driver.h"
#include "sim/cli_args.h"
#include "sim/experiment.h"
#include "sim/run.h"

namespace {

using servelab::ConfigError;

constexpr const char* kUsage =
    "usage: engine <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  run EXP.yaml [--device cpu|cuda] [--out DIR] [--seed N] [--set key.path=value]...\n"
    "             [--weights PATH] [--kv-memory-gb G] [--record-schedule] [--tokens] [--quiet]\n"
    "      run one experiment (the same files as `sim run`) with every step executed on the\n"
    "      model and timed; arrivals are replayed in wall-clock time. Writes summary.json,\n"
    "      requests.csv, steps.csv, config.yaml (schedule.csv with --record-schedule,\n"
    "      tokens.jsonl with --tokens) to DIR (default out/<experiment name>-engine/).\n"
    "      Weights: random from the seed, or a safetensors checkpoint (--weights). KV blocks:\n"
    "      serving.num_gpu_blocks, else G GiB of fp32 K/V (default 1). The block count the\n"
    "      engine allocated is in summary.json and config.yaml; `sim run EXP --set\n"
    "      serving.num_gpu_blocks=N` simulates the same capacity.\n"
    "  help       this text\n"
    "\n"
    "Experiment files are described in docs/experiments.md; the engine in docs/engine.md.\n";

using servelab::UsageError;

double parse_gib(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v > 0) || v > 1e6) {
    throw UsageError("--kv-memory-gb: expected a positive number of GiB, got '" + text + "'");
  }
  return v;
}

int cmd_run(const std::vector<std::string>& args) {
  servelab::EngineOptions options;
  const servelab::ExperimentArgs a = servelab::parse_experiment_args(
      args, "engine run", [&](const std::string& flag, const std::function<std::string()>& value) {
        if (flag == "--device") {
          options.device = value();
        } else if (flag.rfind("--device=", 0) == 0) {
          options.device = flag.substr(9);
        } else if (flag == "--weights") {
          options.weights = value();
        } else if (flag == "--kv-memory-gb") {
          options.kv_memory_gib = parse_gib(value());
        } else if (flag == "--tokens") {
          options.write_tokens = true;
        } else {
          return false;
        }
        return true;
      });
  options.out_dir = a.out_dir;
  if (options.device != "cpu" && options.device != "cuda") {
    throw UsageError("--device: expected cpu or cuda, got '" + options.device + "'");
  }
  const bool record_schedule = a.record_schedule, quiet = a.quiet;
  servelab::ExperimentConfig config = servelab::load_experiment(a.experiment, a.overrides, a.seed);
  if (record_schedule) config.outputs.record_schedule = true;
  options.progress = !quiet && isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  const servelab::RunOutput run = servelab::run_engine(config, options);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!quiet) {
    servelab::print_summary(stdout, config, run);
    std::printf("  wall time %.3f s (including model setup)\n", wall);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return servelab::run_command(
      "engine", kUsage, argc, argv,
      [](const std::string& cmd, const std::vector<std::string>& args) -> std::optional<int> {
        if (cmd == "run") return cmd_run(args);
        return std::nullopt;
      });
}
