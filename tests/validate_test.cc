// `sim validate` arithmetic on run folders written by hand: per-step, per-request and aggregate
// relative errors, schedule comparison, the cost-model replay of engine steps, configuration
// checks and exit codes.
#include "sim/validate.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "serving/config_node.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using test_util::run_sim;
using test_util::temp_dir;
using test_util::write_file;
using test_util::fs::path;

std::string config(const std::string& extra = "", int requests = 3, int blocks = 64) {
  return "name: hand\nseed: 1\nmodel: tiny\nhardware: H100-SXM\nserving: {block_size: 16}\n"
         "policies: {batch: vllm}\nworkload: {type: synthetic, num_requests: " +
         std::to_string(requests) + "}\n" + extra +
         "derived: {num_gpu_blocks: " + std::to_string(blocks) + "}\n";
}

const char* kRequestsHeader =
    "id,arrival_s,first_scheduled_s,first_token_s,finish_s,prompt_tokens,output_tokens,"
    "cached_tokens,preemptions,recomputed_tokens,queueing_ms,ttft_ms,tpot_ms,e2e_ms,status,"
    "reason\n";

// One request row with the latencies that matter here.
std::string req(int id, int prompt, const std::string& ttft, const std::string& tpot,
                const std::string& e2e, const std::string& status = "finished") {
  return std::to_string(id) + ",0,0,0,0," + std::to_string(prompt) + ",3,0,0,0,0," + ttft + "," +
         tpot + "," + e2e + "," + status + ",length\n";
}

const char* kStepsHeader =
    "step,start_s,duration_ms,num_seqs,prefill_tokens,decode_tokens,kv_blocks_used,"
    "kv_blocks_free,kv_blocks_cached,kv_usage,waiting,running,preempted,swap_out_blocks,"
    "swap_in_blocks\n";

std::string step(int i, const std::string& ms, int seqs, int prefill, int decode) {
  return std::to_string(i) + ",0," + ms + "," + std::to_string(seqs) + "," +
         std::to_string(prefill) + "," + std::to_string(decode) + ",1,1,0,0.1,0,1,0,0,0\n";
}

std::string summary(double out_tps, double rps, double ttft50, double ttft99, double tpot50,
                    double tpot99, double e2e50, double e2e99, double itl50, int preempt,
                    const std::string& backend) {
  nlohmann::json j;
  j["run"] = {{"backend", backend}};
  j["throughput"] = {{"output_tokens_per_s", out_tps}, {"requests_per_s", rps}};
  j["ttft_ms"] = {{"p50", ttft50}, {"p99", ttft99}};
  j["tpot_ms"] = {{"p50", tpot50}, {"p99", tpot99}};
  j["e2e_ms"] = {{"p50", e2e50}, {"p99", e2e99}};
  j["itl_ms"] = {{"p50", itl50}};
  j["preemption"] = {{"preemptions", preempt}};
  return j.dump();
}

// Request 0: a 32-token prompt in two chunks, then a decode; requests 1, 2 for latencies.
const char* kSchedule =
    "step,request,first_token,num_tokens,kind\n"
    "0,0,0,16,prefill\n"
    "1,0,16,16,prefill\n"
    "2,0,32,1,decode\n";

void write_runs(const path& dir, const std::string& sim_extra = "") {
  const path s = dir / "sim", e = dir / "engine";
  std::filesystem::create_directories(s);
  std::filesystem::create_directories(e);
  write_file(s / "config.yaml", config(sim_extra));
  write_file(e / "config.yaml", config());
  write_file(s / "requests.csv", std::string(kRequestsHeader) + req(0, 32, "110", "12", "150") +
                                     req(1, 8, "180", "9", "220") + req(2, 8, "400", "", "400"));
  write_file(e / "requests.csv", std::string(kRequestsHeader) + req(0, 32, "100", "10", "150") +
                                     req(1, 8, "200", "10", "200") + req(2, 8, "400", "", "500"));
  write_file(s / "steps.csv", std::string(kStepsHeader) + step(0, "11", 1, 16, 0) +
                                  step(1, "20", 1, 16, 0) + step(2, "30", 1, 0, 1));
  write_file(e / "steps.csv", std::string(kStepsHeader) + step(0, "10", 1, 16, 0) +
                                  step(1, "20", 1, 16, 0) + step(2, "40", 1, 0, 1));
  write_file(s / "schedule.csv", kSchedule);
  write_file(e / "schedule.csv", kSchedule);
  write_file(s / "summary.json", summary(105, 2, 180, 400, 9, 12, 220, 400, 9, 1, "sim"));
  write_file(e / "summary.json",
             summary(100, 2.5, 200, 400, 10, 10, 200, 500, 10, 0, "engine-cpu"));
}

TEST(ErrorStats, AbsoluteAndSignedSummaries) {
  const ErrorStats s = error_stats({0.1, -0.1, 0.0});
  EXPECT_EQ(s.count, 3);
  EXPECT_NEAR(s.mean, 0.2 / 3, 1e-15);
  EXPECT_NEAR(s.mean_signed, 0.0, 1e-15);
  EXPECT_NEAR(s.p50, 0.1, 1e-15);
  EXPECT_NEAR(s.max, 0.1, 1e-15);
  // Linear interpolation between ranks: |errors| sorted 0.1, 0.2 -> p90 = 0.1 + 0.9 * 0.1.
  const ErrorStats t = error_stats({0.2, -0.1});
  EXPECT_NEAR(t.p90, 0.19, 1e-12);
  EXPECT_NEAR(t.p99, 0.199, 1e-12);
  EXPECT_EQ(error_stats({}).count, 0);
}

