// The engine's idle wake-up in the simulator (sim/simulator.h SimReplica::wake_up_ns, a calibrated
// cost model's `wake_up_s`): a step on an idle replica starts wake_up_s after the arrival that
// woke it, with every request that arrived in between; once running, steps follow each other
// with no wake-up; a file without the key (or with 0) starts the step at the arrival, as before.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "serving/experiment.h"
#include "serving/home.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using test_util::read_csv;
using test_util::read_file;
using test_util::temp_dir;
using test_util::write_file;
namespace fs = std::filesystem;

// Two requests 50 us apart at t = 0, then two more 0.5 s later (the replica is idle again by
// then: each request takes a few steps of about a millisecond).
constexpr const char* kTrace =
    "t_us,in,out\n"
    "0,32,4\n50,32,4\n500000,32,4\n500050,32,4\n";

// The shipped tiny CPU calibration with `wake_up_s` set (none: the file as shipped).
std::string cost_file(const fs::path& dir, const std::string& wake) {
  std::string text = read_file(servelab_home() / "experiments/catalog/calibrated/tiny-cpu.yaml");
  if (!wake.empty()) {
    const std::size_t at = text.find("  step_s:");
    EXPECT_NE(at, std::string::npos);
    text.insert(at, "  wake_up_s: " + wake + "\n");
  }
  const fs::path p = dir / ("cost-" + (wake.empty() ? std::string("none") : wake) + ".yaml");
  write_file(p, text);
  return p.string();
}

// steps.csv of `sim run` over kTrace with the cost model `cost`.
std::vector<std::map<std::string, std::string>> steps_of(const fs::path& dir,
                                                         const std::string& cost,
                                                         const std::string& name) {
  ExperimentConfig c = load_experiment((dir / "e.yaml").string(),
                                       {"cost_model.file=" + cost, "outputs.steps_csv=true"});
  RunOptions o;
  o.out_dir = (dir / name).string();
  run_simulation(c, o);
  return read_csv(dir / name / "steps.csv");
}

TEST(SimWakeUp, AStepOnAnIdleReplicaStartsAfterTheWakeUpWithWhatArrivedMeanwhile) {
  const fs::path dir = temp_dir("sim_wake_up");
  write_file(dir / "trace.csv", kTrace);
  write_file(dir / "e.yaml",
             "name: wake-up\nseed: 1\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {block_size: 16, num_gpu_blocks: 256, max_num_seqs: 8, max_model_len: 512}\n"
             "cost_model: {type: calibrated}\n"
             "workload: {type: csv, path: trace.csv, arrival_unit: us,\n"
             "  columns: {arrival: t_us, prompt_tokens: in, output_tokens: out}}\n");
  using Row = std::map<std::string, std::string>;
  const auto start = [](const Row& row) { return std::stod(row.at("start_s")); };
  const auto seqs = [](const Row& row) { return std::stoi(row.at("num_seqs")); };

  for (const std::string& none : {std::string(), std::string("0")}) {
    const auto s = steps_of(dir, cost_file(dir, none), "none" + none);
    ASSERT_GE(s.size(), 3u);
    EXPECT_EQ(start(s[0]), 0.0) << "no wake-up: the first step starts at the first arrival";
    EXPECT_EQ(seqs(s[0]), 1) << "with the first request only";
  }

  const auto s = steps_of(dir, cost_file(dir, "0.0001"), "wake");
  ASSERT_GE(s.size(), 3u);
  EXPECT_NEAR(start(s[0]), 1e-4, 1e-9) << "the first step starts 100 us after the first arrival";
  EXPECT_EQ(seqs(s[0]), 2) << "with the request that arrived 50 us later";
  // The steps that follow while work runs start where the one before ended; the first step after
  // the idle spell starts 100 us after the arrival at 0.5 s, with both late requests.
  bool second_wake = false;
  for (std::size_t k = 1; k < s.size(); ++k) {
    const double prev_end = start(s[k - 1]) + std::stod(s[k - 1].at("duration_ms")) * 1e-3;
    if (start(s[k]) < 0.4) {
      EXPECT_NEAR(start(s[k]), prev_end, 1e-8)
          << "step " << s[k].at("step") << " waited while busy";
    } else if (!second_wake) {
      second_wake = true;
      EXPECT_NEAR(start(s[k]), 0.5 + 1e-4, 1e-9);
      EXPECT_EQ(seqs(s[k]), 2);
    }
  }
  EXPECT_TRUE(second_wake);
}

}  // namespace
}  // namespace servelab
