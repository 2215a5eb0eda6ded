// Every number quoted in docs/lessons/ comes out of this file: each test runs a lesson's
// experiment (experiments/lessons/) with the real `sim` command, or does the project's own
// KV-capacity arithmetic, and checks the numbers the lesson states (to the digits it prints).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "serving/home.h"
#include "serving/kv_capacity.h"
#include "serving/model_config.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;
using nlohmann::json;

const std::string kLessons = servelab_home().string() + "/experiments/lessons/";

json summary(const fs::path& run) { return json::parse(read_file(run / "summary.json")); }

fs::path compare(const std::string& experiment, const fs::path& dir,
                 const std::string& extra = "") {
  const fs::path out = dir / "cmp";
  const Cli r = run_sim(
      "compare " + kLessons + experiment + " --quiet " + extra + " --out " + out.string(), dir);
  EXPECT_EQ(r.code, 0) << r.err;
  return out;
}

// docs/lessons/static-vs-continuous.md
TEST(Lessons, StaticVsContinuousBatching) {
  const fs::path dir = temp_dir("lesson_static");
  // One static batch of the four requests: 32+128+64+256 = 480 tokens in 4 slots x 256 steps.
  const fs::path four = compare("static-vs-continuous.yaml", dir, "--set workload.max_requests=4");
  const json s4 = summary(four / "static");
  EXPECT_EQ(s4["num_steps"], 256);
  EXPECT_DOUBLE_EQ(s4["batch"]["slot_efficiency"].get<double>(), 480.0 / 1024.0);  // 46.9 %
  // With nothing waiting, continuous batching cannot do better.
  EXPECT_DOUBLE_EQ(summary(four / "continuous")["batch"]["slot_efficiency"].get<double>(), 0.46875);

  fs::remove_all(dir / "cmp");
  const fs::path all = compare("static-vs-continuous.yaml", dir);
  const json st = summary(all / "static"), co = summary(all / "continuous");
  EXPECT_EQ(st["num_steps"], 1024);
  EXPECT_DOUBLE_EQ(st["batch"]["slot_efficiency"].get<double>(), 0.46875);
  EXPECT_EQ(co["num_steps"], 608);
  EXPECT_NEAR(co["batch"]["slot_efficiency"].get<double>(), 0.789, 0.0005);  // 78.9 %
  EXPECT_NEAR(st["duration_s"].get<double>(), 7.09, 0.005);
  EXPECT_NEAR(co["duration_s"].get<double>(), 4.22, 0.005);
  EXPECT_NEAR(st["e2e_ms"]["mean"].get<double>(), 3490, 0.5);
  EXPECT_NEAR(co["e2e_ms"]["mean"].get<double>(), 1792, 0.5);
}

