#include "serving/cli.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "serving/config_node.h"
#include "serving/home.h"
#include "serving/interrupt.h"

namespace servelab {

std::string printable(std::string_view message) {
  std::string out;
  for (const char c : message.substr(0, 4000)) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  if (message.size() > 4000) out += "...";
  return out;
}

namespace {

// "a", "a or b", "a, b or c".
std::string or_list(const std::vector<std::string>& words) {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i) out += i + 1 == words.size() ? " or " : ", ";
    out += words[i];
  }
  return out;
}

std::optional<std::int64_t> to_integer(const std::string& text) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

}  // namespace

std::uint64_t parse_seed(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  // The experiment's `seed:` range (and Python's): a larger value would be refused there.
  if (text.empty() || text[0] == '-' || *end != '\0' || errno != 0 ||
      v > static_cast<unsigned long long>(INT64_MAX)) {
    throw UsageError("--seed: expected an integer from 0 to 2^63-1, got '" + text + "'");
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

namespace cli {

std::unique_ptr<CLI::App> command(const std::string& name, const std::string& description) {
  auto app = std::make_unique<CLI::App>(description, name);
  app->set_help_flag("-h,--help", "print this help and exit");
  app->allow_extras();  // reported by parse() as "unknown option" / "unexpected argument"
  app->get_formatter()->column_width(34);
  return app;
}

void parse(CLI::App& app, const std::vector<std::string>& args) {
  const std::string& name = app.get_name();
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    throw HelpShown{};
  } catch (const CLI::ArgumentMismatch& e) {
    // "--set: 1 required TEXT missing": name the option and what it needs.
    // "--seed: At Most 1 required but received 2": the option was given twice.
    const std::string what = e.what();
    const std::string option = what.substr(0, what.find(':'));
    if (what.find("At Most") != std::string::npos) {
      throw UsageError(name + ": " + option + ": given more than once (it takes one value)");
    }
    throw UsageError(name + ": " + option + ": expected a value");
  } catch (const CLI::ParseError& e) {
    throw UsageError(name + ": " + e.what());
  }
  // CLI11 gives an option that wants a value the next argument whatever it is: `--out --quiet`
  // wrote a folder named --quiet. A value spelled like an option (--x, -x; a negative number is
  // not), or empty (which would mean the default without a word), is refused.
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_min() < 1 || opt->count() == 0) continue;
    const std::string option = opt->get_name();
    for (const std::string& value : opt->results()) {
      if (value.empty()) {
        throw UsageError(name + ": " + option + ": expected a value, got an empty one");
      }
      if (value.starts_with("--") || (value.size() >= 2 && value[0] == '-' &&
                                      std::isalpha(static_cast<unsigned char>(value[1])))) {
        throw UsageError(name + ": " + option + ": expected a value, got the option '" + value +
                         "' (write ./" + value + " for a path of that name)");
      }
    }
  }
  for (const std::string& extra : app.remaining()) {
    if (extra == "--") continue;
    if (extra.size() > 1 && extra[0] == '-') {
      throw UsageError(name + ": unknown option '" + extra + "'");
    }
    throw UsageError(name + ": unexpected argument '" + extra + "'");
  }
}

CLI::Validator integer_in(std::int64_t min, std::int64_t max) {
  const std::string expected =
      "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const std::optional<std::int64_t> v = to_integer(text);
        if (v && *v >= min && *v <= max) return "";
        return "expected " + expected + ", got '" + text + "'";
      },
      "INT in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
}

CLI::Validator one_of(const std::vector<std::string>& choices) {
  std::string desc;
  for (const std::string& c : choices) desc += (desc.empty() ? "" : "|") + c;
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        for (const std::string& c : choices) {
          if (text == c) return "";
        }
        return "expected " + or_list(choices) + ", got '" + text + "'";
      },
      desc);
}

CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          parse_seed(text);
        } catch (const UsageError&) {
          return "expected an integer from 0 to 2^63-1, got '" + text + "'";
        }
        return "";
      },
      "0 <= N < 2^63");
}

CLI::Option* add_quiet(CLI::App& app, bool& quiet) {
  return app.add_flag("-q,--quiet", quiet, "print nothing but errors");
}

CLI::Option* add_force(CLI::App& app, bool& force, const std::string& what) {
  return app.add_flag("--force", force, "replace an existing " + what);
}

CLI::Option* add_out(CLI::App& app, std::string& out, const std::string& what) {
  // `--out ""` (an unset shell variable) would silently mean the default folder.
  return app.add_option("-o,--out", out, what)->type_name("PATH")->check(non_empty("a path"));
}

CLI::Validator non_empty(const std::string& what) {
  return CLI::Validator(
      [what](std::string& text) {
        return text.empty() ? "expected " + what + ", got an empty one" : std::string();
      },
      "");
}

