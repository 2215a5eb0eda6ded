// serving/home.h: programs find their run-time files without a compiled-in path. The resolver is
// checked on hand-made folder trees; the relocation tests copy the built `sim` and `engine` to
// temporary folders and run them from another working directory (with the shared library of the
// project's code beside them where they link one: a GPU bundle's programs, scripts/gpu-bundle).
#include "serving/home.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using test_util::Cli;
using test_util::read_file;
using test_util::temp_dir;
using test_util::write_file;

void make_home(const fs::path& root) { fs::create_directories(root / "experiments" / "catalog"); }

// Runs `cmd` (a shell command line) from `cwd` with stdout/stderr in files under `cwd`.
Cli run_in(const fs::path& cwd, const std::string& cmd) {
  const std::string line = "cd '" + cwd.string() + "' && " + cmd + " > out.txt 2> err.txt";
  const int status = std::system(line.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(cwd / "out.txt"),
          read_file(cwd / "err.txt")};
}

// Copies the program `name` to dir/bin/name and, where it links the project's code as a shared
// library (a GPU bundle's programs: bin/../lib/libservelab.so), that library to
// dir/lib/libservelab.so, as a bundle carries both. Returns the program's new path.
fs::path copy_program(std::string_view name, const fs::path& dir) {
  fs::create_directories(dir / "bin");
  const fs::path to = dir / "bin" / name;
  fs::copy_file(servelab_program(name), to);
  const fs::path library = executable_dir().parent_path() / "lib" / "libservelab.so";
  if (fs::exists(library)) {
    fs::create_directories(dir / "lib");
    fs::copy_file(library, dir / "lib" / "libservelab.so");
  }
  return to;
}

TEST(Home, FoundAboveTheExecutableFolder) {
  const fs::path t = temp_dir("home_above");
  make_home(t / "pkg");
  fs::create_directories(t / "pkg" / "bin" / "deeper");
  EXPECT_EQ(find_servelab_home("", t / "pkg" / "bin" / "deeper"), t / "pkg");
  EXPECT_EQ(find_servelab_home("", t / "pkg"), t / "pkg");
}

TEST(Home, MarkerFileNamesTheSourceTree) {
  const fs::path t = temp_dir("home_marker");
  make_home(t / "src");
  fs::create_directories(t / "build" / "tests");
  write_file(t / "build" / ".servelab-home", (t / "src").string() + "\n");
  EXPECT_EQ(find_servelab_home("", t / "build" / "tests"), t / "src");
  // A marker naming a folder without a catalogue is ignored, not trusted.
  write_file(t / "build" / ".servelab-home", (t / "build").string() + "\n");
  EXPECT_THROW(find_servelab_home("", t / "build" / "tests"), HomeError);
}

TEST(Home, EnvironmentWinsAndMustBeRight) {
  const fs::path t = temp_dir("home_env");
  make_home(t / "a");
  make_home(t / "b");
  EXPECT_EQ(find_servelab_home((t / "b").string(), t / "a"), t / "b");
  try {
    find_servelab_home((t / "nowhere").string(), t / "a");
    FAIL() << "a wrong SERVELAB_HOME must not fall back to a guess";
  } catch (const HomeError& e) {
    EXPECT_NE(std::string(e.what()).find("SERVELAB_HOME="), std::string::npos) << e.what();
  }
}

TEST(Home, NoHomeIsAnErrorNamingTheFix) {
  const fs::path t = temp_dir("home_none");
  fs::create_directories(t / "x" / "y");
  try {
    find_servelab_home("", t / "x" / "y");
    FAIL();
  } catch (const HomeError& e) {
    EXPECT_NE(std::string(e.what()).find("SERVELAB_HOME"), std::string::npos) << e.what();
  }
}

TEST(Home, ThisTestFindsItsHome) {
  // In a build folder (<build>/tests) the home is the source tree: the build folder is inside it
  // or its .servelab-home marker names it. In a GPU bundle (bin/) it is the bundle's root.
  EXPECT_TRUE(fs::exists(servelab_home() / "experiments" / "catalog" / "models"));
  EXPECT_TRUE(fs::exists(servelab_home() / "experiments" / "burst-tiny.yaml"));
  EXPECT_TRUE(fs::path(servelab_home()).is_absolute());
}

TEST(Home, ProgramsAreFoundBesideTheTest) {
  EXPECT_TRUE(fs::exists(servelab_program("sim")));
  EXPECT_TRUE(fs::exists(servelab_program("engine")));
  EXPECT_THROW(servelab_program("no-such-program"), HomeError);
}

// A copy of `sim` in pkg/bin beside a copy of the files it reads runs from any working directory
// and never looks at the source tree (the tree it was built from is not above pkg/).
TEST(Relocation, CopiedSimRunsFromItsOwnFolder) {
  const fs::path t = temp_dir("reloc_sim");
  fs::create_directories(t / "elsewhere");
  copy_program("sim", t / "pkg");
  fs::copy(servelab_home() / "experiments", t / "pkg" / "experiments", fs::copy_options::recursive);
  const Cli r = run_in(t / "elsewhere",
                       "env -u SERVELAB_HOME ../pkg/bin/sim run ../pkg/experiments/burst-tiny.yaml "
                       "--out run --quiet");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(t / "elsewhere" / "run" / "summary.json"));
  // The resolved configuration names the copied catalogue's model, and the run matches the one
  // from the build tree byte for byte.
  const Cli ref =
      run_in(t / "elsewhere", "env -u SERVELAB_HOME " + servelab_program("sim") + " run " +
                                  home_path("experiments/burst-tiny.yaml") + " --out ref --quiet");
  ASSERT_EQ(ref.code, 0) << ref.err;
  EXPECT_EQ(read_file(t / "elsewhere" / "run" / "requests.csv"),
            read_file(t / "elsewhere" / "ref" / "requests.csv"));
}

