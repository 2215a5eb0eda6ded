// Command-line parsing shared by the commands that run an experiment (`sim run`, `sim compare`,
// `engine run`): one experiment file plus --out, --seed, --set, --record-schedule and --quiet,
// and whatever options the command adds.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "serving/config_node.h"

namespace servelab {

// A misuse of the command line; the commands print their usage with it and exit with code 2.
struct UsageError : ConfigError {
  using ConfigError::ConfigError;
};

// A non-negative decimal integer. Throws UsageError naming --seed.
std::uint64_t parse_seed(const std::string& text);

struct ExperimentArgs {
  std::string experiment;              // the one positional argument
  std::string out_dir;                 // --out / -o
  std::optional<std::uint64_t> seed;   // --seed
  std::vector<std::string> overrides;  // --set key=value (also --set=key=value), in order
  bool record_schedule = false;        // --record-schedule
  bool record_events = false;          // --record-events (events.csv)
  bool record_blocks = false;          // --record-blocks (blocks.csv)
  bool quiet = false;                  // --quiet / -q
  bool progress = false;               // --progress: a progress line even when stderr is no tty

  // Whether to print progress: --progress or stderr a terminal, never with --quiet.
  bool show_progress() const;

  // The --set overrides followed by those the flags stand for (--seed, --record-*), for commands
  // that load the experiment several times (compare, sweep).
  std::vector<std::string> all_overrides() const;
};

// Handles a command-specific option `flag`; `value()` consumes and returns its argument (or
// throws UsageError when there is none). Returns false when `flag` is not the command's.
using ExtraOption =
    std::function<bool(const std::string& flag, const std::function<std::string()>& value)>;

// Parses `args` of `command` (named in messages, e.g. "sim run"). Throws UsageError for an
// unknown option, a missing value, no experiment file or more than one.
ExperimentArgs parse_experiment_args(const std::vector<std::string>& args,
                                     const std::string& command, const ExtraOption& extra = {});

// A command's subcommand handler: its arguments after the subcommand name; returns the exit code.
using Subcommand = std::function<int(const std::vector<std::string>& args)>;

// The whole main() of a ServeLab command (`program` is "sim" or "engine"): `help` prints
// `usage`; `dispatch(name, args)` runs subcommand `name` or returns nullopt when there is none.
// Installs the SIGINT/SIGTERM handlers (core/interrupt.h). Exit codes: 2 for usage errors (with
// the usage text) and bad input (ConfigError), 128 + signal when interrupted ("interrupted; no
// output written"), 1 for any other exception, otherwise the subcommand's own.
int run_command(const char* program, const char* usage, int argc, char** argv,
                const std::function<std::optional<int>(
                    const std::string& name, const std::vector<std::string>& args)>& dispatch);

}  // namespace servelab
