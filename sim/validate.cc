#include "sim/validate.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <sstream>

#include "core/metrics.h"
#include "core/step_plan.h"
#include "serving/cli.h"
#include "serving/config_node.h"
#include "serving/figures_folder.h"
#include "serving/hardware_config.h"
#include "serving/input_file.h"
#include "serving/interrupt.h"
#include "serving/machine.h"
#include "serving/model_config.h"
#include "serving/output_file.h"
#include "serving/run_folder.h"
#include "sim/calibrated_cost_model.h"
#include "sim/calibration.h"
#include "sim/huber_nnls.h"
#include "sim/power_fit.h"
#include "sim/roofline_cost_model.h"
#include "sim/vidur_fit.h"
#include "traces/csv_reader.h"
#include "traces/data_paths.h"

namespace servelab {

namespace fs = std::filesystem;

namespace {

// A CSV file with a header, no quoting (ServeLab's own files).
struct Csv {
  std::string file;
  std::map<std::string, std::size_t> col;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::int64_t> lines;

  const std::string& at(std::size_t row, const std::string& name) const {
    auto it = col.find(name);
    if (it == col.end()) throw ConfigError(file + ": no column '" + name + "'");
    return rows[row][it->second];
  }
  double number(std::size_t row, const std::string& name) const {
    const std::string& s = at(row, name);
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !std::isfinite(v)) {
      throw ConfigError(file + ":" + std::to_string(lines[row]) + ": column '" + name +
                        "': expected a number, got '" + s + "'");
    }
    return v;
  }
  std::optional<double> maybe(std::size_t row, const std::string& name) const {
    if (at(row, name).empty()) return std::nullopt;
    return number(row, name);
  }
  // A column read_csv checked to be an integer of its range (kColumnTypes).
  std::int64_t integer(std::size_t row, const std::string& name) const {
    return std::strtoll(at(row, name).c_str(), nullptr, 10);
  }
};

// What validate reads of a run folder's files, checked for every row when the file is read, so
// a hand-edited or corrupt value is named (FILE:LINE: column 'X': expected ..., got '...')
// instead of reaching a cast or a vector size.
struct ColumnType {
  enum Kind { kInteger, kNumber, kWord } kind;
  double min = 0, max = 0;           // kInteger, kNumber: the accepted range
  bool empty_ok = false;             // "" is accepted (a value a run does not know)
  std::vector<std::string> words{};  // kWord
};

constexpr double kMaxCount = 1e9;     // tokens, blocks, requests of a step
constexpr double kMaxIndex = 4e18;    // request ids and step indices (int64)
constexpr double kMaxSeconds = 1e12;  // times and durations

const std::map<std::string, ColumnType>& column_types(const std::string& file_name) {
  using K = ColumnType;
  static const std::map<std::string, std::map<std::string, ColumnType>> table = {
      {"requests.csv",
       {{"id", {K::kInteger, 0, kMaxIndex}},
        {"arrival_s", {K::kNumber, 0, kMaxSeconds}},
        {"first_token_s", {K::kNumber, 0, kMaxSeconds, true}},
        {"finish_s", {K::kNumber, 0, kMaxSeconds, true}},
        {"prompt_tokens", {K::kInteger, 0, kMaxCount}},
        {"output_tokens", {K::kInteger, 0, kMaxCount}},
        {"ttft_ms", {K::kNumber, 0, kMaxSeconds, true}},
        {"tpot_ms", {K::kNumber, 0, kMaxSeconds, true}},
        {"e2e_ms", {K::kNumber, 0, kMaxSeconds, true}},
        {"queueing_ms", {K::kNumber, 0, kMaxSeconds, true}},
        {"status",
         {K::kWord,
          0,
          0,
          false,
          {"finished", "rejected", "aborted", "shed", "waiting", "running", "preempted",
           "swapped"}}}}},
      {"steps.csv",
       {{"step", {K::kInteger, 0, kMaxIndex}},
        {"start_s", {K::kNumber, 0, kMaxSeconds}},
        {"duration_ms", {K::kNumber, 0, kMaxSeconds}},
        {"num_seqs", {K::kInteger, 0, kMaxCount}},
        {"prefill_tokens", {K::kInteger, 0, kMaxCount}},
        {"decode_tokens", {K::kInteger, 0, kMaxCount}},
        {"swap_out_blocks", {K::kInteger, 0, kMaxCount}},
        {"swap_in_blocks", {K::kInteger, 0, kMaxCount}}}},
      {"schedule.csv",
       {{"step", {K::kInteger, 0, kMaxIndex}},
        {"request", {K::kInteger, 0, kMaxIndex}},
        {"first_token", {K::kInteger, 0, kMaxCount}},
        {"num_tokens", {K::kInteger, 1, kMaxCount}},
        {"kind", {K::kWord, 0, 0, false, {"prefill", "decode"}}}}},
  };
  static const std::map<std::string, ColumnType> none;
  const auto it = table.find(file_name);
  return it == table.end() ? none : it->second;
}

// Empty when `text` is a value of `type`, else what was expected.
std::string type_error(const ColumnType& type, const std::string& text) {
  if (text.empty() && type.empty_ok) return "";
  if (type.kind == ColumnType::kWord) {
    if (std::find(type.words.begin(), type.words.end(), text) != type.words.end()) return "";
    std::string all;
    for (const std::string& w : type.words) all += (all.empty() ? "" : " or ") + w;
    return all;
  }
  char* end = nullptr;
  errno = 0;
  bool ok = false;
  if (type.kind == ColumnType::kInteger) {
    const long long v = std::strtoll(text.c_str(), &end, 10);
    ok = !text.empty() && *end == '\0' && errno == 0 && static_cast<double>(v) >= type.min &&
         static_cast<double>(v) <= type.max;
  } else {
    const double v = std::strtod(text.c_str(), &end);
    ok = !text.empty() && *end == '\0' && std::isfinite(v) && v >= type.min && v <= type.max;
  }
  if (ok) return "";  // every field of every row comes here: the message only on failure
  std::ostringstream what;
  what << (type.kind == ColumnType::kInteger ? "an integer" : "a number") << " in [" << type.min
       << ", " << type.max << "]";
  return what.str();
}

// The columns a run folder's file must have for what validate reads of it (a file of another
// shape would otherwise be read as no rows).
const std::vector<std::string>& required_columns(const std::string& path) {
  static const std::vector<std::string> none,
      steps = {"step", "duration_ms", "num_seqs", "prefill_tokens", "decode_tokens"},
      schedule = {"step", "request", "first_token", "num_tokens", "kind"};
  const std::string name = fs::path(path).filename().string();
  return name == "steps.csv" ? steps : name == "schedule.csv" ? schedule : none;
}

// Read with the one CSV reader (traces/csv_reader.h): errors name PATH:LINE.
Csv read_csv(const std::string& path) {
  if (!fs::is_regular_file(path)) throw ConfigError(path + ": cannot open (is this a run folder?)");
  CsvReader csv(path);
  Csv c;
  c.file = path;
  std::size_t width = 0;
  const std::map<std::string, ColumnType>& types = column_types(fs::path(path).filename().string());
  while (csv.next_row()) {
    const std::span<const std::string_view> f = csv.fields();
    if (c.col.empty()) {
      for (std::size_t i = 0; i < f.size(); ++i) {
        if (!c.col.emplace(std::string(f[i]), i).second) {
          csv.fail_message("the column '" + std::string(f[i]) + "' appears twice in the header");
        }
      }
      width = f.size();
      continue;
    }
    if (f.size() != width) {
      csv.fail_message("expected " + std::to_string(width) + " fields, got " +
                       std::to_string(f.size()));
    }
    for (const auto& [name, type] : types) {
      const auto it = c.col.find(name);
      if (it == c.col.end()) continue;
      const std::string value(f[it->second]);
      if (const std::string expected = type_error(type, value); !expected.empty()) {
        csv.fail_message("column '" + name + "': expected " + expected + ", got '" + value + "'");
      }
    }
    c.rows.emplace_back(f.begin(), f.end());
    c.lines.push_back(csv.line_number());
  }
  if (c.col.empty()) throw ConfigError(path + ": empty file");
  for (const std::string& name : required_columns(path)) {
    if (!c.col.count(name)) {
      throw ConfigError(path + ":1: no column '" + name + "' in the header (not a ServeLab " +
                        fs::path(path).filename().string() + "?)");
    }
  }
  return c;
}

std::string read_text(const std::string& path) {
  return read_input_file(path, "a file of a run folder");
}

nlohmann::json read_json(const std::string& path) {
  if (!fs::exists(path)) throw ConfigError(path + ": cannot open (is this a run folder?)");
  const std::string text = read_input_file(path, "a JSON file of a run folder");
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw ConfigError(path + ": malformed JSON (" + e.what() + ")");
  }
}

