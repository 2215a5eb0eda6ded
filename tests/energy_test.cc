// Energy and utilization of simulated runs (sim/power_model.h, sim/work_summary.h,
// docs/metrics.md "Energy and utilization"): the power formula by hand, the hardware entry's
// `power:` mapping and its errors, the backend's work counting (which must never change a step's
// duration), and whole runs whose summary.json figures add up and whose every other output is
// what it was without `power:`.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "serving/experiment.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "sim/power_model.h"
#include "sim/roofline_cost_model.h"
#include "sim/run.h"
#include "sim/sim_backend.h"
#include "tests/cost_fixtures.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;
using nlohmann::json;

PowerSpec spec(double idle, double max, double compute, double memory) {
  PowerSpec p;
  p.idle_w = idle;
  p.max_w = max;
  p.compute_w = compute;
  p.memory_w = memory;
  return p;
}

TEST(PowerModel, HandComputedWatts) {
  // Two GPUs of 1e15 FLOP/s and 1e12 B/s. A 1 ms step of 0.5e12 FLOPs (a quarter of the two
  // GPUs' 2e12 FLOPs in 1 ms) and 1e9 bytes (half of their 2e9 B in 1 ms): per GPU
  // 100 + 600 * 0.25 + 200 * 0.5 = 350 W, 700 W for the replica, 0.7 J.
  const PowerModel p(spec(100, 700, 600, 200), 1e15, 1e12, 2);
  EXPECT_TRUE(p.known());
  EXPECT_EQ(p.gpus(), 2);
  EXPECT_DOUBLE_EQ(p.step_watts(0.5e12, 1e9, 1e-3), 700.0);
  EXPECT_DOUBLE_EQ(p.step_joules(0.5e12, 1e9, 1e-3), 0.7);
  // Nothing done: idle power; between steps too.
  EXPECT_DOUBLE_EQ(p.step_watts(0, 0, 1e-3), 200.0);
  EXPECT_DOUBLE_EQ(p.idle_watts(), 200.0);
  EXPECT_DOUBLE_EQ(p.step_joules(0, 0, 0), 0.0);
  // Saturated: the rates clamp at 1 and the sum at max_w (100 + 600 + 200 = 900 > 700).
  EXPECT_DOUBLE_EQ(p.step_watts(1e13, 1e10, 1e-3), 1400.0);
  EXPECT_DOUBLE_EQ(p.peak_flops(), 2e15);
  EXPECT_DOUBLE_EQ(p.peak_bytes_per_s(), 2e12);
}

TEST(PowerModel, UnknownPowerIsZeroAndBadPeaksAreRefused) {
  const PowerModel none(PowerSpec{}, 1e15, 1e12, 1);
  EXPECT_FALSE(none.known());
  EXPECT_EQ(none.step_joules(1e12, 1e9, 1e-3), 0.0);
  EXPECT_EQ(none.idle_watts(), 0.0);
  EXPECT_THROW(PowerModel(PowerSpec{}, 0, 1e12, 1), std::invalid_argument);
  EXPECT_THROW(PowerModel(PowerSpec{}, 1e15, 1e12, 0), std::invalid_argument);
}

TEST(HardwarePower, TheCatalogueHasItAndBadMappingsNameTheKey) {
  for (const char* name : {"H100-SXM", "H200", "A100-80GB", "A40", "L40S"}) {
    const HardwareConfig hw = load_hardware(name, default_catalog_dir());
    EXPECT_TRUE(hw.power.known()) << name;
    EXPECT_LT(hw.power.idle_w, hw.power.max_w) << name;
    EXPECT_NO_THROW(hw.validate()) << name;
  }
  const fs::path dir = temp_dir("energy_hw");
  const std::string base =
      "peak_tflops: 100\npeak_tflops_fp32: 10\nhbm_bandwidth_gbps: 1000\nmemory_gib: 16\n"
      "host_link_gbps: 16\n";
  write_file(dir / "ok.yaml",
             base + "power: {idle_w: 50, max_w: 300, compute_w: 250, memory_w: 40}\n");
  const HardwareConfig ok = load_hardware((dir / "ok.yaml").string(), "");
  EXPECT_EQ(ok.power.idle_w, 50);
  EXPECT_EQ(ok.power.max_w, 300);
  EXPECT_EQ(ok.power.compute_w, 250);
  EXPECT_EQ(ok.power.memory_w, 40);
  write_file(dir / "none.yaml", base);
  EXPECT_FALSE(load_hardware((dir / "none.yaml").string(), "").power.known());
  struct Bad {
    const char* power;
    std::vector<std::string> parts;
  };
  for (const Bad& b : std::vector<Bad>{
           {"{idle_w: 50, max_w: 300, compute_w: 250}", {"none.yaml", "power", "memory_w"}},
           {"{idle_w: 300, max_w: 300, compute_w: 1, memory_w: 1}",
            {"power.max_w", "more than idle_w (300 W)"}},
           {"{idle_w: -1, max_w: 300, compute_w: 1, memory_w: 1}", {"power.idle_w"}},
           {"{idle_w: 1, max_w: 300, compute_w: 1, memory_w: 1, tdp_w: 3}", {"tdp_w"}},
           {"300", {"power", "mapping"}}}) {
    write_file(dir / "none.yaml", base + "power: " + b.power + "\n");
    expect_config_error([&] { load_hardware((dir / "none.yaml").string(), ""); }, b.parts);
  }
  fs::remove_all(dir);
}

