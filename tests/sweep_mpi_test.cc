// `mpirun -np N sim sweep EXP --mpi` (sim/sweep_mpi.h): the files equal those of `--jobs 1`
// byte for byte, a bad experiment is exit code 2 on every rank with the message printed once and
// nothing written, and a sim without its MPI plugin refuses --mpi. The tests that need mpirun
// skip with a message where it is missing or cannot start a job, or where this build has no MPI
// plugin (CMake found no MPI, or the debug preset, which leaves MPI out). Labelled MPI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "serving/home.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

const char* kExperiment = R"(name: mpi-sweep
seed: 7
model: Llama-3-8B
hardware: H100-SXM
serving: {gpu_memory_utilization: 0.3}
workload:
  type: synthetic
  num_requests: 40
  arrival: {process: poisson, rate: 8}
  prompt_len: {dist: uniform, min: 64, max: 1024}
  output_len: {dist: uniform, min: 8, max: 96}
sweep:
  workload.arrival.rate: [4, 32]
  policies.batch: [vllm, sarathi, orca]
)";

std::string files_of(const fs::path& root) {
  // Every file under root, name and content, in name order.
  std::vector<fs::path> paths;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) paths.push_back(fs::relative(e.path(), root));
  }
  std::sort(paths.begin(), paths.end());
  std::string all;
  for (const fs::path& p : paths) all += p.string() + "\n" + read_file(root / p) + "\n";
  return all;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// `mpirun -np N` as this user may run it (root needs --allow-run-as-root; 2 cores need
// --oversubscribe for 3 ranks).
std::string mpirun(int ranks) {
  std::string cmd = "mpirun -np " + std::to_string(ranks) + " --oversubscribe";
  if (::geteuid() == 0) cmd += " --allow-run-as-root";
  return cmd;
}

Cli shell(const std::string& command, const fs::path& dir) {
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = command + " > " + out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
}

// Empty when `sim sweep --mpi` can run here, else why not.
std::string why_no_mpi(const fs::path& dir) {
  const fs::path plugin = fs::path(servelab_program("sim")).parent_path() / "libservelab_mpi.so";
  if (!fs::exists(plugin)) return "this build has no MPI plugin (" + plugin.string() + ")";
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) {
    return "mpirun is missing (apt-get install openmpi-bin)";
  }
  const Cli probe = shell(mpirun(2) + " true", dir);
  if (probe.code != 0) return "mpirun cannot start a job here: " + probe.err.substr(0, 400);
  return "";
}

TEST(SweepMpi, RanksWriteTheFilesOfOneThread) {
  const fs::path dir = temp_dir("sweep_mpi_same");
  if (const std::string why = why_no_mpi(dir); !why.empty()) GTEST_SKIP() << why;
  write_file(dir / "exp.yaml", kExperiment);
  const std::string sweep = servelab_program("sim") + " sweep " + (dir / "exp.yaml").string() +
                            " --no-plot --quiet --out ";
  const Cli one = shell(sweep + (dir / "one").string() + " --jobs 1", dir);
  ASSERT_EQ(one.code, 0) << one.err;
  // 2 ranks (3 points each), and 4 ranks of 2 threads (rank 0 and 1 two points, the others one).
  const Cli two = shell(mpirun(2) + " " + sweep + (dir / "two").string() + " --mpi", dir);
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_EQ(files_of(dir / "one"), files_of(dir / "two")) << "--mpi on 2 ranks and --jobs 1 differ";
  const Cli four =
      shell(mpirun(4) + " " + sweep + (dir / "four").string() + " --mpi --jobs 2", dir);
  ASSERT_EQ(four.code, 0) << four.err;
  EXPECT_EQ(files_of(dir / "one"), files_of(dir / "four"))
      << "--mpi on 4 ranks and --jobs 1 differ";
  const auto rows = read_csv(dir / "two" / "sweep.csv");
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[5].at("point"), "5_rate-32_batch-orca");
  for (const auto& r : rows) {
    EXPECT_EQ(r.at("completed"), "40");
    EXPECT_TRUE(fs::exists(dir / "two" / r.at("point") / "summary.json"));
  }
  // Nothing is left in the ranks' private folders or beside OUT.
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
  // A second sweep into the same folder replaces it (an earlier sweep's files may be replaced).
  const Cli again = shell(mpirun(2) + " " + sweep + (dir / "two").string() + " --mpi", dir);
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(files_of(dir / "one"), files_of(dir / "two"));
}

TEST(SweepMpi, BadInputIsExitTwoOnEveryRankReportedOnce) {
  const fs::path dir = temp_dir("sweep_mpi_bad");
  if (const std::string why = why_no_mpi(dir); !why.empty()) GTEST_SKIP() << why;
  std::string text = kExperiment;
  text.replace(text.find("[vllm, sarathi, orca]"), 21, "[vllm, nosuch]");
  write_file(dir / "bad.yaml", text);
  const std::string sim = servelab_program("sim");
  const Cli bad = shell(mpirun(2) + " " + sim + " sweep " + (dir / "bad.yaml").string() +
                            " --no-plot --mpi --out " + (dir / "bad").string(),
                        dir);
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_EQ(count(bad.err, "sim: error:"), 1u) << bad.err;
  EXPECT_NE(bad.err.find("bad.yaml:14"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("nosuch"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir / "bad"));

  // A user's file in OUT: refused, and left alone.
  write_file(dir / "exp.yaml", kExperiment);
  fs::create_directories(dir / "mine");
  write_file(dir / "mine" / "notes.txt", "mine");
  const Cli mine = shell(mpirun(2) + " " + sim + " sweep " + (dir / "exp.yaml").string() +
                             " --no-plot --mpi --out " + (dir / "mine").string(),
                         dir);
  EXPECT_EQ(mine.code, 2) << mine.err;
  EXPECT_EQ(count(mine.err, "sim: error:"), 1u) << mine.err;
  EXPECT_NE(mine.err.find("notes.txt"), std::string::npos) << mine.err;
  EXPECT_EQ(read_file(dir / "mine" / "notes.txt"), "mine");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "mine"), fs::directory_iterator()), 1);

  // A usage error, once.
  const Cli usage = shell(
      mpirun(2) + " " + sim + " sweep " + (dir / "exp.yaml").string() + " --mpi --jobs 0", dir);
  EXPECT_EQ(usage.code, 2) << usage.err;
  EXPECT_EQ(count(usage.err, "--help lists the options"), 1u) << usage.err;
}

TEST(SweepMpi, WithoutThePluginMpiIsRefused) {
  // A sim copied away from its plugin, as in a GPU bundle or a build without MPI.
  const fs::path dir = temp_dir("sweep_mpi_none");
  fs::copy_file(servelab_program("sim"), dir / "sim", fs::copy_options::overwrite_existing);
  write_file(dir / "exp.yaml", kExperiment);
  const Cli r =
      shell((dir / "sim").string() + " sweep " + (dir / "exp.yaml").string() + " --mpi", dir);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("built without MPI"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace servelab
