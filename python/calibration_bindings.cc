// servelab.profile / calibrate / validate: the validation loop of docs/validation.md from Python,
// by the code of `engine profile` (engine/profile.h), `sim calibrate` (calibrate_profile) and
// `sim validate` (validate_runs). Each works on files as the commands do: the profile is written
// into a private temporary folder and read back; calibrate and validate read a profile file and
// run folders (the Python side writes in-memory inputs to a temporary folder first) and return
// what the command would write (cost.yaml, validation.json, replay.csv) with what it prints, and
// the numbers as dicts. Long work releases the GIL; SIGINT stops a profile cleanly.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <system_error>

#include "core/config_error.h"
#include "engine/profile.h"
#include "python/bindings.h"
#include "python/python_plugins.h"
#include "python/run_files.h"
#include "serving/calibration_profile.h"
#include "serving/interrupt.h"
#include "serving/model_config.h"
#include "serving/output_file.h"
#include "sim/validate.h"

namespace py = pybind11;

namespace servelab::python {

namespace {

// What `print` writes to a FILE*, as a string.
std::string printed(const std::function<void(std::FILE*)>& print) {
  char* buf = nullptr;
  std::size_t size = 0;
  std::FILE* f = open_memstream(&buf, &size);
  if (f == nullptr) throw std::runtime_error("open_memstream failed");
  print(f);
  std::fclose(f);
  std::string text(buf, size);
  std::free(buf);
  return text;
}

template <std::size_t N>
void check_word(const char* what, const std::string& value, const std::string_view (&words)[N]) {
  if (value.empty()) return;  // None: the model file's
  if (const std::string why = unknown_storage_word(value, words); !why.empty()) {
    throw ConfigError(std::string("profile: ") + what + ": " + why);
  }
}

// (csv text, device): the profile `engine profile` would write.
py::tuple profile(const std::string& model, const std::string& device, int reps, int rounds,
                  int warmup, bool quick, int max_tokens, int block_size,
                  const std::string& weights, int lora_rank, const std::string& kv_cache_dtype,
                  const std::string& quantization, std::uint64_t seed) {
  check_word("kv_cache_dtype", kv_cache_dtype, kKvCacheDtypes);
  check_word("quantization", quantization, kQuantizations);
  TempDir tmp;
  // In ProfileOptions' declaration order.
  const ProfileOptions o{.model = model,
                         .device = device,
                         .out = (tmp.path() / "profile.csv").string(),
                         .weights = weights,
                         .reps = reps,
                         .warmup = warmup,
                         .rounds = rounds,
                         .quick = quick,
                         .block_size = block_size,
                         .max_tokens = max_tokens,
                         .seed = seed,
                         .lora_rank = lora_rank,
                         .kv_cache_dtype = kv_cache_dtype,
                         .quantization = quantization};
  ProfileRun run;
  Files files;
  {
    const RegistryReaders registry_readers;  // see python_plugins.h
    py::gil_scoped_release release;
    ScopedInterruptHandler interrupt;
    run = run_profile(o, nullptr);
    files = read_files(tmp.path(), {"profile.csv"});
  }
  return py::make_tuple(files.at(0).second, run.device);
}

py::dict family_error(const FamilyError& e) {
  py::dict d;
  d["shapes"] = e.shapes;
  d["mape"] = e.mape;
  d["max_error"] = e.max_error;
  return d;
}

py::dict family_errors(const std::map<std::string, FamilyError>& families,
                       const FamilyError& overall) {
  py::dict fams;
  for (const auto& [name, e] : families) fams[py::str(name)] = family_error(e);
  py::dict d = family_error(overall);
  d["families"] = fams;
  return d;
}

py::dict coefficients(const CalibratedCoefficients& c) {
  py::dict d;
  d["step_s"] = c.step_s;
  d["per_sequence_s"] = c.per_sequence_s;
  d["per_token_s"] = c.per_token_s;
  d["per_token_above_knee_s"] = c.per_token_above_knee_s;
  d["knee_tokens"] = c.knee_tokens;
  d["prefill_pair_s"] = c.prefill_pair_s;
  d["decode_context_token_s"] = c.decode_context_token_s;
  d["decode_context_token_above_knee_s"] = c.decode_context_token_above_knee_s;
  d["decode_context_knee_tokens"] = c.decode_context_knee_tokens;
  d["sampled_sequence_s"] = c.sampled_sequence_s;
  d["swap_byte_s"] = c.swap_byte_s;
  d["copy_byte_s"] = c.copy_byte_s;
  d["wake_up_s"] = c.wake_up_s;
  if (c.lora_set) {
    d["lora_token_rank_s"] = c.lora_token_rank_s;
    d["lora_adapter_rank_s"] = c.lora_adapter_rank_s;
  }
  if (c.prefill_launch) {
    d["prefill_critical_key_s"] = c.prefill_critical_key_s;
    d["prefill_merge_step_s"] = c.prefill_merge_step_s;
    py::dict launch;
    launch["query_heads"] = c.prefill_launch->query_heads;
    launch["tile_rows"] = c.prefill_launch->tile_rows;
    launch["max_ctas"] = c.prefill_launch->max_ctas;
    launch["min_split_tokens"] = c.prefill_launch->min_split_tokens;
    launch["merge_rows"] = c.prefill_launch->merge_rows;
    if (c.prefill_launch->packs()) {
      launch["packed_heads"] = c.prefill_launch->packed_heads;
      launch["packed_rows"] = c.prefill_launch->packed_rows;
      launch["packed_max_ctas"] = c.prefill_launch->packed_max_ctas;
    }
    d["prefill_launch"] = launch;
  }
  return d;
}

// {yaml, summary, coefficients, fit, host_overhead, model, device, kv_cache_dtype,
// quantization}: what `sim calibrate PROFILE -o COST.yaml` writes and prints, and its numbers.
py::dict calibrate(const std::string& profile_path, const std::string& profile_label, int holdout,
                   const std::string& engine_run, bool between_steps) {
  ProfileCalibration c;  // holdout: 0, or >= 2 (fit_profile_holdout refuses the rest)
  std::string summary;
  {
    const RegistryReaders registry_readers;  // see python_plugins.h
    py::gil_scoped_release release;
    c = calibrate_profile(profile_path, holdout, engine_run, profile_label, "", between_steps);
    summary = printed([&](std::FILE* f) { print_profile_calibration(f, c); });
  }
  const CalibrationResult& r = c.result;
  py::dict fit = family_errors(r.families, r.overall);
  fit["converged"] = r.converged;
  if (r.holdout) {
    py::dict h = family_errors(r.holdout->families, r.holdout->overall);
    h["every"] = r.holdout->every;
    fit["holdout"] = h;
  } else {
    fit["holdout"] = py::none();
  }
  py::dict d;
  d["yaml"] = c.yaml;
  d["summary"] = summary;
  d["coefficients"] = coefficients(r.profile.coefficients);
  d["fit"] = fit;
  if (c.host) {
    py::dict h;
    h["engine_run"] = c.host->engine_run;
    h["steps"] = c.host->steps;
    h["step_s"] = c.host->step_s;
    h["per_sequence_s"] = c.host->per_sequence_s;
    h["between_steps"] = c.host->between_steps;
    h["wake_ups"] = c.host->wake_ups;
    h["wake_up_s"] = c.host->wake_up_s;
    d["host_overhead"] = h;
  } else {
    d["host_overhead"] = py::none();
  }
  d["model"] = r.profile.model;
  d["device"] = r.profile.device;
  d["kv_cache_dtype"] = r.profile.kv_cache_dtype;
  d["quantization"] = r.profile.quantization;
  return d;
}

// {json, replay_csv, text}: what `sim validate SIM ENGINE [--cost-model FILE]` writes and prints.
py::dict validate(const std::string& sim_dir, const std::string& engine_dir,
                  const std::string& cost_model) {
  std::string json, csv, text;
  {
    const RegistryReaders registry_readers;  // see python_plugins.h
    py::gil_scoped_release release;
    const ValidationReport rep = validate_runs(sim_dir, engine_dir, cost_model);
    json = validation_json(rep);
    csv = replay_csv(rep);
    text = printed([&](std::FILE* f) { print_validation(f, rep); });
  }
  py::dict d;
  d["json"] = json;
  d["replay_csv"] = csv;
  d["text"] = text;
  return d;
}

// A file the way the commands' -o writes one: never over one of `inputs`, over an existing file
// only with `force`, atomically. Returns the path.
std::string save_file(const std::string& path, const std::string& text, bool force,
                      const std::vector<std::string>& inputs) {
  check_output_file(path, inputs, force);
  write_file_atomically(path, text);
  return path;
}

// validation.json and replay.csv into `dir` (created), as `sim validate --out DIR` writes them:
// the same folder checks and replacement (write_validation_dir: a previous report, its figures
// included, only with `force`; never a folder of other files or one inside the run folders
// `inputs`).
std::string save_validation(const std::string& dir, const std::string& json, const std::string& csv,
                            bool force, const std::vector<std::string>& inputs) {
  write_validation_dir(dir, inputs, force, json, csv);
  return dir;
}

}  // namespace

void bind_calibration(py::module_& m) {
  m.def("profile", &profile, py::arg("model"), py::arg("device"), py::arg("reps"),
        py::arg("rounds"), py::arg("warmup"), py::arg("quick"), py::arg("max_tokens"),
        py::arg("block_size"), py::arg("weights"), py::arg("lora_rank"), py::arg("kv_cache_dtype"),
        py::arg("quantization"), py::arg("seed"),
        "Times the executor over the profile grid; returns (profile CSV text, device).");
  m.def("calibrate", &calibrate, py::arg("profile_path"), py::arg("profile_label"),
        py::arg("holdout"), py::arg("engine_run"), py::arg("between_steps"),
        "Fits the calibrated cost model to a profile file, as `sim calibrate`.");
  m.def("validate", &validate, py::arg("sim_dir"), py::arg("engine_dir"), py::arg("cost_model"),
        "Compares a sim run folder with an engine run folder, as `sim validate`.");
  m.def("save_file", &save_file, py::arg("path"), py::arg("text"), py::arg("force"),
        py::arg("inputs"), "Writes a file as the commands' -o does.");
  m.def("save_validation", &save_validation, py::arg("dir"), py::arg("json"), py::arg("csv"),
        py::arg("force"), py::arg("inputs"),
        "Writes validation.json and replay.csv into a folder, as `sim validate --out`.");
}

}  // namespace servelab::python