// The backend's work: the roofline's FLOPs and bytes of each step, its duration and joules; the
// durations are those of a backend that counts nothing, bit for bit.
TEST(SimBackendWork, CountsTheRooflinesWorkWithoutChangingTime) {
  const ModelConfig model = easy_model();
  const HardwareConfig hw = easy_hardware();
  const RooflineCostModel roofline(model, hw, 16);
  const PowerModel power(spec(10, 100, 80, 30), hw.peak_flops, hw.hbm_bandwidth, 1);
  SimBackend plain(roofline), counted(roofline);
  counted.set_work_model(&roofline, &power);
  double flops = 0, bytes = 0, joules = 0;
  TimeNs busy = 0;
  for (const StepPlan& plan :
       {decode_plan(8, 100), prefill_plan(0, 300, true), decode_plan(64, 2000)}) {
    const StepResult a = plain.execute(plan), b = counted.execute(plan);
    EXPECT_EQ(a.duration_ns, b.duration_ns);
    const StepCostBreakdown br = roofline.breakdown(plan);
    EXPECT_GT(br.flops, 0);
    EXPECT_GT(br.bytes, 0);
    flops += br.flops;
    bytes += br.bytes;
    joules += power.step_joules(br.flops, br.bytes, ns_to_s(b.duration_ns));
    busy += b.duration_ns;
  }
  EXPECT_DOUBLE_EQ(counted.work().flops, flops);
  EXPECT_DOUBLE_EQ(counted.work().bytes, bytes);
  EXPECT_DOUBLE_EQ(counted.work().joules, joules);
  EXPECT_EQ(counted.work().busy_ns, busy);
  EXPECT_EQ(plain.work().busy_ns, 0);
  // A multi-step round does its forward pass num_steps times.
  StepPlan round = decode_plan(4, 50);
  round.num_steps = 3;
  SimBackend rounds(roofline);
  rounds.set_work_model(&roofline, &power);
  const StepResult r = rounds.execute(round);
  EXPECT_EQ(r.duration_ns, plain.execute(round).duration_ns);
  EXPECT_DOUBLE_EQ(rounds.work().flops, 3 * roofline.breakdown(round).flops);
}

// An engine run's measured energy (a CUDA engine's NVML counter): summary.json's `energy`
// says so and has no busy/idle split and no `utilization`.
TEST(EnergySummary, AMeasuredRunSaysSoAndSplitsNothing) {
  const fs::path dir = temp_dir("energy_measured");
  RunSummary s;
  s.duration_s = 10;
  s.output_tokens = 100;
  s.completed = 5;
  s.measured_joules = 2000;
  ASSERT_TRUE(s.has_energy());
  write_summary_json((dir / "summary.json").string(), s, {}, "");
  const json j = json::parse(read_file(dir / "summary.json"));
  ASSERT_TRUE(j.contains("energy"));
  EXPECT_FALSE(j.contains("utilization"));
  EXPECT_EQ(j["energy"]["measured"], "nvml");
  EXPECT_DOUBLE_EQ(j["energy"]["joules"].get<double>(), 2000);
  EXPECT_DOUBLE_EQ(j["energy"]["average_power_w"].get<double>(), 200);
  EXPECT_DOUBLE_EQ(j["energy"]["joules_per_output_token"].get<double>(), 20);
  EXPECT_DOUBLE_EQ(j["energy"]["joules_per_request"].get<double>(), 400);
  EXPECT_FALSE(j["energy"].contains("busy_joules"));
  // Without either, no energy at all.
  RunSummary none;
  write_summary_json((dir / "none.json").string(), none, {}, "");
  EXPECT_FALSE(json::parse(read_file(dir / "none.json")).contains("energy"));
  fs::remove_all(dir);
}

const std::string kTiny = servelab_home().string() + "/experiments/burst-tiny.yaml";

json summary_of(const fs::path& run) { return json::parse(read_file(run / "summary.json")); }

// A copy of the H100 entry without its `power:` mapping.
fs::path powerless_h100(const fs::path& dir) {
  std::string text = read_file(servelab_home() / "experiments/catalog/hardware/H100-SXM.yaml");
  text = text.substr(0, text.find("\npower:")) + "\n";
  write_file(dir / "H100-nopower.yaml", text);
  return dir / "H100-nopower.yaml";
}