// The run folder's backend (serving/run_folder.h run_backend), or a ConfigError naming it.
std::string backend_of(const std::string& dir) {
  if (std::optional<std::string> backend = run_backend(dir)) return *backend;
  const std::string path = dir + "/summary.json";
  if (!fs::is_regular_file(path)) {
    throw ConfigError(path + ": missing; not a ServeLab run folder");
  }
  read_json(path);  // names a malformed file as such
  throw ConfigError(path + ": without a run.backend; not a ServeLab run folder");
}

YAML::Node read_yaml(const std::string& path) {
  if (!fs::exists(path)) throw ConfigError(path + ": cannot open (is this a run folder?)");
  const std::string text = read_input_file(path, "a YAML file of a run folder");
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": malformed YAML (" + e.what() + ")");
  }
}

std::string dump(const YAML::Node& n) {
  if (!n) return "<absent>";
  YAML::Emitter e;
  e << n;
  return e.c_str();
}

// Where two config.yaml values first differ: the key path below `path` and each side's value
// on one line (a whole section printed as block YAML spanned lines in an error message).
std::string first_difference(const YAML::Node& a, const YAML::Node& b, const std::string& path) {
  const auto one_line = [](const YAML::Node& n) {
    const std::string text = n ? override_text(n) : "<absent>";
    return text.size() > 120 ? text.substr(0, 117) + "..." : text;
  };
  if (a && b && a.IsMap() && b.IsMap()) {
    for (const auto& kv : a) {
      const std::string k = kv.first.Scalar();
      if (dump(kv.second) != dump(b[k])) return first_difference(kv.second, b[k], path + "." + k);
    }
    for (const auto& kv : b) {
      const std::string k = kv.first.Scalar();
      if (!a[k]) return first_difference(a[k], kv.second, path + "." + k);
    }
  } else if (a && b && a.IsSequence() && b.IsSequence() && a.size() == b.size()) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (dump(a[i]) != dump(b[i])) {
        return first_difference(a[i], b[i], path + "[" + std::to_string(i) + "]");
      }
    }
  }
  return "'" + path + "' differs (" + one_line(a) + " vs " + one_line(b) + ")";
}

// The executed steps in order (steps with no rows are not executed: an idle engine forms
// empty plans, which use up step indices), each with its step index and its schedule rows
// ("request:first_token+num_tokens kind").
struct ScheduledStep {
  std::int64_t index = 0;
  std::vector<std::string> rows;
  friend bool operator==(const ScheduledStep& a, const ScheduledStep& b) {
    return a.rows == b.rows;
  }
};

std::vector<ScheduledStep> schedule_by_step(const Csv& c) {
  std::vector<ScheduledStep> steps;
  for (std::size_t i = 0; i < c.rows.size(); ++i) {
    const std::int64_t step = c.integer(i, "step");
    if (steps.empty() || steps.back().index != step) {
      if (!steps.empty() && step < steps.back().index) {
        throw ConfigError(c.file + ":" + std::to_string(c.lines[i]) + ": steps out of order");
      }
      steps.push_back({step, {}});
    }
    steps.back().rows.push_back(c.at(i, "request") + ":" + c.at(i, "first_token") + "+" +
                                c.at(i, "num_tokens") + " " + c.at(i, "kind"));
  }
  return steps;
}

std::string describe(const std::vector<std::string>& rows) {
  if (rows.empty()) return "nothing";
  std::string s;
  for (std::size_t i = 0; i < rows.size() && i < 4; ++i) s += (i ? ", " : "") + rows[i];
  if (rows.size() > 4) s += ", ... (" + std::to_string(rows.size()) + " entries)";
  return s;
}

// The cost model the sim run used (from its config.yaml), or the given cost.yaml.
struct ReplayModel {
  std::unique_ptr<CostModel> model;
  std::string description;
};

// The run's model as it was stored: `model:` is a name, or {name, kv_cache_dtype, quantization}
// when the run stated those.
ModelConfig run_model(const ConfigNode& sim_config) {
  const ConfigNode model_node = sim_config.at("model");
  ModelConfig m =
      load_model(model_node.is_map() ? model_node.get_string("name") : model_node.as_string(),
                 default_catalog_dir());
  if (model_node.is_map() && model_node.has("kv_cache_dtype")) {
    m.kv_cache_dtype = model_node.get_string("kv_cache_dtype");
  }
  if (model_node.is_map() && model_node.has("quantization")) {
    m.quantization = model_node.get_string("quantization");
  }
  return m;
}

// The cost model the sim run's config.yaml (`sim_config`) names, or the cost.yaml
// `override_file` (--cost-model) when given. A value of the wrong type names its line.
ReplayModel replay_model(const ConfigNode& sim_config, const std::string& sim_config_path,
                         const std::string& override_file) {
  ReplayModel r;
  const std::int32_t block_size =
      sim_config.has("serving")
          ? static_cast<std::int32_t>(sim_config.at("serving").get_int("block_size", 16, 1, 256))
          : 16;
  const std::optional<ConfigNode> cm =
      sim_config.has("cost_model") ? std::optional(sim_config.at("cost_model")) : std::nullopt;
  if (cm && !cm->is_map()) cm->fail("a mapping");
  std::string file = override_file;
  if (file.empty() && cm && cm->has("file")) file = cm->get_string("file");
  if (!file.empty()) {
    if (!fs::exists(file)) {
      throw ConfigError(override_file.empty() ? sim_config_path + ": key 'cost_model.file': '" +
                                                    file + "' not found (pass --cost-model FILE)"
                                              : "--cost-model " + file + ": not found");
    }
    CalibratedProfile profile = load_calibrated_profile(file);
    check_profile_storage(profile, run_model(sim_config), sim_config_path,
                          override_file.empty() ? "key 'cost_model.file'" : "--cost-model");
    if (profile.machine && profile.machine->kind == "cpu") {  // as in sim run (sim/run.h)
      warn_if_calibrated_elsewhere(profile.file, profile.machine, this_machine("cpu"),
                                   CalibrationUse::kSimulation);
    }
    r.model = std::make_unique<CalibratedCostModel>(std::move(profile), block_size);
    r.description = "calibrated (" + file + ")";
    return r;
  }
  const std::string hardware = sim_config.get_string("hardware");
  HardwareConfig hw = load_hardware(hardware, default_catalog_dir());
  // The serving stack's host time and block indirection, when the simulated run stated them
  // (serving/experiment.h).
  if (cm) {
    if (cm->has("step_overhead_us")) {
      hw.step_overhead_s = cm->get_double("step_overhead_us", 0, 1e9) * 1e-6;
    }
    if (cm->has("sequence_overhead_us")) {
      hw.sequence_overhead_s = cm->get_double("sequence_overhead_us", 0, 1e9) * 1e-6;
    }
    if (cm->has("block_indirection_ns")) {
      hw.block_indirection_s = cm->get_double("block_indirection_ns", 0, 1e12) * 1e-9;
    }
  }
  r.model = std::make_unique<RooflineCostModel>(run_model(sim_config), hw, block_size);
  r.description = "roofline (" + hardware + ")";
  return r;
}

}  // namespace

