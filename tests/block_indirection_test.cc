// Block-table indirection in a run (cost_model.block_indirection_ns, serving/experiment.h;
// docs/cost-model.md "Block-table indirection"): every step pays it per KV block visited per
// layer, the key is echoed in config.yaml, refused where it means nothing and range-checked, and
// it is off by default.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/config_error.h"
#include "serving/experiment.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

const std::string kBurst = servelab_home().string() + "/experiments/burst.yaml";

TEST(BlockIndirection, OffByDefault) {
  const ExperimentConfig c = load_experiment(kBurst, {});
  EXPECT_FALSE(c.cost_model.block_indirection_ns.has_value());
  const HardwareConfig h100 = load_hardware("H100-SXM", default_catalog_dir());
  EXPECT_EQ(c.cost_model.with_host_time(h100).block_indirection_s, 0.0);
  const ExperimentConfig on = load_experiment(kBurst, {"cost_model.block_indirection_ns=40"});
  EXPECT_DOUBLE_EQ(on.cost_model.with_host_time(h100).block_indirection_s, 40e-9);
}

// One request on Llama-3-8B (32 layers), 16-token blocks, 40 ns per block per layer: each step
// takes 40 * 32 * ceil(context / 16) ns longer, where context is first_token + num_tokens of the
// step's one entry (schedule.csv).
TEST(BlockIndirection, EveryStepPaysPerBlockVisited) {
  const fs::path dir = temp_dir("block_indirection_run");
  ExperimentConfig base = load_experiment(kBurst, {"workload.num_requests=1"});
  ExperimentConfig paged =
      load_experiment(kBurst, {"workload.num_requests=1", "cost_model.block_indirection_ns=40"});
  base.outputs.record_schedule = paged.outputs.record_schedule = true;
  RunOptions o;
  o.out_dir = (dir / "base").string();
  run_simulation(base, o);
  o.out_dir = (dir / "paged").string();
  run_simulation(paged, o);
  const auto ra = read_csv(dir / "base" / "steps.csv"), rb = read_csv(dir / "paged" / "steps.csv");
  const auto sched = read_csv(dir / "paged" / "schedule.csv");
  ASSERT_EQ(ra.size(), rb.size());
  ASSERT_EQ(sched.size(), rb.size());  // one entry per step
  ASSERT_GT(rb.size(), 20u);
  bool crossed = false;  // some step's context crosses a block boundary
  for (std::size_t i = 0; i < rb.size(); ++i) {
    const std::int64_t context =
        std::stoll(sched[i].at("first_token")) + std::stoll(sched[i].at("num_tokens"));
    const std::int64_t blocks = (context + 15) / 16;
    crossed = crossed || (i > 0 && context % 16 == 1);
    EXPECT_NEAR(std::stod(rb[i].at("duration_ms")) - std::stod(ra[i].at("duration_ms")),
                40e-6 * 32 * static_cast<double>(blocks), 2e-6)
        << "step " << i;
  }
  EXPECT_TRUE(crossed);
  EXPECT_NE(read_file(dir / "paged" / "config.yaml").find("block_indirection_ns: 40"),
            std::string::npos);
  EXPECT_EQ(read_file(dir / "base" / "config.yaml").find("block_indirection_ns"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(BlockIndirection, BadValuesNameTheKey) {
  for (const char* bad :
       {"cost_model.block_indirection_ns=-1", "cost_model.block_indirection_ns=1e9",
        "cost_model.block_indirection_ns=abc"}) {
    try {
      load_experiment(kBurst, {bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("block_indirection_ns"), std::string::npos) << e.what();
    }
  }
  const std::string cost =
      servelab_home().string() + "/experiments/catalog/calibrated/tiny-cpu.yaml";
  try {
    load_experiment(kBurst,
                    {"model=tiny", "cost_model.file=" + cost, "cost_model.block_indirection_ns=1"});
    ADD_FAILURE() << "a calibrated model took a block indirection";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("roofline key"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace servelab
