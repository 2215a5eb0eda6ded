// Issue 15, "no lost data": run folders are written under a temporary sibling and moved into
// place only when the run completed; experiment names cannot escape the output folder; symlinks
// are never followed; SIGINT/SIGTERM stop a run cleanly with no output and exit 130/143.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "serving/home.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;

using namespace servelab::test_util;

std::string experiment(const std::string& name_line, const std::string& workload) {
  return name_line +
         "seed: 7\nmodel: tiny\nhardware: H100-SXM\nserving:\n  block_size: 16\n"
         "  num_gpu_blocks: 64\n  max_model_len: 512\nworkload:\n" +
         workload;
}

const std::string kSmall =
    "  type: synthetic\n  num_requests: 40\n  arrival: {process: poisson, rate: 50}\n"
    "  prompt_len: {dist: uniform, min: 20, max: 200}\n"
    "  output_len: {dist: uniform, min: 5, max: 60}\n";

// No ".NAME.tmp-PID" or ".NAME.old-PID" left in `dir`.
void expect_no_leftovers(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    EXPECT_EQ(n.find(".tmp-"), std::string::npos) << e.path();
    EXPECT_EQ(n.find(".old-"), std::string::npos) << e.path();
  }
}

TEST(RunFolder, NamesThatEscapeTheOutputFolderAreRejected) {
  const fs::path dir = temp_dir("run_folder_names");
  fs::create_directories(dir / "work");
  for (const char* name : {"..", ".", ".hidden", "a/b", "../x", "\"\""}) {
    write_file(dir / "work/e.yaml", experiment(std::string("name: ") + name + "\n", kSmall));
    // Default output folder out/<name>: run from dir/work so "out/.." would be dir/work.
    const std::string cmd = "cd " + (dir / "work").string() + " && " + servelab_program("sim") +
                            " run e.yaml -q 2> " + (dir / "err.txt").string();
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 2) << name;
    const std::string err = read_file(dir / "err.txt");
    EXPECT_NE(err.find("e.yaml:1:"), std::string::npos) << name << ": " << err;
    EXPECT_NE(err.find("'name'"), std::string::npos) << name << ": " << err;
  }
  EXPECT_FALSE(fs::exists(dir / "work/summary.json"));
  EXPECT_FALSE(fs::exists(dir / "work/out"));
  // A file stem starting with '.' (no `name:`) is refused too.
  write_file(dir / "work/.e.yaml", experiment("", kSmall));
  const Cli cli = run_sim("run " + (dir / "work/.e.yaml").string() + " -q", dir);
  EXPECT_EQ(cli.code, 2);
  EXPECT_NE(cli.err.find("name"), std::string::npos) << cli.err;
  // The variants of `sim compare` are folder names too.
  write_file(dir / "c.yaml", experiment("name: c\n", kSmall));
  EXPECT_EQ(run_sim("compare " + (dir / "c.yaml").string() + " --variant ..:seed=1 -q --out " +
                        (dir / "cmp").string(),
                    dir)
                .code,
            2);
}

TEST(RunFolder, SymlinkedOutputFolderIsRefused) {
  const fs::path dir = temp_dir("run_folder_symlink");
  write_file(dir / "e.yaml", experiment("name: e\n", kSmall));
  fs::create_directories(dir / "real");
  fs::create_directory_symlink(dir / "real", dir / "link");
  Cli cli =
      run_sim("run " + (dir / "e.yaml").string() + " -q --out " + (dir / "link").string(), dir);
  EXPECT_EQ(cli.code, 2);
  EXPECT_NE(cli.err.find("symlink"), std::string::npos) << cli.err;
  EXPECT_TRUE(fs::is_empty(dir / "real"));
  // A run folder holding a symlinked output file (pointing anywhere) is not replaced.
  ASSERT_EQ(
      run_sim("run " + (dir / "e.yaml").string() + " -q --out " + (dir / "r").string(), dir).code,
      0);
  write_file(dir / "victim.txt", "keep\n");
  fs::remove(dir / "r/steps.csv");
  fs::create_symlink(dir / "victim.txt", dir / "r/steps.csv");
  cli = run_sim("run " + (dir / "e.yaml").string() + " -q --out " + (dir / "r").string(), dir);
  EXPECT_EQ(cli.code, 2);
  EXPECT_NE(cli.err.find("symlink"), std::string::npos) << cli.err;
  EXPECT_EQ(read_file(dir / "victim.txt"), "keep\n");
}