TEST(EnergyRun, SummaryAddsUpAndNothingElseChanges) {
  const fs::path dir = temp_dir("energy_run");
  RunOptions o;
  o.out_dir = (dir / "with").string();
  const RunOutput with = run_simulation(load_experiment(kTiny, {}), o);
  o.out_dir = (dir / "without").string();
  const RunOutput without =
      run_simulation(load_experiment(kTiny, {"hardware=" + powerless_h100(dir).string()}), o);
  json a = summary_of(dir / "with"), b = summary_of(dir / "without");
  ASSERT_TRUE(a.contains("energy"));
  ASSERT_FALSE(b.contains("energy"));
  ASSERT_TRUE(b.contains("utilization"));
  // The schedule and every figure but the energy are the same.
  EXPECT_EQ(read_file(dir / "with" / "steps.csv"), read_file(dir / "without" / "steps.csv"));
  EXPECT_EQ(read_file(dir / "with" / "requests.csv"), read_file(dir / "without" / "requests.csv"));
  const json e = a["energy"], u = a["utilization"];
  a.erase("energy");
  a.erase("run");
  b.erase("run");
  EXPECT_EQ(a, b);
  // One H100: idle 100 W for the time no step ran.
  const HardwareConfig h100 = load_hardware("H100-SXM", default_catalog_dir());
  const double duration = with.summary.duration_s;
  const double busy = u["busy_fraction"].get<double>() * duration;
  EXPECT_GT(busy, 0);
  EXPECT_LE(busy, duration);
  EXPECT_NEAR(e["idle_joules"].get<double>(), h100.power.idle_w * (duration - busy), 1e-6);
  EXPECT_NEAR(e["joules"].get<double>(),
              e["busy_joules"].get<double>() + e["idle_joules"].get<double>(), 1e-9);
  // Busy steps draw between idle and max watts.
  EXPECT_GT(e["busy_joules"].get<double>(), h100.power.idle_w * busy);
  EXPECT_LT(e["busy_joules"].get<double>(), h100.power.max_w * busy);
  EXPECT_DOUBLE_EQ(e["average_power_w"].get<double>(), e["joules"].get<double>() / duration);
  EXPECT_DOUBLE_EQ(e["joules_per_output_token"].get<double>(),
                   e["joules"].get<double>() / a["throughput"]["output_tokens"].get<double>());
  EXPECT_DOUBLE_EQ(e["joules_per_request"].get<double>(),
                   e["joules"].get<double>() / a["requests"]["completed"].get<double>());
  for (const char* k : {"mfu", "mbu"}) {
    EXPECT_GT(u[k].get<double>(), 0) << k;
    EXPECT_LT(u[k].get<double>(), 1) << k;
  }
  // The printed summary says it.
  const Cli cli = run_sim("run " + kTiny + " --out " + (dir / "cli").string(), dir);
  EXPECT_EQ(cli.code, 0) << cli.err;
  EXPECT_NE(cli.out.find("J per output token"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("MFU"), std::string::npos) << cli.out;
  fs::remove_all(dir);
}

// Batching amortises the weights' bytes and the idle power over more tokens: the same saturating
// load served one sequence at a time costs more joules per output token than 64 at a time.
TEST(EnergyRun, JoulesPerTokenFallWithTheBatch) {
  const fs::path dir = temp_dir("energy_batch");
  auto per_token = [&](const std::string& seqs) {
    RunOptions o;
    o.out_dir = (dir / seqs).string();
    const RunOutput r = run_simulation(
        load_experiment(kTiny, {"serving.max_num_seqs=" + seqs, "workload.num_requests=80",
                                "workload.arrival.rate=200"}),
        o);
    EXPECT_TRUE(r.summary.has_energy());
    return r.summary.joules_per_output_token();
  };
  const double one = per_token("1"), many = per_token("64");
  EXPECT_GT(one, 2 * many) << one << " vs " << many;
  fs::remove_all(dir);
}

// A cluster sums its replicas; a pool whose hardware has no `power:` leaves the energy out (it
// would be a partial sum) but keeps the utilization.
TEST(EnergyRun, ClusterSumsItsReplicas) {
  const fs::path dir = temp_dir("energy_cluster");
  const std::string pd = servelab_home().string() + "/experiments/cluster-pd.yaml";
  const std::vector<std::string> small = {"workload.num_requests=60"};
  RunOptions o;
  o.out_dir = (dir / "all").string();
  const RunOutput all = run_simulation(load_experiment(pd, small), o);
  ASSERT_TRUE(all.summary.has_energy());
  const RunSummary::Work& w = *all.summary.work;
  EXPECT_DOUBLE_EQ(w.gpu_s, 4 * all.summary.duration_s);  // four one-GPU replicas
  EXPECT_GT(w.busy_joules, 0);
  EXPECT_GT(w.idle_joules, 0);
  std::vector<std::string> mixed = small;
  mixed.push_back("cluster.pools=[{name: a, count: 2}, {name: b, count: 2, hardware: " +
                  powerless_h100(dir).string() + "}]");
  o.out_dir = (dir / "mixed").string();
  const RunOutput m = run_simulation(load_experiment(pd, mixed), o);
  EXPECT_FALSE(m.summary.has_energy());
  ASSERT_TRUE(m.summary.work.has_value());
  EXPECT_GT(m.summary.mfu(), 0);
  EXPECT_FALSE(summary_of(dir / "mixed").contains("energy"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
