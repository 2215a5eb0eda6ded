// `sim sweep`: the grid runs every point, writes one row per point with unit-named columns, the
// files do not depend on the number of workers, and a malformed sweep section is exit code 2
// naming file:line and the key.
#include <gtest/gtest.h>

#include <string>

#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

const char* kExperiment = R"(name: tiny-sweep
seed: 5
model: Llama-3-8B
hardware: H100-SXM
serving: {gpu_memory_utilization: 0.3}
workload:
  type: synthetic
  num_requests: 150
  arrival: {process: poisson, rate: 8}
  prompt_len: {dist: uniform, min: 64, max: 2048}
  output_len: {dist: uniform, min: 8, max: 256}
sweep:
  workload.arrival.rate: [4, 16]
  policies.batch: [vllm, sarathi]
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

TEST(Sweep, RunsEveryPointAndIsIndependentOfWorkers) {
  const fs::path dir = temp_dir("sweep_jobs");
  write_file(dir / "exp.yaml", kExperiment);
  const std::string exp = (dir / "exp.yaml").string();
  const Cli one =
      run_sim("sweep " + exp + " --no-plot --quiet --jobs 1 --out " + (dir / "a").string(), dir);
  ASSERT_EQ(one.code, 0) << one.err;
  const Cli two =
      run_sim("sweep " + exp + " --no-plot --quiet --jobs 2 --out " + (dir / "b").string(), dir);
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_EQ(files_of(dir / "a"), files_of(dir / "b")) << "--jobs 1 and --jobs 2 differ";

  const auto rows = read_csv(dir / "a" / "sweep.csv");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].at("point"), "0_rate-4_batch-vllm");
  EXPECT_EQ(rows[1].at("policies.batch"), "sarathi");
  EXPECT_EQ(rows[3].at("workload.arrival.rate"), "16");
  for (const auto& r : rows) {
    EXPECT_EQ(r.at("completed"), "150");
    EXPECT_FALSE(r.at("ttft_p99_ms").empty());
    EXPECT_FALSE(r.at("requests_per_s").empty());
    EXPECT_TRUE(fs::exists(dir / "a" / r.at("point") / "summary.json"));
  }
  // A higher rate gives a higher throughput.
  EXPECT_GT(std::stod(rows[2].at("requests_per_s")), std::stod(rows[0].at("requests_per_s")));
}

TEST(Sweep, MalformedSectionIsExitTwoNamingLineAndKey) {
  const fs::path dir = temp_dir("sweep_errors");
  std::string text = kExperiment;
  text.replace(text.find("[vllm, sarathi]"), 15, "vllm");
  write_file(dir / "scalar.yaml", text);
  const Cli scalar = run_sim("sweep " + (dir / "scalar.yaml").string() + " --no-plot", dir);
  EXPECT_EQ(scalar.code, 2);
  EXPECT_NE(scalar.err.find("scalar.yaml:14"), std::string::npos) << scalar.err;
  EXPECT_NE(scalar.err.find("policies.batch"), std::string::npos) << scalar.err;

  text = kExperiment;
  text.replace(text.find("workload.arrival.rate"), 21, "workload.arival.rate");
  write_file(dir / "typo.yaml", text);
  const Cli typo = run_sim("sweep " + (dir / "typo.yaml").string() + " --no-plot", dir);
  EXPECT_EQ(typo.code, 2);
  EXPECT_NE(typo.err.find("typo.yaml:13"), std::string::npos) << typo.err;
  EXPECT_NE(typo.err.find("workload.arival.rate"), std::string::npos) << typo.err;

  text = kExperiment;
  text.replace(text.find("policies.batch: [vllm, sarathi]"), 31, "policies.bach: [vllm]");
  write_file(dir / "unknown.yaml", text);
  const Cli unknown = run_sim("sweep " + (dir / "unknown.yaml").string() + " --no-plot", dir);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("policies.bach"), std::string::npos) << unknown.err;

  text = kExperiment;
  text = text.substr(0, text.find("sweep:"));
  write_file(dir / "none.yaml", text);
  const Cli none = run_sim("sweep " + (dir / "none.yaml").string() + " --no-plot", dir);
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("sweep"), std::string::npos) << none.err;

  EXPECT_EQ(run_sim("sweep " + (dir / "none.yaml").string() + " --jobs 0", dir).code, 2);
}

}  // namespace
}  // namespace servelab