TEST(RunFolder, AReusedFolderHoldsOnlyTheNewRun) {
  const fs::path dir = temp_dir("run_folder_reuse");
  write_file(dir / "e.yaml", experiment("name: e\n", kSmall));
  const std::string run = "run " + (dir / "e.yaml").string() + " -q --out " + (dir / "r").string();
  ASSERT_EQ(run_sim(run + " --record-schedule --record-events --record-blocks", dir).code, 0);
  ASSERT_TRUE(fs::exists(dir / "r/schedule.csv"));
  ASSERT_TRUE(fs::exists(dir / "r/blocks.csv"));
  ASSERT_EQ(run_sim(run, dir).code, 0);
  EXPECT_TRUE(fs::exists(dir / "r/summary.json"));
  EXPECT_TRUE(fs::exists(dir / "r/steps.csv"));
  EXPECT_FALSE(fs::exists(dir / "r/schedule.csv"));  // stale files of the first run are gone
  EXPECT_FALSE(fs::exists(dir / "r/events.csv"));
  EXPECT_FALSE(fs::exists(dir / "r/blocks.csv"));
  // A folder of the user's under a run file's name makes it no run folder: refused, kept.
  fs::remove(dir / "r/steps.csv");
  fs::create_directories(dir / "r/steps.csv");
  write_file(dir / "r/steps.csv/mine.txt", "mine");
  Cli r = run_sim(run, dir);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("steps.csv: is not a file"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(dir / "r/steps.csv/mine.txt"), "mine");
  // A folder named summary.json: no run's summary (an error, never an internal one).
  fs::create_directories(dir / "s/summary.json");
  r = run_sim("run " + (dir / "e.yaml").string() + " -q --out " + (dir / "s").string(), dir);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  expect_no_leftovers(dir);
}

// "r/." and "r/" name the folder r (staged beside it, not inside it); the current folder, or one
// holding it, is refused before the run: replacing it would leave the shell in a deleted folder.
TEST(RunFolder, DotPathsNameTheFolderAndTheCurrentFolderIsRefused) {
  const fs::path dir = temp_dir("run_folder_dot");
  write_file(dir / "e.yaml", experiment("name: e\n", kSmall));
  const std::string run = "run " + (dir / "e.yaml").string() + " -q --out ";
  for (const std::string out : {"r/.", "r/", "r/./"}) {
    const Cli r = run_sim(run + (dir / out).string(), dir);
    ASSERT_EQ(r.code, 0) << out << ": " << r.err;
    EXPECT_TRUE(fs::exists(dir / "r/summary.json")) << out;
    expect_no_leftovers(dir);
    expect_no_leftovers(dir / "r");
  }
  for (const std::string out : {".", "..", "../r"}) {
    const Cli r = run_program("sim", run + out, dir / "stdout.txt", dir / "stderr.txt",
                              "cd '" + (dir / "r").string() + "' && ");
    EXPECT_EQ(r.code, 2) << out;
    EXPECT_NE(r.err.find("is the current folder (or holds it)"), std::string::npos) << r.err;
  }
  EXPECT_TRUE(fs::exists(dir / "r/summary.json"));
  // A name near the 255-byte limit: its staging sibling's name still fits.
  const std::string longest(250, 'n');
  const Cli r = run_sim(run + (dir / longest).string(), dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir / longest / "summary.json"));
  expect_no_leftovers(dir);
  // Over it: the system's error, not "the current folder" (an unresolvable path matched every
  // folder).
  const Cli too_long = run_sim(run + (dir / std::string(300, 'n')).string(), dir);
  EXPECT_EQ(too_long.code, 2) << too_long.err;
  EXPECT_NE(too_long.err.find("File name too long"), std::string::npos) << too_long.err;
  EXPECT_EQ(too_long.err.find("current folder"), std::string::npos) << too_long.err;
  fs::remove_all(dir);
}

TEST(RunFolder, AFailedRunLeavesThePreviousFolderIntact) {
  const fs::path dir = temp_dir("run_folder_failed");
  write_file(dir / "e.yaml", experiment("name: e\n", kSmall));
  const std::string out = " -q --out " + (dir / "r").string();
  ASSERT_EQ(run_sim("run " + (dir / "e.yaml").string() + out, dir).code, 0);
  const std::string summary = read_file(dir / "r/summary.json");
  // A trace whose third row is malformed fails in the middle of the simulation.
  write_file(dir / "t.csv",
             "arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments\n0,10,5,0,0,1:0:"
             "10\n1000000,20,5,0,0,2:0:20\n2000000,x,5,0,0,3:0:30\n");
  write_file(
      dir / "bad.yaml",
      experiment("name: e\n", "  type: servelab\n  path: " + (dir / "t.csv").string() + "\n"));
  const Cli cli = run_sim("run " + (dir / "bad.yaml").string() + out, dir);
  EXPECT_EQ(cli.code, 2) << cli.err;
  EXPECT_NE(cli.err.find("t.csv:4:"), std::string::npos) << cli.err;  // failed mid-run
  EXPECT_EQ(read_file(dir / "r/summary.json"), summary);
  EXPECT_TRUE(fs::exists(dir / "r/requests.csv"));
  EXPECT_TRUE(fs::exists(dir / "r/steps.csv"));
  expect_no_leftovers(dir);
}

