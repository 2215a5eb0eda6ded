// servelab.compare / servelab.sweep / servelab.plot: the commands' functions (sim/compare.h,
// sim/sweep.h, sim/plot.h), on an experiment file or a dict's text (sim/variant_loader.h). compare
// and sweep run into a temporary folder of runs whose files come back as bytes
// (python/run_files.h); their save writes that folder with the commands' rules (check_group_dir,
// staged, entries moved in). Once a Python policy has been registered, every run of a compare or
// sweep checks the scheduler's invariants (python/invariant_hook.h). plot runs the same script as
// `sim plot`.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "python/bindings.h"
#include "python/invariant_hook.h"
#include "python/python_plugins.h"
#include "python/run_files.h"
#include "serving/interrupt.h"
#include "serving/output_file.h"
#include "serving/run_folder.h"
#include "sim/compare.h"
#include "sim/plot.h"
#include "sim/sweep.h"

namespace py = pybind11;

namespace servelab::python {

namespace {

// (run folder names in the commands' order, every file of the group).
using GroupFiles = std::pair<std::vector<std::string>, py::list>;

// The experiment: `text` (YAML or JSON, named `name` in messages, data paths relative to
// `base_dir`) when given, else the file `name`.
ExperimentSource source_of(const std::string& name, const std::optional<std::string>& text,
                           const std::string& base_dir) {
  if (text) return ExperimentSource(name, *text, base_dir);
  return ExperimentSource(name);
}

GroupFiles compare(
    const std::string& name, const std::optional<std::string>& text, const std::string& base_dir,
    const std::optional<std::vector<std::pair<std::string, std::vector<std::string>>>>&
        variant_list,
    const std::vector<std::string>& overrides) {
  const ExperimentSource source = source_of(name, text, base_dir);
  std::vector<Variant> variants;
  if (variant_list) {
    for (const auto& [name, sets] : *variant_list) variants.push_back({name, sets, {}});
  } else {
    variants = variants_from_experiment(source);
  }
  if (variants.empty()) {
    throw ConfigError(source.path + ": no variants: add a `compare:` section or pass variants=");
  }
  const StepHook hook = python_plugins_registered() ? invariant_hook() : StepHook();
  TempDir tmp;
  std::vector<std::string> names;
  Files files;
  {
    const RegistryReaders registry_readers;  // see python_plugins.h
    py::gil_scoped_release release;
    ScopedInterruptHandler interrupt;
    const std::string out = (tmp.path() / "compare").string();
    const std::vector<VariantResult> results =
        run_compare(source, variants, overrides, out, false, hook);
    for (const VariantResult& r : results) names.push_back(r.variant.name);
    files = read_tree(out);
  }
  return {names, to_python(files)};
}

GroupFiles sweep(const std::string& name, const std::optional<std::string>& text,
                 const std::string& base_dir, const std::vector<std::string>& overrides, int jobs) {
  const ExperimentSource source = source_of(name, text, base_dir);
  if (jobs < 1) throw ConfigError("sweep: jobs: expected at least 1, got " + std::to_string(jobs));
  const StepHook hook = python_plugins_registered() ? invariant_hook() : StepHook();
  TempDir tmp;
  std::vector<std::string> names;
  Files files;
  {
    const RegistryReaders registry_readers;  // see python_plugins.h
    py::gil_scoped_release release;
    ScopedInterruptHandler interrupt;
    const std::string out = (tmp.path() / "sweep").string();
    const std::vector<SweepResult> results = run_sweep(source, overrides, out, jobs, false, hook);
    for (const SweepResult& r : results) names.push_back(r.point.name);
    files = read_tree(out);
  }
  return {names, to_python(files)};
}

std::string save_group(const std::string& dir, const std::string& index_file,
                       const std::string& what, const std::vector<std::string>& runs,
                       const py::list& py_files) {
  const Files files = from_python(py_files);
  const RegistryReaders registry_readers;  // see python_plugins.h
  py::gil_scoped_release release;
  check_group_dir(dir, index_file, what, runs);
  StagedDir stage(dir);
  write_files(stage.temp_path(), files);
  commit_group(stage);
  return stage.final_path();
}

int plot(const std::vector<std::string>& inputs, const std::string& out_dir,
         const std::string& format, bool quiet) {
  PlotArgs args;
  args.inputs = inputs;
  args.out_dir = out_dir;
  args.format = format;
  args.quiet = quiet;
  if (inputs.empty()) throw ConfigError("plot: expected at least one run folder");
  if (format != "png" && format != "svg" && format != "pdf") {
    throw ConfigError("plot: format: expected png, svg or pdf, got '" + format + "'");
  }
  const RegistryReaders registry_readers;  // see python_plugins.h
  py::gil_scoped_release release;
  return run_plot(args);
}

}  // namespace

void bind_groups(py::module_& m) {
  m.def("compare", &compare, py::arg("name"), py::arg("text"), py::arg("base_dir"),
        py::arg("variants"), py::arg("overrides"),
        "Runs the variants (or the experiment's compare: section); returns (names, files).");
  m.def("sweep", &sweep, py::arg("name"), py::arg("text"), py::arg("base_dir"),
        py::arg("overrides"), py::arg("jobs"),
        "Runs the experiment's sweep: grid on `jobs` threads; returns (names, files).");
  m.def("save_group", &save_group, py::arg("dir"), py::arg("index_file"), py::arg("what"),
        py::arg("runs"), py::arg("files"), "Writes a compare or sweep folder.");
  m.def("plot", &plot, py::arg("inputs"), py::arg("out_dir"), py::arg("format"), py::arg("quiet"),
        "Runs `sim plot`'s script; returns its exit status.");
  m.def("plot_script", &plot_script_path, "The script `sim plot` runs.");
}

}  // namespace servelab::python