TEST(Validate, HandMadeRunsGiveTheExpectedErrors) {
  const path dir = temp_dir("validate_hand");
  write_runs(dir);
  const ValidationReport r = validate_runs((dir / "sim").string(), (dir / "engine").string());
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(r.schedule, "identical");
  EXPECT_FALSE(r.first_differing_step);
  // Steps: (11-10)/10, 0, (30-40)/40.
  EXPECT_EQ(r.step_paired.count, 3);
  EXPECT_NEAR(r.step_paired.mean, (0.1 + 0 + 0.25) / 3, 1e-12);
  EXPECT_NEAR(r.step_paired.mean_signed, (0.1 - 0.25) / 3, 1e-12);
  EXPECT_NEAR(r.step_paired.max, 0.25, 1e-12);
  // Requests: TTFT +0.1, -0.1, 0; TPOT +0.2, -0.1 (request 2 has one token: no TPOT);
  // E2E 0, +0.1, -0.2.
  EXPECT_EQ(r.requests_compared, 3);
  EXPECT_NEAR(r.ttft.mean, 0.2 / 3, 1e-12);
  EXPECT_NEAR(r.ttft.p50, 0.1, 1e-12);
  EXPECT_EQ(r.tpot.count, 2);
  EXPECT_NEAR(r.tpot.mean, 0.15, 1e-12);
  EXPECT_NEAR(r.tpot.mean_signed, 0.05, 1e-12);
  EXPECT_NEAR(r.e2e.max, 0.2, 1e-12);
  EXPECT_NEAR(r.e2e.p50, 0.1, 1e-12);
  // Aggregates: signed.
  auto agg = [&](const std::string& m) {
    for (const AggregateError& a : r.aggregates) {
      if (a.metric == m) return a;
    }
    ADD_FAILURE() << m;
    return AggregateError{};
  };
  EXPECT_NEAR(*agg("throughput.output_tokens_per_s").error, 0.05, 1e-12);
  EXPECT_NEAR(*agg("throughput.requests_per_s").error, -0.2, 1e-12);
  EXPECT_NEAR(*agg("ttft_ms.p50").error, -0.1, 1e-12);
  EXPECT_NEAR(*agg("tpot_ms.p99").error, 0.2, 1e-12);
  EXPECT_NEAR(*agg("e2e_ms.p99").error, -0.2, 1e-12);
  EXPECT_FALSE(agg("preemption.preemptions").error);  // engine 0: undefined
  EXPECT_NEAR(*agg("num_steps").error, 0.0, 1e-12);
  // The roofline replays the engine's steps (sim config has no cost_model).
  ASSERT_TRUE(r.step_replay);
  EXPECT_EQ(r.step_replay->count, 3);
  EXPECT_NE(r.replay_cost_model.find("roofline"), std::string::npos);
}

// Energy is compared when both summaries have it (a CUDA engine's NVML counter, the simulator's
// power model) and left out when either lacks it.
TEST(Validate, EnergyIsComparedWhenBothRunsKnowIt) {
  const path dir = temp_dir("validate_energy");
  write_runs(dir);
  auto has = [](const ValidationReport& r, const std::string& m) {
    return std::any_of(r.aggregates.begin(), r.aggregates.end(),
                       [&](const AggregateError& a) { return a.metric == m; });
  };
  EXPECT_FALSE(
      has(validate_runs((dir / "sim").string(), (dir / "engine").string()), "energy.joules"));
  auto with_energy = [](const path& file, double joules, double watts, double per_token) {
    nlohmann::json j = nlohmann::json::parse(test_util::read_file(file));
    j["energy"] = {
        {"joules", joules}, {"average_power_w", watts}, {"joules_per_output_token", per_token}};
    write_file(file, j.dump());
  };
  with_energy(dir / "sim" / "summary.json", 900, 300, 0.09);
  EXPECT_FALSE(has(validate_runs((dir / "sim").string(), (dir / "engine").string()),
                   "energy.joules"));  // the engine measured nothing
  with_energy(dir / "engine" / "summary.json", 1000, 400, 0.1);
  const ValidationReport r = validate_runs((dir / "sim").string(), (dir / "engine").string());
  for (const AggregateError& a : r.aggregates) {
    if (a.metric == "energy.joules") {
      EXPECT_NEAR(*a.error, -0.1, 1e-12);
    }
    if (a.metric == "energy.average_power_w") {
      EXPECT_NEAR(*a.error, -0.25, 1e-12);
    }
    if (a.metric == "energy.joules_per_output_token") {
      EXPECT_NEAR(*a.error, -0.1, 1e-12);
    }
  }
  EXPECT_TRUE(has(r, "energy.joules"));
  EXPECT_TRUE(has(r, "energy.average_power_w"));
  EXPECT_TRUE(has(r, "energy.joules_per_output_token"));
  std::filesystem::remove_all(dir);
}

TEST(Validate, ReplayWithACalibratedModelInfersSampling) {
  const path dir = temp_dir("validate_replay");
  // 10 ms a step, 1 ms per sampled sequence, nothing else.
  write_file(dir / "cost.yaml",
             "type: calibrated\nmodel: tiny\nblock_size: 16\nblock_bytes: 8192\ncoefficients:\n"
             "  step_s: 0.01\n  per_sequence_s: 0\n  per_token_s: 0\n  per_token_above_knee_s: 0\n"
             "  knee_tokens: 0\n  prefill_pair_s: 0\n  decode_context_token_s: 0\n"
             "  sampled_sequence_s: 0.001\n  swap_byte_s: 0\n  copy_byte_s: 0\n");
  write_runs(dir, "cost_model: {type: calibrated, file: " + (dir / "cost.yaml").string() + "}\n");
  const ValidationReport r = validate_runs((dir / "sim").string(), (dir / "engine").string());
  ASSERT_TRUE(r.step_replay);
  // Step 0: a chunk that does not sample (10 ms vs 10); step 1 ends the 32-token prompt and
  // samples (11 vs 20); step 2 decodes and samples (11 vs 40).
  EXPECT_NEAR(r.step_replay->mean_signed, (0.0 - 0.45 - 0.725) / 3, 1e-9);
  EXPECT_NEAR(r.step_replay->max, 0.725, 1e-9);
  EXPECT_NE(r.replay_cost_model.find("calibrated"), std::string::npos);
  // The sim config differs from the engine's only in cost_model: no error.
}