std::vector<EngineStep> engine_steps(const std::string& engine_dir) {
  const Csv req = read_csv(engine_dir + "/requests.csv");
  const Csv sched = read_csv(engine_dir + "/schedule.csv");
  const Csv steps = read_csv(engine_dir + "/steps.csv");
  std::map<std::int64_t, std::int64_t> known;  // request -> prompt + outputs so far
  for (std::size_t i = 0; i < req.rows.size(); ++i) {
    if (!known.emplace(req.integer(i, "id"), req.integer(i, "prompt_tokens")).second) {
      throw ConfigError(req.file + ":" + std::to_string(req.lines[i]) + ": request " +
                        req.at(i, "id") + " appears twice");
    }
  }
  std::map<std::int64_t, StepPlan> plans;         // by step index
  std::map<std::int64_t, std::size_t> first_row;  // by step index: its first schedule.csv row
  for (std::size_t i = 0; i < sched.rows.size(); ++i) {
    const std::int64_t step = sched.integer(i, "step");
    first_row.emplace(step, i);
    const std::int64_t id = sched.integer(i, "request");
    ScheduledRequest r;
    r.id = static_cast<RequestId>(id);
    r.first_token = static_cast<std::int32_t>(sched.integer(i, "first_token"));
    r.num_tokens = static_cast<std::int32_t>(sched.integer(i, "num_tokens"));
    r.is_prefill = sched.at(i, "kind") == "prefill";
    auto it = known.find(id);
    if (it == known.end()) {
      throw ConfigError(sched.file + ":" + std::to_string(sched.lines[i]) + ": request " +
                        std::to_string(id) + " is not in requests.csv");
    }
    r.samples = r.first_token + r.num_tokens >= it->second;
    if (r.samples) ++it->second;
    plans[step].requests.push_back(r);
  }
  std::vector<EngineStep> out;
  // One row a step, in order (a replica's own numbering in a cluster's steps.csv aside), and every
  // step the schedule names among them: a hand-edited file would pair the wrong steps silently.
  const bool per_replica = steps.col.count("replica") > 0;
  for (std::size_t i = 0; i < steps.rows.size(); ++i) {
    EngineStep st;
    st.step = steps.integer(i, "step");
    if (!per_replica && i > 0 && st.step <= out.back().step) {
      throw ConfigError(steps.file + ":" + std::to_string(steps.lines[i]) + ": step " +
                        std::to_string(st.step) + " after step " + std::to_string(out.back().step) +
                        " (expected each step once, in increasing order)");
    }
    first_row.erase(st.step);
    st.plan = std::move(plans[st.step]);
    st.plan.swap_out.resize(static_cast<std::size_t>(steps.integer(i, "swap_out_blocks")));
    st.plan.swap_in.resize(static_cast<std::size_t>(steps.integer(i, "swap_in_blocks")));
    st.measured_s = steps.number(i, "duration_ms") * 1e-3;
    if (steps.col.count("start_s")) st.start_s = steps.number(i, "start_s");
    out.push_back(std::move(st));
  }
  if (!per_replica && !first_row.empty()) {
    const auto& [step, row] = *first_row.begin();
    throw ConfigError(sched.file + ":" + std::to_string(sched.lines[row]) + ": step " +
                      std::to_string(step) + " is not in " + steps.file);
  }
  return out;
}

namespace {

// The engine's steps as the latency attribution reads them (sim/latency_attribution.h): start,
// measured duration, entries; predicted_s is left 0 for the caller.
std::vector<AttributionStep> timed_steps(const std::vector<EngineStep>& steps) {
  std::vector<AttributionStep> out;
  out.reserve(steps.size());
  for (const EngineStep& st : steps) {
    AttributionStep& t = out.emplace_back();
    t.start_s = st.start_s;
    t.measured_s = st.measured_s;
    for (const ScheduledRequest& e : st.plan.requests) {
      t.entries.push_back({static_cast<std::int64_t>(e.id), e.first_token, e.num_tokens});
    }
  }
  return out;
}

}  // namespace

HostOverhead fit_host_overhead(const std::string& engine_dir, CalibratedProfile& profile,
                               bool between_steps) {
  if (const std::string backend = backend_of(engine_dir); !backend.starts_with("engine-")) {
    throw ConfigError(engine_dir + ": --engine-run needs an engine run folder (engine run " +
                      "--record-schedule), got a run of backend '" + backend + "'");
  }
  // The run must be of the profiled model, stored and paged the same way: its steps are priced
  // by the profile, and the residual is what the profile does not explain.
  const std::string config_path = engine_dir + "/config.yaml";
  const ConfigNode config = ConfigNode::load_file(config_path);
  check_profile_storage(profile, run_model(config), config_path, "--engine-run");
  if (config.has("serving")) {
    const ConfigNode serving = config.at("serving");
    if (serving.get_int("block_size", 16, 1, 256) != profile.block_size) {
      serving.at("block_size")
          .fail_message("the run's blocks are of " +
                        std::to_string(serving.get_int("block_size", 16, 1, 256)) +
                        " tokens, the profile's of " + std::to_string(profile.block_size) +
                        " (profile with --block-size to match)");
    }
  }
  const std::vector<EngineStep> steps = engine_steps(engine_dir);
  const std::vector<AttributionStep> timed = timed_steps(steps);
  const std::vector<double> after = time_after_steps(timed);
  const CalibratedCostModel model(profile, profile.block_size);
  // Relative least squares of the residual (measured - predicted) on [1, entries], >= 0.
  std::vector<std::pair<double, double>> rows;  // (entries, measured)
  std::vector<double> resid;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const EngineStep& st = steps[k];
    if (!(st.measured_s > 0)) continue;
    const double measured = st.measured_s + (between_steps ? after[k] : 0.0);
    const CalibrationFeatures f = model.features(st.plan);
    rows.push_back({static_cast<double>(f.num_entries), measured});
    resid.push_back(measured - model.seconds(f));
  }
  HostOverhead h;
  h.between_steps = between_steps;
  h.engine_run = engine_dir;
  h.steps = static_cast<std::int64_t>(rows.size());
  if (rows.size() < 2) {
    throw ConfigError(engine_dir +
                      ": too few steps to fit the host overhead (run with "
                      "--record-schedule)");
  }
  Eigen::MatrixXd A(static_cast<Eigen::Index>(rows.size()), 2);
  Eigen::VectorXd b(static_cast<Eigen::Index>(rows.size()));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto k = static_cast<Eigen::Index>(i);
    A(k, 0) = 1.0 / rows[i].second;
    A(k, 1) = rows[i].first / rows[i].second;
    b(k) = resid[i] / rows[i].second;
  }
  const Eigen::VectorXd norms = A.colwise().norm().transpose();
  for (int j = 0; j < 2; ++j) A.col(j) /= norms(j);
  // Huber-weighted (sim/huber_nnls.h): a step with a one-off stall (a CUDA-graph capture, a
  // page fault) must not become everyone's overhead. The threshold scales with the relative
  // residuals' median (at least 0.5 %).
  double huber_c = 0;
  const Eigen::VectorXd x = huber_nnls(A, b, huber_c, 0.005).fit.x.cwiseQuotient(norms);
  h.step_s = x(0);
  h.per_sequence_s = x(1);
  profile.coefficients.step_s += h.step_s;
  profile.coefficients.per_sequence_s += h.per_sequence_s;
  // The loop's wake-up from idle: the median over the run's idle wake-ups (every request's
  // arrival, finished or not).
  const Csv req = read_csv(engine_dir + "/requests.csv");
  std::vector<AttributionRequest> arrivals(req.rows.size());
  for (std::size_t j = 0; j < req.rows.size(); ++j) {
    arrivals[j].id = req.integer(j, "id");
    arrivals[j].arrival_s = req.number(j, "arrival_s");
  }
  std::vector<double> wake = idle_wake_ups(timed, arrivals);
  h.wake_ups = static_cast<std::int64_t>(wake.size());
  if (!wake.empty()) {
    std::sort(wake.begin(), wake.end());
    h.wake_up_s = std::max(0.0, percentile_sorted(wake, 50));
  }
  profile.coefficients.wake_up_s = h.wake_up_s;
  return h;
}

