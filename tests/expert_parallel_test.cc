// Tests of expert routing and expert parallelism: the experts' selection probabilities under a
// router skew, their placement over GPUs, the expected imbalance, the roofline's price of the
// busiest GPU, and the experiment keys (parallel.expert, parallel.expert_placement,
// model.router_skew) with their errors. Expected values are worked by hand in the comments
// (docs/cost-model.md, "Expert parallelism and router skew").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "serving/config_node.h"
#include "serving/expert_routing.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/kv_capacity.h"
#include "serving/model_config.h"
#include "serving/parallel_config.h"
#include "sim/roofline_cost_model.h"
#include "tests/cost_fixtures.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

std::string catalog() { return servelab_home().string() + "/experiments/catalog"; }

// test_util::easy_model() with 4 experts of width 500, 2 per token (as tests/moe_test.cc).
ModelConfig easy_moe(double skew = 0) {
  ModelConfig m = easy_model();
  m.name = "easy-moe";
  m.intermediate_size = 500;
  m.num_experts = 4;
  m.experts_per_token = 2;
  m.router_skew = skew;
  return m;
}

// Two GPUs with free all-reduces, with or without expert parallelism.
ParallelConfig two_gpus(bool expert, ExpertPlacement placement = ExpertPlacement::kLinear) {
  ParallelConfig p;
  p.tensor = 2;
  p.expert = expert;
  p.expert_placement = placement;
  return p;
}

TEST(ExpertRouting, SkewMakesZipfProbabilitiesThatSumToTopK) {
  // Uniform: k / E each.
  EXPECT_EQ(expert_selection_probabilities(easy_moe()), std::vector<double>(4, 0.5));
  EXPECT_TRUE(expert_selection_probabilities(easy_model()).empty());
  // s = 1, k = 1 of 4: weights 1, 1/2, 1/3, 1/4 (sum 25/12) -> 12/25, 6/25, 4/25, 3/25 in some
  // order of the ids, the same every time.
  ModelConfig m = easy_moe(1.0);
  m.experts_per_token = 1;
  std::vector<double> q = expert_selection_probabilities(m);
  EXPECT_EQ(q, expert_selection_probabilities(m));
  std::vector<double> sorted = q;
  std::sort(sorted.rbegin(), sorted.rend());
  const double expected[] = {12.0 / 25, 6.0 / 25, 4.0 / 25, 3.0 / 25};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(sorted[static_cast<std::size_t>(i)], expected[i], 1e-15);
  // s = 4, k = 2: the most popular expert would get 2 / (1 + 1/16 + 1/81 + 1/256) = 1.85 > 1, so
  // it is chosen by every token (1), and the other token's expert splits 1 over weights 1/16,
  // 1/81, 1/256: 0.7943, 0.1569, 0.0488.
  m = easy_moe(4.0);
  sorted = expert_selection_probabilities(m);
  std::sort(sorted.rbegin(), sorted.rend());
  const double rest = 1.0 / 16 + 1.0 / 81 + 1.0 / 256;
  EXPECT_EQ(sorted[0], 1.0);
  EXPECT_NEAR(sorted[1], (1.0 / 16) / rest, 1e-12);
  EXPECT_NEAR(sorted[2], (1.0 / 81) / rest, 1e-12);
  EXPECT_NEAR(sorted[3], (1.0 / 256) / rest, 1e-12);
  EXPECT_NEAR(std::accumulate(sorted.begin(), sorted.end(), 0.0), 2.0, 1e-12);
  // Qwen3-30B-A3B at s = 1: 128 probabilities summing to 8, none above 1, the hottest 8/H(128)
  // = 8 / 5.4331 = 1.47 capped.
  ModelConfig q3 = load_model("Qwen3-30B-A3B", catalog());
  q3.router_skew = 1.0;
  q = expert_selection_probabilities(q3);
  ASSERT_EQ(q.size(), 128u);
  EXPECT_NEAR(std::accumulate(q.begin(), q.end(), 0.0), 8.0, 1e-9);
  EXPECT_EQ(*std::max_element(q.begin(), q.end()), 1.0);
  // The most popular experts are not the lowest ids (the permutation is not the identity).
  EXPECT_NE(std::max_element(q.begin(), q.end()) - q.begin(), 0);
}