// replay.csv (the data of `sim plot`'s predicted-against-measured figure): one row per engine
// step, its shape and both durations, from the report and from `sim validate`.
TEST(Validate, ReplayCsvHoldsEveryEngineStepMeasuredAndPredicted) {
  const path dir = temp_dir("validate_replay_csv");
  write_file(dir / "cost.yaml",
             "type: calibrated\nmodel: tiny\nblock_size: 16\nblock_bytes: 8192\ncoefficients:\n"
             "  step_s: 0.01\n  per_sequence_s: 0\n  per_token_s: 0\n  per_token_above_knee_s: 0\n"
             "  knee_tokens: 0\n  prefill_pair_s: 0\n  decode_context_token_s: 0\n"
             "  sampled_sequence_s: 0.001\n  swap_byte_s: 0\n  copy_byte_s: 0\n");
  write_runs(dir, "cost_model: {type: calibrated, file: " + (dir / "cost.yaml").string() + "}\n");
  const ValidationReport r = validate_runs((dir / "sim").string(), (dir / "engine").string());
  ASSERT_EQ(r.replayed.size(), 3u);
  EXPECT_EQ(r.replayed[1].step, 1);
  EXPECT_EQ(r.replayed[1].prefill_tokens, 16);
  EXPECT_EQ(r.replayed[2].decode_tokens, 1);
  EXPECT_EQ(r.replayed[2].decode_context_tokens, 33);
  EXPECT_NEAR(r.replayed[2].measured_s, 0.040, 1e-12);
  EXPECT_NEAR(r.replayed[2].predicted_s, 0.011, 1e-9);
  const std::string expected =
      "step,num_seqs,prefill_tokens,decode_tokens,decode_context_tokens,measured_ms,"
      "predicted_ms\n"
      "0,1,16,0,0,10.000000,10.000000\n"
      "1,1,16,0,0,20.000000,11.000000\n"
      "2,1,0,1,33,40.000000,11.000000\n";
  EXPECT_EQ(replay_csv(r), expected);
  const auto c = run_sim("validate " + (dir / "sim").string() + " " + (dir / "engine").string() +
                             " --out " + (dir / "v").string() + " -q",
                         dir);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(test_util::read_file(dir / "v/replay.csv"), expected);
  // By kind: the decode step (40 vs 11) and the second chunk (20 vs 11) are slow (> 1.5x).
  ASSERT_EQ(r.replayed_by_kind.size(), 3u);
  EXPECT_EQ(r.replayed_by_kind[0].kind, "decode");
  EXPECT_EQ(r.replayed_by_kind[0].slow_steps, 1);
  EXPECT_FALSE(r.replayed_by_kind[0].time_weighted_without_slow);
  EXPECT_EQ(r.replayed_by_kind[1].kind, "prefill");
  EXPECT_NEAR(r.replayed_by_kind[1].time_weighted, (21.0 - 30.0) / 30.0, 1e-9);
  EXPECT_NEAR(*r.replayed_by_kind[1].time_weighted_without_slow, 0.0, 1e-9);
  EXPECT_EQ(r.replayed_by_kind[2].kind, "all");
  EXPECT_NEAR(r.replayed_by_kind[2].slow_measured_s, 0.060, 1e-12);
  const nlohmann::json j = nlohmann::json::parse(test_util::read_file(dir / "v/validation.json"));
  ASSERT_EQ(j["step_time"]["replayed_by_kind"].size(), 3u);
  EXPECT_EQ(j["step_time"]["replayed_by_kind"][0]["kind"], "decode");
  EXPECT_TRUE(j["step_time"]["replayed_by_kind"][0]["time_weighted_without_slow"].is_null());
  EXPECT_NEAR(j["step_time"]["first_replayed"]["error"].get<double>(), 0.0, 1e-9);
  EXPECT_EQ(j["step_time"]["slow_step_factor"].get<double>(), kSlowStepFactor);
  // An engine run without schedule.csv cannot be replayed: the header alone.
  std::filesystem::remove(dir / "engine/schedule.csv");
  const ValidationReport none = validate_runs((dir / "sim").string(), (dir / "engine").string());
  EXPECT_EQ(replay_csv(none), expected.substr(0, expected.find('\n') + 1));
  EXPECT_TRUE(none.replayed_by_kind.empty());
}