ValidationReport validate_runs(const std::string& sim_dir, const std::string& engine_dir,
                               const std::string& cost_model_file) {
  ValidationReport rep;
  rep.sim_dir = sim_dir;
  rep.engine_dir = engine_dir;
  for (const std::string& d : {sim_dir, engine_dir}) {
    if (!fs::is_directory(d)) throw ConfigError(d + ": not a run folder (no such directory)");
  }
  std::error_code ec_same;
  if (fs::equivalent(sim_dir, engine_dir, ec_same)) {
    throw ConfigError(engine_dir + ": the same folder as the simulated run; validate a " +
                      "simulator run against a measured one (engine run or sim bench)");
  }
  // The order matters (which side is the prediction): each folder's backend says what it is.
  const std::string sim_backend = backend_of(sim_dir), measured_backend = backend_of(engine_dir);
  if (sim_backend != "sim") {
    throw ConfigError(sim_dir + ": a run of backend '" + sim_backend +
                      "', expected a simulator run first (sim validate SIM_RUN MEASURED_RUN)");
  }
  if (!measured_backend.starts_with("engine-") && measured_backend != "bench") {
    throw ConfigError(engine_dir + ": a run of backend '" + measured_backend +
                      "', expected a measured run second (engine run or sim bench: "
                      "sim validate SIM_RUN MEASURED_RUN)");
  }

  // 1. Same experiment: workload, seed and model must match; other differences are warnings.
  const std::string sim_cfg_path = sim_dir + "/config.yaml",
                    eng_cfg_path = engine_dir + "/config.yaml";
  const YAML::Node sc = read_yaml(sim_cfg_path), ec = read_yaml(eng_cfg_path);
  // Data files by name: config.yaml writes them as absolute paths, which differ where one run
  // was made again elsewhere (gpu-runs revalidate) on the same files.
  const auto by_file_name = [](const YAML::Node& node) {
    YAML::Node copy = YAML::Clone(node);
    if (copy.IsScalar() && copy.Scalar().find('/') != std::string::npos) {
      return YAML::Node(fs::path(copy.Scalar()).filename().string());  // a model file
    }
    for_each_data_path(
        copy, [](YAML::Node& value) { value = fs::path(value.Scalar()).filename().string(); });
    return copy;
  };
  for (const char* key : {"workload", "seed", "model"}) {
    const YAML::Node s = by_file_name(sc[key]), e = by_file_name(ec[key]);
    if (dump(s) != dump(e)) {
      throw ConfigError(sim_cfg_path + " and " + eng_cfg_path +
                        " describe different experiments: key " + first_difference(s, e, key) +
                        "; validate runs of the same experiment");
    }
  }
  for (const char* key : {"serving", "policies"}) {
    if (dump(sc[key]) != dump(ec[key])) {
      rep.warnings.push_back(std::string("config.yaml key '") + key + "' differs between the runs");
    }
  }
  if (dump(ec["derived"]["num_gpu_blocks"]) == "0") {
    // sim bench: a client measured the server and cannot know its KV capacity.
    rep.warnings.push_back(
        "the measured folder does not record its KV block count (a client's measurement, sim "
        "bench): make sure sim run used the server's (--set serving.num_gpu_blocks=N)");
  } else if (dump(sc["derived"]["num_gpu_blocks"]) != dump(ec["derived"]["num_gpu_blocks"])) {
    rep.warnings.push_back("the runs had different KV block counts (" +
                           dump(sc["derived"]["num_gpu_blocks"]) + " vs " +
                           dump(ec["derived"]["num_gpu_blocks"]) +
                           "): pass --set serving.num_gpu_blocks=N to sim run");
  }

  // 2. Schedules, step by step.
  const Csv sim_steps = read_csv(sim_dir + "/steps.csv"),
            eng_steps = read_csv(engine_dir + "/steps.csv");
  rep.sim_steps = static_cast<std::int64_t>(sim_steps.rows.size());
  rep.engine_steps = static_cast<std::int64_t>(eng_steps.rows.size());
  const bool have_schedules =
      fs::exists(sim_dir + "/schedule.csv") && fs::exists(engine_dir + "/schedule.csv");
  std::vector<ScheduledStep> sim_sched, eng_sched;
  std::int64_t paired = std::min(rep.sim_steps, rep.engine_steps);
  if (have_schedules) {
    sim_sched = schedule_by_step(read_csv(sim_dir + "/schedule.csv"));
    eng_sched = schedule_by_step(read_csv(engine_dir + "/schedule.csv"));
    const std::size_t n = std::max(sim_sched.size(), eng_sched.size());
    rep.schedule = "identical";
    for (std::size_t i = 0; i < n; ++i) {
      static const ScheduledStep none{-1, {}};
      const auto& a = i < sim_sched.size() ? sim_sched[i] : none;
      const auto& b = i < eng_sched.size() ? eng_sched[i] : none;
      if (!(a == b)) {
        rep.schedule = "differ";
        rep.first_differing_step = static_cast<std::int64_t>(i);
        rep.schedule_detail = "executed step " + std::to_string(i) + ": sim runs " +
                              describe(a.rows) + "; engine runs " + describe(b.rows);
        paired = std::min<std::int64_t>(paired, static_cast<std::int64_t>(i));
        break;
      }
    }
    rep.paired_basis = "schedule.csv";
  } else {
    rep.schedule_detail =
        "schedule.csv missing in " +
        std::string(fs::exists(sim_dir + "/schedule.csv") ? engine_dir : sim_dir) +
        " (run with --record-schedule)";
    // Pair steps while their shapes in steps.csv agree.
    for (std::int64_t i = 0; i < paired; ++i) {
      bool same = true;
      for (const char* k :
           {"num_seqs", "prefill_tokens", "decode_tokens", "swap_out_blocks", "swap_in_blocks"}) {
        if (sim_steps.at(i, k) != eng_steps.at(i, k)) same = false;
      }
      if (!same) {
        paired = i;
        break;
      }
    }
    rep.paired_basis = "steps.csv shapes";
  }
  {
    std::vector<double> errors;
    for (std::int64_t i = 0; i < paired; ++i) {
      const double e = eng_steps.number(i, "duration_ms");
      if (e > 0) errors.push_back((sim_steps.number(i, "duration_ms") - e) / e);
    }
    rep.step_paired = error_stats(errors);
  }

  // 3. The sim's cost model on every engine step (rebuilt from the engine's schedule.csv).
  std::vector<AttributionStep> timed;  // the same steps, for the latency attribution
  const Csv sim_req = read_csv(sim_dir + "/requests.csv"),
            eng_req = read_csv(engine_dir + "/requests.csv");
  if (fs::exists(engine_dir + "/schedule.csv")) {
    const ReplayModel rm =
        replay_model(ConfigNode::load_file(sim_cfg_path), sim_cfg_path, cost_model_file);
    rep.replay_cost_model = rm.description;
    const std::vector<EngineStep> steps = engine_steps(engine_dir);
    std::vector<double> errors;
    timed = timed_steps(steps);
    for (std::size_t k = 0; k < steps.size(); ++k) {
      const EngineStep& st = steps[k];
      const double predicted = timed[k].predicted_s = ns_to_s(rm.model->step_time(st.plan));
      if (st.measured_s > 0) {
        errors.push_back((predicted - st.measured_s) / st.measured_s);
        const CalibrationFeatures f = CalibrationFeatures::from_plan(st.plan);
        rep.replayed.push_back({st.step, f.num_entries, f.step.prefill_tokens, f.step.decode_tokens,
                                f.step.decode_context_tokens, st.measured_s, predicted});
      }
    }
    rep.step_replay = error_stats(errors);
    rep.replayed_by_kind = replay_by_kind(rep.replayed);
  }

  // 4. Requests, joined by id over those finished in both.
  std::map<std::int64_t, std::size_t> sim_rows;
  for (std::size_t i = 0; i < sim_req.rows.size(); ++i) {
    if (!sim_rows.emplace(sim_req.integer(i, "id"), i).second) {
      throw ConfigError(sim_req.file + ":" + std::to_string(sim_req.lines[i]) + ": request " +
                        sim_req.at(i, "id") + " appears twice");
    }
  }
  std::set<std::int64_t> eng_ids;
  for (std::size_t j = 0; j < eng_req.rows.size(); ++j) {
    if (!eng_ids.insert(eng_req.integer(j, "id")).second) {
      throw ConfigError(eng_req.file + ":" + std::to_string(eng_req.lines[j]) + ": request " +
                        eng_req.at(j, "id") + " appears twice");
    }
  }
  std::vector<double> ttft, tpot, e2e;
  std::vector<AttributionRequest> attributed;
  // Requests the two runs did differently: one side's that the other has no row for, those
  // finished on one side only, and those finished in both with other lengths (a server capping
  // max_tokens): every error below would compare different work, so the report says so.
  std::int64_t measured_unfinished = 0, simulated_unfinished = 0, other_lengths = 0;
  std::int64_t only_simulated = 0, only_measured = 0;
  std::string first_other;
  for (std::size_t j = 0; j < eng_req.rows.size(); ++j) {
    const auto it = sim_rows.find(eng_req.integer(j, "id"));
    if (it == sim_rows.end()) {
      ++only_measured;
      continue;
    }
    const bool sim_done = sim_req.at(it->second, "status") == "finished";
    const bool eng_done = eng_req.at(j, "status") == "finished";
    measured_unfinished += sim_done && !eng_done;
    simulated_unfinished += eng_done && !sim_done;
  }
  for (const auto& [id, i] : sim_rows) only_simulated += !eng_ids.contains(id);
  if (only_simulated > 0 || only_measured > 0) {
    rep.warnings.push_back(
        std::to_string(only_simulated) +
        " requests of the simulation have no row in the measured "
        "run and " +
        std::to_string(only_measured) +
        " of the measured run none in the simulation: the aggregates compare different work");
  }
  for (std::size_t j = 0; j < eng_req.rows.size(); ++j) {
    auto it = sim_rows.find(eng_req.integer(j, "id"));
    if (it == sim_rows.end()) continue;
    const std::size_t i = it->second;
    if (sim_req.at(i, "status") != "finished" || eng_req.at(j, "status") != "finished") continue;
    for (const char* col : {"prompt_tokens", "output_tokens"}) {
      if (sim_req.integer(i, col) == eng_req.integer(j, col)) continue;
      if (other_lengths++ == 0) {
        first_other = "request " + eng_req.at(j, "id") + ": " + sim_req.at(i, col) + " " + col +
                      " simulated, " + eng_req.at(j, col) + " measured";
      }
      break;
    }
    ++rep.requests_compared;
    if (!timed.empty()) {
      AttributionRequest& a = attributed.emplace_back();
      a.id = eng_req.integer(j, "id");
      a.arrival_s = eng_req.number(j, "arrival_s");
      a.first_token_s = eng_req.number(j, "first_token_s");
      a.finish_s = eng_req.number(j, "finish_s");
      a.prompt_tokens = eng_req.integer(j, "prompt_tokens");
      a.output_tokens = eng_req.integer(j, "output_tokens");
      a.sim_ttft_ms = sim_req.number(i, "ttft_ms");
      a.sim_tpot_ms = sim_req.maybe(i, "tpot_ms");
    }
    auto add = [&](std::vector<double>& v, const char* col) {
      const std::optional<double> s = sim_req.maybe(i, col), e = eng_req.maybe(j, col);
      if (s && e && *e > 0) v.push_back((*s - *e) / *e);
    };
    add(ttft, "ttft_ms");
    add(tpot, "tpot_ms");
    add(e2e, "e2e_ms");
  }
  if (measured_unfinished > 0) {
    rep.warnings.push_back(std::to_string(measured_unfinished) +
                           " requests finished in the simulation but not in the measured run "
                           "(its requests.csv says why): the aggregates compare different work");
  }
  if (simulated_unfinished > 0) {
    rep.warnings.push_back(std::to_string(simulated_unfinished) +
                           " requests finished in the measured run but not in the simulation "
                           "(its requests.csv says why): the aggregates compare different work");
  }
  if (other_lengths > 0) {
    rep.warnings.push_back(std::to_string(other_lengths) +
                           " requests finished in both runs with other lengths (" + first_other +
                           "): the measured side did not run the experiment's requests");
  }
  rep.ttft = error_stats(ttft);
  rep.tpot = error_stats(tpot);
  rep.e2e = error_stats(e2e);
  if (!timed.empty()) rep.latency = attribute_latency(timed, attributed);

  // 5. Aggregates from summary.json.
  const nlohmann::json ss = read_json(sim_dir + "/summary.json"),
                       es = read_json(engine_dir + "/summary.json");
  if (es.contains("run") && es["run"].value("backend", "") == "bench") rep.measured_label = "bench";
  const std::pair<const char*, const char*> metrics[] = {{"throughput", "output_tokens_per_s"},
                                                         {"throughput", "requests_per_s"},
                                                         {"ttft_ms", "p50"},
                                                         {"ttft_ms", "p99"},
                                                         {"tpot_ms", "p50"},
                                                         {"tpot_ms", "p99"},
                                                         {"e2e_ms", "p50"},
                                                         {"e2e_ms", "p99"},
                                                         {"itl_ms", "p50"},
                                                         {"preemption", "preemptions"}};
  for (const auto& metric : metrics) {
    // Not a structured binding: clang before 16 cannot capture one in the lambda below.
    const auto& section = metric.first;
    const auto& key = metric.second;
    AggregateError a;
    a.metric = std::string(section) + "." + key;
    auto get = [&](const nlohmann::json& j, const std::string& file) {
      if (!j.contains(section) || !j[section].contains(key) || !j[section][key].is_number()) {
        throw ConfigError(file + ": no number at '" + a.metric + "'");
      }
      return j[section][key].get<double>();
    };
    a.sim = get(ss, sim_dir + "/summary.json");
    a.engine = get(es, engine_dir + "/summary.json");
    if (a.engine != 0) a.error = (a.sim - a.engine) / a.engine;
    rep.aggregates.push_back(a);
  }
  {
    AggregateError a;
    a.metric = "num_steps";
    a.sim = static_cast<double>(rep.sim_steps);
    a.engine = static_cast<double>(rep.engine_steps);
    if (a.engine != 0) a.error = (a.sim - a.engine) / a.engine;
    rep.aggregates.push_back(a);
  }
  // Energy, when both know it (the simulator's power model; a CUDA engine's board counter).
  for (const char* key : {"joules", "average_power_w", "joules_per_output_token"}) {
    const auto number = [key](const nlohmann::json& j) -> std::optional<double> {
      if (!j.contains("energy") || !j["energy"].contains(key) || !j["energy"][key].is_number()) {
        return std::nullopt;
      }
      return j["energy"][key].get<double>();
    };
    const std::optional<double> sim = number(ss), engine = number(es);
    if (!sim || !engine) continue;
    AggregateError a;
    a.metric = std::string("energy.") + key;
    a.sim = *sim;
    a.engine = *engine;
    if (a.engine != 0) a.error = (a.sim - a.engine) / a.engine;
    rep.aggregates.push_back(a);
  }
  return rep;
}