TEST(ExpertRouting, PlacementsLinearRoundRobinAndBalanced) {
  const std::vector<double> q = {0.1, 0.5, 0.2, 0.4, 0.3, 0.5};  // k = 2 of 6
  using V = std::vector<std::vector<std::int32_t>>;
  EXPECT_EQ(place_experts(q, 3, ExpertPlacement::kLinear), (V{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(place_experts(q, 3, ExpertPlacement::kRoundRobin), (V{{0, 3}, {1, 4}, {2, 5}}));
  // Balanced, hottest first (ties by id): 1 (0.5) -> GPU 0, 5 (0.5) -> 1, 3 (0.4) -> 2, 4 (0.3)
  // -> 2 (0.4 is least), 2 (0.2) -> 0 (0.5 vs 0.5: the lower), 0 -> 1. Loads 0.7, 0.6, 0.7
  // against linear's 0.6, 0.6, 0.8.
  EXPECT_EQ(place_experts(q, 3, ExpertPlacement::kBalanced), (V{{1, 2}, {0, 5}, {3, 4}}));
  EXPECT_EQ(place_experts(q, 1, ExpertPlacement::kBalanced), (V{{0, 1, 2, 3, 4, 5}}));
  ExpertPlacement p = ExpertPlacement::kLinear;
  EXPECT_TRUE(parse_expert_placement("round_robin", p));
  EXPECT_EQ(p, ExpertPlacement::kRoundRobin);
  EXPECT_FALSE(parse_expert_placement("random", p));
}

TEST(ExpertRouting, ExpectedLargestOfNormals) {
  // Known values: 0, 1/sqrt(pi), 3/(2 sqrt(pi)), 1.0294, 1.4236, 1.7660 (order statistics).
  EXPECT_EQ(expected_max_standard_normal(1), 0.0);
  EXPECT_NEAR(expected_max_standard_normal(2), 1 / std::sqrt(M_PI), 1e-9);
  EXPECT_NEAR(expected_max_standard_normal(3), 1.5 / std::sqrt(M_PI), 1e-9);
  EXPECT_NEAR(expected_max_standard_normal(4), 1.02938, 1e-5);
  EXPECT_NEAR(expected_max_standard_normal(8), 1.42360, 1e-5);
  EXPECT_NEAR(expected_max_standard_normal(16), 1.76599, 1e-5);
}

TEST(ExpertRouting, SkewedRoutersTouchFewerExpertsOnOneGpu) {
  const RooflineCostModel uniform(easy_moe(), easy_hardware(), 10);
  const RooflineCostModel skewed(easy_moe(1.0), easy_hardware(), 10);
  // One token touches k experts whatever the skew (sum_e q_e = k).
  EXPECT_NEAR(skewed.experts_touched(1), 2.0, 1e-12);
  // Two tokens: 4 - sum_e (1 - q_e)^2 = 2 * 2 - sum q_e^2 = 4 - sum q_e^2; uniform 3, skewed
  // less (sum q^2 is smallest when all are equal).
  std::vector<double> q = expert_selection_probabilities(easy_moe(1.0));
  double sum_sq = 0;
  for (double x : q) sum_sq += x * x;
  EXPECT_NEAR(skewed.experts_touched(2), 4 - sum_sq, 1e-12);
  EXPECT_LT(skewed.experts_touched(2), uniform.experts_touched(2));
  // So a decode step of a few tokens reads fewer weights.
  EXPECT_LT(skewed.breakdown(decode_plan(3, 100)).gemm,
            uniform.breakdown(decode_plan(3, 100)).gemm);
  EXPECT_EQ(skewed.breakdown(decode_plan(1, 100)).gemm,
            uniform.breakdown(decode_plan(1, 100)).gemm);
}

TEST(ExpertParallel, TheBusiestGpuSetsTheRoutedExpertsTime) {
  const RooflineCostModel tp(easy_moe(), easy_hardware(), 10, two_gpus(false));
  const RooflineCostModel ep(easy_moe(), easy_hardware(), 10, two_gpus(true));
  // Uniform q = 0.5; GPU 0 holds experts 0 and 1, GPU 1 experts 2 and 3: each expects half the
  // rows and experts, sum q = 1, sum q (1 - q) = 0.5; z_2 = 1/sqrt(pi).
  const double z = 1 / std::sqrt(M_PI);
  // One token: rows 1 + z sqrt(0.5) = 1.3989; experts u = q = 0.5 each: the same.
  auto one = ep.busiest_expert_load(1);
  EXPECT_NEAR(one.rows, 1 + z * std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(one.experts, 1 + z * std::sqrt(0.5), 1e-12);
  // Two tokens: rows 2 + z = 2.5642; u = 0.75 each: 1.5 + z sqrt(2 * 0.1875) = 1.8455.
  auto two = ep.busiest_expert_load(2);
  EXPECT_NEAR(two.rows, 2 + z, 1e-12);
  EXPECT_NEAR(two.experts, 1.5 + z * std::sqrt(0.375), 1e-12);
  // Capped at the GPU's 2 experts.
  EXPECT_EQ(ep.busiest_expert_load(1000).experts, 2.0);
  // Tensor parallelism: every GPU has all 2 rows per token and every touched expert.
  EXPECT_EQ(tp.busiest_expert_load(1).rows, 2.0);
  EXPECT_EQ(tp.busiest_expert_load(1).experts, 2.0);
  // A decode step of one token on the classic roofline (memory-bound), per layer of a GPU:
  //   QKV 3 * (1000 x 500 x 2 B) + (1500 + 1000) * 2 = 3,005,000; O 1e6 + 1,500 * 2 =
  //   1,003,000; router 8,000 + 1,004 * 2 = 10,008;
  //   tensor-parallel experts (width 250): 2 x 2 * 500,000 + 2 * 1,500 * 2 = 2,006,000 and
  //   2 x 500,000 + 2 * 1,250 * 2 = 1,005,000;
  //   expert-parallel (width 500, x = 1.3989 rows and experts): x (2e6 + 2,000 * 2) and
  //   x (1e6 + 1,500 * 2).
  const double common = 3'005'000 + 1'003'000 + 10'008;
  const double x = 1 + z * std::sqrt(0.5);
  EXPECT_NEAR(tp.breakdown(decode_plan(1, 100)).gemm, 10 * (common + 2'006'000 + 1'005'000) / 1e11,
              1e-12);
  EXPECT_NEAR(ep.breakdown(decode_plan(1, 100)).gemm,
              10 * (common + x * 2'004'000 + x * 1'003'000) / 1e11, 1e-12);
  // A long prefill is compute-bound and its rows spread evenly: within 1 % of tensor
  // parallelism (16,384 rows per GPU plus z sqrt(8,192) = 51).
  const StepPlan pre = prefill_plan(0, 16384, true);
  EXPECT_GT(ep.breakdown(pre).gemm, tp.breakdown(pre).gemm);
  EXPECT_LT(ep.breakdown(pre).gemm, 1.01 * tp.breakdown(pre).gemm);
  // Bytes reported are the average GPU's: the same as tensor parallelism's.
  EXPECT_EQ(ep.breakdown(decode_plan(4, 100)).bytes, tp.breakdown(decode_plan(4, 100)).bytes);
}

TEST(ExpertParallel, PlacementMattersUnderASkewedRouter) {
  // Qwen3-30B-A3B over 8 H100s, router skew 1: linear placement leaves one GPU about 1.53x the
  // mean load, balanced about 1.20x.
  ModelConfig q3 = load_model("Qwen3-30B-A3B", catalog());
  q3.router_skew = 1.0;
  const HardwareConfig h100 = load_hardware("H100-SXM", catalog());
  ParallelConfig p;
  p.tensor = 8;
  const RooflineCostModel tp(q3, h100, 16, p);
  p.expert = true;
  const RooflineCostModel linear(q3, h100, 16, p);
  p.expert_placement = ExpertPlacement::kBalanced;
  const RooflineCostModel balanced(q3, h100, 16, p);
  // A 4,096-token prefill: under tensor parallelism every GPU reads and writes the hidden
  // states of all 4,096 x 8 (token, expert) rows for experts 96 wide; under expert parallelism
  // a GPU has only its experts' rows, 768 wide. The busiest GPU sets the time, so the placement
  // that evens the load wins.
  const StepPlan pre = prefill_plan(0, 4096, true);
  const double t_tp = tp.breakdown(pre).gemm, t_lin = linear.breakdown(pre).gemm,
               t_bal = balanced.breakdown(pre).gemm;
  EXPECT_GT(t_tp, t_lin);
  EXPECT_GT(t_lin, 1.05 * t_bal);
  // The busiest GPU's rows: 4,096 x its sum of q (1.53 and 1.20) plus z_8 sigma; under tensor
  // parallelism all 8 x 4,096.
  EXPECT_GT(linear.busiest_expert_load(4096).rows, 1.45 * 4096);
  EXPECT_LT(balanced.busiest_expert_load(4096).rows, 1.30 * 4096);
  EXPECT_EQ(tp.busiest_expert_load(4096).rows, 8.0 * 4096);
  // One decode token is memory-bound: the busiest GPU reads more whole experts than a tensor-
  // parallel GPU reads slices of 8 experts (one expert's worth), so expert parallelism loses.
  const StepPlan one = decode_plan(1, 1000);
  EXPECT_GT(balanced.breakdown(one).gemm, tp.breakdown(one).gemm);
  EXPECT_GT(linear.breakdown(one).gemm, balanced.breakdown(one).gemm);
}

// Runs `sim run` on burst.yaml with `sets`, in a fresh folder; returns the result.
Cli run_burst(const std::string& sets, const fs::path& dir, const std::string& out) {
  return run_sim("run " + servelab_home().string() +
                     "/experiments/burst.yaml --set workload.num_requests=40 "
                     "--set serving.gpu_memory_utilization=0.9 " +
                     sets + " --out " + (dir / out).string(),
                 dir);
}

TEST(ExpertParallel, ExperimentKeysRunEchoAndRefuseWithTheirLines) {
  const fs::path dir = temp_dir("expert_parallel");
  const std::string q3 = "--set model.name=Qwen3-30B-A3B --set hardware=H100-SXM ";
  const Cli ok =
      run_burst(q3 + "--set parallel.tensor=2 --set parallel.expert=true "
                     "--set parallel.expert_placement=balanced --set model.router_skew=0.8",
                dir, "ok");
  ASSERT_EQ(ok.code, 0) << ok.err;
  const std::string config = read_file(dir / "ok" / "config.yaml");
  EXPECT_NE(config.find("expert: true"), std::string::npos) << config;
  EXPECT_NE(config.find("expert_placement: balanced"), std::string::npos) << config;
  EXPECT_NE(config.find("router_skew: 0.8"), std::string::npos) << config;
  // Expert parallelism on a dense model.
  const Cli dense = run_burst("--set parallel.tensor=2 --set parallel.expert=true", dir, "dense");
  EXPECT_EQ(dense.code, 2);
  EXPECT_NE(dense.err.find("key 'parallel.expert'"), std::string::npos) << dense.err;
  EXPECT_NE(dense.err.find("is dense"), std::string::npos) << dense.err;
  // A placement without expert parallelism, and one that does not exist.
  const Cli lone =
      run_burst(q3 + "--set parallel.tensor=2 --set parallel.expert_placement=linear", dir, "lone");
  EXPECT_EQ(lone.code, 2);
  EXPECT_NE(lone.err.find("expert: true"), std::string::npos) << lone.err;
  const Cli bad = run_burst(
      q3 + "--set parallel.tensor=2 --set parallel.expert=true --set parallel.expert_placement=x",
      dir, "bad");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("round_robin"), std::string::npos) << bad.err;
  // A router skew on a dense model, and one out of range.
  const Cli skew = run_burst("--set model.name=Llama-3-8B --set model.router_skew=1", dir, "skew");
  EXPECT_EQ(skew.code, 2);
  EXPECT_NE(skew.err.find("key 'model.router_skew'"), std::string::npos) << skew.err;
  EXPECT_NE(skew.err.find("Llama-3-8B is dense"), std::string::npos) << skew.err;
  const Cli far = run_burst(q3 + "--set model.router_skew=5", dir, "far");
  EXPECT_EQ(far.code, 2);
  EXPECT_NE(far.err.find("router_skew"), std::string::npos) << far.err;
  for (const char* out : {"dense", "lone", "bad", "skew", "far"}) {
    EXPECT_FALSE(fs::exists(dir / out)) << out;
  }
  // Experts that do not split over the GPUs: easy-moe's 4 over 5.
  ParallelChoice five;
  five.set = true;
  five.tensor = 5;
  five.expert = true;
  five.expert_where = "x.yaml:3:12: key 'parallel.expert'";
  ParallelConfig p;
  expect_config_error([&] { apply_expert_parallel(five, easy_moe(), p); },
                      {"x.yaml:3:12: key 'parallel.expert'", "4 experts", "over 5 GPUs"});
  EXPECT_FALSE(p.expert);
  // The cost model checks a ParallelConfig built in code the same way.
  ParallelConfig five_gpus = two_gpus(true);
  five_gpus.tensor = 5;
  expect_config_error([&] { RooflineCostModel cm(easy_moe(), easy_hardware(), 10, five_gpus); },
                      {"parallel.expert", "4 experts", "over 5 GPUs"});
  ParallelConfig copies = two_gpus(true, ExpertPlacement::kBalanced);
  copies.redundant_experts = 6;
  expect_config_error([&] { RooflineCostModel cm(easy_moe(), easy_hardware(), 10, copies); },
                      {"parallel.redundant_experts", "at most one copy of an expert per GPU"});
  copies.redundant_experts = 2;
  copies.expert_placement = ExpertPlacement::kLinear;
  expect_config_error([&] { RooflineCostModel cm(easy_moe(), easy_hardware(), 10, copies); },
                      {"parallel.redundant_experts", "expert_placement: balanced"});
}

TEST(ExpertParallel, ClusterPoolsTakeExpertParallelism) {
  const fs::path dir = temp_dir("expert_parallel_pool");
  const fs::path exp = dir / "pools.yaml";
  write_file(exp, R"(name: pools
model: Qwen3-30B-A3B
hardware: H100-SXM
workload:
  type: synthetic
  num_requests: 30
  arrival: {process: poisson, rate: 5}
  prompt_len: {dist: fixed, value: 512}
  output_len: {dist: fixed, value: 32}
cluster:
  pools:
    - {name: ep, count: 1, parallel: {tensor: 2, expert: true}}
    - {name: tp, count: 1, parallel: {tensor: 2}}
)");
  const Cli r = run_sim("run " + exp.string() + " --out " + (dir / "run").string(), dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string config = read_file(dir / "run" / "config.yaml");
  EXPECT_NE(config.find("expert: true"), std::string::npos) << config;
  // On a dense pool: the pool's key and line.
  write_file(exp, R"(name: pools
model: Llama-3-8B
hardware: H100-SXM
workload: {type: synthetic, num_requests: 5, arrival: {process: poisson, rate: 5},
           prompt_len: {dist: fixed, value: 64}, output_len: {dist: fixed, value: 8}}
cluster:
  pools:
    - {name: ep, count: 1, parallel: {tensor: 2, expert: true}}
)");
  const Cli dense = run_sim("run " + exp.string() + " --out " + (dir / "dense").string(), dir);
  EXPECT_EQ(dense.code, 2);
  EXPECT_NE(dense.err.find("pools.yaml:8:"), std::string::npos) << dense.err;
  EXPECT_NE(dense.err.find("cluster.pools[0].parallel.expert"), std::string::npos) << dense.err;
}

// A dense draft model beside an expert-parallel mixture runs under the same tensor parallelism
// (it was refused: "expert parallelism needs a mixture of experts; model Llama-3.2-1B is dense").
TEST(ExpertParallel, ADenseDraftModelRunsBesideExpertParallelism) {
  const fs::path dir = temp_dir("expert_parallel_draft");
  const fs::path exp = dir / "draft.yaml";
  write_file(exp, R"(name: ep-draft
model: Qwen3-30B-A3B
hardware: H100-SXM
parallel: {tensor: 4, expert: true}
serving:
  speculative_config: {method: draft_model, model: Llama-3.2-1B, num_speculative_tokens: 2,
                       acceptance_rate: 0.6}
workload: {type: synthetic, num_requests: 4, arrival: {process: fixed, rate: 10},
           prompt_len: {dist: fixed, value: 256}, output_len: {dist: fixed, value: 8}}
)");
  const Cli r = run_sim("run " + exp.string() + " -q --out " + (dir / "run").string(), dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json s = nlohmann::json::parse(read_file(dir / "run" / "summary.json"));
  EXPECT_EQ(s["requests"]["completed"], 4);
  EXPECT_GT(s["spec_decode"]["num_drafts"].get<std::int64_t>(), 0);
}

TEST(ExpertParallel, RedundantCopiesSplitTheHotExpertsAndTakeMemory) {
  // q = 1.0, 0.4, 0.3, 0.3 (k = 2 of 4) over 2 GPUs with 2 redundant copies: expert 0 gets a
  // second copy (1.0 -> 0.5 + 0.5), then it is at one copy per GPU, so expert 1 gets the other
  // (0.4 -> 0.2 + 0.2). Heaviest first: 0 (0.5) -> GPU 0, 0 -> 1 (GPU 0 holds it), 2 (0.3) -> 0
  // (0.5 each: the lower), 3 (0.3) -> 1 (0.5 < 0.8), 1 (0.2) -> 0 (a tie), 1 -> 1 (GPU 0 holds
  // it). Loads 1.0 and 1.0, where without copies the best split is 1.3 and 0.7.
  const std::vector<double> q = {1.0, 0.4, 0.3, 0.3};
  const auto gpus = place_expert_copies(q, 2, ExpertPlacement::kBalanced, 2);
  ASSERT_EQ(gpus.size(), 2u);
  auto ids = [](const std::vector<ExpertCopy>& g) {
    std::vector<std::int32_t> out;
    for (const ExpertCopy& c : g) out.push_back(c.expert);
    return out;
  };
  EXPECT_EQ(ids(gpus[0]), (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(ids(gpus[1]), (std::vector<std::int32_t>{0, 1, 3}));
  for (const auto& g : gpus) {
    EXPECT_DOUBLE_EQ(g[0].q, 0.5);
    EXPECT_DOUBLE_EQ(g[1].q, 0.2);
    EXPECT_DOUBLE_EQ(g[2].q, 0.3);
  }
  // Without copies: the experts with their q, as place_experts puts them.
  const auto plain = place_expert_copies(q, 2, ExpertPlacement::kLinear, 0);
  EXPECT_EQ(ids(plain[0]), (std::vector<std::int32_t>{0, 1}));
  EXPECT_DOUBLE_EQ(plain[1][0].q, 0.3);

  // Qwen3-30B-A3B over 8 H100s, skew 1, balanced: its most popular expert alone is a whole GPU's
  // mean load (q = 1 of 8 x 16 / 128), so balancing cannot even the GPUs out; 8 copies lower
  // the busiest GPU's rows of a 4,096-token prefill from about 4,944 to 4,181 and the step's
  // GEMMs with them (each GPU reads 17 experts instead of 16, which costs more than it saves in
  // steps of a few hundred tokens).
  ModelConfig q3 = load_model("Qwen3-30B-A3B", catalog());
  q3.router_skew = 1.0;
  const HardwareConfig h100 = load_hardware("H100-SXM", catalog());
  ParallelConfig p;
  p.tensor = 8;
  p.expert = true;
  p.expert_placement = ExpertPlacement::kBalanced;
  const RooflineCostModel balanced(q3, h100, 16, p);
  p.redundant_experts = 8;
  const RooflineCostModel copies(q3, h100, 16, p);
  EXPECT_LT(copies.busiest_expert_load(4096).rows, 0.9 * balanced.busiest_expert_load(4096).rows);
  EXPECT_EQ(copies.busiest_expert_load(4096).experts, 17.0);
  EXPECT_LT(copies.breakdown(prefill_plan(0, 4096, true)).gemm,
            balanced.breakdown(prefill_plan(0, 4096, true)).gemm);
  // Memory, on 4 GPUs with 16 copies: 16 / 4 = 4 more experts per GPU, 4 x 48 layers x 3 x
  // 2,048 x 768 x 2 B = 1,811,939,328 B: 4,608 fewer blocks of 393,216 B (2 x 48 layers x 128
  // KV columns per GPU x 2 B x 16 tokens).
  KvCapacityOptions kv;
  kv.tensor_parallel = 4;
  const KvCapacity without = compute_kv_capacity(q3, h100, kv);
  kv.redundant_experts = 16;
  const KvCapacity with = compute_kv_capacity(q3, h100, kv);
  EXPECT_EQ(with.weight_bytes - without.weight_bytes, 1'811'939'328);
  EXPECT_EQ(without.gpu_block_bytes, 393'216);
  EXPECT_EQ(without.num_gpu_blocks - with.num_gpu_blocks, 4'608);
}

TEST(ExpertParallel, RedundantExpertsAreCheckedWithTheirLines) {
  const fs::path dir = temp_dir("expert_parallel_redundant");
  const std::string q3 = "--set model.name=Qwen3-30B-A3B --set hardware=H100-SXM ";
  const std::string ep = "--set parallel.tensor=4 --set parallel.expert=true ";
  const Cli ok = run_burst(q3 + ep +
                               "--set parallel.expert_placement=balanced "
                               "--set parallel.redundant_experts=16",
                           dir, "ok");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(read_file(dir / "ok" / "config.yaml").find("redundant_experts: 16"), std::string::npos);
  struct Case {
    std::string sets, expect;
  };
  const Case cases[] = {
      {"--set parallel.tensor=4 --set parallel.redundant_experts=4", "expert: true"},
      {ep + "--set parallel.redundant_experts=4", "expert_placement: balanced"},
      {ep + "--set parallel.expert_placement=balanced --set parallel.redundant_experts=6",
       "choose a multiple of 4"},
      {ep + "--set parallel.expert_placement=balanced --set parallel.redundant_experts=388",
       "at most 384"},
      {"--set parallel.tensor=1 --set parallel.expert=true --set "
       "parallel.expert_placement=balanced --set parallel.redundant_experts=4",
       "parallel.tensor > 1"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const std::string out = "bad" + std::to_string(i++);
    const Cli r = run_burst(q3 + c.sets, dir, out);
    EXPECT_EQ(r.code, 2) << c.sets;
    EXPECT_NE(r.err.find("parallel.redundant_experts"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir / out));
  }
}

// The busiest GPU's expected rows and experts against a Monte Carlo of real top-k routing (each
// token draws k distinct experts uniformly; splitmix64, fixed seed): the normal approximation
// with z_N is within 8 % at one token (where counts are small integers; it leans low) and
// within 2 % from 64 tokens on.
TEST(ExpertParallel, TheImbalanceApproximationAgreesWithSampledRouting) {
  struct Case {
    std::int32_t experts, k, gpus;
  };
  for (const Case c : {Case{128, 8, 4}, Case{128, 8, 8}, Case{8, 2, 4}}) {
    ModelConfig m = easy_model();
    m.hidden_size = 1024;
    m.num_heads = m.num_kv_heads = 16;
    m.head_dim = 64;
    m.vocab_size = 1024;
    m.intermediate_size = 512;
    m.num_experts = c.experts;
    m.experts_per_token = c.k;
    ParallelConfig p;
    p.tensor = c.gpus;
    p.expert = true;
    const RooflineCostModel cm(m, easy_hardware(), 16, p);
    std::uint64_t state = 12345;
    auto next = [&state] {
      std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      return z ^ (z >> 31);
    };
    const std::int32_t per_gpu = c.experts / c.gpus;
    for (const std::int64_t tokens : {1, 8, 64, 512}) {
      const int trials = tokens <= 64 ? 2000 : 300;
      double rows_sum = 0, experts_sum = 0;
      std::vector<std::int32_t> ids(static_cast<std::size_t>(c.experts));
      for (int trial = 0; trial < trials; ++trial) {
        std::vector<std::int64_t> rows(static_cast<std::size_t>(c.gpus), 0);
        std::vector<bool> seen(ids.size(), false);
        for (std::int64_t t = 0; t < tokens; ++t) {
          std::iota(ids.begin(), ids.end(), 0);
          for (std::int32_t i = 0; i < c.k; ++i) {  // a partial Fisher-Yates: k distinct experts
            const auto j =
                i + static_cast<std::int32_t>(next() % static_cast<std::uint64_t>(c.experts - i));
            std::swap(ids[static_cast<std::size_t>(i)], ids[static_cast<std::size_t>(j)]);
            const std::int32_t e = ids[static_cast<std::size_t>(i)];
            ++rows[static_cast<std::size_t>(e / per_gpu)];
            seen[static_cast<std::size_t>(e)] = true;
          }
        }
        std::vector<std::int64_t> touched(rows.size(), 0);
        for (std::size_t e = 0; e < seen.size(); ++e) {
          if (seen[e]) ++touched[e / static_cast<std::size_t>(per_gpu)];
        }
        rows_sum += static_cast<double>(*std::max_element(rows.begin(), rows.end()));
        experts_sum += static_cast<double>(*std::max_element(touched.begin(), touched.end()));
      }
      const auto load = cm.busiest_expert_load(tokens);
      const double tolerance = tokens == 1 ? 0.08 : tokens < 64 ? 0.04 : 0.02;
      const std::string what = std::to_string(c.experts) + "/" + std::to_string(c.k) + " on " +
                               std::to_string(c.gpus) + ", " + std::to_string(tokens) + " tokens";
      EXPECT_NEAR(load.rows / (rows_sum / trials), 1.0, tolerance) << what;
      EXPECT_NEAR(load.experts / (experts_sum / trials), 1.0, tolerance) << what;
    }
  }
}

}  // namespace
}  // namespace servelab
