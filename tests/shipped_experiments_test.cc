// The experiment files a GPU window runs (gpu-check e2e and validate) are checked here, where a
// mistake costs nothing: each one loads, validates and simulates to completion. The engine runs
// of the same files on a GPU then fail only for GPU reasons.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serving/home.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using test_util::Cli;
using test_util::read_file;
using test_util::run_sim;
using test_util::temp_dir;

std::vector<fs::path> gpu_experiments() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(servelab_home() / "experiments/validation/gpu")) {
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  }
  for (int c : {1, 8, 32, 128}) {
    files.push_back(servelab_home() / "bench/gpu" / ("e2e-c" + std::to_string(c) + ".yaml"));
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ShippedExperiments, GpuRunsSimulateToCompletion) {
  const fs::path dir = temp_dir("shipped_gpu");
  const std::vector<fs::path> files = gpu_experiments();
  ASSERT_GE(files.size(), 7u);  // three validation workloads, four concurrency levels
  for (const fs::path& f : files) {
    const fs::path out = dir / f.stem();
    const Cli r = run_sim("run " + f.string() + " --quiet --out " + out.string(), dir);
    ASSERT_EQ(r.code, 0) << f << ": " << r.err;
    const auto s = nlohmann::json::parse(read_file(out / "summary.json"));
    EXPECT_GT(s["requests"]["total"].get<int>(), 0) << f;
    EXPECT_EQ(s["requests"]["completed"], s["requests"]["total"]) << f;
    EXPECT_EQ(s["requests"]["rejected"].get<int>(), 0) << f;
  }
}

// experiments/cluster-1000.yaml (docs/performance.md measures it whole): the shipped sizes, and
// the same file shrunk to 20 replicas and 2,000 requests runs to completion.
TEST(ShippedExperiments, ThousandReplicaClusterRunsShrunk) {
  const fs::path dir = temp_dir("shipped_cluster_1000");
  const fs::path file = servelab_home() / "experiments/cluster-1000.yaml";
  const std::string text = read_file(file);
  EXPECT_NE(text.find("num_requests: 10000000"), std::string::npos);
  EXPECT_NE(text.find("count: 1000}"), std::string::npos);
  const Cli r = run_sim("run " + file.string() + " --quiet --out " + (dir / "out").string() +
                            " --set workload.num_requests=2000 --set workload.arrival.rate=400"
                            " --set 'cluster.pools=[{name: replicas, count: 20}]'",
                        dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto s = nlohmann::json::parse(read_file(dir / "out" / "summary.json"));
  EXPECT_EQ(s["requests"]["completed"].get<int>(), 2000);
  EXPECT_EQ(s["cluster"]["replicas"].get<int>(), 20);
  EXPECT_EQ(s["cluster"]["router"], "round_robin");
  EXPECT_FALSE(fs::exists(dir / "out" / "steps.csv"));
}

}  // namespace
}  // namespace servelab