namespace {

// The replayed error by step kind and the first replayed step (a cold start shows there).
void print_replay_by_kind(std::FILE* f, const ValidationReport& r) {
  if (r.replayed_by_kind.empty()) return;
  std::fprintf(f, "\n  %-34s %7s %11s %11s %9s %8s %14s %9s\n", "replayed step time by kind",
               "steps", "measured s", "predicted s", "time-wtd", "MAPE", "slow (% time)",
               "w/o slow");
  for (const StepKindError& k : r.replayed_by_kind) {
    char slow[32], without[32];
    std::snprintf(slow, sizeof slow, "%lld (%.1f)", static_cast<long long>(k.slow_steps),
                  100 * k.slow_measured_s / k.measured_s);
    if (k.time_weighted_without_slow) {
      std::snprintf(without, sizeof without, "%+.2f", 100 * *k.time_weighted_without_slow);
    } else {
      std::snprintf(without, sizeof without, "-");
    }
    std::fprintf(f, "  %-34s %7lld %11.3f %11.3f %+9.2f %8.2f %14s %9s\n", k.kind.c_str(),
                 static_cast<long long>(k.steps), k.measured_s, k.predicted_s,
                 100 * k.time_weighted, 100 * k.error.mean, slow, without);
  }
  const ReplayedStep& first = r.replayed.front();
  std::fprintf(f,
               "  (percent; time-wtd: (sum predicted - sum measured) / sum measured; slow: "
               "measured > %.1fx predicted)\n"
               "  first replayed step (%lld): measured %.2f ms, predicted %.2f ms (%+.1f %%)\n",
               kSlowStepFactor, static_cast<long long>(first.step), 1e3 * first.measured_s,
               1e3 * first.predicted_s,
               100 * (first.predicted_s - first.measured_s) / first.measured_s);
}

// The requests re-timed on the engine's schedule (sim/latency_attribution.h).
void print_latency_attribution(std::FILE* f, const ValidationReport& r) {
  if (!r.latency) return;
  const LatencyAttribution& a = *r.latency;
  if (a.rows.empty()) {
    std::fprintf(f,
                 "\n  latency attribution: no request attributed (%lld whose token times do not "
                 "fall at their steps: a steps.csv without start_s?)\n",
                 static_cast<long long>(a.unmatched));
    return;
  }
  char title[96];
  std::snprintf(title, sizeof title, "latency, p50 of %lld requests (TPOT %lld)",
                static_cast<long long>(a.requests), static_cast<long long>(a.tpot_requests));
  std::fprintf(f, "\n  %-44s %10s %8s %10s %8s\n", title, "TTFT ms", "error", "TPOT ms", "error");
  static const char* const kLabels[] = {"engine, measured", "its steps back to back",
                                        "its steps as the cost model prices them",
                                        "the simulator's own run"};
  for (std::size_t i = 0; i < a.rows.size(); ++i) {
    const LatencyRow& row = a.rows[i];
    auto pct = [](const std::optional<double>& e, char* buf, std::size_t n) {
      if (e) {
        std::snprintf(buf, n, "%+.2f", 100 * *e);
      } else {
        std::snprintf(buf, n, "-");
      }
      return buf;
    };
    char te[32], pe[32], tp[32];
    if (row.tpot_p50_ms) {
      std::snprintf(tp, sizeof tp, "%.3f", *row.tpot_p50_ms);
    } else {
      std::snprintf(tp, sizeof tp, "-");
    }
    std::fprintf(f, "  %-44s %10.3f %8s %10s %8s\n", i < 4 ? kLabels[i] : row.name.c_str(),
                 row.ttft_p50_ms, pct(row.ttft_error, te, sizeof te), tp,
                 pct(row.tpot_error, pe, sizeof pe));
  }
  std::fprintf(
      f,
      "  (percent against the measured p50; each row adds one cause: the engine's time "
      "between steps\n   (%.3f s, %.2f %% of its %.3f s of steps), the cost model, the "
      "simulator's own schedule%s)\n",
      a.between_steps_s, a.steps_s > 0 ? 100 * a.between_steps_s / a.steps_s : 0.0, a.steps_s,
      a.unmatched > 0 ? ("; " + std::to_string(a.unmatched) + " requests not attributed").c_str()
                      : "");
  if (a.wake_ups > 0) {
    // The simulator starts a step on an idle replica at the arrival itself, or its calibrated
    // profile's wake_up_s after it (sim/simulator.h SimReplica::wake_up_ns); the report does not
    // know which profile the simulated run used, so it names both.
    std::fprintf(f,
                 "  engine idle wake-ups: %lld steps started on an arrival at an idle engine, "
                 "%.1f us after it (p50; p90 %.1f us); the simulator starts them at the arrival "
                 "plus its profile's wake_up_s (0 without one)\n",
                 static_cast<long long>(a.wake_ups), a.wake_up_p50_s * 1e6, a.wake_up_p90_s * 1e6);
  }
}

}  // namespace