// The replayed error split by step kind: sums, time-weighted errors, slow steps (measured >
// 1.5x predicted) and the time-weighted error without them.
TEST(ReplayByKind, SumsEachKindAndSeparatesTheSlowSteps) {
  auto step = [](std::int64_t i, std::int64_t prefill, std::int64_t decode, double m_ms,
                 double p_ms) {
    ReplayedStep s;
    s.step = i;
    s.prefill_tokens = prefill;
    s.decode_tokens = decode;
    s.measured_s = m_ms / 1e3;
    s.predicted_s = p_ms / 1e3;
    return s;
  };
  const std::vector<ReplayedStep> steps = {
      step(0, 0, 0, 5, 1),     // other, slow: the only one of its kind
      step(1, 0, 4, 10, 10),   // decode
      step(2, 16, 0, 20, 18),  // prefill
      step(3, 0, 4, 30, 10),   // decode, slow
      step(4, 8, 2, 40, 50),   // mixed
      step(5, 0, 4, 10, 11),   // decode
  };
  const std::vector<StepKindError> k = replay_by_kind(steps);
  ASSERT_EQ(k.size(), 5u);
  EXPECT_EQ(k[0].kind, "decode");
  EXPECT_EQ(k[1].kind, "prefill");
  EXPECT_EQ(k[2].kind, "mixed");
  EXPECT_EQ(k[3].kind, "other");
  EXPECT_EQ(k[4].kind, "all");
  // decode: 50 ms measured, 31 predicted; the 30 ms step is slow; without it 21 vs 20.
  EXPECT_EQ(k[0].steps, 3);
  EXPECT_NEAR(k[0].measured_s, 0.050, 1e-12);
  EXPECT_NEAR(k[0].predicted_s, 0.031, 1e-12);
  EXPECT_NEAR(k[0].time_weighted, -19.0 / 50.0, 1e-12);
  EXPECT_NEAR(k[0].error.mean, (0.0 + 20.0 / 30.0 + 0.1) / 3, 1e-12);
  EXPECT_EQ(k[0].slow_steps, 1);
  EXPECT_NEAR(k[0].slow_measured_s, 0.030, 1e-12);
  EXPECT_NEAR(*k[0].time_weighted_without_slow, 1.0 / 20.0, 1e-12);
  EXPECT_NEAR(k[2].time_weighted, 0.25, 1e-12);
  EXPECT_EQ(k[2].slow_steps, 0);
  EXPECT_FALSE(k[3].time_weighted_without_slow);  // every step of the kind is slow
  // all: 115 ms measured, 100 predicted; slow 30 + 5 ms; without them 80 vs 89.
  EXPECT_EQ(k[4].steps, 6);
  EXPECT_NEAR(k[4].time_weighted, -15.0 / 115.0, 1e-12);
  EXPECT_EQ(k[4].slow_steps, 2);
  EXPECT_NEAR(k[4].slow_measured_s, 0.035, 1e-12);
  EXPECT_NEAR(*k[4].time_weighted_without_slow, 9.0 / 80.0, 1e-12);
  EXPECT_TRUE(replay_by_kind({}).empty());
}

// Issue 16: replaying with a CPU calibration recorded on another CPU warns (one line, on
// stderr); on the same CPU it does not. $SERVELAB_MACHINE_NAME stands for this machine.
TEST(Validate, ReplayWithACalibrationFromAnotherCpuWarnsOnce) {
  const path dir = temp_dir("validate_machine");
  write_file(dir / "cost.yaml",
             "type: calibrated\nmodel: tiny\nmachine: {kind: cpu, name: \"Recorded CPU\", "
             "threads: 2}\nblock_size: 16\nblock_bytes: 8192\ncoefficients:\n"
             "  step_s: 0.01\n  per_sequence_s: 0\n  per_token_s: 0\n  per_token_above_knee_s: 0\n"
             "  knee_tokens: 0\n  prefill_pair_s: 0\n  decode_context_token_s: 0\n"
             "  sampled_sequence_s: 0.001\n  swap_byte_s: 0\n  copy_byte_s: 0\n");
  write_runs(dir, "cost_model: {type: calibrated, file: " + (dir / "cost.yaml").string() + "}\n");
  ::setenv("SERVELAB_MACHINE_NAME", "Recorded CPU", 1);
  testing::internal::CaptureStderr();
  validate_runs((dir / "sim").string(), (dir / "engine").string());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ::setenv("SERVELAB_MACHINE_NAME", "Another CPU", 1);
  testing::internal::CaptureStderr();
  validate_runs((dir / "sim").string(), (dir / "engine").string());
  validate_runs((dir / "sim").string(), (dir / "engine").string());
  const std::string err = testing::internal::GetCapturedStderr();
  ::unsetenv("SERVELAB_MACHINE_NAME");
  EXPECT_NE(err.find("cost.yaml was calibrated on cpu \"Recorded CPU\""), std::string::npos) << err;
  EXPECT_NE(err.find("do not carry across machines"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), err.size() - 1) << err;  // one line, once
}

TEST(Validate, DifferingSchedulesReportTheFirstStepAndPairOnlyBefore) {
  const path dir = temp_dir("validate_differ");
  write_runs(dir);
  write_file(dir / "engine/schedule.csv",
             "step,request,first_token,num_tokens,kind\n0,0,0,16,prefill\n1,0,16,8,prefill\n"
             "2,0,24,8,prefill\n");
  const ValidationReport r = validate_runs((dir / "sim").string(), (dir / "engine").string());
  EXPECT_EQ(r.schedule, "differ");
  ASSERT_TRUE(r.first_differing_step);
  EXPECT_EQ(*r.first_differing_step, 1);
  EXPECT_NE(r.schedule_detail.find("0:16+16 prefill"), std::string::npos) << r.schedule_detail;
  EXPECT_NE(r.schedule_detail.find("0:16+8 prefill"), std::string::npos) << r.schedule_detail;
  EXPECT_EQ(r.step_paired.count, 1);
  EXPECT_NEAR(r.step_paired.mean, 0.1, 1e-12);
  // Differing from the first step on, nothing pairs: the table shows no error, not 0.00 %.
  write_file(dir / "engine/schedule.csv",
             "step,request,first_token,num_tokens,kind\n0,0,0,8,prefill\n");
  const auto c = run_sim("validate " + (dir / "sim").string() + " " + (dir / "engine").string() +
                             " --out " + (dir / "v").string(),
                         dir);
  ASSERT_EQ(c.code, 0) << c.err;
  const std::size_t at = c.out.find("step time, paired");
  ASSERT_NE(at, std::string::npos) << c.out;
  const std::string line = c.out.substr(at, c.out.find('\n', at) - at);
  EXPECT_NE(line.find(" 0        -        -"), std::string::npos) << line;
}

