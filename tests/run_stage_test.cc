// serving/run_stage.h: where a run writes. The final folder is checked before anything is
// created, the run goes to a hidden staging sibling, streamed files open there as the experiment's
// `outputs:` ask, commit() moves the folder into place, and an abandoned stage leaves nothing.
#include "serving/run_stage.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <set>
#include <string>

#include "core/config_error.h"
#include "serving/output_file.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

ExperimentConfig experiment(const std::string& name) {
  ExperimentConfig c;
  c.name = name;
  return c;
}

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

TEST(RunStage, StagesOpensTheAskedStreamsAndCommitsIntoPlace) {
  const fs::path dir = temp_dir("run_stage_commit");
  ExperimentConfig c = experiment("e");
  c.outputs.steps_csv = true;
  c.outputs.record_schedule = false;
  c.outputs.record_events = true;
  c.outputs.record_blocks = true;
  const std::string final_dir = (dir / "run").string();
  std::string committed;
  {
    RunStage stage(c, {.out_dir = final_dir});
    ASSERT_TRUE(stage.writes_files());
    const fs::path temp = stage.dir();
    EXPECT_EQ(temp.parent_path(), dir);
    EXPECT_EQ(temp.filename().string().rfind(".run.tmp-", 0), 0u) << temp;
    EXPECT_FALSE(fs::exists(final_dir));  // nothing in place before the run completed
    EXPECT_EQ(entries(temp), (std::set<std::string>{"steps.csv", "events.csv", "blocks.csv"}));
    committed = stage.commit();
  }
  EXPECT_EQ(committed, final_dir);
  EXPECT_EQ(entries(final_dir), (std::set<std::string>{"steps.csv", "events.csv", "blocks.csv"}));
  EXPECT_EQ(entries(dir), (std::set<std::string>{"run"}));  // no staging folder left
}

TEST(RunStage, AnAbandonedRunLeavesThePreviousFolderAsItWas) {
  const fs::path dir = temp_dir("run_stage_abandon");
  fs::create_directories(dir / "run");
  write_file(dir / "run" / "summary.json", "{\"run\": {\"backend\": \"sim\"}, \"previous\": true}");
  {
    RunStage stage(experiment("e"), {.out_dir = (dir / "run").string()});
    EXPECT_TRUE(fs::exists(stage.dir()));
  }  // destroyed without commit(): an error or an interrupt
  EXPECT_EQ(entries(dir), (std::set<std::string>{"run"}));
  EXPECT_EQ(read_file(dir / "run" / "summary.json"),
            "{\"run\": {\"backend\": \"sim\"}, \"previous\": true}");
}

TEST(RunStage, RefusesAFolderHoldingAUsersFileBeforeCreatingAnything) {
  const fs::path dir = temp_dir("run_stage_refuse");
  fs::create_directories(dir / "run");
  write_file(dir / "run" / "notes.txt", "mine");
  try {
    RunStage stage(experiment("e"), {.out_dir = (dir / "run").string()});
    FAIL() << "a folder holding notes.txt was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("notes.txt"), std::string::npos) << e.what();
  }
  EXPECT_EQ(entries(dir), (std::set<std::string>{"run"}));
  EXPECT_EQ(entries(dir / "run"), (std::set<std::string>{"notes.txt"}));
}

// A file the user saved in the folder while the run ran (engine run and sim bench replay
// arrivals in wall-clock time, for hours) is not deleted with the previous run: the commit checks
// again, and keeps the run's files beside the folder.
TEST(RunStage, AFileSavedInTheFolderDuringTheRunIsKept) {
  const fs::path dir = temp_dir("run_stage_late_file");
  fs::create_directories(dir / "run");
  write_file(dir / "run" / "summary.json", "{\"run\": {\"backend\": \"sim\"}}");
  RunStage stage(experiment("e"), {.out_dir = (dir / "run").string()});
  write_file(fs::path(stage.dir()) / "summary.json", "new");
  write_file(dir / "run" / "notes.txt", "mine");
  try {
    stage.commit();
    FAIL() << "the folder was replaced with notes.txt in it";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("notes.txt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the run's files are in"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(dir / "run" / "notes.txt"), "mine");
  const std::string kept = (dir / "run").string() + ".run-" + std::to_string(::getpid());
  EXPECT_EQ(read_file(fs::path(kept) / "summary.json"), "new");
}

TEST(RunStage, DefaultFolderIsOutNameWithTheDriversSuffix) {
  const fs::path dir = temp_dir("run_stage_default");
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);
  std::string sim, engine;
  {
    RunStage s(experiment("burst"), {});
    sim = s.commit();
  }
  {
    RunStage s(experiment("burst"), {.default_suffix = "-engine"});
    engine = s.commit();
  }
  fs::current_path(cwd);
  EXPECT_EQ(sim, "out/burst");
  EXPECT_EQ(engine, "out/burst-engine");
  EXPECT_TRUE(fs::is_directory(dir / "out" / "burst"));
  EXPECT_TRUE(fs::is_directory(dir / "out" / "burst-engine"));
}