void print_validation(std::FILE* f, const ValidationReport& r) {
  const char* measured = r.measured_label.c_str();
  std::fprintf(f, "validate %s (sim) against %s (%s)\n", r.sim_dir.c_str(), r.engine_dir.c_str(),
               measured);
  for (const std::string& w : r.warnings) std::fprintf(f, "  warning: %s\n", w.c_str());
  std::fprintf(f, "  schedules: %s", r.schedule.c_str());
  if (!r.schedule_detail.empty()) std::fprintf(f, " (%s)", r.schedule_detail.c_str());
  std::fprintf(f, "\n  steps: sim %lld, %s %lld\n", static_cast<long long>(r.sim_steps), measured,
               static_cast<long long>(r.engine_steps));
  std::fprintf(f, "\n  %-34s %7s %8s %8s %8s %8s %8s %9s\n", "relative error, % (|sim-eng|/eng)",
               "n", "mean", "p50", "p90", "p99", "max", "bias");
  auto row = [&](const std::string& name, const ErrorStats& s) {
    if (s.count == 0) {  // nothing paired: no error to show (0.00 would read as a perfect match)
      std::fprintf(f, "  %-34s %7d %8s %8s %8s %8s %8s %9s\n", name.c_str(), 0, "-", "-", "-", "-",
                   "-", "-");
      return;
    }
    std::fprintf(f, "  %-34s %7lld %8.2f %8.2f %8.2f %8.2f %8.2f %+9.2f\n", name.c_str(),
                 static_cast<long long>(s.count), 100 * s.mean, 100 * s.p50, 100 * s.p90,
                 100 * s.p99, 100 * s.max, 100 * s.mean_signed);
  };
  row("step time, paired (" + r.paired_basis + ")", r.step_paired);
  if (r.step_replay) row("step time, replayed", *r.step_replay);
  row("TTFT per request", r.ttft);
  row("TPOT per request", r.tpot);
  row("E2E per request", r.e2e);
  if (r.step_replay) std::fprintf(f, "  (replay cost model: %s)\n", r.replay_cost_model.c_str());
  print_replay_by_kind(f, r);
  print_latency_attribution(f, r);
  std::fprintf(f, "\n  %-34s %12s %12s %9s\n", "aggregate", "sim", measured, "error %");
  for (const AggregateError& a : r.aggregates) {
    if (a.error) {
      std::fprintf(f, "  %-34s %12.4g %12.4g %+9.2f\n", a.metric.c_str(), a.sim, a.engine,
                   100 * *a.error);
    } else {
      std::fprintf(f, "  %-34s %12.4g %12.4g %9s\n", a.metric.c_str(), a.sim, a.engine, "-");
    }
  }
}

std::string validation_json(const ValidationReport& r) {
  using J = nlohmann::ordered_json;
  auto stats = [](const ErrorStats& s) {
    return J{{"count", s.count},
             {"mean", s.mean},
             {"p50", s.p50},
             {"p90", s.p90},
             {"p99", s.p99},
             {"max", s.max},
             {"mean_signed", s.mean_signed}};
  };
  J j;
  j["sim_dir"] = r.sim_dir;
  j["engine_dir"] = r.engine_dir;
  j["warnings"] = r.warnings;
  j["schedule"] = {
      {"comparison", r.schedule},
      {"first_differing_step", r.first_differing_step ? J(*r.first_differing_step) : J(nullptr)},
      {"detail", r.schedule_detail}};
  j["steps"] = {{"sim", r.sim_steps}, {"engine", r.engine_steps}};
  j["step_time"] = {{"paired", stats(r.step_paired)},
                    {"paired_basis", r.paired_basis},
                    {"replayed", r.step_replay ? stats(*r.step_replay) : J(nullptr)},
                    {"replay_cost_model", r.replay_cost_model}};
  J kinds = J::array();
  for (const StepKindError& k : r.replayed_by_kind) {
    kinds.push_back(
        {{"kind", k.kind},
         {"steps", k.steps},
         {"measured_s", k.measured_s},
         {"predicted_s", k.predicted_s},
         {"time_weighted", k.time_weighted},
         {"error", stats(k.error)},
         {"slow_steps", k.slow_steps},
         {"slow_measured_s", k.slow_measured_s},
         {"time_weighted_without_slow",
          k.time_weighted_without_slow ? J(*k.time_weighted_without_slow) : J(nullptr)}});
  }
  j["step_time"]["replayed_by_kind"] = kinds;
  j["step_time"]["slow_step_factor"] = kSlowStepFactor;
  if (r.replayed.empty()) {
    j["step_time"]["first_replayed"] = nullptr;
  } else {
    const ReplayedStep& first = r.replayed.front();
    j["step_time"]["first_replayed"] = {
        {"step", first.step},
        {"measured_s", first.measured_s},
        {"predicted_s", first.predicted_s},
        {"error", (first.predicted_s - first.measured_s) / first.measured_s}};
  }
  j["requests"] = {{"compared", r.requests_compared},
                   {"ttft", stats(r.ttft)},
                   {"tpot", stats(r.tpot)},
                   {"e2e", stats(r.e2e)}};
  if (r.latency) {
    const LatencyAttribution& a = *r.latency;
    auto opt = [](const std::optional<double>& v) { return v ? J(*v) : J(nullptr); };
    J rows = J::array();
    for (const LatencyRow& row : a.rows) {
      rows.push_back({{"name", row.name},
                      {"ttft_p50_ms", row.ttft_p50_ms},
                      {"tpot_p50_ms", opt(row.tpot_p50_ms)},
                      {"ttft_error", opt(row.ttft_error)},
                      {"tpot_error", opt(row.tpot_error)}});
    }
    j["latency_attribution"] = {{"requests", a.requests},
                                {"tpot_requests", a.tpot_requests},
                                {"unmatched", a.unmatched},
                                {"between_steps_s", a.between_steps_s},
                                {"steps_s", a.steps_s},
                                {"wake_ups", a.wake_ups},
                                {"wake_up_p50_s", a.wake_up_p50_s},
                                {"wake_up_p90_s", a.wake_up_p90_s},
                                {"rows", rows}};
  } else {
    j["latency_attribution"] = nullptr;
  }
  J agg = J::object();
  for (const AggregateError& a : r.aggregates) {
    agg[a.metric] = {
        {"sim", a.sim}, {"engine", a.engine}, {"error", a.error ? J(*a.error) : J(nullptr)}};
  }
  j["aggregates"] = agg;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string replay_csv(const ValidationReport& r) {
  std::string out =
      "step,num_seqs,prefill_tokens,decode_tokens,decode_context_tokens,measured_ms,"
      "predicted_ms\n";
  char buf[256];
  for (const ReplayedStep& s : r.replayed) {
    std::snprintf(buf, sizeof buf, "%lld,%lld,%lld,%lld,%lld,%.6f,%.6f\n",
                  static_cast<long long>(s.step), static_cast<long long>(s.num_seqs),
                  static_cast<long long>(s.prefill_tokens), static_cast<long long>(s.decode_tokens),
                  static_cast<long long>(s.decode_context_tokens), s.measured_s * 1e3,
                  s.predicted_s * 1e3);
    out += buf;
  }
  return out;
}

namespace {

// SIM_DIR-validation, beside SIM_DIR ("run/." and "run/" give "run-validation", "." its name).
std::string default_validation_dir(const std::string& sim_dir) {
  fs::path base = fs::path(sim_dir).lexically_normal();
  if (base.has_parent_path() && !base.has_filename()) base = base.parent_path();
  if (base.filename() == "." || base.filename() == ".." || base.empty()) {
    base = fs::weakly_canonical(fs::absolute(base));
  }
  return base.string() + "-validation";
}

}  // namespace

void check_validation_dir(const std::string& dir, const std::vector<std::string>& inputs,
                          bool force) {
  for (const std::string& in : inputs) {
    if (path_within(dir, in)) {
      throw ConfigError(dir + ": the report's folder is in the run folder " + in +
                        "; choose another --out");
    }
  }
  refuse_symlink(dir);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) return;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) {
    throw ConfigError(dir + ": output path exists and is not a directory");
  }
  bool previous = false;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "figures" && !entry.is_symlink()) {
      check_figures_dir(entry.path().string(),
                        "refusing to write the report there (choose another --out)");
    } else if ((name == "validation.json" || name == "replay.csv") && !entry.is_symlink() &&
               entry.is_regular_file()) {
      // Ours only if it reads as ours (a report's keys, the replay's header): --force replaces
      // a previous report, never a user's file of the same name.
      std::ifstream in(entry.path(), std::ios::binary);
      bool ours = false;
      if (name == "replay.csv") {
        std::string header;
        std::getline(in, header);
        ours = header + "\n" == replay_csv(ValidationReport{});
      } else {
        const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        ours = j.is_object() && j.contains("sim_dir") && j.contains("engine_dir") &&
               j.contains("schedule");
      }
      if (!ours) {
        throw ConfigError(dir + ": refusing to write here: its '" + name +
                          "' is not a `sim validate` report (choose another --out)");
      }
      previous = true;
    } else {
      throw ConfigError(dir + ": refusing to write here: it holds '" + name +
                        "', which is not a `sim validate` output (choose another --out)");
    }
  }
  if (ec) throw_io_error(dir, "listing", ec.value());
  if (previous && !force) {
    throw ConfigError(dir + ": holds a previous validation report; pass --force to replace it");
  }
}

