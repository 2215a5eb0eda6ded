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

#include "engine/engine_driver.h"
#include "engine/profile.h"
#include "serving/cli_args.h"
#include "serving/config_node.h"
#include "serving/experiment.h"
#include "serving/output_file.h"
#include "serving/run_folder.h"

namespace {

using servelab::ConfigError;

constexpr const char* kUsage =
    "usage: engine <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  run EXP.yaml [--device cpu|cuda] [--out DIR] [--seed N] [--set key.path=value]...\n"
    "             [--weights PATH] [--kv-memory-gb G] [--record-schedule] [--tokens]\n"
    "             [--progress] [--quiet]\n"
    "      run one experiment (the same files as `sim run`) with every step executed on the\n"
    "      model and timed; arrivals are replayed in wall-clock time. Writes summary.json,\n"
    "      requests.csv, steps.csv, config.yaml (schedule.csv with --record-schedule,\n"
    "      tokens.jsonl with --tokens) to DIR (default out/<experiment name>-engine/).\n"
    "      Weights: random from the seed, or a safetensors checkpoint (--weights). KV blocks:\n"
    "      serving.num_gpu_blocks, else G GiB of fp32 K/V (default 1). The block count the\n"
    "      engine allocated is in summary.json and config.yaml; `sim run EXP --set\n"
    "      serving.num_gpu_blocks=N` simulates the same capacity.\n"
    "  profile --model M -o PROFILE.csv [--device cpu|cuda] [--reps N] [--rounds R]\n"
    "             [--warmup N] [--quick] [--max-tokens N] [--block-size N] [--weights PATH]\n"
    "             [--seed N] [--force] [--quiet]\n"
    "      time the executor over a grid of step shapes (prefill, batched prefill, chunks with\n"
    "      cached context, decode batches by context, mixed, swap, copy): N repetitions\n"
    "      (default 9) over R passes (default 3), each shape warmed up and timed back to back\n"
    "      within a pass; writes each shape's median with the cost\n"
    "      model's features and a header naming the device, date and engine version, for\n"
    "      `sim calibrate` (docs/validation.md); an existing PROFILE.csv is replaced only with\n"
    "      --force\n"
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
  options.progress = a.show_progress();
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

int parse_count(const std::string& flag, const std::string& text, int min, int max) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < min || v > max) {
    throw UsageError(flag + ": expected an integer in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], got '" + text + "'");
  }
  return static_cast<int>(v);
}

int cmd_profile(const std::vector<std::string>& args) {
  servelab::ProfileOptions o;
  bool quiet = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(a + ": expected a value");
      return args[++i];
    };
    if (a == "--model") {
      o.model = value();
    } else if (a == "-o" || a == "--out") {
      o.out = value();
    } else if (a == "--device") {
      o.device = value();
    } else if (a.rfind("--device=", 0) == 0) {
      o.device = a.substr(9);
    } else if (a == "--reps") {
      o.reps = parse_count(a, value(), 1, 1000);
    } else if (a == "--rounds") {
      o.rounds = parse_count(a, value(), 1, 1000);
    } else if (a == "--warmup") {
      o.warmup = parse_count(a, value(), 0, 1000);
    } else if (a == "--max-tokens") {
      o.max_tokens = parse_count(a, value(), 16, 1 << 20);
    } else if (a == "--block-size") {
      o.block_size = parse_count(a, value(), 1, 256);
    } else if (a == "--weights") {
      o.weights = value();
    } else if (a == "--seed") {
      o.seed = servelab::parse_seed(value());
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--force") {
      o.force = true;
    } else if (a == "--quiet" || a == "-q") {
      quiet = true;
    } else {
      throw UsageError("engine profile: unknown argument '" + a + "'");
    }
  }
  if (o.device != "cpu" && o.device != "cuda") {
    throw UsageError("--device: expected cpu or cuda, got '" + o.device + "'");
  }
  if (o.model.empty()) throw UsageError("engine profile: --model M is required");
  if (o.out.empty()) throw UsageError("engine profile: -o PROFILE.csv is required");
  // Before the (long) profile: an existing file only with --force, never an input.
  servelab::check_output_file(o.out, {o.weights, o.model}, o.force);
  const auto start = std::chrono::steady_clock::now();
  const std::size_t shapes =
      servelab::run_profile(o, !quiet && isatty(STDERR_FILENO) ? stderr : nullptr);
  if (!quiet) {
    std::printf("profiled %zu step shapes of %s on %s in %.1f s; wrote %s\n", shapes,
                o.model.c_str(), servelab::cpu_device_name().c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                o.out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return servelab::run_command(
      "engine", kUsage, argc, argv,
      [](const std::string& cmd, const std::vector<std::string>& args) -> std::optional<int> {
        if (cmd == "run") return cmd_run(args);
        if (cmd == "profile") return cmd_profile(args);
        return std::nullopt;
      });
}
