// Command-line plumbing shared by every command of `sim` and `engine`, over CLI11.
//
// Each subcommand describes its options on a CLI::App (cli::command) and parses its arguments
// with cli::parse, which gives every subcommand the same behaviour:
//   - `--help` / `-h` prints the subcommand's options to stdout; the program exits 0;
//   - a usage error (an unknown option, a missing or malformed value, a missing or extra
//     argument) is a UsageError "COMMAND: OPTION: what was expected, got what": exit code 2;
//   - values are checked by validators that say what they expect (cli::seed_value, ...).
// run_command is the whole main() of a program: it dispatches to the subcommand and maps
// exceptions to exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serving/config_node.h"

namespace servelab {

// A misuse of the command line: exit code 2, with a pointer to the command's --help.
struct UsageError : ConfigError {
  using ConfigError::ConfigError;
};

// Thrown by cli::parse after printing a command's --help; run_command exits 0 on it.
struct HelpShown {};

// A decimal integer in [0, 2^63-1] (the experiment's `seed:` range). Throws UsageError naming
// --seed.
std::uint64_t parse_seed(const std::string& text);

// The options of the commands that run an experiment (`sim run`, `sim compare`, `sim sweep`,
// `engine run`): one experiment file plus the flags below, and whatever the command adds.
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

// `message` safe for a terminal: control bytes other than newline and tab (a NUL, an escape
// sequence from a binary file quoted in the message) as \xNN, and at most 4,000 bytes.
std::string printable(std::string_view message);

namespace cli {

// A subcommand's parser: `name` is how messages and --help name it ("sim run"), `description`
// the paragraph --help prints above the options.
std::unique_ptr<CLI::App> command(const std::string& name, const std::string& description);

// Parses `args` (the arguments after the subcommand name) with `app`. Positional arguments
// beyond those `app` declares and options it does not know are usage errors. Throws HelpShown
// after printing --help, UsageError for a misuse.
void parse(CLI::App& app, const std::vector<std::string>& args);

// Validators whose messages read "OPTION: expected ..., got 'TEXT'".
CLI::Validator integer_in(std::int64_t min, std::int64_t max);   // a decimal integer in range
CLI::Validator one_of(const std::vector<std::string>& choices);  // one of the words
CLI::Validator seed_value();                                     // a non-negative integer
CLI::Validator non_empty(const std::string& what);  // any text but "" ("expected WHAT, ...")

// The common options (--quiet/-q, --force, --out/-o).
CLI::Option* add_quiet(CLI::App& app, bool& quiet);
CLI::Option* add_force(CLI::App& app, bool& force, const std::string& what);
CLI::Option* add_out(CLI::App& app, std::string& out, const std::string& what);

// Throws UsageError for two different --set values of one key ("--set K: given more than
// once", the later would silently win; the same assignment twice is harmless) and for --set
// seed=N beside --seed (`seed_given`).
void check_overrides(const std::vector<std::string>& overrides, bool seed_given);

// Adds the experiment options (the positional EXP.yaml, --out/-o, --seed, --set,
// --record-schedule, --record-events, --record-blocks, --quiet/-q, --progress) to `app`.
void add_experiment_options(CLI::App& app, ExperimentArgs& args);

}  // namespace cli

// Parses `args` of `command` (named in messages, e.g. "sim run") with the experiment options
// plus those `add_extra` declares. Throws UsageError for an unknown option, a missing value, no
// experiment file or more than one; HelpShown after --help.
ExperimentArgs parse_experiment_args(const std::vector<std::string>& args,
                                     const std::string& command,
                                     const std::function<void(CLI::App&)>& add_extra = {},
                                     const std::string& description = "");

// The whole main() of a ServeLab command (`program` is "sim" or "engine"): `help`, `--help`
// and `-h` print `usage` (exit 0), `help NAME` subcommand NAME's --help (an unknown NAME is a
// usage error, exit 2); `dispatch(name, args)` runs subcommand `name` or returns nullopt when
// there is none. Installs the SIGINT/SIGTERM handlers (core/interrupt.h). Exit
// codes: 0 after a subcommand's --help, 2 for usage errors (the message and a pointer to the
// subcommand's --help) and bad input (ConfigError, HomeError), 128 + signal when interrupted
// ("interrupted; no output written"), 1 for any other exception, otherwise the subcommand's own.
int run_command(const char* program, const char* usage, int argc, char** argv,
                const std::function<std::optional<int>(
                    const std::string& name, const std::vector<std::string>& args)>& dispatch);

}  // namespace servelab
