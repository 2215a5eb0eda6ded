#include "serving/cli_args.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "serving/home.h"
#include "serving/interrupt.h"

namespace servelab {

std::uint64_t parse_seed(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || *end != '\0' || errno != 0) {
    throw UsageError("--seed: expected a non-negative integer, got '" + text + "'");
  }
  return v;
}

std::vector<std::string> ExperimentArgs::all_overrides() const {
  std::vector<std::string> out = overrides;
  if (seed) out.push_back("seed=" + std::to_string(*seed));
  if (record_schedule) out.push_back("outputs.record_schedule=true");
  if (record_events) out.push_back("outputs.record_events=true");
  if (record_blocks) out.push_back("outputs.record_blocks=true");
  return out;
}

bool ExperimentArgs::show_progress() const { return !quiet && (progress || isatty(STDERR_FILENO)); }

ExperimentArgs parse_experiment_args(const std::vector<std::string>& args,
                                     const std::string& command, const ExtraOption& extra) {
  ExperimentArgs out;
  bool have_experiment = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::function<std::string()> value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(a + ": expected a value");
      return args[++i];
    };
    if (a == "--out" || a == "-o") {
      out.out_dir = value();
    } else if (a == "--seed") {
      out.seed = parse_seed(value());
    } else if (a == "--set") {
      out.overrides.push_back(value());
    } else if (a.rfind("--set=", 0) == 0) {
      out.overrides.push_back(a.substr(6));
    } else if (a == "--record-schedule") {
      out.record_schedule = true;
    } else if (a == "--record-events") {
      out.record_events = true;
    } else if (a == "--record-blocks") {
      out.record_blocks = true;
    } else if (a == "--quiet" || a == "-q") {
      out.quiet = true;
    } else if (a == "--progress") {
      out.progress = true;
    } else if (extra && extra(a, value)) {
      continue;
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError(command + ": unknown option '" + a + "'");
    } else if (!have_experiment) {
      out.experiment = a;
      have_experiment = true;
    } else {
      throw UsageError(command + ": more than one experiment file given ('" + out.experiment +
                       "', '" + a + "')");
    }
  }
  if (!have_experiment) {
    throw UsageError(command + ": expected an experiment file (" + command + " EXP.yaml)");
  }
  return out;
}

int run_command(const char* program, const char* usage, int argc, char** argv,
                const std::function<std::optional<int>(
                    const std::string& name, const std::vector<std::string>& args)>& dispatch) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(usage, stderr);
    return 2;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  install_interrupt_handlers();
  try {
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      std::fputs(usage, stdout);
      return 0;
    }
    if (const std::optional<int> code = dispatch(cmd, args)) return *code;
    throw UsageError("unknown command '" + cmd + "' (try: " + program + " help)");
  } catch (const Interrupted& e) {
    // Whatever was being written was temporary (StagedDir, AtomicFile) and is gone.
    std::fprintf(stderr, "\n%s: interrupted; no output written\n", program);
    return 128 + e.signal();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    std::fputs(usage, stderr);
    return 2;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 2;
  } catch (const HomeError& e) {  // the install is incomplete or SERVELAB_HOME is wrong
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace servelab