void write_validation_dir(const std::string& dir, const std::vector<std::string>& inputs,
                          bool force, const std::string& json, const std::string& csv) {
  // check_validation_dir made sure the folder holds only a previous report (its figures only
  // what `sim plot` wrote there): the report replaces it whole, written into a staging folder
  // first, so a failed write or an interrupt leaves the previous report as it was (the files
  // were replaced one by one: a full disk left the new validation.json beside the old
  // replay.csv, its figures gone).
  check_validation_dir(dir, inputs, force);
  StagedDir stage(dir);
  write_file_atomically(stage.temp_path() + "/validation.json", json);
  write_file_atomically(stage.temp_path() + "/replay.csv", csv);
  throw_if_interrupted();
  stage.commit();
}

int validate_command(const std::vector<std::string>& args) {
  std::string sim_dir, engine_dir, out, cost;
  bool quiet = false, force = false;
  const auto app = cli::command(
      "sim validate",
      "Compare a sim run with the engine's run of the same experiment: step-time, per-request "
      "and aggregate errors, schedules step by step; writes OUT/validation.json and OUT/replay.csv "
      "(each engine step's measured and replayed duration).");
  app->add_option("SIM_DIR", sim_dir, "the sim run folder");
  app->add_option("ENGINE_DIR", engine_dir, "the engine's run folder");
  cli::add_out(*app, out, "the report's folder (default SIM_DIR-validation)");
  app->add_option("--cost-model", cost, "predict the engine's steps with this calibrated model")
      ->type_name("COST.yaml");
  cli::add_force(*app, force, "report in OUT");
  cli::add_quiet(*app, quiet);
  cli::parse(*app, args);
  const std::vector<std::string> dirs = {sim_dir, engine_dir};
  if (sim_dir.empty() || engine_dir.empty()) {
    throw UsageError("sim validate: expected two run folders (sim validate SIM_DIR ENGINE_DIR)");
  }
  const std::string dir = out.empty() ? default_validation_dir(sim_dir) : out;
  const ValidationReport rep = validate_runs(dirs[0], dirs[1], cost);
  write_validation_dir(dir, dirs, force, validation_json(rep), replay_csv(rep));
  if (!quiet) {
    print_validation(stdout, rep);
    std::printf("  wrote %s/validation.json\n", dir.c_str());
  }
  return 0;
}

namespace {

// The model whose roofline prices a power fit's shapes: `model_arg` (a catalogue name or a
// model file) when given, which must be the model the profile names, else the profile's
// `# model:` name from the catalogue. A name the catalogue lacks is an error that names the
// profile and says to pass --model.
ModelConfig power_fit_model(const EngineProfile& p, const std::string& profile,
                            const std::string& model_arg) {
  const auto named = p.header.find("model");
  if (named == p.header.end()) throw ConfigError(profile + ": no '# model:' line");
  if (model_arg.empty()) {
    try {
      return load_model(named->second, default_catalog_dir());
    } catch (const ConfigError& e) {
      throw ConfigError(profile + ": its model '" + named->second +
                        "' is not in the catalogue; pass --model with its file (" + e.what() + ")");
    }
  }
  ModelConfig model = load_model(model_arg, default_catalog_dir());
  if (model.name != named->second) {
    throw ConfigError("--model " + model_arg + " is '" + model.name + "', but " + profile +
                      " profiled '" + named->second + "'");
  }
  return model;
}

}  // namespace

