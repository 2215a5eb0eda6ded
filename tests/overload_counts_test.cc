// Shed and capped counts (issue 22, item 6) beyond summary.json: `sim sweep`'s sweep.csv and
// table, and `engine serve`'s /metrics (servelab:requests_shed_total,
// servelab:requests_capped_total) — present only when an admission or length_cap plugin is
// configured, so every other sweep and server keeps its output byte for byte.
#include <gtest/gtest.h>

#include <string>

#include "engine/serve_metrics.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

// A burst far over capacity: a bounded queue sheds part of it.
const std::string kExperiment = R"(name: shed-sweep
seed: 5
model: Llama-3-8B
hardware: H100-SXM
serving: {gpu_memory_utilization: 0.3}
workload:
  type: synthetic
  num_requests: 200
  arrival: {process: poisson, rate: 60}
  prompt_len: {dist: uniform, min: 64, max: 2048}
  output_len: {dist: uniform, min: 8, max: 256}
)";

TEST(OverloadCounts, SweepCsvAndTableShowShedAndCappedOnlyWithAPlugin) {
  const fs::path dir = temp_dir("overload_sweep");
  write_file(dir / "plain.yaml", kExperiment + "sweep:\n  workload.arrival.rate: [30, 60]\n");
  write_file(dir / "shed.yaml",
             kExperiment +
                 "policies:\n"
                 "  admission: {name: queue-length, max_waiting: 8}\n"
                 "  length_cap: {name: queue-length, max_tokens: 32, when_waiting_over: 4}\n"
                 "sweep:\n  workload.arrival.rate: [30, 60]\n");
  const Cli plain = run_sim("sweep " + (dir / "plain.yaml").string() +
                                " --no-plot --jobs 1 --out " + (dir / "p").string(),
                            dir);
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("shed"), std::string::npos) << plain.out;
  const auto plain_rows = read_csv(dir / "p" / "sweep.csv");
  ASSERT_EQ(plain_rows.size(), 2u);
  EXPECT_FALSE(plain_rows[0].count("shed"));
  EXPECT_FALSE(plain_rows[0].count("capped"));

  const Cli shed = run_sim(
      "sweep " + (dir / "shed.yaml").string() + " --no-plot --jobs 1 --out " + (dir / "s").string(),
      dir);
  ASSERT_EQ(shed.code, 0) << shed.err;
  EXPECT_NE(shed.out.find("shed  capped"), std::string::npos) << shed.out;
  const auto rows = read_csv(dir / "s" / "sweep.csv");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows) {
    const std::int64_t n_shed = std::stoll(r.at("shed"));
    const std::int64_t n_capped = std::stoll(r.at("capped"));
    EXPECT_GT(n_shed, 0);
    EXPECT_GT(n_capped, 0);
    // The columns are the summaries' counts; shed requests never complete.
    EXPECT_EQ(std::stoll(r.at("completed")) + n_shed, 200);
  }
  EXPECT_GT(std::stoll(rows[1].at("shed")), std::stoll(rows[0].at("shed")));  // twice the rate
  fs::remove_all(dir);
}

TEST(OverloadCounts, ServeMetricsCountShedAndCappedOnlyWhenReported) {
  ServeMetrics plain("m");
  plain.on_shed();
  EXPECT_EQ(plain.render().find("servelab:requests_shed_total"), std::string::npos);
  EXPECT_EQ(plain.render().find("servelab:requests_capped_total"), std::string::npos);

  ServeMetrics m("m");
  m.set_report_overload(true);
  const std::string zero = m.render();
  EXPECT_NE(zero.find("# TYPE servelab:requests_shed_total counter"), std::string::npos) << zero;
  EXPECT_NE(zero.find("servelab:requests_shed_total{model_name=\"m\"} 0\n"), std::string::npos)
      << zero;
  m.on_shed();
  m.on_shed();
  m.on_capped();
  const std::string text = m.render();
  EXPECT_NE(text.find("servelab:requests_shed_total{model_name=\"m\"} 2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("servelab:requests_capped_total{model_name=\"m\"} 1\n"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace servelab