// `sim trace` finds a relative trace path as an experiment's `path:` does (here, else the
// home), and the file it reads is the one `convert` never writes, even with --force.
TEST(Home, TraceCommandsResolveTheirInputFirst) {
  const fs::path t = temp_dir("home_trace");
  fs::create_directories(t / "home" / "experiments" / "catalog");
  fs::create_directories(t / "home" / "traces");
  fs::create_directories(t / "elsewhere");
  const std::string trace =
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n";
  write_file(t / "home" / "traces" / "az.csv", trace);
  const std::string sim = "SERVELAB_HOME=" + (t / "home").string() + " " + servelab_program("sim");
  const Cli stats = run_in(t / "elsewhere", sim + " trace stats traces/az.csv");
  ASSERT_EQ(stats.code, 0) << stats.err;
  EXPECT_NE(stats.out.find("requests               2"), std::string::npos) << stats.out;
  const Cli convert =
      run_in(t / "elsewhere", sim + " trace convert traces/az.csv " +
                                  (t / "home" / "traces" / "az.csv").string() + " --force");
  EXPECT_EQ(convert.code, 2) << convert.err;
  EXPECT_EQ(read_file(t / "home" / "traces" / "az.csv"), trace);
  fs::remove_all(t);
}

// An experiment path relative to neither the working folder nor anything there is looked up in
// the home, as data files are: `sim run experiments/burst-tiny.yaml` from any folder runs the
// shipped file and writes out/ where it was started; a file of that name in the working folder
// wins; one in neither place is an error naming both.
TEST(Home, ExperimentPathsFallBackToTheHome) {
  const fs::path t = temp_dir("home_experiment");
  const std::string sim = servelab_program("sim");
  const Cli shipped = run_in(t, sim + " run experiments/burst-tiny.yaml --quiet");
  ASSERT_EQ(shipped.code, 0) << shipped.err;
  ASSERT_TRUE(fs::exists(t / "out" / "burst-tiny" / "summary.json"));
  const Cli ref =
      run_in(t, sim + " run " + home_path("experiments/burst-tiny.yaml") + " --out ref --quiet");
  ASSERT_EQ(ref.code, 0) << ref.err;
  EXPECT_EQ(read_file(t / "out" / "burst-tiny" / "requests.csv"),
            read_file(t / "ref" / "requests.csv"));
  // A local file of the same name is the one read (its own name, not the shipped one's).
  fs::create_directories(t / "experiments");
  write_file(t / "experiments" / "burst-tiny.yaml",
             "name: mine\nmodel: tiny\nhardware: H100-SXM\n"
             "workload: {type: synthetic, num_requests: 3, arrival: {process: poisson, rate: 1},\n"
             "  prompt_len: {dist: fixed, value: 20}, output_len: {dist: fixed, value: 2}}\n");
  const Cli local = run_in(t, sim + " run experiments/burst-tiny.yaml --quiet");
  ASSERT_EQ(local.code, 0) << local.err;
  EXPECT_TRUE(fs::exists(t / "out" / "mine" / "summary.json"));
  const Cli missing = run_in(t, sim + " run experiments/no-such.yaml --quiet");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("experiments/no-such.yaml: cannot open file"), std::string::npos)
      << missing.err;
  EXPECT_NE(missing.err.find("nor in the ServeLab home"), std::string::npos) << missing.err;
}

// Alone: no catalogue above the program's folder (only the library a bundle's `sim` needs).
TEST(Relocation, CopiedAloneNeedsServelabHome) {
  const fs::path t = temp_dir("reloc_alone");
  copy_program("sim", t);
  const std::string exp = home_path("experiments/burst-tiny.yaml");
  const Cli without = run_in(t, "env -u SERVELAB_HOME bin/sim run " + exp + " --out a --quiet");
  EXPECT_EQ(without.code, 2) << without.err;
  EXPECT_NE(without.err.find("SERVELAB_HOME"), std::string::npos) << without.err;
  EXPECT_FALSE(fs::exists(t / "a"));
  const Cli with = run_in(t, "SERVELAB_HOME='" + servelab_home().string() + "' bin/sim run " + exp +
                                 " --out b --quiet");
  EXPECT_EQ(with.code, 0) << with.err;
  EXPECT_TRUE(fs::exists(t / "b" / "summary.json"));
}

TEST(Relocation, CopiedEngineRunsTheTinyModel) {
  const fs::path t = temp_dir("reloc_engine");
  copy_program("engine", t / "pkg");
  fs::copy(servelab_home() / "experiments", t / "pkg" / "experiments", fs::copy_options::recursive);
  const Cli r = run_in(t,
                       "env -u SERVELAB_HOME pkg/bin/engine run pkg/experiments/burst-tiny.yaml "
                       "--set workload.num_requests=4 --out run --quiet");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(t / "run" / "summary.json"));
}

}  // namespace
}  // namespace servelab
