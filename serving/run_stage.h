// Where one run writes, as every driver begins it (`sim run` with one replica or a cluster,
// `engine run` with one replica or a cluster): the run folder, checked and staged, and the
// Recorder that streams steps.csv, schedule.csv, events.csv and blocks.csv into it.
//
// The folder is staged in a temporary sibling (serving/output_file.h StagedDir) and moved into
// place by commit() once the run completed, so an existing run folder is replaced only by a whole
// new run, never by a partial one; destroying an uncommitted RunStage removes the temporary.
#pragma once

#include <optional>
#include <string>

#include "serving/experiment.h"
#include "serving/output_file.h"
#include "serving/recorder.h"

namespace servelab {

// ConfigError when the experiment file or a `path:` of its workload lies inside `final_dir`, a
// folder the caller is about to replace (a previous run's config.yaml run again with --out on
// its own folder). RunStage checks it; `sim bench` too.
void refuse_inputs_inside(const ExperimentConfig& config, const std::string& final_dir);

// Every member has an initializer, so a caller names only what it sets ({.out_dir = ...}).
struct RunStageOptions {
  std::string out_dir = {};         // the run folder; empty: out/<experiment name><default_suffix>
  std::string default_suffix = {};  // "" for `sim run`, "-engine" for `engine run`
  bool write_files = true;          // false: no folder, and a Recorder that streams nothing
  bool replica_column = false;      // a cluster run: steps.csv and schedule.csv name the replica
};

class RunStage {
 public:
  // With write_files: checks the final folder (check_out_dir: ConfigError when it holds anything
  // but a previous run's outputs, or is a symlink; and when the experiment file or a `path:` of
  // its workload lies inside it, since the run replaces it), creates its staging folder, and opens
  // the streamed files the experiment's `outputs:` asks for there. Without: only the Recorder.
  // Throws ConfigError when a folder cannot be created, std::runtime_error when a streamed file
  // cannot be opened.
  RunStage(const ExperimentConfig& config, const RunStageOptions& options);
  RunStage(const RunStage&) = delete;
  RunStage& operator=(const RunStage&) = delete;

  // The run's recorder (SLOs from the experiment); it lives as long as the RunStage.
  Recorder& recorder() { return recorder_; }
  bool writes_files() const { return stage_.has_value(); }
  // The staging folder every output of the run goes to; "" when the run writes no files.
  const std::string& dir() const;
  // Moves the staging folder into place (replacing a previous run folder) and returns the final
  // folder; throws Interrupted (serving/interrupt.h) instead after SIGINT/SIGTERM. REQUIRES:
  // writes_files(), every output written, called once.
  std::string commit();

 private:
  std::optional<StagedDir> stage_;  // before recorder_: the files close before the folder goes
  Recorder recorder_;
};

}  // namespace servelab