TEST(RunStage, WithoutFilesNothingIsCreatedAndCommitIsRefused) {
  const fs::path dir = temp_dir("run_stage_none");
  RunStage stage(experiment("e"), {.out_dir = (dir / "run").string(), .write_files = false});
  EXPECT_FALSE(stage.writes_files());
  EXPECT_EQ(stage.dir(), "");
  EXPECT_TRUE(entries(dir).empty());
  EXPECT_THROW(stage.commit(), std::logic_error);
}

TEST(OutputFile, PathWithinResolvesDotsSlashesAndSymlinks) {
  const fs::path dir = temp_dir("output_file_within");
  fs::create_directories(dir / "run/sub");
  fs::create_symlink(dir / "run", dir / "link");
  const std::string run = (dir / "run").string();
  EXPECT_TRUE(path_within(run + "/config.yaml", run));
  EXPECT_TRUE(path_within(run + "/config.yaml", run + "/"));
  EXPECT_TRUE(path_within(run + "/./sub/../config.yaml", run + "/."));
  EXPECT_TRUE(path_within(run, run + "/"));
  EXPECT_TRUE(path_within((dir / "link/x.csv").string(), run));
  EXPECT_FALSE(path_within((dir / "run2/x.csv").string(), run));  // not a prefix by characters
  EXPECT_FALSE(path_within(dir.string(), run));
}

// serving/output_file.h check_output_file: an existing file in a folder read as a whole (a
// checkpoint folder, a Hugging Face model folder, a sharded index's folder) is an input too,
// even with --force; a new file there, or one elsewhere with --force, is fine.
TEST(OutputFile, AFileOfAnInputFolderIsNeverReplaced) {
  const fs::path dir = temp_dir("output_file_input_folder");
  fs::create_directories(dir / "ckpt");
  write_file(dir / "ckpt/model.safetensors", "weights");
  write_file(dir / "ckpt/model.safetensors.index.json", "{}");
  write_file(dir / "other.csv", "old");
  const std::string shard = (dir / "ckpt/model.safetensors").string();
  for (const std::string& input :
       {(dir / "ckpt").string(), (dir / "ckpt/model.safetensors.index.json").string()}) {
    try {
      check_output_file(shard, {input}, /*force=*/true);
      ADD_FAILURE() << "a file of " << input << " was accepted as the output";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("a file of the input folder"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(
      check_output_file((dir / "ckpt/profile.csv").string(), {(dir / "ckpt").string()}, false));
  EXPECT_NO_THROW(check_output_file((dir / "other.csv").string(), {(dir / "ckpt").string()}, true));
  EXPECT_EQ(read_file(dir / "ckpt/model.safetensors"), "weights");
}

// An I/O error names the file as the user will find it: a staged folder by its final name, and
// the full disk with its advice.
TEST(OutputFile, IoErrorsNameTheFinalFolderNotTheStagingOne) {
  const fs::path dir = temp_dir("io_error_names");
  StagedDir stage((dir / "run").string());
  try {
    throw_io_error(stage.temp_path() + "/steps.csv", "writing", ENOSPC);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              (dir / "run/steps.csv").string() +
                  ": writing failed (No space left on device); the disk is full: free space or "
                  "choose another output");
  }
  // Another process's staging folder, or a name of the user's, is named as it is.
  for (const std::string& path :
       {(dir / ".run.tmp-1/steps.csv").string(), (dir / ".tmp-" / "x").string()}) {
    try {
      throw_io_error(path, "writing", EACCES);
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": writing failed", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace servelab
