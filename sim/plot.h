// `sim plot`: figures from run folders, drawn by the Python script shipped in the repository
// (sim/plot/servelab_plot.py, matplotlib).
//
// The C++ side checks the arguments (each input must be a run folder, holding summary.json, or a
// `sim compare` / `sim sweep` folder, holding compare.csv / sweep.csv) and runs the script with
// an argument vector (no shell). The script is sim/plot/servelab_plot.py under the ServeLab home
// (serving/home.h: $SERVELAB_HOME, else found from the executable's folder); $SERVELAB_PLOT_SCRIPT
// names the script itself and $SERVELAB_PYTHON the interpreter (default /usr/bin/python3, Debian's,
// which has python3-matplotlib; `python3` on PATH otherwise).
#pragma once

#include <string>
#include <vector>

namespace servelab {

struct PlotArgs {
  std::vector<std::string> inputs;  // run, compare or sweep folders, in order
  std::string out_dir;              // -o/--out; empty: <first input>/figures
  std::string format = "png";       // png, svg or pdf
  bool quiet = false;
};

// Parses `sim plot` arguments. Throws UsageError for an unknown option, a bad --format or no
// input folder.
PlotArgs parse_plot_args(const std::vector<std::string>& args);

// What an input folder is: "run", "compare", "sweep" or "validation" (a `sim validate` folder:
// validation.json and replay.csv). Throws ConfigError naming the folder when it does not exist
// or is none of them, when a run folder's summary.json is not valid JSON ("PATH: not valid
// JSON: ...") or not a JSON object, or when a validation folder lacks replay.csv.
std::string plot_input_kind(const std::string& dir);

// The script and interpreter `sim plot` runs (see the top of this file).
std::string plot_script_path();
std::string plot_python();

// Validates the inputs and the figures' folder (serving/figures_folder.h: absent, empty or one
// that `sim plot` wrote; ConfigError otherwise), then runs the script into a staged folder
// beside it whose figures replace those of the same names, with the manifest, only when the
// script succeeded: a refused input leaves no figure. Returns the script's exit status: 0 when
// every figure was written, 2 for input it refused, 3 when matplotlib is missing, 1 otherwise.
// Throws std::runtime_error when the interpreter cannot be started.
int run_plot(const PlotArgs& args);

// `sim plot RUN_DIR... [-o DIR] [--format png|svg|pdf] [--quiet]`: the exit code.
int plot_command(const std::vector<std::string>& args);

}  // namespace servelab
