#include "sim/plot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "serving/cli.h"
#include "serving/config_node.h"
#include "serving/figures_folder.h"
#include "serving/home.h"
#include "serving/interrupt.h"
#include "serving/output_file.h"

extern char** environ;

namespace servelab {

namespace fs = std::filesystem;

PlotArgs parse_plot_args(const std::vector<std::string>& args) {
  PlotArgs out;
  const auto app = cli::command(
      "sim plot",
      "Figures from run, compare, sweep or validation folders: latency CDFs, throughput and KV "
      "usage over time, batch composition, request Gantt (needs schedule.csv), KV block map "
      "(needs blocks.csv), curves and bars per variant, predicted against measured step time "
      "(`sim validate` folders).");
  app->add_option("RUN_DIR", out.inputs, "run, compare, sweep or validation folders");
  cli::add_out(*app, out.out_dir, "the figures' folder (default RUN_DIR/figures)");
  app->add_option("--format", out.format, "the figures' format (default png)")
      ->check(cli::one_of({"png", "svg", "pdf"}));
  cli::add_quiet(*app, out.quiet);
  cli::parse(*app, args);
  if (out.inputs.empty()) {
    throw UsageError("sim plot: expected at least one run folder (sim plot RUN_DIR...)");
  }
  return out;
}

std::string plot_input_kind(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw ConfigError(dir + ": no such folder");
  if (!fs::is_directory(dir, ec)) throw ConfigError(dir + ": not a folder");
  // A folder of that name (a variant called summary.json) is none of these files.
  const auto has = [&](const char* name) { return fs::is_regular_file(fs::path(dir) / name, ec); };
  if (has("summary.json")) {
    // Checked here too (servelab_plot.py does the same) so a corrupt file is one clear line.
    const std::string path = (fs::path(dir) / "summary.json").string();
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ConfigError(path + ": cannot read");
    nlohmann::json summary;
    try {
      summary = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(path + ": not valid JSON: " + e.what());
    }
    // The script reads the run's keys from it (run, requests, ...): anything but an object
    // would end there in a traceback.
    if (!summary.is_object()) {
      throw ConfigError(path + ": expected a JSON object (a run's summary), got " +
                        std::string(summary.type_name()));
    }
    return "run";
  }
  if (has("sweep.csv")) return "sweep";
  if (has("compare.csv")) return "compare";
  if (has("validation.json")) {
    // The figure is drawn from replay.csv, which `sim validate` writes beside validation.json.
    if (!has("replay.csv")) {
      throw ConfigError(dir +
                        ": a `sim validate` folder without replay.csv (written by sim validate "
                        "since the replay figure exists): run sim validate again");
    }
    return "validation";
  }
  throw ConfigError(dir +
                    ": not a run folder (no summary.json), a `sim compare` / `sim sweep` folder "
                    "(no compare.csv or sweep.csv) nor a `sim validate` folder (no "
                    "validation.json)");
}

std::string plot_script_path() {
  if (const char* s = std::getenv("SERVELAB_PLOT_SCRIPT"); s && *s) return s;
  return home_path("sim/plot/servelab_plot.py");
}

std::string plot_python() {
  if (const char* s = std::getenv("SERVELAB_PYTHON"); s && *s) return s;
  std::error_code ec;
  if (fs::exists("/usr/bin/python3", ec)) return "/usr/bin/python3";
  return "python3";
}

int run_plot(const PlotArgs& args) {
  for (const std::string& in : args.inputs) plot_input_kind(in);
  const std::string script = plot_script_path();
  std::error_code ec;
  if (!fs::exists(script, ec)) {
    throw ConfigError(script + ": plot script not found (set SERVELAB_HOME to the source tree)");
  }
  const std::string out_dir =
      args.out_dir.empty() ? (fs::path(args.inputs.front()) / "figures").string() : args.out_dir;
  check_figures_dir(out_dir, "refusing to write figures there (choose another -o)");
  StagedDir stage(out_dir);
  std::vector<std::string> argv_s = {plot_python(),     script,     "--out",    out_dir, "--stage",
                                     stage.temp_path(), "--format", args.format};
  if (args.quiet) argv_s.push_back("--quiet");
  argv_s.insert(argv_s.end(), args.inputs.begin(), args.inputs.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (rc != 0) {
    throw ConfigError(argv_s[0] + ": cannot start the plotting interpreter (" + std::strerror(rc) +
                      "; SERVELAB_PYTHON names another)");
  }
  // Waited for in steps, so that an interrupt sent to this process alone (kill -INT) stops the
  // script too; Ctrl-C reaches both (the script then exits quietly) and is reported as one.
  int status = 0;
  bool stopped = false;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) throw std::runtime_error("waitpid failed");
    if (interrupt_signal() != 0 && !stopped) {
      kill(pid, SIGTERM);
      stopped = true;
    }
    usleep(20'000);
  }
  throw_if_interrupted();  // nothing committed: the staged figures go with `stage`
  if (!WIFEXITED(status)) {
    std::fprintf(stderr, "sim: error: the plot script (%s) ended by signal %d\n", argv_s[0].c_str(),
                 WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return 1;
  }
  const int code = WEXITSTATUS(status);
  if (code == 2 || code == 3) return code;  // its own error message, or matplotlib missing
  if (code != 0) {
    std::fprintf(stderr, "sim: error: the plot script (%s %s) failed with exit code %d\n",
                 argv_s[0].c_str(), script.c_str(), code);
    return 1;
  }
  std::vector<std::string> written;
  for (const auto& entry : fs::directory_iterator(stage.temp_path(), ec)) {
    written.push_back(entry.path().filename().string());
  }
  if (ec) throw_io_error(stage.temp_path(), "listing", ec.value());
  // Again: a file of the user's that appeared in the folder while the script drew (a figure's
  // name saved by hand meanwhile) would be replaced without a word.
  check_figures_dir(out_dir, "refusing to write figures there (choose another -o)");
  write_figures_manifest(stage.temp_path(), out_dir, written);
  stage.commit_entries();
  return 0;
}

int plot_command(const std::vector<std::string>& args) {
  const int code = run_plot(parse_plot_args(args));
  if (code == 3) {
    std::fprintf(stderr,
                 "sim: error: matplotlib is missing (apt-get install python3-matplotlib, or set "
                 "SERVELAB_PYTHON to an interpreter that has it)\n");
    return 1;
  }
  return code;
}

}  // namespace servelab
