// The serving stack's host time in the roofline (cost_model.step_overhead_us and
// cost_model.sequence_overhead_us, serving/experiment.h): replaces the hardware entry's values,
// shows in every step's duration, is echoed in config.yaml, and is refused where it means
// nothing (a calibrated model fits its own host time) or is out of range.
#include <gtest/gtest.h>

#include <string>

#include "core/config_error.h"
#include "serving/experiment.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/model_config.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

const std::string kBurst = servelab_home().string() + "/experiments/burst.yaml";

TEST(HostTime, ReplacesTheHardwareEntrysValues) {
  const HardwareConfig h100 = load_hardware("H100-SXM", default_catalog_dir());
  const ExperimentConfig none = load_experiment(kBurst, {});
  const HardwareConfig same = none.cost_model.with_host_time(h100);
  EXPECT_EQ(same.step_overhead_s, h100.step_overhead_s);
  EXPECT_EQ(same.sequence_overhead_s, h100.sequence_overhead_s);
  const ExperimentConfig c = load_experiment(
      kBurst, {"cost_model.step_overhead_us=3000", "cost_model.sequence_overhead_us=25"});
  const HardwareConfig hw = c.cost_model.with_host_time(h100);
  EXPECT_DOUBLE_EQ(hw.step_overhead_s, 3e-3);
  EXPECT_DOUBLE_EQ(hw.sequence_overhead_s, 25e-6);
  EXPECT_EQ(hw.peak_flops, h100.peak_flops);  // nothing else changes
  // One of the two alone keeps the entry's other value.
  const ExperimentConfig one = load_experiment(kBurst, {"cost_model.sequence_overhead_us=0"});
  EXPECT_EQ(one.cost_model.with_host_time(h100).step_overhead_s, h100.step_overhead_s);
  EXPECT_EQ(one.cost_model.with_host_time(h100).sequence_overhead_s, 0.0);
}

// Every step of the same schedule takes the extra host time: the decode-only steps of burst.yaml
// before any request finishes, where the two runs are still in lockstep.
TEST(HostTime, EveryStepPaysIt) {
  const fs::path dir = temp_dir("host_time_run");
  const ExperimentConfig base = load_experiment(kBurst, {"workload.num_requests=1"});
  const ExperimentConfig slow =
      load_experiment(kBurst, {"workload.num_requests=1", "cost_model.step_overhead_us=2500",
                               "cost_model.sequence_overhead_us=100"});
  RunOptions o;
  o.out_dir = (dir / "base").string();
  const RunOutput a = run_simulation(base, o);
  o.out_dir = (dir / "slow").string();
  const RunOutput b = run_simulation(slow, o);
  EXPECT_EQ(a.summary.num_steps, b.summary.num_steps);
  const auto ra = read_csv(dir / "base" / "steps.csv"), rb = read_csv(dir / "slow" / "steps.csv");
  ASSERT_EQ(ra.size(), rb.size());
  ASSERT_GT(ra.size(), 2u);
  const HardwareConfig h100 = load_hardware("H100-SXM", default_catalog_dir());
  // One sequence per step: (2500 + 100) us instead of the entry's step + sequence time.
  const double extra_ms = 2.6 - (h100.step_overhead_s + h100.sequence_overhead_s) * 1e3;
  for (std::size_t i = 0; i < ra.size(); ++i) {
    EXPECT_NEAR(std::stod(rb[i].at("duration_ms")) - std::stod(ra[i].at("duration_ms")), extra_ms,
                1e-5)
        << "step " << i;
  }
  const std::string cfg = read_file(dir / "slow" / "config.yaml");
  EXPECT_NE(cfg.find("step_overhead_us: 2500"), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("sequence_overhead_us: 100"), std::string::npos) << cfg;
  EXPECT_EQ(read_file(dir / "base" / "config.yaml").find("step_overhead_us"), std::string::npos);
  fs::remove_all(dir);
}

TEST(HostTime, BadValuesNameTheKey) {
  for (const char* bad : {"cost_model.step_overhead_us=-1", "cost_model.sequence_overhead_us=1e9",
                          "cost_model.step_overhead_us=abc"}) {
    try {
      load_experiment(kBurst, {bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      const std::string key = std::string(bad).substr(11, std::string(bad).find('=') - 11);
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  const std::string cost =
      servelab_home().string() + "/experiments/catalog/calibrated/tiny-cpu.yaml";
  try {
    load_experiment(kBurst,
                    {"model=tiny", "cost_model.file=" + cost, "cost_model.step_overhead_us=1"});
    ADD_FAILURE() << "a calibrated model took a host time";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("roofline key"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace servelab