// docs/lessons/block-arithmetic.md
TEST(Lessons, BlockArithmetic) {
  const ModelConfig m = load_model("Llama-3-8B", default_catalog_dir());
  EXPECT_EQ(m.num_layers, 32);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 128);
  const std::int64_t block = kv_block_bytes(m, 16);
  EXPECT_EQ(block, 2 * 1024 * 1024);            // 2 MiB
  EXPECT_EQ(60'000'000'000LL / block, 28'610);  // 60 GB
  EXPECT_EQ((60LL << 30) / block, 30'720);      // 60 GiB
  EXPECT_EQ(kv_block_bytes(m, 1), 128 * 1024);  // 128 KiB per token

  const fs::path dir = temp_dir("lesson_blocks");
  const Cli r = run_sim(
      "run " + kLessons + "block-arithmetic.yaml --quiet --out " + (dir / "run").string(), dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const json s = summary(dir / "run");
  EXPECT_EQ(s["run"]["num_gpu_blocks"], "28183");
  EXPECT_NEAR(s["kv_cache"]["usage_mean"].get<double>(), 0.046, 0.0005);
  EXPECT_NEAR(s["kv_cache"]["usage_max"].get<double>(), 0.094, 0.0005);
  EXPECT_NEAR(28183.0 * static_cast<double>(block) / (1 << 30), 55.04, 0.005);  // GiB of KV
}

// docs/lessons/paged-vs-contiguous.md
TEST(Lessons, PagedVsContiguous) {
  const fs::path dir = temp_dir("lesson_paged");
  const fs::path out = compare("paged-vs-contiguous.yaml", dir);
  const json p = summary(out / "paged"), c = summary(out / "contiguous-max-len"),
             e = summary(out / "contiguous-exact");
  EXPECT_EQ(p["run"]["num_gpu_blocks"], "3607");  // 30 % of memory
  // Reserving max_model_len (4,096 tokens = 256 blocks) per request, at most 3607 / 256 = 14
  // requests run at once, and the workload keeps that many running.
  std::int64_t max_running = 0;
  for (const auto& row : read_csv(out / "contiguous-max-len" / "steps.csv")) {
    max_running = std::max<std::int64_t>(max_running, std::stoll(row.at("running")));
  }
  EXPECT_EQ(max_running, 14);
  EXPECT_NEAR(p["ttft_ms"]["p50"].get<double>(), 19.3, 0.05);
  EXPECT_NEAR(c["ttft_ms"]["p50"].get<double>(), 3069.6, 0.05);
  EXPECT_NEAR(p["kv_cache"]["usage_mean"].get<double>(), 0.199, 0.0005);
  EXPECT_NEAR(c["kv_cache"]["usage_mean"].get<double>(), 0.947, 0.0005);
  EXPECT_NEAR(e["kv_cache"]["usage_mean"].get<double>(), 0.248, 0.0005);
  EXPECT_NEAR(c["kv_cache"]["reserved_unused_blocks_mean"].get<double>(), 2765, 0.5);
  EXPECT_NEAR(c["kv_cache"]["reserved_unused_blocks_mean"].get<double>() * 2 / 1024, 5.4, 0.05);
  EXPECT_NEAR(e["kv_cache"]["reserved_unused_blocks_mean"].get<double>(), 175, 0.5);
  EXPECT_NEAR(p["kv_cache"]["internal_fragmentation_mean"].get<double>(), 0.010, 0.0005);
  EXPECT_NEAR(c["kv_cache"]["internal_fragmentation_mean"].get<double>(), 0.809, 0.0005);
  EXPECT_NEAR(p["goodput"]["requests_per_s"].get<double>(), 7.21, 0.005);
  EXPECT_NEAR(c["goodput"]["requests_per_s"].get<double>(), 1.75, 0.005);
}

// docs/lessons/shared-prefix.md: blocks holding the system prompt (positions 0-12), from
// blocks.csv.
TEST(Lessons, SharedSystemPrompt) {
  const fs::path dir = temp_dir("lesson_prefix");
  const fs::path out = compare("shared-prefix.yaml", dir);
  auto count = [](const fs::path& run, std::size_t& system_blocks, std::size_t& shared, int& peak) {
    std::set<std::string> sys;
    std::map<std::string, std::set<std::string>> holders;
    for (const auto& r : read_csv(run / "blocks.csv")) {
      const int pos = std::stoi(r.at("position"));
      if (pos < 13) sys.insert(r.at("block"));
      if (pos < 13) holders[r.at("block")].insert(r.at("request"));
    }
    system_blocks = sys.size();
    shared = 0;
    for (const auto& [b, h] : holders) shared += h.size() > 1 ? 1 : 0;
    peak = 0;
    for (const auto& r : read_csv(run / "steps.csv")) {
      peak = std::max(peak, std::stoi(r.at("kv_blocks_used")));
    }
  };
  std::size_t sys = 0, shared = 0;
  int peak = 0;
  count(out / "no-sharing", sys, shared, peak);
  EXPECT_EQ(sys, 208u);  // 16 x ceil(200 / 16) = 16 x 13
  EXPECT_EQ(shared, 0u);
  EXPECT_EQ(peak, 304);
  count(out / "prefix-cache", sys, shared, peak);
  EXPECT_EQ(sys, 28u);     // 12 shared full blocks + 16 private 13th blocks
  EXPECT_EQ(shared, 12u);  // 200 / 16 = 12 full blocks
  EXPECT_EQ(peak, 124);
  const json s = summary(out / "prefix-cache");
  EXPECT_EQ(s["prefix_cache"]["hit_tokens"], 2880);  // 15 requests x 12 blocks x 16 tokens
  EXPECT_EQ(s["prefix_cache"]["queried_tokens"], 4224);
}

// docs/lessons/prefix-caching-mooncake.md
TEST(Lessons, PrefixCachingOnMooncake) {
  const fs::path dir = temp_dir("lesson_mooncake");
  const fs::path out = compare("prefix-caching-mooncake.yaml", dir);
  const json h = summary(out / "prefix-cache"), n = summary(out / "no-prefix-cache");
  EXPECT_EQ(h["requests"]["completed"], 1998);
  EXPECT_NEAR(h["prefix_cache"]["hit_rate"].get<double>(), 0.068, 0.0005);
  EXPECT_NEAR(h["ttft_ms"]["p50"].get<double>(), 1875.6, 0.05);
  EXPECT_NEAR(n["ttft_ms"]["p50"].get<double>(), 1999.8, 0.05);
  EXPECT_NEAR(h["ttft_ms"]["p99"].get<double>(), 6992.1, 0.05);
  EXPECT_NEAR(n["ttft_ms"]["p99"].get<double>(), 7390.0, 0.05);
  EXPECT_NEAR(h["goodput"]["requests_per_s"].get<double>(), 1.45, 0.005);
  EXPECT_NEAR(n["goodput"]["requests_per_s"].get<double>(), 1.41, 0.005);
  EXPECT_NEAR(h["kv_cache"]["usage_mean"].get<double>(), 0.225, 0.0005);
  EXPECT_NEAR(n["kv_cache"]["usage_mean"].get<double>(), 0.272, 0.0005);
}

// docs/lessons/prefix-routing.md
TEST(Lessons, PrefixAffinityRouting) {
  const fs::path dir = temp_dir("lesson_routing");
  const fs::path out = compare("prefix-routing.yaml", dir);
  const json rr = summary(out / "round-robin"), lo = summary(out / "least-outstanding"),
             pa = summary(out / "prefix-affinity");
  for (const json* s : {&rr, &lo, &pa}) {
    EXPECT_EQ((*s)["requests"]["completed"], 3000);
    EXPECT_EQ((*s)["throughput"]["input_tokens"], 10802094);
  }
  EXPECT_EQ(rr["cluster"]["pools"][0]["prefill_tokens"], 7477777);
  EXPECT_EQ(lo["cluster"]["pools"][0]["prefill_tokens"], 7525399);
  EXPECT_EQ(pa["cluster"]["pools"][0]["prefill_tokens"], 3081198);
  EXPECT_NEAR(rr["ttft_ms"]["p50"].get<double>(), 4018.9, 0.05);
  EXPECT_NEAR(lo["ttft_ms"]["p50"].get<double>(), 4696.0, 0.05);
  EXPECT_NEAR(pa["ttft_ms"]["p50"].get<double>(), 34.3, 0.05);
  EXPECT_NEAR(rr["ttft_ms"]["p99"].get<double>(), 9246.6, 0.05);
  EXPECT_NEAR(lo["ttft_ms"]["p99"].get<double>(), 8309.5, 0.05);
  EXPECT_NEAR(pa["ttft_ms"]["p99"].get<double>(), 250.1, 0.05);
  EXPECT_NEAR(rr["tpot_ms"]["p50"].get<double>(), 30.90, 0.005);
  EXPECT_NEAR(lo["tpot_ms"]["p50"].get<double>(), 30.91, 0.005);
  EXPECT_NEAR(pa["tpot_ms"]["p50"].get<double>(), 13.37, 0.005);
  EXPECT_NEAR(rr["goodput"]["requests_per_s"].get<double>(), 1.74, 0.005);
  EXPECT_NEAR(lo["goodput"]["requests_per_s"].get<double>(), 1.92, 0.005);
  EXPECT_NEAR(pa["goodput"]["requests_per_s"].get<double>(), 35.68, 0.005);
  EXPECT_EQ(rr["preemption"]["preemptions"], 173);
  EXPECT_EQ(lo["preemption"]["preemptions"], 172);
  EXPECT_EQ(pa["preemption"]["preemptions"], 0);
  EXPECT_NEAR(rr["kv_cache"]["usage_mean"].get<double>(), 0.956, 0.0005);
  EXPECT_NEAR(lo["kv_cache"]["usage_mean"].get<double>(), 0.957, 0.0005);
  EXPECT_NEAR(pa["kv_cache"]["usage_mean"].get<double>(), 0.404, 0.0005);
}

// docs/lessons/preemption.md
TEST(Lessons, RecomputeVsSwap) {
  const fs::path dir = temp_dir("lesson_preempt");
  const fs::path out = compare("preemption.yaml", dir);
  const json r = summary(out / "recompute"), s = summary(out / "swap");
  EXPECT_EQ(r["preemption"]["preemptions"], 120);
  EXPECT_EQ(r["preemption"]["recomputed_tokens"], 27091);
  EXPECT_EQ(r["kv_cache"]["swapped_out_blocks"], 0);
  EXPECT_EQ(s["preemption"]["preemptions"], 117);
  EXPECT_EQ(s["preemption"]["recomputed_tokens"], 0);
  EXPECT_EQ(s["kv_cache"]["swapped_out_blocks"], 6327);
  EXPECT_EQ(s["kv_cache"]["swapped_in_blocks"], 6327);
  EXPECT_NEAR(r["ttft_ms"]["p99"].get<double>(), 2250.6, 0.05);
  EXPECT_NEAR(s["ttft_ms"]["p99"].get<double>(), 2390.0, 0.05);
  EXPECT_NEAR(r["tpot_ms"]["p99"].get<double>(), 20.97, 0.005);
  EXPECT_NEAR(s["tpot_ms"]["p99"].get<double>(), 20.23, 0.005);
  EXPECT_NEAR(r["prefix_cache"]["hit_rate"].get<double>(), 0.189, 0.0005);
  EXPECT_NEAR(s["prefix_cache"]["hit_rate"].get<double>(), 0.101, 0.0005);
}

// docs/lessons/chunked-prefill.md
TEST(Lessons, ChunkedPrefillTradeOff) {
  const fs::path dir = temp_dir("lesson_chunked");
  const Cli r = run_sim("sweep " + kLessons + "chunked-prefill.yaml --quiet --no-plot --out " +
                            (dir / "sweep").string(),
                        dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = read_csv(dir / "sweep" / "sweep.csv");
  ASSERT_EQ(rows.size(), 6u);
  const double ttft[] = {136.2, 105.3, 97.9, 94.9, 89.7, 89.7};
  const double tpot99[] = {10.17, 11.80, 12.72, 13.78, 14.19, 14.12};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_NEAR(std::stod(rows[i].at("ttft_p50_ms")), ttft[i], 0.05) << i;
    EXPECT_NEAR(std::stod(rows[i].at("tpot_p99_ms")), tpot99[i], 0.005) << i;
  }
}

}  // namespace
}  // namespace servelab
