// Where a simulated run writes (sim run, one replica or a cluster): the run folder is staged in
// a temporary sibling folder and moved into place once complete, so an existing run folder is
// replaced only by a whole new run, never by a partial one.
#pragma once

#include <optional>
#include <string>

#include "serving/experiment.h"
#include "serving/output_file.h"
#include "serving/run_folder.h"
#include "sim/run.h"

namespace servelab {

struct RunStage {
  // Checks the final folder (options.out_dir, default out/<name>; check_out_dir) and stages it;
  // sets out_dir to the staging folder. Nothing when options.write_files is false.
  RunStage(const ExperimentConfig& config, const RunOptions& options, std::string& out_dir) {
    if (!options.write_files) return;
    const std::string final_dir = options.out_dir.empty() ? "out/" + config.name : options.out_dir;
    check_out_dir(final_dir);
    stage.emplace(final_dir);
    out_dir = stage->temp_path();
    if (config.outputs.steps_csv) steps_path = out_dir + "/steps.csv";
    if (config.outputs.record_schedule) schedule_path = out_dir + "/schedule.csv";
  }
  RunStage(const RunStage&) = delete;
  RunStage& operator=(const RunStage&) = delete;

  std::optional<StagedDir> stage;  // empty when the run writes no files
  std::string steps_path;          // "" when steps.csv is not written
  std::string schedule_path;       // "" when schedule.csv is not written
};

}  // namespace servelab