int calibrate_command(const std::vector<std::string>& args) {
  std::string profile, out, engine_run, host_overhead_from, hardware, model_arg;
  bool quiet = false, force = false, power = false, between_steps = false;
  int holdout = 0;
  std::vector<std::string> profiles, vidur, held_out;
  const auto app = cli::command(
      "sim calibrate",
      "Fit the calibrated cost model to an `engine profile` (NNLS over the roofline's "
      "operators), plus the engine loop's host overhead from an engine run folder recorded with "
      "--record-schedule; prints the fit error per shape family (docs/validation.md). With "
      "--vidur, fit a hardware entry's kernel parameters to Vidur operator profiles instead, "
      "holding out every other token count and the --held-out profiles.");
  app->add_option("PROFILE.csv", profiles, "the profile `engine profile` wrote");
  app->add_option("--vidur", vidur, "Vidur mlp.csv profiles of one GPU to fit (repeatable)")
      ->type_name("MLP.csv");
  app->add_option("--held-out", held_out,
                  "Vidur profiles of the same GPU only to report errors on (repeatable)")
      ->type_name("MLP.csv");
  app->add_option("--hardware", hardware,
                  "the catalogue entry (or .yaml) to start from (--vidur, --power)")
      ->type_name("NAME");
  app->add_flag("--power", power,
                "fit the hardware entry's power model to the profile's board power readings "
                "(a CUDA profile with NVML) instead; -o writes the entry with the fitted `power:`");
  app->add_option("--model", model_arg,
                  "with --power: the model the profile ran, when its `# model:` name is not in "
                  "the catalogue (a model .yaml or Hugging Face config.json)")
      ->type_name("NAME|PATH");
  cli::add_out(*app, out, "the cost model file to write")->type_name("COST.yaml");
  app->add_option("--engine-run", engine_run, "fit the host overhead on this engine run folder")
      ->type_name("ENGINE_DIR");
  app->add_option("--host-overhead-from", host_overhead_from,
                  "instead of --engine-run: add the host overhead an earlier calibration of the "
                  "model fitted (its host_overhead section), to refit a profile whose engine run "
                  "is not at hand")
      ->type_name("COST.yaml");
  app->add_flag("--between-steps", between_steps,
                "with --engine-run: fit the host overhead to step periods (a step's duration plus "
                "the engine's time before the next step when the next continues a request), so "
                "that simulated latencies include the loop's work after a step");
  CLI::Option* holdout_option =
      app->add_option("--holdout", holdout,
                      "hold every N-th shape of each family out of the fit and report the error on "
                      "those (N >= 2)")
          ->type_name("N");
  cli::add_force(*app, force, "COST.yaml");
  cli::add_quiet(*app, quiet);
  cli::parse(*app, args);
  const auto check_holdout = [&] {
    if (holdout_option->count() > 0 && holdout < 2) {
      throw UsageError("sim calibrate: --holdout: expected an integer >= 2, got " +
                       std::to_string(holdout));
    }
  };
  if (!model_arg.empty() && !power) {
    throw UsageError("sim calibrate: --model goes with --power (a cost-model fit reads no model)");
  }
  if (power) {
    if (!vidur.empty()) throw UsageError("sim calibrate: --power and --vidur are two fits");
    if (hardware.empty()) throw UsageError("sim calibrate: --power needs --hardware NAME");
    if (!held_out.empty() || !engine_run.empty() || !host_overhead_from.empty() || between_steps) {
      throw UsageError("sim calibrate: --power takes a profile, --hardware, --holdout and -o");
    }
    if (profiles.size() != 1) {
      throw UsageError(
          "sim calibrate: --power needs one profile (sim calibrate PROFILE.csv "
          "--power --hardware NAME)");
    }
    check_holdout();
    // Never an input, even with --force: the profile, the hardware entry (whose text the output
    // extends) and a model file.
    const HardwareConfig hw = load_hardware(hardware, default_catalog_dir());
    if (!out.empty()) {
      std::vector<std::string> inputs = {profiles[0], hw.source};
      std::error_code ec;
      if (!model_arg.empty() && fs::exists(model_arg, ec)) inputs.push_back(model_arg);
      check_output_file(out, inputs, force);
    }
    const EngineProfile p = read_profile(profiles[0]);
    ModelConfig model = power_fit_model(p, profiles[0], model_arg);
    if (!p.kv_cache_dtype.empty()) model.kv_cache_dtype = p.kv_cache_dtype;
    if (!p.quantization.empty()) model.quantization = p.quantization;
    const PowerFit fit = fit_power(p, model, hw, holdout_option->count() > 0 ? holdout : 2);
    if (!out.empty()) write_file_atomically(out, power_hardware_yaml(fit, read_text(hw.source)));
    if (!quiet) {
      print_power_fit(stdout, fit);
      if (!out.empty()) std::printf("  wrote %s\n", out.c_str());
    }
    return 0;
  }
  if (!vidur.empty()) {
    if (!profiles.empty()) throw UsageError("sim calibrate: --vidur takes no engine profile");
    if (holdout_option->count() > 0) {
      throw UsageError(
          "sim calibrate: --holdout goes with an engine profile (--vidur holds out every other "
          "token count and the --held-out profiles)");
    }
    if (hardware.empty()) throw UsageError("sim calibrate: --vidur needs --hardware NAME");
    if (!engine_run.empty() || !host_overhead_from.empty() || between_steps) {
      throw UsageError(
          "sim calibrate: --engine-run, --host-overhead-from and --between-steps go with an "
          "engine profile");
    }
    if (out.empty()) throw UsageError("sim calibrate: expected -o HARDWARE.yaml");
    // Held-out data is data the fit never saw.
    for (const std::string& h : held_out) {
      for (const std::string& v : vidur) {
        std::error_code ec;
        if (h == v || fs::equivalent(h, v, ec)) {
          throw UsageError("sim calibrate: --held-out " + h + " is also a --vidur profile (" + v +
                           "): held-out measurements must be ones the fit never saw");
        }
      }
    }
    const HardwareConfig base = load_hardware(hardware, default_catalog_dir());
    std::vector<std::string> inputs = vidur;
    inputs.insert(inputs.end(), held_out.begin(), held_out.end());
    inputs.push_back(base.source);  // the entry the fit starts from
    check_output_file(out, inputs, force);
    std::vector<VidurProfile> train, test;
    for (const std::string& f : vidur) train.push_back(read_vidur_profile(f));
    for (const std::string& f : held_out) test.push_back(read_vidur_profile(f));
    const VidurFit fit = fit_vidur(base, train, test);
    write_file_atomically(out, vidur_hardware_yaml(fit, vidur, held_out));
    if (!quiet) {
      print_vidur_fit(stdout, fit);
      std::printf("  wrote %s\n", out.c_str());
    }
    return 0;
  }
  if (!held_out.empty() || !hardware.empty()) {
    throw UsageError(
        "sim calibrate: --held-out and --hardware go with --vidur (--hardware also "
        "with --power)");
  }
  check_holdout();
  if (!engine_run.empty() && !host_overhead_from.empty()) {
    throw UsageError(
        "sim calibrate: --engine-run and --host-overhead-from are two sources of one host "
        "overhead; give one");
  }
  if (profiles.size() > 1) throw UsageError("sim calibrate: more than one profile given");
  if (!profiles.empty()) profile = profiles[0];
  if (profile.empty())
    throw UsageError("sim calibrate: expected a profile (sim calibrate PROFILE.csv -o COST.yaml)");
  if (out.empty()) throw UsageError("sim calibrate: expected -o COST.yaml");
  // Never the measured profile (or the engine run's files), and an existing file only with
  // --force; checked before the fit so a refusal costs nothing.
  std::vector<std::string> inputs = {profile};
  if (!engine_run.empty()) inputs.push_back(engine_run);  // none of the run folder's files
  if (!host_overhead_from.empty()) inputs.push_back(host_overhead_from);
  check_output_file(out, inputs, force);
  const ProfileCalibration c =
      calibrate_profile(profile, holdout, engine_run, profile, host_overhead_from, between_steps);
  write_file_atomically(out, c.yaml);
  if (!quiet) {
    print_profile_calibration(stdout, c);
    std::printf("  wrote %s\n", out.c_str());
  }
  return 0;
}

ProfileCalibration calibrate_profile(const std::string& profile_path, int holdout,
                                     const std::string& engine_run,
                                     const std::string& profile_label,
                                     const std::string& host_overhead_from, bool between_steps) {
  if (between_steps && engine_run.empty()) {
    throw UsageError(
        "sim calibrate: --between-steps goes with --engine-run (the time between "
        "steps is measured on that run)");
  }
  if (!engine_run.empty() && !host_overhead_from.empty()) {
    throw std::logic_error("calibrate_profile: an engine run and an earlier host overhead");
  }
  ProfileCalibration c;
  const EngineProfile p = read_profile(profile_path);
  // Read before the fit, so that a bad file costs nothing.
  std::optional<HostOverhead> earlier;
  if (!host_overhead_from.empty()) {
    earlier = read_host_overhead(host_overhead_from, p.header.at("model"));
  }
  c.result = holdout ? fit_profile_holdout(p, holdout) : fit_profile(p);
  if (c.result.profile.file.empty()) c.result.profile.file = profile_path;  // for messages
  if (!engine_run.empty()) {
    c.host = fit_host_overhead(engine_run, c.result.profile, between_steps);
  }
  if (earlier) {
    c.result.profile.coefficients.step_s += earlier->step_s;
    c.result.profile.coefficients.per_sequence_s += earlier->per_sequence_s;
    c.result.profile.coefficients.wake_up_s = earlier->wake_up_s;
    c.host = std::move(earlier);
  }
  c.yaml = calibration_yaml(c.result, profile_label, c.host ? &*c.host : nullptr);
  return c;
}

HostOverhead read_host_overhead(const std::string& cost_yaml, const std::string& model) {
  const ConfigNode doc = ConfigNode::load_file(cost_yaml);
  if (const std::string m = doc.get_string("model"); m != model) {
    doc.at("model").fail_message("'" + m + "', but the profile measured '" + model +
                                 "' (a host overhead carries only between calibrations of one "
                                 "model)");
  }
  if (!doc.has("host_overhead")) {
    throw ConfigError(cost_yaml +
                      ": has no host_overhead section to reuse (it was calibrated without "
                      "--engine-run)");
  }
  const ConfigNode h = doc.at("host_overhead");
  if (!h.is_map()) h.fail("a mapping of engine_run, steps, step_s and per_sequence_s");
  h.allow_keys({"engine_run", "steps", "step_s", "per_sequence_s", "between_steps", "wake_ups",
                "wake_up_s"});
  HostOverhead o;
  o.engine_run = h.get_string("engine_run");
  o.steps = h.get_int("steps", 0, INT64_MAX);
  o.step_s = h.get_double("step_s", 0.0, 1e6);
  o.per_sequence_s = h.get_double("per_sequence_s", 0.0, 1e6);
  o.between_steps = h.get_bool("between_steps", false);
  // Files written before the wake-up was fitted have neither: 0, a step starts at its arrival.
  o.wake_ups = h.has("wake_ups") ? h.get_int("wake_ups", 0, INT64_MAX) : 0;
  o.wake_up_s = h.has("wake_up_s") ? h.get_double("wake_up_s", 0.0, 1.0) : 0.0;
  o.carried = true;
  return o;
}

void print_profile_calibration(std::FILE* out, const ProfileCalibration& c) {
  print_calibration(out, c.result);
  if (c.host) {
    std::fprintf(out,
                 "  host overhead %sover %lld steps%s of %s: step_s %.9g, per_sequence_s %.9g\n",
                 c.host->carried ? "(an earlier calibration's, --host-overhead-from) " : "",
                 static_cast<long long>(c.host->steps),
                 c.host->between_steps ? " (periods: the time between steps included)" : "",
                 c.host->engine_run.c_str(), c.host->step_s, c.host->per_sequence_s);
    std::fprintf(out, "  idle wake-up (the median of %lld): %.1f us\n",
                 static_cast<long long>(c.host->wake_ups), c.host->wake_up_s * 1e6);
  }
}

}  // namespace servelab
