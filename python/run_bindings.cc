// servelab.run / servelab.engine_run / Result.save: one experiment, from a YAML file or a dict
// (passed here as JSON text, which is YAML), run by run_simulation (sim/run.h) or run_engine
// (engine/engine_driver.h) into a temporary folder whose files come back as bytes
// (python/run_files.h). The run releases the GIL (Python policies take it back when called) and
// turns SIGINT into a clean stop (serving/interrupt.h ScopedInterruptHandler: the loops unwind,
// the temporaries are removed, Python sees KeyboardInterrupt). While a Python policy is active
// the scheduler's invariants are checked after every step (core/scheduler_invariants.h) and the
// KV pool's every max(1024, blocks) steps.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine_driver.h"
#include "python/bindings.h"
#include "python/invariant_hook.h"
#include "python/python_plugins.h"
#include "python/run_files.h"
#include "serving/interrupt.h"
#include "serving/output_file.h"
#include "serving/run_folder.h"
#include "sim/run.h"

namespace py = pybind11;

namespace servelab::python {

namespace {

// The experiment: `text` (YAML or JSON, named `name` in messages, data paths relative to
// `base_dir`) when given, else the file `name`.
ExperimentConfig load(const std::string& name, const std::optional<std::string>& text,
                      const std::string& base_dir, const std::vector<std::string>& overrides,
                      std::optional<std::uint64_t> seed) {
  if (text) return load_experiment_text(*text, name, base_dir, "experiment", overrides, seed);
  return load_experiment(name, overrides, seed);
}

// The step hook of a run: the invariant checks while a Python policy is active (unless
// check_invariants=False).
StepHook step_hook(const ExperimentConfig& config, bool check) {
  if (!check || !uses_python_policy(config)) return {};
  return invariant_hook();
}

// `runner(config, options)` (run_simulation or run_engine) into a temporary folder, with the GIL
// released and SIGINT stopping it cleanly; the files it wrote, as Python bytes.
template <class Options>
py::list run_in_temp_dir(const ExperimentConfig& config, Options& options,
                         RunOutput (*runner)(const ExperimentConfig&, const Options&)) {
  TempDir tmp;
  options.out_dir = (tmp.path() / config.name).string();
  Files files;
  {
    const RegistryReaders registry_readers;  // see python_plugins.h
    py::gil_scoped_release release;
    ScopedInterruptHandler interrupt;
    const RunOutput out = runner(config, options);
    files = read_files(out.out_dir, out.files);
  }
  return to_python(files);
}

void apply_records(ExperimentConfig& config, bool schedule, bool events, bool blocks) {
  if (schedule) config.outputs.record_schedule = true;
  if (events) config.outputs.record_events = true;
  if (blocks) config.outputs.record_blocks = true;
}

py::list run(const std::string& name, const std::optional<std::string>& text,
             const std::string& base_dir, const std::vector<std::string>& overrides,
             std::optional<std::uint64_t> seed, bool record_schedule, bool record_events,
             bool record_blocks, bool check_invariants) {
  ExperimentConfig config = load(name, text, base_dir, overrides, seed);
  apply_records(config, record_schedule, record_events, record_blocks);
  RunOptions options;
  options.before_step = step_hook(config, check_invariants);
  return run_in_temp_dir(config, options, run_simulation);
}

py::list engine_run(const std::string& name, const std::optional<std::string>& text,
                    const std::string& base_dir, const std::vector<std::string>& overrides,
                    std::optional<std::uint64_t> seed, bool record_schedule,
                    const std::string& device, const std::string& weights, double kv_memory_gib,
                    bool tokens, bool check_invariants) {
  ExperimentConfig config = load(name, text, base_dir, overrides, seed);
  apply_records(config, record_schedule, false, false);
  EngineOptions options;
  options.device = device;
  options.weights = weights;
  if (!(kv_memory_gib > 0)) {
    throw ConfigError("engine_run: kv_memory_gb: expected a positive number of GiB, got " +
                      std::to_string(kv_memory_gib));
  }
  options.kv_memory_gib = kv_memory_gib;
  options.write_tokens = tokens;
  options.before_step = step_hook(config, check_invariants);
  return run_in_temp_dir(config, options, run_engine);
}

std::string save_run(const std::string& dir, const py::list& py_files) {
  const Files files = from_python(py_files);
  const RegistryReaders registry_readers;  // see python_plugins.h
  py::gil_scoped_release release;
  check_out_dir(dir);
  StagedDir stage(dir);
  write_files(stage.temp_path(), files);
  stage.commit();
  return stage.final_path();
}

}  // namespace

void bind_runs(py::module_& m) {
  m.def("run", &run, py::arg("name"), py::arg("text"), py::arg("base_dir"), py::arg("overrides"),
        py::arg("seed"), py::arg("record_schedule"), py::arg("record_events"),
        py::arg("record_blocks"), py::arg("check_invariants"),
        "Simulates one experiment; returns its run folder's files as [(name, bytes)].");
  m.def("engine_run", &engine_run, py::arg("name"), py::arg("text"), py::arg("base_dir"),
        py::arg("overrides"), py::arg("seed"), py::arg("record_schedule"), py::arg("device"),
        py::arg("weights"), py::arg("kv_memory_gb"), py::arg("tokens"), py::arg("check_invariants"),
        "Runs one experiment on the engine; returns its run folder's files as [(name, bytes)].");
  m.def("save_run", &save_run, py::arg("dir"), py::arg("files"),
        "Writes a run folder as `sim run` does (never over a folder holding anything else).");
}

}  // namespace servelab::python
