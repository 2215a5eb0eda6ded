#include "serving/run_stage.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "serving/interrupt.h"
#include "serving/run_folder.h"
#include "traces/data_paths.h"

namespace servelab {

namespace {

namespace fs = std::filesystem;

// Checks the final folder and stages it, or nothing when the run writes no files.
std::optional<StagedDir> stage_for(const ExperimentConfig& config, const RunStageOptions& options) {
  if (!options.write_files) return std::nullopt;
  const std::string final_dir =
      options.out_dir.empty() ? "out/" + config.name + options.default_suffix : options.out_dir;
  check_out_dir(final_dir);
  refuse_inputs_inside(config, final_dir);
  return std::optional<StagedDir>(std::in_place, final_dir);
}

std::string streamed_path(const std::optional<StagedDir>& stage, bool wanted, const char* name) {
  return stage && wanted ? stage->temp_path() + "/" + name : std::string();
}

}  // namespace

void refuse_inputs_inside(const ExperimentConfig& config, const std::string& final_dir) {
  std::vector<std::string> inputs = {config.file};
  std::vector<std::string> data;
  // Every data file the workload reads (traces, sessions files, length tables, mix parts: the
  // `path`, `file` and `table` keys; a length table was missed and deleted with the old folder).
  if (config.root.IsMap() && config.root["workload"]) {
    for_each_data_path(config.root["workload"],
                       [&](YAML::Node& value) { data.push_back(value.Scalar()); });
  }
  for (const std::string& p : data) {
    inputs.push_back(fs::path(p).is_absolute() || config.base_dir.empty()
                         ? p
                         : (fs::path(config.base_dir) / p).string());
  }
  for (const std::string& in : inputs) {
    if (!in.empty() && path_within(in, final_dir)) {
      throw ConfigError(in + ": an input of the run is in its output folder " + final_dir +
                        ", which the run replaces; choose another --out, or move the file");
    }
  }
}

RunStage::RunStage(const ExperimentConfig& config, const RunStageOptions& options)
    : stage_(stage_for(config, options)),
      recorder_(config.slo, streamed_path(stage_, config.outputs.steps_csv, "steps.csv"),
                streamed_path(stage_, config.outputs.record_schedule, "schedule.csv"),
                options.replica_column) {
  if (config.scheduler.lora.enabled()) recorder_.track_lora_slots(config.scheduler.lora.max_loras);
  if (!config.request_classes.empty()) recorder_.set_request_classes(config.request_classes);
  if (!stage_) return;
  if (config.outputs.record_events) recorder_.record_events(stage_->temp_path() + "/events.csv");
  if (config.outputs.record_blocks) recorder_.record_blocks(stage_->temp_path() + "/blocks.csv");
}

const std::string& RunStage::dir() const {
  static const std::string none;
  return stage_ ? stage_->temp_path() : none;
}

std::string RunStage::commit() {
  if (!stage_) throw std::logic_error("RunStage::commit: the run writes no files");
  throw_if_interrupted();  // a run shorter than the drivers' check interval: not committed
  // Checked again: a run replayed in wall-clock time (engine run) lasts long enough
  // for the user to save a file in the folder meanwhile, which replacing it would delete. The
  // run's files are then kept beside it, under another name, rather than lost.
  try {
    check_out_dir(stage_->final_path());
  } catch (const ConfigError& e) {
    const std::string kept = stage_->final_path() + ".run-" + std::to_string(::getpid());
    std::error_code ec;
    fs::remove_all(kept, ec);
    if (std::rename(stage_->temp_path().c_str(), kept.c_str()) != 0) throw;
    throw ConfigError(std::string(e.what()) +
                      " (it changed while the run ran); the run's files are in " + kept);
  }
  stage_->commit();
  return stage_->final_path();
}

}  // namespace servelab
