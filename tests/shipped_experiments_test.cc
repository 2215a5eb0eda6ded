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

}  // namespace
}  // namespace servelab