TEST(Validate, WithoutSchedulesStepsPairByShape) {
  const path dir = temp_dir("validate_noschedule");
  write_runs(dir);
  std::filesystem::remove(dir / "sim/schedule.csv");
  std::filesystem::remove(dir / "engine/schedule.csv");
  write_file(dir / "engine/steps.csv", std::string(kStepsHeader) + step(0, "10", 1, 16, 0) +
                                           step(1, "20", 1, 8, 0) + step(2, "40", 1, 0, 1));
  const ValidationReport r = validate_runs((dir / "sim").string(), (dir / "engine").string());
  EXPECT_EQ(r.schedule, "not compared");
  EXPECT_EQ(r.paired_basis, "steps.csv shapes");
  EXPECT_EQ(r.step_paired.count, 1);
  EXPECT_FALSE(r.step_replay);
}

TEST(Validate, ConfigurationChecks) {
  const path dir = temp_dir("validate_config");
  write_runs(dir);
  // Different block counts or policies: a warning, not an error.
  write_file(dir / "engine/config.yaml", config("", 3, 128));
  ValidationReport r = validate_runs((dir / "sim").string(), (dir / "engine").string());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("num_gpu_blocks"), std::string::npos);
  // A different workload: an error naming the key, and exit 2 from the command.
  write_file(dir / "engine/config.yaml", config("", 4));
  try {
    validate_runs((dir / "sim").string(), (dir / "engine").string());
    FAIL();
  } catch (const ConfigError& e) {
    // The first differing key and both values, on one line.
    EXPECT_NE(std::string(e.what()).find("key 'workload.num_requests' differs (3 vs 4)"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
  auto c = run_sim("validate " + (dir / "sim").string() + " " + (dir / "engine").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("workload"), std::string::npos) << c.err;
  // The measured side ran other lengths (a server capping max_tokens) or did not finish what the
  // simulation finished: warned, since every error then compares different work.
  write_runs(dir);
  std::string measured = std::string(kRequestsHeader) + req(0, 32, "100", "10", "150") +
                         req(1, 8, "200", "10", "200") + req(2, 8, "400", "", "500", "aborted");
  const std::string capped = "1,0,0,0,0,8,3,";
  measured.replace(measured.find(capped), capped.size(), "1,0,0,0,0,8,2,");
  write_file(dir / "engine/requests.csv", measured);
  r = validate_runs((dir / "sim").string(), (dir / "engine").string());
  std::string all;
  for (const std::string& w : r.warnings) all += w + "\n";
  EXPECT_NE(all.find("1 requests finished in the simulation but not in the measured run"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("1 requests finished in both runs with other lengths (request 1: 3 "
                     "output_tokens simulated, 2 measured)"),
            std::string::npos)
      << all;
  // The other way round (the simulation aborted one), a request the measured run has no row
  // for: each warned; a request listed twice or a status no run writes: an error with its line.
  write_runs(dir);
  write_file(dir / "sim/requests.csv",
             std::string(kRequestsHeader) + req(0, 32, "100", "10", "150") +
                 req(1, 8, "200", "10", "200") + req(2, 8, "400", "", "500", "aborted"));
  write_file(dir / "engine/requests.csv", std::string(kRequestsHeader) +
                                              req(0, 32, "100", "10", "150") +
                                              req(2, 8, "400", "10", "500"));
  r = validate_runs((dir / "sim").string(), (dir / "engine").string());
  all.clear();
  for (const std::string& w : r.warnings) all += w + "\n";
  EXPECT_NE(all.find("1 requests finished in the measured run but not in the simulation"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("1 requests of the simulation have no row in the measured run and 0 of the "
                     "measured run none in the simulation"),
            std::string::npos)
      << all;
  for (const std::string& bad : {std::string(kRequestsHeader) + req(0, 32, "100", "10", "150") +
                                     req(0, 32, "100", "10", "150"),
                                 std::string(kRequestsHeader) + req(0, 32, "100", "10", "150") +
                                     req(1, 8, "200", "10", "200", "finsihed")}) {
    write_file(dir / "engine/requests.csv", bad);
    try {
      validate_runs((dir / "sim").string(), (dir / "engine").string());
      FAIL() << bad;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("requests.csv:3"), std::string::npos) << what;
    }
  }
}

TEST(Validate, CommandWritesJsonAndRefusesBadInput) {
  const path dir = temp_dir("validate_cli");
  write_runs(dir);
  auto c = run_sim("validate " + (dir / "sim").string() + " " + (dir / "engine").string() +
                       " --out " + (dir / "v").string(),
                   dir);
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("TTFT per request"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("replayed step time by kind"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("first replayed step (0)"), std::string::npos) << c.out;
  const nlohmann::json j = nlohmann::json::parse(test_util::read_file(dir / "v/validation.json"));
  EXPECT_EQ(j["schedule"]["comparison"], "identical");
  EXPECT_NEAR(j["requests"]["tpot"]["mean"].get<double>(), 0.15, 1e-12);
  EXPECT_NEAR(j["aggregates"]["throughput.output_tokens_per_s"]["error"].get<double>(), 0.05,
              1e-12);
  EXPECT_TRUE(j["aggregates"]["preemption.preemptions"]["error"].is_null());
  // Default output folder: SIM_DIR-validation ("sim/." and "sim/" name the same folder).
  c = run_sim("validate " + (dir / "sim").string() + "/. " + (dir / "engine").string() + " -q",
              dir);
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "sim-validation/validation.json"));
  // A previous report is replaced only with --force; a folder of the user's, or one inside an
  // input run folder, never.
  const std::string both = (dir / "sim").string() + " " + (dir / "engine").string();
  c = run_sim("validate " + both + " -q", dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("holds a previous validation report; pass --force"), std::string::npos)
      << c.err;
  // The replaced report's figures go with it (they drew the old numbers).
  std::filesystem::create_directories(dir / "sim-validation/figures");
  write_file(dir / "sim-validation/figures/.servelab-figures", "step_error.png\n");
  write_file(dir / "sim-validation/figures/step_error.png", "old figure");
  EXPECT_EQ(run_sim("validate " + both + " -q --force", dir).code, 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "sim-validation/figures"));
  EXPECT_TRUE(std::filesystem::exists(dir / "sim-validation/validation.json"));
  std::filesystem::create_directories(dir / "mine");
  write_file(dir / "mine/notes.txt", "mine");
  c = run_sim("validate " + both + " -q --force --out " + (dir / "mine").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("holds 'notes.txt', which is not a `sim validate` output"),
            std::string::npos)
      << c.err;
  // A file of the user's that only has a report's name is not replaced, even with --force.
  for (const char* file : {"validation.json", "replay.csv"}) {
    std::filesystem::remove_all(dir / "mine");
    std::filesystem::create_directories(dir / "mine");
    write_file(dir / "mine" / file, "{\"my\": \"notes\"}\n");
    c = run_sim("validate " + both + " -q --force --out " + (dir / "mine").string(), dir);
    EXPECT_EQ(c.code, 2) << file;
    EXPECT_NE(c.err.find(std::string("its '") + file + "' is not a `sim validate` report"),
              std::string::npos)
        << c.err;
    EXPECT_EQ(test_util::read_file(dir / "mine" / file), "{\"my\": \"notes\"}\n");
  }
  std::filesystem::remove_all(dir / "mine");
  std::filesystem::create_directories(dir / "mine");
  write_file(dir / "mine/notes.txt", "mine");
  for (const char* inside : {"sim", "engine/v"}) {
    c = run_sim("validate " + both + " -q --force --out " + (dir / inside).string(), dir);
    EXPECT_EQ(c.code, 2) << inside;
    EXPECT_NE(c.err.find("the report's folder is in the run folder"), std::string::npos) << c.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "sim/validation.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "engine/v"));

  // Missing folder, missing file, malformed CSV row, wrong argument count.
  c = run_sim("validate " + (dir / "nope").string() + " " + (dir / "engine").string(), dir);
  EXPECT_EQ(c.code, 2);
  std::filesystem::remove(dir / "engine/summary.json");
  c = run_sim("validate " + (dir / "sim").string() + " " + (dir / "engine").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("summary.json"), std::string::npos) << c.err;
  write_runs(dir);
  write_file(dir / "engine/steps.csv", std::string(kStepsHeader) + "0,0,10\n");
  c = run_sim("validate " + (dir / "sim").string() + " " + (dir / "engine").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("steps.csv:2:"), std::string::npos) << c.err;
  c = run_sim("validate " + (dir / "sim").string(), dir);
  EXPECT_EQ(c.code, 2);
  // A steps.csv or schedule.csv of another shape is not read as "no steps".
  for (const char* file : {"steps.csv", "schedule.csv"}) {
    write_runs(dir);
    write_file(dir / "engine" / file, "garbage\n");
    c = run_sim("validate " + (dir / "sim").string() + " " + (dir / "engine").string(), dir);
    EXPECT_EQ(c.code, 2) << file;
    EXPECT_NE(c.err.find(std::string(file) + ":1: no column 'step'"), std::string::npos) << c.err;
  }
  // The folders swapped, or one folder twice: which side is the prediction is not a guess.
  write_runs(dir);
  c = run_sim("validate " + (dir / "engine").string() + " " + (dir / "sim").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("a run of backend 'engine-cpu', expected a simulator run first"),
            std::string::npos)
      << c.err;
  c = run_sim("validate " + (dir / "sim").string() + " " + (dir / "sim").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("the same folder"), std::string::npos) << c.err;
}

// Every value validate reads of a run folder is checked where the file is read: a hand-edited
// or corrupt one names its file, line and column (it was cast unchecked: undefined behaviour,
// an "internal error", or silently dropped steps), in either folder.
TEST(Validate, CorruptValuesNameTheirFileLineAndColumn) {
  const path dir = temp_dir("validate_corrupt");
  struct Case {
    std::string file, text, says;
  };
  const std::string reqs = std::string(kRequestsHeader) + req(0, 32, "100", "10", "150") +
                           req(1, 8, "200", "10", "200") + req(2, 8, "400", "", "500");
  const std::vector<Case> cases = {
      {"engine/schedule.csv", "step,request,first_token,num_tokens,kind\n0,0,0,1e20,prefill\n",
       "schedule.csv:2: column 'num_tokens': expected an integer in [1, 1e+09], got '1e20'"},
      {"engine/schedule.csv", "step,request,first_token,num_tokens,kind\n0,0,0,16,prefil\n",
       "schedule.csv:2: column 'kind': expected prefill or decode, got 'prefil'"},
      {"sim/schedule.csv", "step,request,first_token,num_tokens,kind\n1.5,0,0,16,prefill\n",
       "sim/schedule.csv:2: column 'step': expected an integer"},
      {"engine/steps.csv", std::string(kStepsHeader) + "0,0,10,1,16,0,1,1,0,0.1,0,1,0,-1,0\n",
       "steps.csv:2: column 'swap_out_blocks': expected an integer in [0, 1e+09], got '-1'"},
      {"engine/steps.csv", std::string(kStepsHeader) + "0,0,-5,1,16,0,1,1,0,0.1,0,1,0,0,0\n",
       "steps.csv:2: column 'duration_ms': expected a number in [0, 1e+12], got '-5'"},
      {"sim/requests.csv", std::string(kRequestsHeader) + "abc,0,0,0,0,8,3,0,0,0,0,1,1,1,x,y\n",
       "sim/requests.csv:2: column 'id': expected an integer"},
      {"engine/requests.csv", reqs + req(1, 8, "200", "10", "200"),
       "requests.csv:5: request 1 appears twice"},
      // A step twice, steps out of order, a scheduled step without its row: the rows would pair
      // the wrong steps.
      {"engine/steps.csv",
       std::string(kStepsHeader) + step(0, "10", 1, 16, 0) + step(0, "20", 1, 16, 0) +
           step(2, "40", 1, 0, 1),
       "steps.csv:3: step 0 after step 0 (expected each step once, in increasing order)"},
      {"engine/steps.csv",
       std::string(kStepsHeader) + step(1, "10", 1, 16, 0) + step(0, "20", 1, 16, 0) +
           step(2, "40", 1, 0, 1),
       "steps.csv:3: step 0 after step 1"},
      {"engine/steps.csv",
       std::string(kStepsHeader) + step(0, "10", 1, 16, 0) + step(2, "40", 1, 0, 1),
       "schedule.csv:3: step 1 is not in"},
      {"engine/steps.csv", "step,duration_ms,duration_ms,num_seqs,prefill_tokens,decode_tokens\n",
       "steps.csv:1: the column 'duration_ms' appears twice in the header"},
      {"engine/summary.json", "{\"run\": {\"backend\"", "summary.json: malformed JSON"},
      {"sim/config.yaml", config("cost_model: {step_overhead_us: abc}\n"),
       "key 'cost_model.step_overhead_us': expected a number in [0, 1e+09], got 'abc'"},
      {"sim/config.yaml", config("cost_model: {file: [a, b]}\n"),
       "key 'cost_model.file': expected a string, got a list"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.file + ": " + k.says);
    write_runs(dir);
    write_file(dir / k.file, k.text);
    const auto c =
        run_sim("validate " + (dir / "sim").string() + " " + (dir / "engine").string(), dir);
    EXPECT_EQ(c.code, 2) << c.err;
    EXPECT_NE(c.err.find(k.says), std::string::npos) << c.err;
  }
  // A calibration of another model, or a --cost-model that is not there, is refused by name.
  write_runs(dir);
  write_file(dir / "other.yaml",
             "type: calibrated\nmodel: Llama-3-8B\nblock_size: 16\nblock_bytes: 2097152\n"
             "coefficients:\n  step_s: 0.01\n  per_sequence_s: 0\n  per_token_s: 0\n"
             "  per_token_above_knee_s: 0\n  knee_tokens: 0\n  prefill_pair_s: 0\n"
             "  decode_context_token_s: 0\n  sampled_sequence_s: 0\n  swap_byte_s: 0\n"
             "  copy_byte_s: 0\n");
  const std::string both = (dir / "sim").string() + " " + (dir / "engine").string();
  auto c = run_sim("validate " + both + " --cost-model " + (dir / "other.yaml").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("was calibrated for model 'Llama-3-8B', but the experiment runs 'tiny'"),
            std::string::npos)
      << c.err;
  c = run_sim("validate " + both + " --cost-model " + (dir / "none.yaml").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("--cost-model " + (dir / "none.yaml").string() + ": not found"),
            std::string::npos)
      << c.err;
}

}  // namespace
}  // namespace servelab