void check_overrides(const std::vector<std::string>& overrides, bool seed_given) {
  std::vector<std::pair<std::string, std::string>> given;  // (key, the whole assignment)
  for (const std::string& o : overrides) {
    const std::string key = override_key(o);
    for (const auto& [k, earlier] : given) {
      if (k == key && earlier != o) {
        throw UsageError("--set " + key + ": given more than once, with different values ('" +
                         earlier + "', '" + o + "'; give each key one value)");
      }
      if (override_replaces(earlier, o)) {
        throw UsageError("--set " + key + ": replaces what --set " + k +
                         " set before it (it holds that key; give the key once, or set the "
                         "section first and the key after it)");
      }
    }
    given.emplace_back(key, o);
    if (seed_given && key == "seed") {
      throw UsageError("--set seed: given with --seed too (give the seed once)");
    }
  }
}

void add_experiment_options(CLI::App& app, ExperimentArgs& args) {
  add_out(app, args.out_dir, "the run folder (default out/<experiment name>...)");
  app.add_option_function<std::string>(
         "--seed", [&args](const std::string& v) { args.seed = parse_seed(v); },
         "the experiment's seed (as --set seed=N)")
      ->check(seed_value())
      ->type_name("N");
  app.add_option("--set", args.overrides,
                 "override one experiment key, e.g. --set workload.arrival.rate=5 (repeatable)")
      ->type_name("key.path=value")
      ->allow_extra_args(false);
  app.add_flag("--record-schedule", args.record_schedule,
               "write schedule.csv (every step's scheduled requests)");
  app.add_flag("--record-events", args.record_events, "write events.csv (request events)");
  app.add_flag("--record-blocks", args.record_blocks, "write blocks.csv (KV block map)");
  app.add_flag("--progress", args.progress, "a progress line even when stderr is no terminal");
  add_quiet(app, args.quiet);
}

}  // namespace cli

ExperimentArgs parse_experiment_args(const std::vector<std::string>& args,
                                     const std::string& command,
                                     const std::function<void(CLI::App&)>& add_extra,
                                     const std::string& description) {
  ExperimentArgs out;
  std::vector<std::string> files;
  const auto app = cli::command(command, description);
  app->add_option("EXP.yaml", files, "the experiment file (docs/experiments.md)");
  cli::add_experiment_options(*app, out);
  if (add_extra) add_extra(*app);
  cli::parse(*app, args);
  cli::check_overrides(out.overrides, out.seed.has_value());
  if (files.empty()) {
    throw UsageError(command + ": expected an experiment file (" + command + " EXP.yaml)");
  }
  if (files.size() > 1) {
    throw UsageError(command + ": more than one experiment file given ('" + files[0] + "', '" +
                     files[1] + "')");
  }
  out.experiment = files[0];
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
      if (args.empty()) {
        std::fputs(usage, stdout);
        return 0;
      }
      // `sim help run`: the command's own help, as `sim run --help` prints it.
      if (args.size() > 1) {
        throw UsageError("help: expected one command name, got " + std::to_string(args.size()) +
                         " arguments");
      }
      if (const std::optional<int> code = dispatch(args[0], {"--help"})) return *code;
      std::fprintf(stderr, "%s: help: unknown command '%s'\n", program, args[0].c_str());
      std::fputs(usage, stderr);
      return 2;
    }
    if (const std::optional<int> code = dispatch(cmd, args)) return *code;
    std::fprintf(stderr, "%s: unknown command '%s'\n", program, cmd.c_str());
    std::fputs(usage, stderr);
    return 2;
  } catch (const HelpShown&) {
    return 0;
  } catch (const Interrupted& e) {
    // Whatever was being written was temporary (StagedDir, AtomicFile) and is gone.
    std::fprintf(stderr, "\n%s: interrupted; no output written\n", program);
    return 128 + e.signal();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", program, printable(e.what()).c_str());
    std::fprintf(stderr, "(%s %s --help lists the options; %s help the commands)\n", program,
                 cmd.c_str(), program);
    return 2;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, printable(e.what()).c_str());
    return 2;
  } catch (const HomeError& e) {  // the install is incomplete or SERVELAB_HOME is wrong
    std::fprintf(stderr, "%s: error: %s\n", program, printable(e.what()).c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    // What was asked for does not fit this machine's memory (a huge pool, a cluster of
    // 100,000 replicas): the size of the input, not a bug; the staged outputs are gone.
    std::fprintf(stderr,
                 "%s: error: out of memory: the experiment needs more memory than this machine "
                 "has (fewer requests, replicas or KV blocks, or a larger machine); no output "
                 "written\n",
                 program);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", program, printable(e.what()).c_str());
    return 1;
  }
}

}  // namespace servelab