// Runs `sim ARGS...` in a child, sends `sig` once it has run for a while, and returns its exit
// status (-1 when it had to be killed); stderr goes to `err`.
int interrupt_sim(const std::vector<std::string>& args, int sig, const fs::path& err) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDERR_FILENO);
    std::vector<char*> argv;
    std::string bin = servelab_program("sim");
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ::kill(pid, sig);
  int status = 0;
  for (int i = 0; i < 300; ++i) {  // up to 30 s
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

TEST(RunFolder, SigintAndSigtermStopTheRunWithNoOutput) {
  const fs::path dir = temp_dir("run_folder_signal");
  // Far more requests than a few seconds can simulate.
  write_file(dir / "e.yaml", experiment("name: e\n",
                                        "  type: synthetic\n  num_requests: 50000000\n"
                                        "  arrival: {process: poisson, rate: 1000}\n"
                                        "  prompt_len: {dist: uniform, min: 20, max: 200}\n"
                                        "  output_len: {dist: uniform, min: 5, max: 60}\n"));
  for (const auto& [sig, code] : {std::pair{SIGINT, 130}, std::pair{SIGTERM, 143}}) {
    // Appended, not `"r" + std::string`: that trips a GCC 12 -Wrestrict false positive.
    const fs::path out = dir / std::string("r").append(std::to_string(sig));
    EXPECT_EQ(interrupt_sim({"run", (dir / "e.yaml").string(), "-q", "--record-schedule", "--out",
                             out.string()},
                            sig, dir / "err.txt"),
              code);
    EXPECT_FALSE(fs::exists(out));
    EXPECT_NE(read_file(dir / "err.txt").find("interrupted; no output written"), std::string::npos)
        << read_file(dir / "err.txt");
    expect_no_leftovers(dir);
  }
}

// A sweep of many short points, each shorter than the simulator's interrupt check interval: the
// signal stops it between points, with no output and 128 + the signal.
TEST(RunFolder, SignalsStopASweepOfShortPoints) {
  const fs::path dir = temp_dir("run_folder_sweep_signal");
  std::string seeds;
  for (int i = 1; i <= 4000; ++i) seeds += (i > 1 ? "," : "") + std::to_string(i);
  write_file(dir / "e.yaml", experiment("name: e\n",
                                        "  type: synthetic\n  num_requests: 5\n"
                                        "  arrival: {process: poisson, rate: 50}\n"
                                        "  prompt_len: {dist: fixed, value: 20}\n"
                                        "  output_len: {dist: fixed, value: 4}\n") +
                                 "sweep:\n  seed: [" + seeds + "]\n");
  const fs::path out = dir / "s";
  EXPECT_EQ(interrupt_sim({"sweep", (dir / "e.yaml").string(), "-q", "--no-plot", "--jobs", "2",
                           "--out", out.string()},
                          SIGTERM, dir / "err.txt"),
            143)
      << read_file(dir / "err.txt");
  EXPECT_FALSE(fs::exists(out));
  EXPECT_NE(read_file(dir / "err.txt").find("interrupted; no output written"), std::string::npos)
      << read_file(dir / "err.txt");
  expect_no_leftovers(dir);
}

// Figures: a run folder's figures/ goes with the run only when `sim plot` wrote all of it.
TEST(RunFolder, AUsersFigureInTheRunFolderIsNeverRemoved) {
  const fs::path dir = temp_dir("run_folder_figures");
  write_file(dir / "e.yaml", experiment("name: e\n", kSmall));
  const std::string run = "run " + (dir / "e.yaml").string() + " -q --out " + (dir / "r").string();
  ASSERT_EQ(run_sim(run, dir).code, 0);
  fs::create_directories(dir / "r/figures");
  write_file(dir / "r/figures/mine.png", "my figure");
  Cli c = run_sim(run, dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("holds 'mine.png', which `sim plot` did not write"), std::string::npos)
      << c.err;
  EXPECT_EQ(read_file(dir / "r/figures/mine.png"), "my figure");
  // Named in a manifest of sim plot's (as if it had drawn it): the run replaces the folder.
  write_file(dir / "r/figures/.servelab-figures", "mine.png\n");
  c = run_sim(run, dir);
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_FALSE(fs::exists(dir / "r/figures"));
}

// The run replaces its folder: an input inside it (a previous run's config.yaml run again, a
// trace kept there) is refused, and left as it was.
TEST(RunFolder, AnInputInsideTheOutputFolderIsRefused) {
  const fs::path dir = temp_dir("run_folder_inputs");
  write_file(dir / "e.yaml", experiment("name: e\n", kSmall));
  ASSERT_EQ(
      run_sim("run " + (dir / "e.yaml").string() + " -q --out " + (dir / "r").string(), dir).code,
      0);
  write_file(dir / "r/config.yaml", read_file(dir / "e.yaml") + "# mine\n");
  Cli c =
      run_sim("run " + (dir / "r/config.yaml").string() + " -q --out " + (dir / "r").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("an input of the run is in its output folder"), std::string::npos) << c.err;
  EXPECT_NE(read_file(dir / "r/config.yaml").find("# mine"), std::string::npos);
  // A trace the workload reads, by a path relative to the experiment.
  write_file(
      dir / "r/requests.csv",
      "arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments\n0,10,5,0,0,1:0:10\n");
  write_file(dir / "t.yaml", experiment("name: t\n", "  type: servelab\n  path: r/requests.csv\n"));
  c = run_sim("run " + (dir / "t.yaml").string() + " -q --out " + (dir / "r").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("r/requests.csv: an input of the run"), std::string::npos) << c.err;
  EXPECT_TRUE(fs::exists(dir / "r/requests.csv"));
  // A length table (`lengths: {table: ...}`, a distribution's `file`): it was not seen as an
  // input, and the run deleted it with the old folder.
  write_file(dir / "r/blocks.csv", "num_prefill_tokens,num_decode_tokens\n20,4\n30,5\n");
  write_file(dir / "l.yaml", experiment("name: l\n",
                                        "  type: synthetic\n  num_requests: 5\n"
                                        "  arrival: {process: poisson, rate: 20}\n"
                                        "  lengths: {table: r/blocks.csv}\n"));
  c = run_sim("run " + (dir / "l.yaml").string() + " -q --out " + (dir / "r").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("r/blocks.csv: an input of the run"), std::string::npos) << c.err;
  EXPECT_TRUE(fs::exists(dir / "r/blocks.csv"));
  expect_no_leftovers(dir);
}

// A comparison or sweep written again into its folder leaves none of the previous group's
// results beside the new ones: runs its index named that the new one lacks, and its figures.
TEST(RunFolder, AGroupWrittenAgainHoldsOnlyTheNewGroup) {
  const fs::path dir = temp_dir("run_folder_group_again");
  write_file(dir / "e.yaml",
             experiment("name: e\n", kSmall) +
                 "compare:\n  - {name: a, set: {}}\n  - {name: b, set: {seed: 2}}\n");
  const std::string cmp =
      "compare " + (dir / "e.yaml").string() + " -q --out " + (dir / "c").string();
  ASSERT_EQ(run_sim(cmp, dir).code, 0);
  fs::create_directories(dir / "c/figures");
  write_file(dir / "c/figures/x.png", "drawn");
  write_file(dir / "c/figures/.servelab-figures", "x.png\n");
  fs::create_directories(dir / "c/notes");  // a folder of the user's: kept
  ASSERT_EQ(run_sim(cmp + " --variant z:seed=3", dir).code, 0);
  EXPECT_TRUE(fs::exists(dir / "c/z/summary.json"));
  EXPECT_FALSE(fs::exists(dir / "c/a"));
  EXPECT_FALSE(fs::exists(dir / "c/b"));
  EXPECT_FALSE(fs::exists(dir / "c/figures"));
  EXPECT_TRUE(fs::exists(dir / "c/notes"));
  // A figure of the user's in figures/: refused, nothing changed.
  fs::create_directories(dir / "c/figures");
  write_file(dir / "c/figures/mine.png", "mine");
  const Cli c = run_sim(cmp, dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("mine.png"), std::string::npos) << c.err;
  EXPECT_TRUE(fs::exists(dir / "c/z/summary.json"));
  // The same in a previous variant's run folder, which the new group would remove: refused
  // before any variant runs.
  fs::remove_all(dir / "c/figures");
  fs::create_directories(dir / "c/z/figures");
  write_file(dir / "c/z/figures/mine.png", "mine");
  const Cli old = run_sim(cmp, dir);
  EXPECT_EQ(old.code, 2);
  EXPECT_NE(old.err.find("z/figures: holds 'mine.png'"), std::string::npos) << old.err;
  EXPECT_EQ(read_file(dir / "c/z/figures/mine.png"), "mine");
  // The comparison's own output names are not variant names.
  for (const char* name : {"compare.csv", "classes.csv", "figures", "summary.json", "sweep.csv",
                           "validation.json", "replay.csv"}) {
    const Cli v = run_sim(cmp + "2 --variant " + std::string(name) + ":seed=1", dir);
    EXPECT_EQ(v.code, 2) << name;
    EXPECT_NE(v.err.find("is taken by the comparison's own output"), std::string::npos) << v.err;
  }
  EXPECT_FALSE(fs::exists(dir / "c2"));
  expect_no_leftovers(dir);
}

}  // namespace
}  // namespace servelab