namespace servelab {
namespace {

TEST(HostOverhead, FitsWhatTheProfileMissed) {
  const path dir = test_util::temp_dir("validate_overhead");
  write_runs(dir);
  // The profile says 1 ms a step; the engine measured 10, 20, 40 ms.
  CalibratedProfile p;
  p.model = "tiny";
  p.block_size = 16;
  p.block_bytes = 8192;
  p.coefficients.step_s = 0.001;
  // A simulator run has no measured host time to fit.
  EXPECT_THROW(fit_host_overhead((dir / "sim").string(), p), ConfigError);
  // A run of another model, or of other blocks, is not what the profile prices.
  CalibratedProfile other = p;
  other.model = "Llama-3-8B";
  EXPECT_THROW(fit_host_overhead((dir / "engine").string(), other), ConfigError);
  other = p;
  other.block_size = 32;
  other.block_bytes = 16384;
  try {
    fit_host_overhead((dir / "engine").string(), other);
    ADD_FAILURE() << "a run of 16-token blocks fitted to a profile of 32";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("the run's blocks are of 16 tokens, the profile's of 32"),
              std::string::npos)
        << e.what();
  }
  const HostOverhead h = fit_host_overhead((dir / "engine").string(), p);
  EXPECT_EQ(h.steps, 3);
  EXPECT_GT(h.step_s + h.per_sequence_s, 0.005);
  EXPECT_NEAR(p.coefficients.step_s + p.coefficients.per_sequence_s,
              0.001 + h.step_s + h.per_sequence_s, 1e-12);
  // Relative errors over 10, 20, 40 ms with one entry each, Huber-weighted: the first round is
  // least squares, x0 = sum(1/y) / sum(1/y^2), its relative residuals set the threshold
  // c = 1.345 x 1.4826 x median |r|, and the solution is the fixed point of
  // x = sum(w_i / y_i) / sum(w_i / y_i^2) with w_i = min(1, c / |(x - y_i) / y_i|).
  const double y[] = {10, 20, 40};
  const double x0 = (1 / 10.0 + 1 / 20.0 + 1 / 40.0) / (1 / 100.0 + 1 / 400.0 + 1 / 1600.0);
  std::vector<double> r0;
  for (double v : y) r0.push_back(std::abs((x0 - v) / v));
  std::sort(r0.begin(), r0.end());
  const double thr = 1.345 * std::max(0.005, 1.4826 * r0[1]);
  double x = x0;
  for (int it = 0; it < 200; ++it) {
    double num = 0, den = 0;
    for (double v : y) {
      const double e = std::abs((x - v) / v);
      const double w = e <= thr ? 1.0 : thr / e;
      num += w / v;
      den += w / (v * v);
    }
    x = num / den;
  }
  EXPECT_LT(x, x0);  // the 40 ms step, beyond the threshold, pulls less
  EXPECT_NEAR(p.coefficients.step_s + p.coefficients.per_sequence_s, x * 1e-3, 1e-3 * x * 1e-3);
  // `sim calibrate --engine-run` writes the section and the file still loads.
  auto c = test_util::run_sim("calibrate " + (dir / "nope.csv").string() + " -o " +
                                  (dir / "c.yaml").string() + " --engine-run " +
                                  (dir / "engine").string(),
                              dir);
  EXPECT_EQ(c.code, 2);
}

// A tiny-model profile that prices every step at 1 ms (step_s), for the host-overhead fits.
CalibratedProfile one_ms_steps() {
  CalibratedProfile p;
  p.model = "tiny";
  p.block_size = 16;
  p.block_bytes = 8192;
  p.coefficients.step_s = 0.001;
  return p;
}

// --between-steps: the host overhead fitted to step periods. One request decodes through four
// steps of 10 ms with 1 ms between them; predicted 1 ms each (step_s). Durations leave 9 ms to
// fit; periods 10 ms (11 ms less the 1 predicted) for the three steps the next one continues,
// and the last step's duration alone (no next step to measure its gap against).
TEST(HostOverhead, BetweenStepsFitsStepPeriods) {
  const path dir = temp_dir("validate_host_gaps");
  write_runs(dir);
  const path e = dir / "engine";
  write_file(e / "requests.csv", std::string(kRequestsHeader) + req(0, 4, "10", "11", "43"));
  write_file(e / "schedule.csv",
             "step,request,first_token,num_tokens,kind\n0,0,0,4,prefill\n1,0,4,1,decode\n"
             "2,0,5,1,decode\n3,0,6,1,decode\n");
  std::string steps = kStepsHeader;
  for (int k = 0; k < 4; ++k) {
    steps += std::to_string(k) + "," + std::to_string(0.011 * k) + ",10," +
             (k == 0 ? "1,4,0" : "1,0,1") + ",1,1,0,0.1,0,1,0,0,0\n";
  }
  write_file(e / "steps.csv", steps);
  auto fitted = [&](bool between_steps) {
    CalibratedProfile p = one_ms_steps();
    const HostOverhead h = fit_host_overhead(e.string(), p, between_steps);
    EXPECT_EQ(h.between_steps, between_steps);
    return h.step_s + h.per_sequence_s;  // one entry a step: only the sum is determined
  };
  EXPECT_NEAR(fitted(false), 0.009, 1e-6);
  const double with_gaps = fitted(true);
  EXPECT_GT(with_gaps, 0.0097);  // the three periods of 11 ms outweigh the last step's 10
  EXPECT_LT(with_gaps, 0.0100 + 1e-6);
  // The CLI: --between-steps only with --engine-run (exit 2), and the section records it.
  auto r = test_util::run_sim("calibrate " + (dir / "p.csv").string() + " -o " +
                                  (dir / "c.yaml").string() + " --between-steps",
                              dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--between-steps goes with --engine-run"), std::string::npos) << r.err;
}

// The idle wake-up: the median, over the engine run's steps that started on an arrival at an idle
// engine, of their latency from the arrival (sim/latency_attribution.h idle_wake_ups), becomes
// the coefficients' wake_up_s. Request 0 arrives at 0 and its prefill starts at 0.2 ms; request 1
// arrives at 20 ms, after request 0 finished (step 1 ends at 10.5 ms), and its prefill starts at
// 20.1 ms: wake-ups of 0.2 and 0.1 ms, median 0.15 ms.
TEST(HostOverhead, WakeUpIsTheMedianOfTheRunsIdleWakeUps) {
  const path dir = temp_dir("validate_wake_up");
  write_runs(dir);
  const path e = dir / "engine";
  write_file(e / "requests.csv",
             std::string(kRequestsHeader) +
                 "0,0,0.0002,0.0102,0.0105,4,2,0,0,0,0,10.2,0.3,10.5,finished,length\n"
                 "1,0.02,0.0201,0.0301,0.0304,4,2,0,0,0,0,10.1,0.3,10.4,finished,length\n");
  write_file(e / "schedule.csv",
             "step,request,first_token,num_tokens,kind\n0,0,0,4,prefill\n1,0,4,1,decode\n"
             "2,1,0,4,prefill\n3,1,4,1,decode\n");
  const std::string tail = ",1,1,0,0.1,0,1,0,0,0\n";
  write_file(e / "steps.csv", std::string(kStepsHeader) + "0,0.0002,10,1,4,0" + tail +
                                  "1,0.0102,0.3,1,0,1" + tail + "2,0.0201,10,1,4,0" + tail +
                                  "3,0.0301,0.3,1,0,1" + tail);
  CalibratedProfile p = one_ms_steps();
  const HostOverhead h = fit_host_overhead(e.string(), p, false);
  EXPECT_EQ(h.wake_ups, 2);
  EXPECT_NEAR(h.wake_up_s, 0.00015, 1e-12);
  EXPECT_EQ(p.coefficients.wake_up_s, h.wake_up_s);
}

}  // namespace
}  // namespace servelab
