// Every number quoted in docs/lessons/ comes out of this file: each test runs a lesson's
// experiment (experiments/lessons/) with the real `sim` command, or does the project's own
// KV-capacity arithmetic or step pricing (RooflineCostModel), and checks the numbers the lesson
// states (to the digits it prints) and the orderings it teaches.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/metrics.h"
#include "core/step_plan.h"
#include "engine/llama_weights.h"
#include "engine/weight_quant_probe.h"
#include "serving/calibration_profile.h"
#include "serving/experiment.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/kv_capacity.h"
#include "serving/model_config.h"
#include "serving/parallel_config.h"
#include "sim/calibrated_cost_model.h"
#include "sim/calibration.h"
#include "sim/roofline_cost_model.h"
#include "tests/cost_fixtures.h"
#include "tests/kv_quant_measure.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;
using nlohmann::json;

const std::string kLessons = servelab_home().string() + "/experiments/lessons/";

json summary(const fs::path& run) { return json::parse(read_file(run / "summary.json")); }

// The sum of the integer column `column` of a CSV file, streamed: a lesson's steps.csv has tens
// of thousands of rows, and read_csv's map per row costs more than the run that wrote them.
std::int64_t sum_column(const fs::path& file, const std::string& column) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  std::size_t index = 0;
  for (std::size_t begin = 0;; ++index) {
    const std::size_t end = std::min(line.find(',', begin), line.size());
    if (line.compare(begin, end - begin, column) == 0) break;
    if (end == line.size()) {
      ADD_FAILURE() << file << " has no column " << column;
      return -1;
    }
    begin = end + 1;
  }
  std::int64_t sum = 0;
  while (std::getline(in, line)) {
    std::size_t begin = 0;
    for (std::size_t i = 0; i < index && begin != std::string::npos; ++i) {
      begin = line.find(',', begin);
      if (begin != std::string::npos) ++begin;
    }
    std::int64_t value = 0;
    const char* first =
        begin == std::string::npos ? line.data() + line.size() : line.data() + begin;
    if (std::from_chars(first, line.data() + line.size(), value).ec != std::errc()) {
      ADD_FAILURE() << file << ": no integer " << column << " in row '" << line << "'";
      return -1;
    }
    sum += value;
  }
  return sum;
}

fs::path compare(const std::string& experiment, const fs::path& dir,
                 const std::string& extra = "") {
  const fs::path out = dir / "cmp";
  const Cli r = run_sim(
      "compare " + kLessons + experiment + " --quiet " + extra + " --out " + out.string(), dir);
  EXPECT_EQ(r.code, 0) << r.err;
  return out;
}

// A lesson's sweep (`sim sweep --jobs 2`, into dir/s): its sweep.csv rows keyed "A@B", A and B
// the row's values of the columns `first` and `second` (empty when the sweep failed).
using SweepRows = std::map<std::string, std::map<std::string, std::string>>;
SweepRows sweep_by(const std::string& experiment, const fs::path& dir, const std::string& first,
                   const std::string& second) {
  const Cli r = run_sim("sweep " + kLessons + experiment + " --quiet --no-plot --jobs 2 --out " +
                            (dir / "s").string(),
                        dir);
  EXPECT_EQ(r.code, 0) << r.err;
  SweepRows at;
  if (r.code != 0) return at;
  for (const auto& row : read_csv(dir / "s" / "sweep.csv")) {
    at[row.at(first) + "@" + row.at(second)] = row;
  }
  return at;
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
  EXPECT_NEAR(st["duration_s"].get<double>(), 6.71, 0.005);
  EXPECT_NEAR(co["duration_s"].get<double>(), 4.00, 0.005);
  EXPECT_NEAR(st["e2e_ms"]["mean"].get<double>(), 3305, 0.5);
  EXPECT_NEAR(co["e2e_ms"]["mean"].get<double>(), 1701, 0.5);
  // A decode step of the four sequences (H100 entry, fitted kernel model), as the lesson quotes.
  const auto steps = read_csv(all / "continuous" / "steps.csv");
  ASSERT_GT(steps.size(), 1u);
  EXPECT_EQ(steps[1].at("decode_tokens"), "4");
  EXPECT_NEAR(std::stod(steps[1].at("duration_ms")), 6.6, 0.05);
  // Refilling freed slots finishes the same work sooner, and every request sooner on average.
  EXPECT_LT(co["duration_s"].get<double>(), 0.7 * st["duration_s"].get<double>());
  EXPECT_LT(co["e2e_ms"]["mean"].get<double>(), 0.6 * st["e2e_ms"]["mean"].get<double>());
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
  EXPECT_NEAR(s["kv_cache"]["usage_max"].get<double>(), 0.096, 0.0005);
  // The whole-GPU cache is far from the bottleneck at this load.
  EXPECT_LT(s["kv_cache"]["usage_max"].get<double>(), 0.1);
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
  // Its decode steps of 14 requests: 7.27 ms median (the lesson quotes it).
  std::vector<double> decode14;
  for (const auto& row : read_csv(out / "contiguous-max-len" / "steps.csv")) {
    if (row.at("prefill_tokens") == "0" && row.at("num_seqs") == "14") {
      decode14.push_back(std::stod(row.at("duration_ms")));
    }
  }
  ASSERT_FALSE(decode14.empty());
  std::nth_element(decode14.begin(), decode14.begin() + decode14.size() / 2, decode14.end());
  EXPECT_NEAR(decode14[decode14.size() / 2], 7.27, 0.005);
  EXPECT_NEAR(p["ttft_ms"]["p50"].get<double>(), 22.0, 0.05);
  EXPECT_NEAR(c["ttft_ms"]["p50"].get<double>(), 2299.5, 0.05);
  EXPECT_NEAR(p["kv_cache"]["usage_mean"].get<double>(), 0.197, 0.0005);
  EXPECT_NEAR(c["kv_cache"]["usage_mean"].get<double>(), 0.947, 0.0005);
  EXPECT_NEAR(e["kv_cache"]["usage_mean"].get<double>(), 0.245, 0.0005);
  EXPECT_NEAR(c["kv_cache"]["reserved_unused_blocks_mean"].get<double>(), 2764, 0.5);
  EXPECT_NEAR(c["kv_cache"]["reserved_unused_blocks_mean"].get<double>() * 2 / 1024, 5.4, 0.05);
  EXPECT_NEAR(e["kv_cache"]["reserved_unused_blocks_mean"].get<double>(), 173, 0.5);
  EXPECT_EQ(p["kv_cache"]["reserved_unused_blocks_mean"].get<double>(), 0.0);
  EXPECT_NEAR(p["kv_cache"]["internal_fragmentation_mean"].get<double>(), 0.010, 0.0005);
  EXPECT_NEAR(c["kv_cache"]["internal_fragmentation_mean"].get<double>(), 0.810, 0.0005);
  EXPECT_NEAR(p["goodput"]["requests_per_s"].get<double>(), 7.23, 0.005);
  EXPECT_NEAR(c["goodput"]["requests_per_s"].get<double>(), 2.90, 0.005);
  // The exact oracle never limits admission here: same TTFT and goodput as paging.
  EXPECT_DOUBLE_EQ(e["ttft_ms"]["p50"].get<double>(), p["ttft_ms"]["p50"].get<double>());
  EXPECT_DOUBLE_EQ(e["goodput"]["requests_per_s"].get<double>(),
                   p["goodput"]["requests_per_s"].get<double>());
  // Reserving max_model_len: TTFT from milliseconds to seconds, most requests miss the SLOs.
  EXPECT_LT(c["goodput"]["slo_attainment"].get<double>(), 0.5);
  EXPECT_EQ(p["goodput"]["slo_attainment"].get<double>(), 1.0);
  EXPECT_GT(c["ttft_ms"]["p50"].get<double>(), 50 * p["ttft_ms"]["p50"].get<double>());
  EXPECT_LT(c["goodput"]["requests_per_s"].get<double>(),
            0.5 * p["goodput"]["requests_per_s"].get<double>());
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
  EXPECT_EQ(n["requests"]["completed"], 1998);
  EXPECT_NEAR(h["prefix_cache"]["hit_rate"].get<double>(), 0.067, 0.0005);
  EXPECT_NEAR(h["ttft_ms"]["p50"].get<double>(), 1742.4, 0.05);
  EXPECT_NEAR(n["ttft_ms"]["p50"].get<double>(), 1870.9, 0.05);
  EXPECT_NEAR(h["ttft_ms"]["p99"].get<double>(), 6604.1, 0.05);
  EXPECT_NEAR(n["ttft_ms"]["p99"].get<double>(), 6872.4, 0.05);
  EXPECT_NEAR(h["goodput"]["requests_per_s"].get<double>(), 1.48, 0.005);
  EXPECT_NEAR(n["goodput"]["requests_per_s"].get<double>(), 1.45, 0.005);
  EXPECT_NEAR(h["kv_cache"]["usage_mean"].get<double>(), 0.197, 0.0005);
  EXPECT_NEAR(n["kv_cache"]["usage_mean"].get<double>(), 0.233, 0.0005);
  // The cache moves the TTFT distribution left (by more milliseconds at the tail), raises
  // goodput, and holds fewer blocks.
  const double gain50 = n["ttft_ms"]["p50"].get<double>() - h["ttft_ms"]["p50"].get<double>();
  const double gain99 = n["ttft_ms"]["p99"].get<double>() - h["ttft_ms"]["p99"].get<double>();
  EXPECT_NEAR(gain50, 128, 0.5);
  EXPECT_NEAR(gain99, 268, 0.5);
  EXPECT_GT(gain50, 0);
  EXPECT_GT(gain99, gain50);
  EXPECT_GT(h["goodput"]["requests_per_s"].get<double>(),
            n["goodput"]["requests_per_s"].get<double>());
  EXPECT_LT(h["kv_cache"]["usage_mean"].get<double>(), n["kv_cache"]["usage_mean"].get<double>());
}

// docs/lessons/prefix-caching-mooncake.md, last paragraph, and docs/experiments.md: the whole
// Mooncake hour at 1.7x, where the prefix cache decides whether the server keeps up.
TEST(Lessons, MooncakeHourAtTheLimit) {
  const fs::path dir = temp_dir("lesson_mooncake_hour");
  const std::string exp = servelab_home().string() + "/experiments/mooncake-conv.yaml";
  for (const char* pc : {"hash", "none"}) {
    const Cli r = run_sim("run " + exp + " --quiet --set policies.prefix_cache=" + pc + " --out " +
                              (dir / pc).string(),
                          dir);
    ASSERT_EQ(r.code, 0) << r.err;
  }
  const json h = summary(dir / "hash"), n = summary(dir / "none");
  EXPECT_EQ(h["requests"]["completed"], 12031);
  EXPECT_EQ(n["requests"]["completed"], 12031);
  EXPECT_NEAR(h["ttft_ms"]["p50"].get<double>() / 1000, 1.8, 0.05);   // seconds
  EXPECT_NEAR(n["ttft_ms"]["p50"].get<double>() / 60000, 2.0, 0.05);  // minutes
  EXPECT_EQ(n["preemption"]["preemptions"], 4388);
  EXPECT_GT(n["ttft_ms"]["p50"].get<double>(), 30 * h["ttft_ms"]["p50"].get<double>());
  auto max_waiting = [](const fs::path& run) {
    int most = 0;
    for (const auto& row : read_csv(run / "steps.csv")) {
      most = std::max(most, std::stoi(row.at("waiting")));
    }
    return most;
  };
  EXPECT_EQ(max_waiting(dir / "hash"), 36);
  EXPECT_EQ(max_waiting(dir / "none"), 1051);
  fs::remove_all(dir);
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
  EXPECT_EQ(rr["cluster"]["pools"][0]["prefill_tokens"], 7486153);
  EXPECT_EQ(lo["cluster"]["pools"][0]["prefill_tokens"], 7434206);
  EXPECT_EQ(pa["cluster"]["pools"][0]["prefill_tokens"], 3062430);
  EXPECT_NEAR(rr["ttft_ms"]["p50"].get<double>(), 2847.1, 0.05);
  EXPECT_NEAR(lo["ttft_ms"]["p50"].get<double>(), 2886.4, 0.05);
  EXPECT_NEAR(pa["ttft_ms"]["p50"].get<double>(), 36.2, 0.05);
  EXPECT_NEAR(rr["ttft_ms"]["p99"].get<double>(), 7302.6, 0.05);
  EXPECT_NEAR(lo["ttft_ms"]["p99"].get<double>(), 5616.4, 0.05);
  EXPECT_NEAR(pa["ttft_ms"]["p99"].get<double>(), 189.6, 0.05);
  EXPECT_NEAR(rr["tpot_ms"]["p50"].get<double>(), 30.20, 0.005);
  EXPECT_NEAR(lo["tpot_ms"]["p50"].get<double>(), 30.17, 0.005);
  EXPECT_NEAR(pa["tpot_ms"]["p50"].get<double>(), 13.24, 0.005);
  EXPECT_NEAR(rr["goodput"]["requests_per_s"].get<double>(), 2.01, 0.005);
  EXPECT_NEAR(lo["goodput"]["requests_per_s"].get<double>(), 2.12, 0.005);
  EXPECT_NEAR(pa["goodput"]["requests_per_s"].get<double>(), 35.63, 0.005);
  EXPECT_EQ(rr["preemption"]["preemptions"], 167);
  EXPECT_EQ(lo["preemption"]["preemptions"], 180);
  EXPECT_EQ(pa["preemption"]["preemptions"], 0);
  EXPECT_NEAR(rr["kv_cache"]["usage_mean"].get<double>(), 0.956, 0.0005);
  EXPECT_NEAR(lo["kv_cache"]["usage_mean"].get<double>(), 0.956, 0.0005);
  EXPECT_NEAR(pa["kv_cache"]["usage_mean"].get<double>(), 0.402, 0.0005);
}

// docs/lessons/preemption.md
TEST(Lessons, RecomputeVsSwap) {
  const fs::path dir = temp_dir("lesson_preempt");
  const fs::path out = compare("preemption.yaml", dir);
  const json r = summary(out / "recompute"), s = summary(out / "swap");
  EXPECT_EQ(r["preemption"]["preemptions"], 122);
  EXPECT_EQ(r["preemption"]["recomputed_tokens"], 29942);
  EXPECT_EQ(r["kv_cache"]["swapped_out_blocks"], 0);
  EXPECT_EQ(s["preemption"]["preemptions"], 110);
  EXPECT_EQ(s["preemption"]["recomputed_tokens"], 0);
  EXPECT_EQ(s["kv_cache"]["swapped_out_blocks"], 6347);
  EXPECT_EQ(s["kv_cache"]["swapped_in_blocks"], 6347);
  EXPECT_NEAR(6347.0 * 2 / 1024, 12.4, 0.05);  // GiB each way
  EXPECT_NEAR(r["ttft_ms"]["p99"].get<double>(), 2349.4, 0.05);
  EXPECT_NEAR(s["ttft_ms"]["p99"].get<double>(), 2477.3, 0.05);
  EXPECT_NEAR(r["tpot_ms"]["p99"].get<double>(), 20.50, 0.005);
  EXPECT_NEAR(s["tpot_ms"]["p99"].get<double>(), 19.67, 0.005);
  // vLLM's hit rate (resumed requests' lookups left out) nearly ties; counting them, recompute
  // finds twice the hits (a resumed request's own blocks are still cached).
  const auto all_lookups = [](const json& x) {
    return x["prefix_cache"]["hit_tokens"].get<double>() /
           x["prefix_cache"]["queried_tokens"].get<double>();
  };
  EXPECT_NEAR(r["prefix_cache"]["hit_rate"].get<double>(), 0.112, 0.0005);
  EXPECT_NEAR(s["prefix_cache"]["hit_rate"].get<double>(), 0.103, 0.0005);
  EXPECT_NEAR(all_lookups(r), 0.210, 0.0005);
  EXPECT_EQ(s["prefix_cache"]["preempted_queried_tokens"], 0);  // a swapped victim never looks up
  // Nearly a tie: recompute has the better TTFT tail, swap the better TPOT tail.
  EXPECT_LT(r["ttft_ms"]["p99"].get<double>(), s["ttft_ms"]["p99"].get<double>());
  EXPECT_LT(s["tpot_ms"]["p99"].get<double>(), r["tpot_ms"]["p99"].get<double>());
  EXPECT_GT(all_lookups(r), 1.5 * all_lookups(s));
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
  const double ttft[] = {180.9, 123.3, 102.1, 93.8, 85.5, 85.7};
  const double tpot99[] = {11.74, 12.37, 12.75, 13.08, 13.19, 13.61};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_NEAR(std::stod(rows[i].at("ttft_p50_ms")), ttft[i], 0.05) << i;
    EXPECT_NEAR(std::stod(rows[i].at("tpot_p99_ms")), tpot99[i], 0.005) << i;
  }
  // The trade-off: up to 4,096 tokens a larger budget lowers TTFT p50, and every larger budget
  // raises TPOT p99.
  for (std::size_t i = 1; i < rows.size(); ++i) {
    if (i < 5) {
      EXPECT_LT(std::stod(rows[i].at("ttft_p50_ms")), std::stod(rows[i - 1].at("ttft_p50_ms")))
          << i;
    }
    EXPECT_GT(std::stod(rows[i].at("tpot_p99_ms")), std::stod(rows[i - 1].at("tpot_p99_ms"))) << i;
  }
  // 8,192 -> 256 tokens per step: TPOT p99 14 % lower, TTFT p50 more than doubled.
  EXPECT_NEAR(1 - tpot99[0] / tpot99[5], 0.14, 0.005);
  EXPECT_GT(ttft[0], 2 * ttft[5]);

  // What a step of one prompt's n tokens (from position 0, sampling) costs, in ms: the fitted
  // H100 entry against the classic roofline.
  const ModelConfig m = load_model("Llama-3-8B", default_catalog_dir());
  const HardwareConfig h100 = load_hardware("H100-SXM", default_catalog_dir());
  const RooflineCostModel fitted(m, h100, 16), classic(m, h100.classic_roofline(), 16);
  auto step_ms = [](const CostModel& cm, std::int32_t n) {
    StepPlan plan;
    ScheduledRequest r;
    r.num_tokens = n;
    r.is_prefill = true;
    r.samples = true;
    plan.requests.push_back(r);
    plan.num_prefill_tokens = n;
    return static_cast<double>(cm.step_time(plan)) / 1e6;
  };
  EXPECT_NEAR(step_ms(fitted, 256), 10.7, 0.05);
  EXPECT_NEAR(step_ms(fitted, 1), 6.5, 0.05);
  EXPECT_NEAR(step_ms(fitted, 256) / step_ms(fitted, 1), 1.6, 0.05);
  EXPECT_NEAR(step_ms(classic, 256), 8.1, 0.05);
  EXPECT_NEAR(step_ms(fitted, 8192), 229, 0.5);
  EXPECT_NEAR(step_ms(classic, 8192), 243, 0.5);
}

// docs/lessons/fp8-kv.md
TEST(Lessons, Fp8Kv) {
  // Capacity: the same 30 % of an H100, half the bytes per block.
  ModelConfig bf16 = load_model("Llama-3-8B", default_catalog_dir());
  ModelConfig fp8 = bf16;
  fp8.kv_cache_dtype = "fp8";
  EXPECT_EQ(kv_block_bytes(bf16, 16), 2097152);  // 2 MiB
  EXPECT_EQ(kv_block_bytes(fp8, 16), 1048576);   // 1 MiB
  const fs::path dir = temp_dir("lesson_fp8_kv");
  const fs::path out = compare("fp8-kv.yaml", dir);
  const json b = summary(out / "bf16"), f = summary(out / "fp8");
  EXPECT_EQ(b["run"]["num_gpu_blocks"], "3607");
  EXPECT_EQ(f["run"]["num_gpu_blocks"], "7214");
  EXPECT_NEAR(b["throughput"]["requests_per_s"].get<double>(), 4.74, 0.005);
  EXPECT_NEAR(f["throughput"]["requests_per_s"].get<double>(), 5.43, 0.005);
  EXPECT_NEAR(b["throughput"]["output_tokens_per_s"].get<double>(), 1875, 0.5);
  EXPECT_NEAR(f["throughput"]["output_tokens_per_s"].get<double>(), 2150, 0.5);
  EXPECT_NEAR(b["ttft_ms"]["p50"].get<double>(), 6143.5, 0.05);
  EXPECT_NEAR(b["ttft_ms"]["p99"].get<double>(), 15362.5, 0.05);
  EXPECT_NEAR(f["ttft_ms"]["p50"].get<double>(), 62.6, 0.05);
  EXPECT_NEAR(f["ttft_ms"]["p99"].get<double>(), 226.8, 0.05);
  EXPECT_NEAR(b["tpot_ms"]["p50"].get<double>(), 12.94, 0.005);
  EXPECT_NEAR(f["tpot_ms"]["p50"].get<double>(), 11.48, 0.005);
  EXPECT_NEAR(b["tpot_ms"]["p99"].get<double>(), 14.59, 0.005);
  EXPECT_NEAR(f["tpot_ms"]["p99"].get<double>(), 16.36, 0.005);
  EXPECT_EQ(b["preemption"]["preemptions"], 116);
  EXPECT_EQ(f["preemption"]["preemptions"], 0);
  EXPECT_NEAR(b["goodput"]["requests_per_s"].get<double>(), 0.69, 0.005);
  EXPECT_NEAR(f["goodput"]["requests_per_s"].get<double>(), 5.43, 0.005);
  EXPECT_NEAR(b["kv_cache"]["usage_mean"].get<double>(), 0.930, 0.0005);
  EXPECT_NEAR(f["kv_cache"]["usage_mean"].get<double>(), 0.485, 0.0005);
  EXPECT_NEAR(b["duration_s"].get<double>(), 126.7, 0.05);
  EXPECT_NEAR(f["duration_s"].get<double>(), 110.5, 0.05);
  // One decode step of 64 sequences at 2,048 tokens of context, priced by the roofline.
  const HardwareConfig h100 = load_hardware("H100-SXM", default_catalog_dir());
  const RooflineCostModel cb(bf16, h100, 16), cf(fp8, h100, 16);
  StepFeatures d;
  d.num_tokens = d.decode_tokens = d.num_sampled = 64;
  // (Each decode computes position 2,047: 2,048 (query, key) pairs over 2,048 tokens of KV, as
  // StepFeatures::from_plan counts it and servelab.step_cost prices it.)
  d.decode_pairs = 64 * 2048;
  d.decode_context_tokens = 64 * 2048;
  const StepCostBreakdown sb = cb.breakdown(d), sf = cf.breakdown(d);
  EXPECT_NEAR(sb.decode_attention * 1e3, 7.34, 0.005);
  EXPECT_NEAR(sf.decode_attention * 1e3, 3.68, 0.005);
  EXPECT_NEAR(sb.total() * 1e3, 14.86, 0.005);
  EXPECT_NEAR(sf.total() * 1e3, 11.19, 0.005);
  // The CPU engine on the tiny model (tests/kv_quant_measure.h), against bf16 KV.
  const std::vector<kv_quant::Difference> m = kv_quant::measure();
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].steps, 256);
  EXPECT_NEAR(m[0].max_logit, 17.87, 0.005);
  EXPECT_NEAR(m[0].max_abs, 0.019, 0.0005);  // fp32 KV: bf16's own rounding
  EXPECT_EQ(m[0].differing, 1);
  EXPECT_NEAR(m[2].max_abs, 0.38, 0.005);  // fp8 e4m3
  EXPECT_NEAR(100 * m[2].max_abs / m[2].max_logit, 2.1, 0.05);
  EXPECT_EQ(m[2].differing, 4);
  EXPECT_NEAR(m[3].max_abs, 0.65, 0.005);  // fp8 e5m2
  EXPECT_NEAR(100 * m[3].max_abs / m[3].max_logit, 3.6, 0.05);
  EXPECT_EQ(m[3].differing, 13);
  EXPECT_NEAR(m[4].max_abs, 0.35, 0.005);  // fp8 e4m3, computed scales
  EXPECT_EQ(m[4].differing, 4);
}

// docs/lessons/kv-offload.md
TEST(Lessons, KvOffload) {
  const fs::path dir = temp_dir("lesson_kv_offload");
  const fs::path out = compare("kv-offload.yaml", dir);
  const json n = summary(out / "no-offload"), h = summary(out / "host"),
             d = summary(out / "host-disk");
  auto prefilled = [&](const char* v) {
    return sum_column(out / v / "steps.csv", "prefill_tokens");
  };
  EXPECT_EQ(n["requests"]["completed"], 2463);
  EXPECT_EQ(d["requests"]["completed"], 2463);
  // Prompt tokens prefilled: the history each turn had to recompute.
  EXPECT_EQ(prefilled("no-offload"), 3387245);
  EXPECT_EQ(prefilled("host"), 2193319);
  EXPECT_EQ(prefilled("host-disk"), 465953);
  // Hit rates, and where the hits were found.
  EXPECT_FALSE(n.contains("kv_offload"));
  EXPECT_NEAR(n["prefix_cache"]["hit_rate"].get<double>(), 0.380, 0.0005);
  // vLLM's rates: the GPU pool's hits, and the tiers' (its KV connector's "external" ones).
  EXPECT_NEAR(h["prefix_cache"]["hit_rate"].get<double>(), 0.376, 0.0005);
  EXPECT_NEAR(d["prefix_cache"]["hit_rate"].get<double>(), 0.375, 0.0005);
  EXPECT_NEAR(h["prefix_cache"]["external_hit_rate"].get<double>(), 0.178, 0.0005);
  EXPECT_NEAR(d["prefix_cache"]["external_hit_rate"].get<double>(), 0.571, 0.0005);
  EXPECT_FALSE(n["prefix_cache"].contains("external_hit_rate"));
  EXPECT_EQ(h["prefix_cache"]["hit_tokens_gpu"], 18173200);
  EXPECT_EQ(h["prefix_cache"]["hit_tokens_host"], 7178416);
  EXPECT_EQ(d["prefix_cache"]["hit_tokens_gpu"], 17510736);
  EXPECT_EQ(d["prefix_cache"]["hit_tokens_host"], 6520080);
  EXPECT_EQ(d["prefix_cache"]["hit_tokens_disk"], 14637024);
  EXPECT_EQ(h["kv_offload"]["host"]["capacity_blocks"], 8192);  // 16 GiB of 2 MiB blocks
  EXPECT_EQ(h["kv_offload"]["host"]["loaded_blocks"], 73771);
  EXPECT_EQ(h["kv_offload"]["dropped_blocks"], 158093);
  EXPECT_EQ(d["kv_offload"]["disk"]["loaded_blocks"], 107293);
  EXPECT_EQ(d["kv_offload"]["dropped_blocks"], 0);
  EXPECT_NEAR(h["kv_offload"]["load_time_s"].get<double>(), 3.02, 0.005);
  EXPECT_NEAR(d["kv_offload"]["load_time_s"].get<double>(), 39.58, 0.005);
  // TTFT and throughput.
  EXPECT_NEAR(n["ttft_ms"]["mean"].get<double>(), 1976.6, 0.05);
  EXPECT_NEAR(h["ttft_ms"]["mean"].get<double>(), 1120.2, 0.05);
  EXPECT_NEAR(d["ttft_ms"]["mean"].get<double>(), 896.2, 0.05);
  EXPECT_NEAR(n["ttft_ms"]["p50"].get<double>(), 462.0, 0.05);
  EXPECT_NEAR(h["ttft_ms"]["p50"].get<double>(), 80.4, 0.05);
  EXPECT_NEAR(d["ttft_ms"]["p50"].get<double>(), 63.0, 0.05);
  EXPECT_NEAR(n["goodput"]["slo_attainment"].get<double>(), 0.540, 0.0005);
  EXPECT_NEAR(h["goodput"]["slo_attainment"].get<double>(), 0.654, 0.0005);
  EXPECT_NEAR(d["goodput"]["slo_attainment"].get<double>(), 0.694, 0.0005);
  EXPECT_NEAR(n["throughput"]["output_tokens_per_s"].get<double>(), 794.2, 0.05);
  EXPECT_NEAR(h["throughput"]["output_tokens_per_s"].get<double>(), 808.4, 0.05);
  EXPECT_NEAR(d["throughput"]["output_tokens_per_s"].get<double>(), 811.8, 0.05);
  // Idle-session offload (10 s) on the same host tier: idle sessions go down early, more of
  // their blocks come back, but the work saved is small (the LRU free queue evicts idle
  // sessions' blocks first anyway, and every eviction reaches the host tier).
  const json i = summary(out / "host-idle");
  EXPECT_EQ(i["requests"]["completed"], 2463);
  EXPECT_EQ(i["kv_offload"]["idle"]["sessions"], 1841);
  EXPECT_EQ(i["kv_offload"]["idle"]["blocks"], 18528);
  EXPECT_NEAR(i["kv_offload"]["idle"]["store_time_s"].get<double>(), 0.76, 0.005);
  EXPECT_EQ(i["kv_offload"]["host"]["loaded_blocks"], 80986);
  EXPECT_NEAR(i["prefix_cache"]["external_hit_rate"].get<double>(), 0.187, 0.0005);
  EXPECT_EQ(prefilled("host-idle"), 2201184);
  EXPECT_NEAR(i["ttft_ms"]["mean"].get<double>(), 1113.1, 0.05);
  EXPECT_NEAR(i["ttft_ms"]["p99"].get<double>(), 5606.3, 0.05);
  EXPECT_NEAR(h["ttft_ms"]["p99"].get<double>(), 5760.4, 0.05);
  EXPECT_EQ(i["kv_cache"]["offloaded_blocks"].get<std::int64_t>(),
            i["kv_cache"]["evicted_blocks"].get<std::int64_t>() + 18528);
  EXPECT_GT(i["prefix_cache"]["external_hit_rate"].get<double>(),
            h["prefix_cache"]["external_hit_rate"].get<double>());
  EXPECT_LT(std::abs(prefilled("host-idle") - prefilled("host")), prefilled("host") / 100);
  // The ordering the lesson teaches: each tier recomputes less and answers sooner.
  EXPECT_GT(prefilled("no-offload"), prefilled("host"));
  EXPECT_GT(prefilled("host"), 4 * prefilled("host-disk"));
  EXPECT_LT(d["ttft_ms"]["mean"].get<double>(), h["ttft_ms"]["mean"].get<double>());
  EXPECT_LT(h["ttft_ms"]["mean"].get<double>(), n["ttft_ms"]["mean"].get<double>());
}

// docs/lessons/fp8-kv.md, "Over the load": the sweep behind figures/fp8-kv.png.
TEST(Lessons, Fp8KvSweep) {
  const fs::path dir = temp_dir("lesson_fp8_sweep");
  const SweepRows at = sweep_by("fp8-kv.yaml", dir, "model.kv_cache_dtype",
                                "workload.arrival.rate");  // "dtype@rate"
  ASSERT_EQ(at.size(), 8u);
  auto v = [&](const std::string& k, const char* col) { return std::stod(at.at(k).at(col)); };
  EXPECT_NEAR(v("bf16@2", "output_tokens_per_s"), 744.6, 0.05);
  EXPECT_NEAR(v("fp8@2", "output_tokens_per_s"), 745.3, 0.05);
  EXPECT_NEAR(v("bf16@4", "output_tokens_per_s"), 1459.4, 0.05);
  EXPECT_NEAR(v("fp8@4", "output_tokens_per_s"), 1463.9, 0.05);
  EXPECT_NEAR(v("bf16@6", "output_tokens_per_s"), 1875.1, 0.05);
  EXPECT_NEAR(v("bf16@8", "output_tokens_per_s"), 1885.4, 0.05);
  EXPECT_NEAR(v("fp8@6", "output_tokens_per_s"), 2150.4, 0.05);
  EXPECT_NEAR(v("fp8@8", "output_tokens_per_s"), 2764.2, 0.05);
  EXPECT_NEAR(v("bf16@6", "ttft_p99_ms"), 15362.5, 0.05);
  EXPECT_NEAR(v("bf16@8", "ttft_p99_ms"), 40387.4, 0.05);
  EXPECT_NEAR(v("fp8@6", "ttft_p99_ms"), 226.8, 0.05);
  EXPECT_NEAR(v("fp8@8", "ttft_p99_ms"), 2582.4, 0.05);
  EXPECT_NEAR(v("fp8@8", "kv_usage_mean"), 0.798, 0.0005);
  EXPECT_NEAR(v("bf16@6", "kv_usage_mean"), 0.930, 0.0005);
  // The capacities the figure's first panel shows.
  EXPECT_EQ(summary(dir / "s" / "3_kv_cache_dtype-bf16_rate-8")["run"]["num_gpu_blocks"], "3607");
  EXPECT_EQ(summary(dir / "s" / "7_kv_cache_dtype-fp8_rate-8")["run"]["num_gpu_blocks"], "7214");
}

// docs/lessons/page-size.md
TEST(Lessons, PageSize) {
  const fs::path dir = temp_dir("lesson_page_size");
  auto sweep = [&](const std::string& name, const std::string& extra) {
    const Cli r = run_sim("sweep " + kLessons + "page-size.yaml --quiet --no-plot " + extra +
                              " --out " + (dir / name).string(),
                          dir);
    EXPECT_EQ(r.code, 0) << r.err;
    return read_csv(dir / name / "sweep.csv");
  };
  const auto rows = sweep("paged", "");
  ASSERT_EQ(rows.size(), 5u);
  const char* sizes[] = {"8", "16", "32", "64", "128"};
  const double step_ms[] = {23.16, 21.64, 20.73, 19.94, 19.17};
  const double unused[] = {261, 542, 1081, 2092, 3785};
  const double frag[] = {1.7, 3.5, 7.0, 13.2, 23.0};
  const double batch[] = {65.5, 64.0, 62.3, 59.7, 56.0};
  const double tok_s[] = {2827, 2955, 3007, 2996, 2921};
  const double ttft[] = {688, 315, 244, 454, 937};
  auto col = [&](std::size_t i, const char* c) { return std::stod(rows[i].at(c)); };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].at("serving.block_size"), sizes[i]);
    EXPECT_EQ(rows[i].at("completed"), "600") << i;
    EXPECT_NEAR(col(i, "step_ms_mean"), step_ms[i], 0.005) << i;
    EXPECT_NEAR(col(i, "unused_slots_mean"), unused[i], 0.5) << i;
    EXPECT_NEAR(100 * col(i, "internal_fragmentation_mean"), frag[i], 0.05) << i;
    EXPECT_NEAR(col(i, "batch_seqs_mean"), batch[i], 0.05) << i;
    EXPECT_NEAR(col(i, "output_tokens_per_s"), tok_s[i], 0.5) << i;
    EXPECT_NEAR(col(i, "ttft_p50_ms"), ttft[i], 0.5) << i;
    if (i > 0) {
      // Larger pages: cheaper steps, more waste, smaller batches.
      EXPECT_LT(col(i, "step_ms_mean"), col(i - 1, "step_ms_mean")) << i;
      EXPECT_GT(col(i, "unused_slots_mean"), col(i - 1, "unused_slots_mean")) << i;
      EXPECT_LT(col(i, "batch_seqs_mean"), col(i - 1, "batch_seqs_mean")) << i;
    }
  }
  // The middle wins: 32 has the most tokens/s and the lowest TTFT p50, 64 is within 0.4 %.
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i == 2) continue;
    EXPECT_LT(col(i, "output_tokens_per_s"), col(2, "output_tokens_per_s")) << i;
    EXPECT_GT(col(i, "ttft_p50_ms"), col(2, "ttft_p50_ms")) << i;
  }
  EXPECT_NEAR(1 - tok_s[3] / tok_s[2], 0.004, 0.0005);
  EXPECT_NEAR(1 - tok_s[0] / tok_s[2], 0.060, 0.0005);
  EXPECT_NEAR(1 - tok_s[4] / tok_s[2], 0.029, 0.0005);
  EXPECT_NEAR(tok_s[2] / tok_s[0] - 1, 0.064, 0.0005);
  EXPECT_NEAR(tok_s[3] / tok_s[4] - 1, 0.026, 0.0005);
  EXPECT_NEAR(unused[4] / unused[0], 14.5, 0.05);
  EXPECT_NEAR(1 - step_ms[4] / step_ms[0], 0.17, 0.005);  // README.md's table

  // The indirection row: 40 ns per page per layer added to one decode at context 256, against
  // that decode's attention without it (Llama-2-7B on the A100 entry).
  const ModelConfig m = load_model("Llama-2-7B", default_catalog_dir());
  HardwareConfig a100 = load_hardware("A100-80GB", default_catalog_dir());
  const RooflineCostModel contiguous(m, a100, 16);
  a100.block_indirection_s = 40e-9;
  StepPlan plan;
  ScheduledRequest r;
  r.first_token = 255;
  r.num_tokens = 1;
  r.samples = true;
  plan.requests.push_back(r);
  plan.num_decode_tokens = 1;
  const double base = contiguous.breakdown(plan).decode_attention;
  const double share[] = {43.2, 21.6, 10.8, 5.4, 2.7};
  for (std::size_t i = 0; i < 5; ++i) {
    const RooflineCostModel paged(m, a100, std::stoi(sizes[i]));
    EXPECT_NEAR(100 * (paged.breakdown(plan).decode_attention / base - 1), share[i], 0.05)
        << sizes[i];
  }

  // A kernel that pays nothing per page: the smallest page wins.
  const auto free = sweep("free", "--set cost_model.block_indirection_ns=0");
  ASSERT_EQ(free.size(), 5u);
  for (std::size_t i = 1; i < free.size(); ++i) {
    EXPECT_LT(std::stod(free[i].at("output_tokens_per_s")),
              std::stod(free[i - 1].at("output_tokens_per_s")))
        << i;
  }
  EXPECT_NEAR(std::stod(free[0].at("output_tokens_per_s")), 3134, 0.5);
  EXPECT_NEAR(std::stod(free[4].at("output_tokens_per_s")), 2941, 0.5);
  EXPECT_NEAR(std::stod(free[0].at("ttft_p50_ms")), 45, 0.5);
  EXPECT_NEAR(std::stod(free[4].at("ttft_p50_ms")), 873, 0.5);
  fs::remove_all(dir);
}

// docs/lessons/speculative-decoding.md
TEST(Lessons, SpeculativeDecodingPaysAtLowBatch) {
  const fs::path dir = temp_dir("lesson_specdec");
  const Cli r = run_sim("sweep " + kLessons + "speculative-decoding.yaml --quiet --no-plot --out " +
                            (dir / "sweep").string(),
                        dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = read_csv(dir / "sweep" / "sweep.csv");
  ASSERT_EQ(rows.size(), 16u);  // max_num_seqs x {off, k = 4} x acceptance {0.4, 0.8}
  // Per batch size: off (the two acceptance points are the same run), p = 0.4, p = 0.8.
  const double tput[4][3] = {{151.563, 247.539, 496.719},
                             {2005.256, 2813.104, 5103.276},
                             {5054.230, 5361.046, 8718.800},
                             {7800.201, 6574.679, 10182.712}};
  const double tpot[4][3] = {{6.561011, 3.992804, 1.958307},
                             {7.355144, 5.493441, 2.972463},
                             {11.685685, 11.149962, 6.554880},
                             {26.131371, 31.068628, 17.574220}};
  for (std::size_t b = 0; b < 4; ++b) {
    const auto& off = rows[4 * b];
    EXPECT_EQ(off.at("output_tokens_per_s"), rows[4 * b + 1].at("output_tokens_per_s")) << b;
    for (std::size_t v = 0; v < 3; ++v) {
      const auto& row = rows[v == 0 ? 4 * b : 4 * b + 1 + v];
      EXPECT_NEAR(std::stod(row.at("output_tokens_per_s")), tput[b][v], 0.0005) << b << v;
      EXPECT_NEAR(std::stod(row.at("tpot_mean_ms")), tpot[b][v], 0.0000005) << b << v;
      EXPECT_EQ(row.at("completed"), "256");
    }
    // p = 0.8 wins at every batch size, by less as the batch grows.
    EXPECT_GT(tput[b][2], tput[b][0]);
    if (b > 0) {
      EXPECT_LT(tput[b][2] / tput[b][0], tput[b - 1][2] / tput[b - 1][0]);
    }
  }
  // The page's numbers: TPOT 3.4x and 1.6x lower at batch 1; at batch 256 p = 0.4 loses 16 % of
  // the throughput and raises TPOT; p = 0.8 still wins there by 1.3x, against 3.3x at batch 1.
  EXPECT_NEAR(tpot[0][0] / tpot[0][2], 3.35, 0.01);  // "3.4x"
  EXPECT_NEAR(tpot[0][0] / tpot[0][1], 1.6, 0.05);
  EXPECT_NEAR(1 - tput[3][1] / tput[3][0], 0.16, 0.005);
  EXPECT_GT(tpot[3][1], tpot[3][0]);
  EXPECT_NEAR(tput[3][2] / tput[3][0], 1.3, 0.05);
  EXPECT_NEAR(tput[0][2] / tput[0][0], 3.3, 0.05);
  fs::remove_all(dir);
}

// docs/lessons/lora.md
TEST(Lessons, LoraAdaptersAgainstMaxLoras) {
  const fs::path dir = temp_dir("lesson_lora");
  const fs::path out = dir / "cmp";
  const Cli r = run_sim("compare " + servelab_home().string() +
                            "/experiments/lora.yaml --quiet --out " + out.string(),
                        dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const char* const names[] = {"base-model",
                               "adapters-1",
                               "adapters-4",
                               "adapters-8",
                               "adapters-16",
                               "adapters-64",
                               "adapters-64-max-loras-64"};
  // The page's table: output tokens/s, adapters per step, batch seqs, TTFT p50 / p99 (s), TPOT
  // p50 (ms), to the digits it prints, and the adapter loads.
  const double table[7][6] = {
      {7721, 0.00, 197.7, 16.4, 35.9, 30.80}, {7022, 1.00, 199.3, 20.3, 43.9, 33.82},
      {7002, 3.91, 199.5, 20.4, 44.1, 33.90}, {6977, 7.43, 199.7, 20.6, 44.4, 34.02},
      {6560, 7.30, 160.1, 15.4, 65.5, 32.52}, {4582, 7.58, 68.3, 56.6, 120.3, 18.07},
      {6678, 52.60, 201.7, 22.7, 48.6, 35.60}};
  const std::int64_t loads[7] = {0, 1, 4, 8, 16, 86, 64};
  double tput[7];
  for (int v = 0; v < 7; ++v) {
    const json s = summary(out / names[v]);
    EXPECT_EQ(s["requests"]["completed"], 3000) << names[v];
    tput[v] = s["throughput"]["output_tokens_per_s"].get<double>();
    EXPECT_NEAR(tput[v], table[v][0], 0.5) << names[v];
    EXPECT_NEAR(s["lora"]["adapters_per_step_mean"].get<double>(), table[v][1], 0.005) << names[v];
    EXPECT_NEAR(s["batch"]["seqs_mean"].get<double>(), table[v][2], 0.05) << names[v];
    EXPECT_NEAR(s["ttft_ms"]["p50"].get<double>() / 1000, table[v][3], 0.05) << names[v];
    EXPECT_NEAR(s["ttft_ms"]["p99"].get<double>() / 1000, table[v][4], 0.05) << names[v];
    EXPECT_NEAR(s["tpot_ms"]["p50"].get<double>(), table[v][5], 0.005) << names[v];
    EXPECT_EQ(s["lora"]["adapter_loads"], loads[v]) << names[v];
    // max_loras binds: never more adapters per step than allowed.
    EXPECT_LE(s["lora"]["adapters_per_step_mean"].get<double>(), v == 6 ? 64.0 : 8.0);
  }
  // "about 9 %" for one adapter; "41 % below the base model" with 64; the orderings.
  EXPECT_NEAR(1 - tput[1] / tput[0], 0.09, 0.005);
  EXPECT_NEAR(1 - tput[5] / tput[0], 0.41, 0.005);
  EXPECT_GT(tput[1], tput[2]);
  EXPECT_GT(tput[2], tput[3]);
  EXPECT_GT(tput[3], tput[4]);
  EXPECT_GT(tput[4], tput[5]);
  EXPECT_GT(tput[6], tput[5]);
  EXPECT_LT(tput[6], tput[3]);
  // The slots' memory: 28,183 blocks without LoRA slots (docs/cost-model.md's worked example),
  // 27,863 with 8 of rank 16, 25,623 with 64; the cache is used to at most 43 %.
  EXPECT_EQ(summary(out / names[3])["run"]["num_gpu_blocks"], "27863");
  EXPECT_EQ(summary(out / names[6])["run"]["num_gpu_blocks"], "25623");
  EXPECT_LT(summary(out / names[6])["kv_cache"]["usage_max"].get<double>(), 0.44);
  // The system prompt is cached once per adapter.
  EXPECT_EQ(summary(out / names[1])["prefix_cache"]["hit_tokens"], 767744);
  EXPECT_EQ(summary(out / names[5])["prefix_cache"]["hit_tokens"], 745984);
  fs::remove_all(dir);
}

// docs/lessons/lora.md, "The cliff moves with max_loras": `sim sweep experiments/lora.yaml` (1 to
// 64 adapters x max_loras 8, 16, 64) and the two runs at 20 req/s.
TEST(Lessons, LoraCliffMovesWithMaxLoras) {
  const fs::path dir = temp_dir("lesson_lora_sweep");
  const std::string lora = servelab_home().string() + "/experiments/lora.yaml";
  const Cli r =
      run_sim("sweep " + lora + " --quiet --no-plot --out " + (dir / "sweep").string(), dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = read_csv(dir / "sweep" / "sweep.csv");
  const int adapters[] = {1, 2, 4, 8, 16, 32, 64};
  const int limits[] = {8, 16, 64};
  ASSERT_EQ(rows.size(), 21u);  // grid order: adapters outer, max_loras inner
  auto at = [&](int a, int m, const char* column) {
    for (const auto& row : rows) {
      if (row.at("workload.lora.adapters") == std::to_string(a) &&
          row.at("serving.lora.max_loras") == std::to_string(m)) {
        return std::stod(row.at(column));
      }
    }
    ADD_FAILURE() << "no point " << a << " x " << m;
    return 0.0;
  };
  for (int i = 0; i < 7; ++i) {
    for (int j = 0; j < 3; ++j) {
      const int a = adapters[i], m = limits[j];
      // Slowly down with every adapter, steeply past the limit; a higher limit never costs.
      if (i > 0) {
        EXPECT_LE(at(a, m, "output_tokens_per_s"), at(adapters[i - 1], m, "output_tokens_per_s"));
      }
      if (j > 0) {
        EXPECT_GE(at(a, m, "output_tokens_per_s"), at(a, limits[j - 1], "output_tokens_per_s"));
      }
      if (a <= m) {  // the limit does not bind: the same run as without it
        EXPECT_EQ(at(a, m, "output_tokens_per_s"), at(a, 64, "output_tokens_per_s")) << a << m;
      }
    }
  }
  // The page's numbers: (adapters, max_loras, column, value, tolerance; TTFT in s).
  struct Quoted {
    int adapters, max_loras;
    const char* column;
    double value, tolerance;
  };
  const Quoted quoted[] = {{8, 8, "output_tokens_per_s", 6977, 0.5},
                           {32, 64, "output_tokens_per_s", 6840, 0.5},
                           {1, 8, "output_tokens_per_s", 7022, 0.5},
                           {64, 8, "output_tokens_per_s", 4582, 0.5},
                           {64, 16, "output_tokens_per_s", 5665, 0.5},
                           {64, 64, "output_tokens_per_s", 6678, 0.5},
                           {32, 8, "output_tokens_per_s", 5400, 0.5},
                           {32, 16, "output_tokens_per_s", 6638, 0.5},
                           {1, 8, "ttft_p50_ms", 20, 0.5},
                           {1, 8, "slo_attainment", 0.12, 0.005},
                           {1, 8, "goodput_requests_per_s", 3.5, 0.05},
                           {16, 8, "goodput_requests_per_s", 13.3, 0.05},
                           {16, 16, "goodput_requests_per_s", 3.3, 0.05},
                           {16, 64, "goodput_requests_per_s", 3.3, 0.05},
                           {32, 16, "goodput_requests_per_s", 13.8, 0.05},
                           {32, 16, "ttft_p50_ms", 0.64, 0.005},
                           {16, 8, "ttft_p99_ms", 65.5, 0.05},
                           {32, 16, "ttft_p99_ms", 68.9, 0.05},
                           {64, 8, "goodput_requests_per_s", 2.5, 0.05}};
  for (const Quoted& q : quoted) {
    const bool ttft = std::string(q.column).starts_with("ttft");
    EXPECT_NEAR(at(q.adapters, q.max_loras, q.column) / (ttft ? 1000 : 1), q.value, q.tolerance)
        << q.adapters << " adapters, max_loras " << q.max_loras << ", " << q.column;
  }
  // At 20 req/s the server keeps up with 64 adapters under max_loras 64, not under 8.
  double p50[2], tput[2];
  for (int k = 0; k < 2; ++k) {
    const fs::path out = dir / ("calm" + std::to_string(k));
    const Cli c =
        run_sim("run " + lora +
                    " --quiet --set workload.arrival.rate=20 --set workload.lora.adapters=64"
                    " --set serving.lora.max_loras=" +
                    (k == 0 ? "64" : "8") + " --out " + out.string(),
                dir);
    ASSERT_EQ(c.code, 0) << c.err;
    const json s = summary(out);
    p50[k] = s["ttft_ms"]["p50"].get<double>();
    tput[k] = s["throughput"]["output_tokens_per_s"].get<double>();
  }
  EXPECT_NEAR(p50[0], 32, 0.5);
  EXPECT_NEAR(tput[0], 4756, 0.5);
  EXPECT_NEAR(p50[1] / 1000, 33.2, 0.05);
  EXPECT_NEAR(tput[1], 3498, 0.5);
  fs::remove_all(dir);
}

// docs/lessons/cache-aware-order.md: `sim compare experiments/cache-aware.yaml`, and lpm against
// fcfs at 8 req/s.
TEST(Lessons, CacheAwareOrderGroupsThePromptsRequests) {
  const fs::path dir = temp_dir("lesson_cache_aware");
  const std::string exp = servelab_home().string() + "/experiments/cache-aware.yaml";
  const Cli r = run_sim("compare " + exp + " --quiet --out " + (dir / "cmp").string(), dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const char* const names[] = {"fcfs", "lpm", "lpm-uncapped", "dfs-weight", "random"};
  // The page's table: requests/s, prompt tokens computed (M), requests with no prefix hit (%),
  // TTFT p50 and p99 (s), preemptions.
  const double table[5][6] = {{6.04, 9.22, 81.8, 125.7, 246.7, 165},
                              {6.28, 8.73, 76.3, 112.3, 231.4, 170},
                              {10.50, 4.02, 23.6, 21.7, 57.2, 286},
                              {10.49, 4.02, 23.6, 21.5, 57.0, 273},
                              {7.84, 6.18, 42.7, 37.7, 263.5, 334}};
  double tput[5], computed[5], tpot_p99[5];
  for (int v = 0; v < 5; ++v) {
    SCOPED_TRACE(names[v]);
    const fs::path run = dir / "cmp" / names[v];
    const json s = summary(run);
    EXPECT_EQ(s["requests"]["completed"], 3000);
    EXPECT_EQ(s["throughput"]["input_tokens"], 10802094);
    tput[v] = s["throughput"]["requests_per_s"].get<double>();
    computed[v] = static_cast<double>(sum_column(run / "steps.csv", "prefill_tokens")) / 1e6;
    tpot_p99[v] = s["tpot_ms"]["p99"].get<double>();
    std::int64_t no_hit = 0;
    for (const auto& row : read_csv(run / "requests.csv")) no_hit += row.at("cached_tokens") == "0";
    EXPECT_NEAR(tput[v], table[v][0], 0.005);
    EXPECT_NEAR(computed[v], table[v][1], 0.005);
    EXPECT_NEAR(100.0 * static_cast<double>(no_hit) / 3000, table[v][2], 0.05);
    EXPECT_NEAR(s["ttft_ms"]["p50"].get<double>() / 1000, table[v][3], 0.05);
    EXPECT_NEAR(s["ttft_ms"]["p99"].get<double>() / 1000, table[v][4], 0.05);
    EXPECT_EQ(s["preemption"]["preemptions"], static_cast<std::int64_t>(table[v][5]));
  }
  // docs/experiments.md: the prefix-cache hit rate 3.9 % under fcfs, 33.1 % under dfs-weight;
  // the share of prompt tokens served from the cache 14.8 % and 63.3 %.
  const json fcfs = summary(dir / "cmp" / "fcfs"), dfs = summary(dir / "cmp" / "dfs-weight");
  EXPECT_NEAR(fcfs["prefix_cache"]["hit_rate"].get<double>(), 0.039, 0.0005);
  EXPECT_NEAR(dfs["prefix_cache"]["hit_rate"].get<double>(), 0.331, 0.0005);
  EXPECT_NEAR(fcfs["prefix_cache"]["prompt_hit_rate"].get<double>(), 0.148, 0.0005);
  EXPECT_NEAR(dfs["prefix_cache"]["prompt_hit_rate"].get<double>(), 0.633, 0.0005);
  // "1.74x"; 9.22 M of 10.8 M input; random's TPOT p99 above a second, the others' at most
  // 25.3 ms.
  EXPECT_NEAR(tput[3] / tput[0], 1.74, 0.005);
  EXPECT_GT(tpot_p99[4], 1000);
  for (int v = 0; v < 4; ++v) EXPECT_LE(tpot_p99[v], 25.3) << names[v];
  // At 8 req/s lpm stays on: 7.94 req/s against 6.04, TTFT p50 7.1 s against 65.6 s, 47 waiting
  // on average and never more than 128.
  double rate8[2], p50[2];
  for (int k = 0; k < 2; ++k) {
    const fs::path out = dir / (k == 0 ? "fcfs8" : "lpm8");
    const Cli c = run_sim("run " + exp + " --quiet --set workload.arrival.rate=8 --set " +
                              (k == 0 ? "policies.queue=fcfs" : "policies.queue=lpm") + " --out " +
                              out.string(),
                          dir);
    ASSERT_EQ(c.code, 0) << c.err;
    const json s = summary(out);
    rate8[k] = s["throughput"]["requests_per_s"].get<double>();
    p50[k] = s["ttft_ms"]["p50"].get<double>() / 1000;
    if (k == 1) {
      const auto steps = read_csv(out / "steps.csv");
      double waiting = 0;
      for (const auto& row : steps) {
        EXPECT_LE(std::stoi(row.at("waiting")), 128);
        waiting += std::stod(row.at("waiting"));
      }
      EXPECT_NEAR(waiting / static_cast<double>(steps.size()), 47, 0.5);
    }
  }
  EXPECT_NEAR(rate8[0], 6.04, 0.005);
  EXPECT_NEAR(rate8[1], 7.94, 0.005);
  EXPECT_NEAR(p50[0], 65.6, 0.05);
  EXPECT_NEAR(p50[1], 7.1, 0.05);
  fs::remove_all(dir);
}

// docs/lessons/sharing-a-server.md: a chat class and a batch flood on one server, by queue order.
TEST(Lessons, SharingAServer) {
  const fs::path dir = temp_dir("lesson_sharing");
  const fs::path out = compare("sharing-a-server.yaml", dir);
  const char* const names[] = {"fcfs", "fair", "priority", "sjf", "edf"};
  // The page's table: chat TTFT p50 and p99 (ms), chat TPOT p50 (ms), chat SLO met (%), batch
  // E2E mean (s), batch SLO met (%), output tokens/s.
  const double table[5][7] = {{110283.2, 194889.9, 41.90, 13.3, 113.2, 99.7, 3582},
                              {132.3, 396.3, 62.55, 99.8, 122.3, 99.8, 3571},
                              {126.8, 383.1, 62.58, 99.8, 122.3, 99.8, 3570},
                              {165.3, 160766.8, 59.05, 64.3, 98.3, 83.8, 3579},
                              {126.8, 383.1, 62.58, 99.8, 122.3, 99.8, 3570}};
  double batch_last[5];
  for (int v = 0; v < 5; ++v) {
    SCOPED_TRACE(names[v]);
    const json s = summary(out / names[v]);
    const json& chat = s["classes"]["chat"];
    const json& batch = s["classes"]["batch"];
    EXPECT_EQ(s["requests"]["completed"], 3527);
    EXPECT_EQ(batch["requests"]["completed"], 3000);
    EXPECT_GE(s["duration_s"].get<double>(), 285);
    EXPECT_LT(s["duration_s"].get<double>(), 287);
    EXPECT_NEAR(chat["ttft_ms"]["p50"].get<double>(), table[v][0], 0.05);
    EXPECT_NEAR(chat["ttft_ms"]["p99"].get<double>(), table[v][1], 0.05);
    EXPECT_NEAR(chat["tpot_ms"]["p50"].get<double>(), table[v][2], 0.005);
    EXPECT_NEAR(100 * chat["goodput"]["slo_attainment"].get<double>(), table[v][3], 0.05);
    EXPECT_NEAR(batch["e2e_ms"]["mean"].get<double>() / 1000, table[v][4], 0.05);
    EXPECT_NEAR(100 * batch["goodput"]["slo_attainment"].get<double>(), table[v][5], 0.05);
    EXPECT_EQ(std::round(s["throughput"]["output_tokens_per_s"].get<double>()), table[v][6]);
    // The chat class: 13.1 % of the output tokens.
    EXPECT_NEAR(100.0 * chat["throughput"]["output_tokens"].get<double>() /
                    s["throughput"]["output_tokens"].get<double>(),
                13.1, 0.05);
    batch_last[v] = 0;
    int chat_late = 0, tpot_missed = 0;
    std::int64_t missed_tokens = 0;
    for (const auto& row : read_csv(out / names[v] / "requests.csv")) {
      if (row.at("class") == "batch") {
        batch_last[v] = std::max(batch_last[v], std::stod(row.at("finish_s")));
        if (!row.at("tpot_ms").empty() && std::stod(row.at("tpot_ms")) > 100) {
          ++tpot_missed;
          missed_tokens += std::stoll(row.at("output_tokens"));
        }
      } else {
        chat_late += std::stod(row.at("first_scheduled_s")) > 200;
      }
    }
    if (v == 0) {
      EXPECT_EQ(chat_late, 416);  // of 527 chat requests, under fcfs
    }
    if (v == 3) {
      // sjf: 487 batch requests (16 %), 120 output tokens on average, miss the TPOT target.
      EXPECT_EQ(tpot_missed, 487);
      EXPECT_NEAR(static_cast<double>(missed_tokens) / tpot_missed, 120, 0.5);
      EXPECT_NEAR(batch["throughput"]["output_tokens"].get<double>() / 3000, 296, 0.5);
    }
  }
  // Under fair and priority the batch's last request finishes 2.2 s later than under fcfs; edf
  // makes priority's decisions (no batch deadline falls due in the run): identical files.
  EXPECT_NEAR(batch_last[1] - batch_last[0], 2.2, 0.05);
  EXPECT_NEAR(batch_last[2] - batch_last[0], 2.2, 0.05);
  for (const char* f : {"requests.csv", "steps.csv"}) {
    EXPECT_EQ(read_file(out / "priority" / f), read_file(out / "edf" / f)) << f;
  }
  // A batch TTFT objective of one minute, impossible for two thirds of the flood: edf serves the
  // late batch requests first (chat TTFT p50 48.4 s, 42.1 % meet the SLO, against 99.8 % under
  // priority), and the batch gains nothing (906 first tokens within the minute; priority 905,
  // fcfs 1,004). Demoting the late restores the chat class (90.3 %, p50 133.4 ms) at the same
  // 906; with half a second of slack 92.4 % and 1,177 (chat p99 168.1 s); a slack as long as the
  // chat objective demotes every chat request on arrival (13.1 %).
  {
    const char* const queues[] = {"fcfs",
                                  "priority",
                                  "edf",
                                  "{name: edf, late: demote}",
                                  "{name: edf, late: demote, slack_ms: 500}",
                                  "{name: edf, late: demote, slack_ms: 1000}"};
    const int within[] = {1004, 905, 906, 906, 1177, 1277};
    const double chat_slo[] = {13.3, 99.8, 42.1, 90.3, 92.4, 13.1};
    const double chat_p50[] = {-1, -1, 48429.3, 133.4, -1, -1};
    for (int k = 0; k < 6; ++k) {
      SCOPED_TRACE(queues[k]);
      const fs::path run = dir / ("batch60-" + std::to_string(k));
      const Cli c = run_sim("run " + kLessons + "sharing-a-server.yaml --quiet --set " +
                                "'policies.queue=" + queues[k] +
                                "' --set slo.classes.batch.ttft_ms=60000 --out " + run.string(),
                            dir);
      ASSERT_EQ(c.code, 0) << c.err;
      const json s = summary(run);
      EXPECT_NEAR(100 * s["classes"]["chat"]["goodput"]["slo_attainment"].get<double>(),
                  chat_slo[k], 0.05);
      if (chat_p50[k] >= 0) {
        EXPECT_NEAR(s["classes"]["chat"]["ttft_ms"]["p50"].get<double>(), chat_p50[k], 0.05);
      }
      if (k == 4) {
        EXPECT_NEAR(s["classes"]["chat"]["ttft_ms"]["p99"].get<double>() / 1000, 168.1, 0.05);
      }
      int n = 0;
      for (const auto& row : read_csv(run / "requests.csv")) {
        n += row.at("class") == "batch" && !row.at("ttft_ms").empty() &&
             std::stod(row.at("ttft_ms")) <= 60000;
      }
      EXPECT_EQ(n, within[k]);
    }
  }
  // sjf with starvation prevention after 5 s falls back to arrival order during the flood: chat
  // TTFT p50 110.3 s, 13.1 % meet the SLO.
  {
    const fs::path run = dir / "sjf-wait5";
    const Cli c = run_sim("run " + kLessons + "sharing-a-server.yaml --quiet --set " +
                              "'policies.queue={name: sjf, max_wait_s: 5}' --out " + run.string(),
                          dir);
    ASSERT_EQ(c.code, 0) << c.err;
    const json s = summary(run);
    EXPECT_NEAR(s["classes"]["chat"]["ttft_ms"]["p50"].get<double>() / 1000, 110.3, 0.05);
    EXPECT_NEAR(100 * s["classes"]["chat"]["goodput"]["slo_attainment"].get<double>(), 13.1, 0.05);
  }
  // At 10 chat requests/s: fair makes the chat class wait its turn, priority does not; the
  // batch fares the same under both.
  const double at10[2][3] = {{342.1, 87.9, 292.5}, {140.8, 99.4, 292.6}};
  for (int k = 0; k < 2; ++k) {
    const fs::path run = dir / (k == 0 ? "fair10" : "priority10");
    const Cli c =
        run_sim("run " + kLessons + "sharing-a-server.yaml --quiet --set " +
                    (k == 0 ? "policies.queue=fair" : "policies.queue=priority") +
                    " --set 'workload.parts[0].workload.arrival.rate=10' --out " + run.string(),
                dir);
    ASSERT_EQ(c.code, 0) << c.err;
    const json s = summary(run);
    EXPECT_NEAR(s["classes"]["chat"]["ttft_ms"]["p50"].get<double>(), at10[k][0], 0.05);
    EXPECT_NEAR(100 * s["classes"]["chat"]["goodput"]["slo_attainment"].get<double>(), at10[k][1],
                0.05);
    EXPECT_NEAR(s["classes"]["batch"]["e2e_ms"]["p99"].get<double>() / 1000, at10[k][2], 0.05);
  }
}

// docs/lessons/reserve-or-preempt.md
TEST(Lessons, ReserveOrPreempt) {
  const fs::path dir = temp_dir("lesson_reserve");
  const fs::path out = compare("reserve-or-preempt.yaml", dir);
  const char* const names[] = {"vllm",   "prefill-first", "sglang-own",
                               "sglang", "sglang-cap",    "vllm-cap"};
  // The page's table: TTFT p50 and p99 (ms), TPOT p99 (ms), goodput (req/s), preemptions,
  // recomputed tokens.
  const double table[6][6] = {
      {280.9, 3833.4, 19.99, 10.85, 254, 78022}, {371.6, 4406.8, 20.53, 10.25, 44, 13038},
      {967.2, 5677.2, 18.59, 8.02, 1, 216},      {496.5, 4864.8, 20.25, 9.42, 1, 945},
      {1996.9, 7469.3, 18.19, 6.22, 0, 0},       {280.9, 3833.4, 19.99, 10.85, 254, 78022}};
  json s[6];
  for (int v = 0; v < 6; ++v) {
    SCOPED_TRACE(names[v]);
    s[v] = summary(out / names[v]);
    EXPECT_EQ(s[v]["requests"]["completed"], 2000);
    // The same 161 s and 3,104 to 3,107 output tokens/s for all.
    EXPECT_NEAR(s[v]["duration_s"].get<double>(), 161, 0.5);
    EXPECT_GE(std::round(s[v]["throughput"]["output_tokens_per_s"].get<double>()), 3104);
    EXPECT_LE(std::round(s[v]["throughput"]["output_tokens_per_s"].get<double>()), 3107);
    EXPECT_NEAR(s[v]["ttft_ms"]["p50"].get<double>(), table[v][0], 0.05);
    EXPECT_NEAR(s[v]["ttft_ms"]["p99"].get<double>(), table[v][1], 0.05);
    EXPECT_NEAR(s[v]["tpot_ms"]["p99"].get<double>(), table[v][2], 0.005);
    EXPECT_NEAR(s[v]["goodput"]["requests_per_s"].get<double>(), table[v][3], 0.005);
    EXPECT_EQ(s[v]["preemption"]["preemptions"], static_cast<std::int64_t>(table[v][4]));
    EXPECT_EQ(s[v]["preemption"]["recomputed_tokens"], static_cast<std::int64_t>(table[v][5]));
  }
  // vllm-cap is vllm to the digit: vLLM's admission never reads max_tokens (the same steps; only
  // requests.csv's finish reasons differ, "stop" before max_tokens instead of "length").
  EXPECT_TRUE(read_file(out / "vllm" / "steps.csv") == read_file(out / "vllm-cap" / "steps.csv"));
  // 78,022 tokens are 5.3 % of the 1.46 M prompt tokens vllm computes.
  const double prefilled =
      static_cast<double>(sum_column(out / "vllm" / "steps.csv", "prefill_tokens"));
  EXPECT_NEAR(prefilled / 1e6, 1.46, 0.005);
  EXPECT_NEAR(100 * 78022 / prefilled, 5.3, 0.05);
  // The step shape's share of the gap: about 90 ms.
  EXPECT_NEAR(table[1][0] - table[0][0], 90, 1);
  // Outputs of 249.9 tokens on average; the cap 1,536 is about six times that.
  EXPECT_NEAR(static_cast<double>(s[0]["throughput"]["output_tokens"].get<std::int64_t>()) / 2000,
              249.9, 0.05);
  // sglang-own: its one preemption 11 s into the run, 14,313 steps in all.
  EXPECT_EQ(s[2]["num_steps"], 14313);
  for (const auto& row : read_csv(out / "sglang-own" / "steps.csv")) {
    if (row.at("preempted") != "0") {
      EXPECT_NEAR(std::stod(row.at("start_s")), 11, 0.5);
    }
  }
  // Arrivals in the first 11 s: TTFT p50 96.6 and 96.7 ms; after: 1,250.2 against 626.4.
  for (int v : {2, 3}) {
    std::vector<double> before, after;
    for (const auto& row : read_csv(out / names[v] / "requests.csv")) {
      (std::stod(row.at("arrival_s")) < 11 ? before : after)
          .push_back(std::stod(row.at("ttft_ms")));
    }
    std::sort(before.begin(), before.end());
    std::sort(after.begin(), after.end());
    EXPECT_NEAR(percentile_sorted(before, 50), v == 2 ? 96.6 : 96.7, 0.05) << names[v];
    EXPECT_NEAR(percentile_sorted(after, 50), v == 2 ? 1250.2 : 626.4, 0.05) << names[v];
  }
  // The decay at conservativeness 0.01: 0.7 x 0.01 x 0.86 / 600 = 1.0e-5 per decode step, below
  // 0.15 over the run; at 1, from at most 1 to the floor 0.098 within 900 steps.
  EXPECT_NEAR(0.7 * 0.01 * 0.86 / 600, 1.0e-5, 0.05e-5);
  EXPECT_LT(0.7 * 0.01 * 0.86 / 600 * 14313, 0.15);
  EXPECT_LE((1 - 0.098) / (0.7 * 0.86 / 600), 900);
  // Six other seeds: conservativeness 0.01 has the higher TTFT p50 on every one.
  for (int seed = 1; seed <= 6; ++seed) {
    double p50[2];
    for (int k = 0; k < 2; ++k) {
      const fs::path run = dir / ("seed" + std::to_string(seed) + "-" + std::to_string(k));
      const Cli c = run_sim(
          "run " + kLessons + "reserve-or-preempt.yaml --quiet --seed " + std::to_string(seed) +
              " --set 'policies.batch={name: sglang, schedule_conservativeness: " +
              (k == 0 ? "0.01" : "1") + "}' --out " + run.string(),
          dir);
      ASSERT_EQ(c.code, 0) << c.err;
      p50[k] = summary(run)["ttft_ms"]["p50"].get<double>();
    }
    EXPECT_GT(p50[0], p50[1]) << "seed " << seed;
  }
  // Long answers: vllm against sglang.
  const fs::path lng = dir / "long";
  fs::create_directories(lng);
  const fs::path long_out = compare(
      "reserve-or-preempt.yaml", lng,
      "--set workload.arrival.rate=0.7 --set workload.num_requests=1000 --set "
      "'workload.prompt_len={dist: lognormal, mean: 2500, stddev: 1500, min: 32, max: 6144}' "
      "--set 'workload.output_len={dist: lognormal, mean: 900, stddev: 600, min: 8, max: 2000}'");
  // preemptions, recomputed tokens, TPOT p99, worst TPOT, TTFT p50
  const double longs[2][5] = {{112, 104321, 14.21, 32.4, 295.5}, {17, 21238, 12.25, 17.0, 304.5}};
  for (int k = 0; k < 2; ++k) {
    const fs::path run = long_out / (k == 0 ? "vllm" : "sglang");
    SCOPED_TRACE(run.string());
    const json l = summary(run);
    EXPECT_EQ(l["preemption"]["preemptions"], static_cast<std::int64_t>(longs[k][0]));
    EXPECT_EQ(l["preemption"]["recomputed_tokens"], static_cast<std::int64_t>(longs[k][1]));
    EXPECT_NEAR(l["tpot_ms"]["p99"].get<double>(), longs[k][2], 0.005);
    double worst = 0;
    for (const auto& row : read_csv(run / "requests.csv"))
      worst = std::max(worst, std::stod(row.at("tpot_ms")));
    EXPECT_NEAR(worst, longs[k][3], 0.05);
    EXPECT_NEAR(l["ttft_ms"]["p50"].get<double>(), longs[k][4], 0.05);
  }
  fs::remove_all(dir);
}

// docs/lessons/gpu-decode-cost.md: the numbers come from the H200 profile and calibrated model
// that ship in experiments/catalog/calibrated/ (measured 2026-11-28) and from the lesson's
// `sim compare`.
namespace gpu_decode_cost {

// The measured median of the profile's decode row of `seqs` sequences at context `ctx`, ms.
double measured_decode_ms(const EngineProfile& p, std::int64_t seqs, std::int64_t ctx) {
  for (const ProfileRow& r : p.rows) {
    if (r.family == "decode" && r.features.step.decode_tokens == seqs &&
        r.features.step.decode_context_tokens == seqs * ctx) {
      return static_cast<double>(r.median_ns) / 1e6;
    }
  }
  ADD_FAILURE() << "no decode row for " << seqs << " x " << ctx;
  return 0;
}

double measured_chunk_ms(const EngineProfile& p, std::int64_t tokens, std::int64_t context) {
  for (const ProfileRow& r : p.rows) {
    if (r.family == "chunk" && r.features.step.prefill_tokens == tokens &&
        r.features.step.prefill_context_tokens == context) {
      return static_cast<double>(r.median_ns) / 1e6;
    }
  }
  ADD_FAILURE() << "no chunk row for " << tokens << " after " << context - tokens;
  return 0;
}

// A decode step of `seqs` sequences at context `ctx`, priced by `cm`, ms.
double priced_decode_ms(const CostModel& cm, std::int32_t seqs, std::int32_t ctx) {
  StepPlan plan;
  for (std::int32_t i = 0; i < seqs; ++i) {
    ScheduledRequest r;
    r.first_token = ctx - 1;
    r.num_tokens = 1;
    r.is_prefill = false;
    r.samples = true;
    plan.requests.push_back(r);
  }
  plan.num_decode_tokens = seqs;
  return static_cast<double>(cm.step_time(plan)) / 1e6;
}

}  // namespace gpu_decode_cost

TEST(Lessons, GpuDecodeCost) {
  using namespace gpu_decode_cost;
  const std::string cal = servelab_home().string() + "/experiments/catalog/calibrated/";
  const EngineProfile p = read_profile(cal + "llama-3-8b-h200-profile.csv");
  const ModelConfig m = load_model("Llama-3-8B", default_catalog_dir());
  const HardwareConfig h200 = load_hardware("H200", default_catalog_dir());
  const RooflineCostModel roof(m, h200, 16);
  const CalibratedCostModel calibrated(load_calibrated_profile(cal + "llama-3-8b-h200.yaml"), 16);
  // Batching at context 16: measured, tokens per second, roofline.
  const std::int32_t seqs[] = {1, 32, 128, 256};
  const double measured[] = {5.30, 5.39, 6.20, 8.60};
  const double tokens_per_s[] = {189, 5939, 20633, 29755};
  const double roofline[] = {5.03, 5.48, 7.42, 10.45};
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(seqs[i]);
    const double ms = measured_decode_ms(p, seqs[i], 16);
    EXPECT_NEAR(ms, measured[i], 0.005);
    EXPECT_NEAR(seqs[i] / ms * 1e3, tokens_per_s[i], 0.5);
    EXPECT_NEAR(priced_decode_ms(roof, seqs[i], 16), roofline[i], 0.005);
  }
  const double one = measured_decode_ms(p, 1, 16);
  EXPECT_NEAR(measured_decode_ms(p, 32, 16) / one, 1.02, 0.005);
  EXPECT_NEAR(measured_decode_ms(p, 128, 16) / one, 1.17, 0.005);
  EXPECT_NEAR(32 * one / measured_decode_ms(p, 32, 16), 31, 0.5);
  EXPECT_NEAR(128 * one / measured_decode_ms(p, 128, 16), 109, 0.6);
  // The weights' read time at the measured copy bandwidth, and the floor above it.
  const double weights_gb =
      2.0 *
      (32.0 * (4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096 + 3.0 * 4096 * 14336) + 128256.0 * 4096) /
      1e9;
  EXPECT_NEAR(weights_gb, 15.0, 0.05);
  EXPECT_NEAR(weights_gb / 4224 * 1e3, 3.55, 0.005);
  EXPECT_NEAR(one - weights_gb / 4224 * 1e3, 1.75, 0.05);
  // Context at 32 sequences.
  const std::int32_t ctx[] = {16, 1024, 4096, 8192};
  const double measured_ctx[] = {5.39, 6.45, 9.53, 13.64};
  const double roofline_ctx[] = {5.48, 6.48, 9.53, 13.60};
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(ctx[i]);
    EXPECT_NEAR(measured_decode_ms(p, 32, ctx[i]), measured_ctx[i], 0.005);
    EXPECT_NEAR(priced_decode_ms(roof, 32, ctx[i]), roofline_ctx[i], 0.005);
  }
  EXPECT_EQ(kv_block_bytes(m, 16) / 16, 131072);  // 128 KiB a token
  const double kv_gb = 32.0 * 8192 * 131072 / 1e9;
  EXPECT_NEAR(kv_gb, 34.4, 0.05);
  const double extra_ms = measured_decode_ms(p, 32, 8192) - measured_decode_ms(p, 32, 16);
  EXPECT_NEAR(extra_ms, 8.25, 0.005);
  EXPECT_NEAR(kv_gb / extra_ms, 4.17, 0.005);  // TB/s
  // The chunk after a short and a long prefix.
  EXPECT_NEAR(measured_chunk_ms(p, 16, 16 + 128), 5.72, 0.005);
  EXPECT_NEAR(measured_chunk_ms(p, 16, 16 + 6144), 8.17, 0.005);
  // The calibrated model's host overhead and what it does to a large batch.
  EXPECT_NEAR(calibrated.profile().coefficients.per_sequence_s * 1e6, 7.56, 0.005);
  EXPECT_NEAR(priced_decode_ms(calibrated, 128, 16), 7.79, 0.005);

  // The lesson's experiment.
  const fs::path dir = temp_dir("lesson_gpu_decode");
  const Cli r = run_sim(
      "compare " + kLessons + "gpu-decode-cost.yaml --quiet --out " + (dir / "c").string(), dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const json ro = summary(dir / "c" / "roofline");
  const json ca = summary(dir / "c" / "calibrated");
  EXPECT_NEAR(ro["throughput"]["output_tokens_per_s"].get<double>(), 3616, 0.5);
  EXPECT_NEAR(ca["throughput"]["output_tokens_per_s"].get<double>(), 3601, 0.5);
  EXPECT_NEAR(ro["tpot_ms"]["p50"].get<double>(), 6.41, 0.005);
  EXPECT_NEAR(ca["tpot_ms"]["p50"].get<double>(), 6.76, 0.005);
  EXPECT_NEAR(ca["tpot_ms"]["p50"].get<double>() / ro["tpot_ms"]["p50"].get<double>(), 1.06, 0.005);
  fs::remove_all(dir);
}

// docs/lessons/pd-disaggregation.md
TEST(Lessons, PdDisaggregation) {
  const fs::path dir = temp_dir("lesson_pd");
  const fs::path out = compare("pd-disaggregation.yaml", dir, "--record-events");
  const char* const names[] = {"unified-4",
                               "unified-4-chunk-256",
                               "pd-1-3",
                               "pd-2-2",
                               "pd-3-1",
                               "pd-1-3-50gbe",
                               "pd-1-3-25gbe",
                               "pd-1-3-50gbe-layerwise",
                               "pd-1-3-25gbe-layerwise",
                               "pd-1-3-50gbe-fair",
                               "pd-1-3-25gbe-per-pair"};
  // The page's first table: TTFT p50, p99, TPOT p50, p99, ITL p99 (ms), goodput (req/s), the
  // share meeting the SLO (%).
  const double table[11][7] = {{78.9, 235.3, 10.10, 12.86, 82.2, 5.06, 45.65},
                               {175.2, 506.0, 9.55, 11.70, 14.0, 7.83, 70.7},
                               {317.8, 1151.8, 8.43, 9.34, 9.5, 10.59, 95.6},
                               {79.5, 260.3, 9.82, 11.40, 11.7, 6.62, 59.75},
                               {69.4, 190.8, 19.75, 25.25, 25.8, 0.03, 0.3},
                               {317.8, 1151.8, 8.85, 10.49, 9.7, 10.16, 91.95},
                               {317.8, 1151.8, 129.86, 604.53, 9.0, 0.09, 1.1},
                               {317.8, 1151.8, 8.38, 9.35, 9.6, 10.59, 95.6},
                               {317.8, 1151.8, 129.51, 603.71, 9.0, 0.09, 1.2},
                               {317.8, 1151.8, 8.94, 10.96, 9.6, 9.95, 89.9},
                               {317.8, 1151.8, 9.03, 11.54, 9.7, 9.52, 85.95}};
  json s[11];
  for (int v = 0; v < 11; ++v) {
    SCOPED_TRACE(names[v]);
    s[v] = summary(out / names[v]);
    EXPECT_EQ(s[v]["requests"]["completed"], 2000);
    EXPECT_NEAR(s[v]["ttft_ms"]["p50"].get<double>(), table[v][0], 0.05);
    EXPECT_NEAR(s[v]["ttft_ms"]["p99"].get<double>(), table[v][1], 0.05);
    EXPECT_NEAR(s[v]["tpot_ms"]["p50"].get<double>(), table[v][2], 0.005);
    EXPECT_NEAR(s[v]["tpot_ms"]["p99"].get<double>(), table[v][3], 0.005);
    EXPECT_NEAR(s[v]["itl_ms"]["p99"].get<double>(), table[v][4], 0.05);
    EXPECT_NEAR(s[v]["goodput"]["requests_per_s"].get<double>(), table[v][5], 0.005);
    EXPECT_NEAR(100 * s[v]["goodput"]["slo_attainment"].get<double>(), table[v][6], 0.001);
  }
  // Interference in a unified replica: 1,985 steps carry a prompt, 79.3 ms and 3,012 prompt
  // tokens each on average, 22 % of the time, against 8.1 ms a decode-only step; one decode
  // token in 37 is in such a step.
  {
    std::int64_t prompt_steps = 0, prompt_tokens = 0, decodes_in_prompt_steps = 0, decodes = 0;
    double prompt_ms = 0, decode_only_ms = 0, decode_only_steps = 0;
    for (const auto& row : read_csv(out / "unified-4" / "steps.csv")) {
      const std::int64_t prefill = std::stoll(row.at("prefill_tokens"));
      const std::int64_t decode = std::stoll(row.at("decode_tokens"));
      const double ms = std::stod(row.at("duration_ms"));
      decodes += decode;
      if (prefill > 0) {
        ++prompt_steps;
        prompt_tokens += prefill;
        prompt_ms += ms;
        decodes_in_prompt_steps += decode;
      } else if (decode > 0) {
        ++decode_only_steps;
        decode_only_ms += ms;
      }
    }
    EXPECT_EQ(prompt_steps, 1985);
    EXPECT_NEAR(prompt_ms / prompt_steps, 79.3, 0.05);
    EXPECT_NEAR(static_cast<double>(prompt_tokens) / prompt_steps, 3012, 0.5);
    EXPECT_NEAR(decode_only_ms / decode_only_steps, 8.1, 0.05);
    EXPECT_NEAR(100 * prompt_ms / (prompt_ms + decode_only_ms), 22, 0.5);
    EXPECT_NEAR(static_cast<double>(decodes) / decodes_in_prompt_steps, 37, 0.5);
  }
  // Who misses the SLO: unified-4's 1,087 by TPOT only, pd-1-3's 88 by TTFT only.
  auto misses = [](const fs::path& run, double tpot_ms) {
    int ttft = 0, tpot = 0, any = 0;
    for (const auto& row : read_csv(run / "requests.csv")) {
      const bool late = std::stod(row.at("ttft_ms")) > 1000;
      const bool slow = std::stod(row.at("tpot_ms")) > tpot_ms;
      ttft += late;
      tpot += slow;
      any += late || slow;
    }
    return std::array<int, 3>{ttft, tpot, any};
  };
  EXPECT_EQ(misses(out / "unified-4", 10), (std::array<int, 3>{0, 1087, 1087}));
  EXPECT_EQ(misses(out / "pd-1-3", 10), (std::array<int, 3>{88, 0, 88}));
  // Busy pools: pd-1-3's prefill replica 83.5 %, pd-3-1's three 28 %.
  EXPECT_NEAR(s[2]["cluster"]["pools"][0]["busy_fraction"].get<double>(), 0.835, 0.0005);
  EXPECT_NEAR(s[4]["cluster"]["pools"][0]["busy_fraction"].get<double>(), 0.28, 0.005);
  // The KV: 128 KiB a token, 392.8 MB a request, 4.4 GB/s at pd-1-3's 11.08 requests/s.
  const json& kv = s[2]["cluster"]["kv_transfers"];
  const double per_request = kv["bytes"].get<double>() / kv["count"].get<double>();
  EXPECT_NEAR(per_request / 1e6, 392.8, 0.05);
  EXPECT_NEAR(per_request * s[2]["throughput"]["requests_per_s"].get<double>() / 1e9, 4.4, 0.05);
  EXPECT_EQ(32 * 8 * 128 * 2 * 2, 128 * 1024);
  // Through the host: 7.7 ms a transfer, the port 8.5 % busy, yet 44 % wait (5.0 ms on average)
  // behind the prompts that ended in the same prefill step: 1,436 in steps that end two to five.
  const auto busy_percent = [](const json& run) {
    return run["throughput"]["requests_per_s"].get<double>() *
           run["cluster"]["kv_transfers"]["transfer_mean_ms"].get<double>() / 10;
  };
  EXPECT_NEAR(kv["transfer_mean_ms"].get<double>(), 7.7, 0.05);
  EXPECT_NEAR(busy_percent(s[2]), 8.5, 0.05);
  EXPECT_NEAR(kv["wait_mean_ms"].get<double>(), 5.0, 0.05);
  {
    std::map<std::string, int> per_step;  // transfers by the prefill's end
    int waited = 0;
    for (const auto& row : read_csv(out / "pd-1-3" / "events.csv")) {
      if (row.at("event") != "transfer") continue;
      ++per_step[row.at("time_s")];
      waited += row.at("detail").find("wait_ms=0.000000 ") == std::string::npos;
    }
    int together = 0, most = 0;
    for (const auto& [time, n] : per_step) {
      if (n >= 2) together += n;
      most = std::max(most, n);
    }
    EXPECT_EQ(together, 1436);
    EXPECT_EQ(most, 5);
    EXPECT_EQ(waited, 888);
  }
  // 50 Gb/s: 62.9 ms a transfer, the port 69 % busy, 58.0 ms of waiting; 25 Gb/s: 125.7 ms,
  // 139 % asked of the port at pd-1-3's rate, 36.1 s of waiting on average, 75.5 s at worst.
  const json& kv50 = s[5]["cluster"]["kv_transfers"];
  EXPECT_NEAR(kv50["transfer_mean_ms"].get<double>(), 62.9, 0.05);
  EXPECT_NEAR(kv50["wait_mean_ms"].get<double>(), 58.0, 0.05);
  EXPECT_NEAR(busy_percent(s[5]), 69, 0.5);
  const json& kv25 = s[6]["cluster"]["kv_transfers"];
  EXPECT_NEAR(kv25["transfer_mean_ms"].get<double>(), 125.7, 0.05);
  EXPECT_NEAR(s[2]["throughput"]["requests_per_s"].get<double>() *
                  kv25["transfer_mean_ms"].get<double>() / 10,
              139, 0.5);
  EXPECT_NEAR(kv25["wait_mean_ms"].get<double>() / 1000, 36.1, 0.05);
  EXPECT_NEAR(kv25["max_ms"].get<double>() / 1000, 75.5, 0.05);
  // A 25 Gb/s link per pair: each of the three 46 % busy, 54.4 ms of waiting.
  const json& pair25 = s[10]["cluster"]["kv_transfers"];
  EXPECT_NEAR(busy_percent(s[10]) / 3, 46, 0.5);
  EXPECT_NEAR(pair25["wait_mean_ms"].get<double>(), 54.4, 0.05);
  // What the decode waits after the prefill: 12.7 ms at the host link, 120.9 behind 50 Gb/s,
  // 2.5 streamed layer by layer (5.4 at worst: the prompts of a step interleave their layers on
  // the port); 36.2 s behind 25 Gb/s, 36.1 layer-wise.
  EXPECT_NEAR(kv["exposed_mean_ms"].get<double>(), 12.7, 0.05);
  EXPECT_NEAR(kv50["exposed_mean_ms"].get<double>(), 120.9, 0.05);
  EXPECT_NEAR(s[7]["cluster"]["kv_transfers"]["exposed_mean_ms"].get<double>(), 2.5, 0.05);
  EXPECT_NEAR(s[7]["cluster"]["kv_transfers"]["max_ms"].get<double>(), 5.4, 0.05);
  // It keeps up: the prefill replica makes KV at about 83 % of the port's rate while it computes
  // (the port 69 % busy, the replica 83.5 %).
  EXPECT_NEAR(
      busy_percent(s[5]) / (100 * s[2]["cluster"]["pools"][0]["busy_fraction"].get<double>()), 0.83,
      0.005);
  EXPECT_NEAR(kv25["exposed_mean_ms"].get<double>() / 1000, 36.2, 0.05);
  EXPECT_NEAR(s[8]["cluster"]["kv_transfers"]["exposed_mean_ms"].get<double>() / 1000, 36.1, 0.05);
  // Sharing the 50 Gb/s port instead of queueing: the decode waits 146.9 ms on average instead
  // of 120.9, at worst 540.5 ms instead of 298.6; the smallest quarter of the KV (by bytes)
  // 99.6 instead of 113.0, the largest 195.8 instead of 132.5; the sizes' c is 0.47.
  const json& fair = s[9]["cluster"]["kv_transfers"];
  EXPECT_EQ(fair["wait_mean_ms"].get<double>(), 0);
  EXPECT_EQ(fair["bytes"], kv50["bytes"]);
  EXPECT_NEAR(fair["exposed_mean_ms"].get<double>(), 146.9, 0.05);
  EXPECT_NEAR(fair["max_ms"].get<double>(), 540.5, 0.05);
  EXPECT_NEAR(kv50["max_ms"].get<double>(), 298.6, 0.05);
  const auto quarters = [](const fs::path& run) {
    std::vector<std::pair<double, double>> t;  // (bytes, wait + transfer ms)
    for (const auto& row : read_csv(run / "events.csv")) {
      if (row.at("event") != "transfer") continue;
      double bytes = 0, wait = 0, transfer = 0;
      const std::string& d = row.at("detail");
      EXPECT_EQ(std::sscanf(d.c_str() + d.find(' '), " bytes=%lf wait_ms=%lf transfer_ms=%lf",
                            &bytes, &wait, &transfer),
                3)
          << d;
      t.emplace_back(bytes, wait + transfer);
    }
    std::sort(t.begin(), t.end());
    const std::size_t q = t.size() / 4;
    double small = 0, large = 0, sum = 0, sq = 0;
    for (std::size_t i = 0; i < q; ++i) {
      small += t[i].second / static_cast<double>(q);
      large += t[t.size() - 1 - i].second / static_cast<double>(q);
    }
    for (const auto& [bytes, ms] : t) {
      sum += bytes;
      sq += bytes * bytes;
    }
    const double n = static_cast<double>(t.size()), mean = sum / n;
    return std::array<double, 3>{small, large, std::sqrt(sq / n - mean * mean) / mean};
  };
  const std::array<double, 3> queued = quarters(out / "pd-1-3-50gbe");
  const std::array<double, 3> shared = quarters(out / "pd-1-3-50gbe-fair");
  EXPECT_NEAR(queued[0], 113.0, 0.05);
  EXPECT_NEAR(shared[0], 99.6, 0.05);
  EXPECT_NEAR(queued[1], 132.5, 0.05);
  EXPECT_NEAR(shared[1], 195.8, 0.05);
  EXPECT_NEAR(queued[2], 0.47, 0.005);
  // Prompts of c = 1.45 at 14 requests/s: sharing 36.5 ms on average, queueing 52.1.
  double exposed[2];
  for (int m = 0; m < 2; ++m) {
    const std::string name = m == 0 ? "queue" : "fair";
    const Cli r = run_sim(
        "run " + kLessons +
            "pd-disaggregation.yaml --quiet --set 'cluster.pools=[{name: prefill, count: 1, "
            "role: prefill}, {name: decode, count: 3, role: decode}]' --set "
            "'cluster.kv_transfer={bandwidth_gb_s: 6.25, sharing: " +
            name +
            "}' --set 'workload.prompt_len={dist: lognormal, mean: 1500, stddev: 4500, min: 16, "
            "max: 7900}' --set workload.arrival.rate=14 --record-events --out " +
            (dir / name).string(),
        dir);
    ASSERT_EQ(r.code, 0) << r.err;
    exposed[m] = summary(dir / name)["cluster"]["kv_transfers"]["exposed_mean_ms"].get<double>();
    EXPECT_NEAR(quarters(dir / name)[2], 1.45, 0.005);
  }
  EXPECT_NEAR(exposed[0], 52.1, 0.05);
  EXPECT_NEAR(exposed[1], 36.5, 0.05);

  // The sweep: the highest rate of the grid with >= 90 % meeting the interactive and the loose
  // SLO, and the highest goodput, per setup.
  const Cli r = run_sim("sweep " + kLessons + "pd-disaggregation.yaml --quiet --no-plot --out " +
                            (dir / "sweep").string(),
                        dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = read_csv(dir / "sweep" / "sweep.csv");
  ASSERT_EQ(rows.size(), 35u);
  const char* const swept[] = {"unified-4", "unified-4-chunk-256", "pd-1-3", "pd-2-2", "pd-3-1"};
  const int tight[] = {8, 10, 12, 10, 4};
  const int loose[] = {16, 16, 12, 16, 12};
  const double best[] = {7.46, 8.78, 10.59, 8.49, 3.66};
  for (int v = 0; v < 5; ++v) {
    SCOPED_TRACE(swept[v]);
    int tight_max = 0, loose_max = 0;
    double goodput = 0, loose_at_16 = 0;
    for (const auto& row : rows) {
      if (row.at("variant") != swept[v]) continue;
      const int rate = std::stoi(row.at("workload.arrival.rate"));
      if (std::stod(row.at("slo_attainment")) >= 0.9) tight_max = std::max(tight_max, rate);
      const auto m = misses(dir / "sweep" / row.at("point"), 30);
      const double met = 1 - m[2] / 2000.0;
      if (met >= 0.9) loose_max = std::max(loose_max, rate);
      if (rate == 16) loose_at_16 = met;
      goodput = std::max(goodput, std::stod(row.at("goodput_requests_per_s")));
    }
    EXPECT_EQ(tight_max, tight[v]);
    EXPECT_EQ(loose_max, loose[v]);
    EXPECT_NEAR(goodput, best[v], 0.005);
    if (loose[v] == 16) {
      EXPECT_GE(loose_at_16, 0.997);
    }
  }
  // One prefill GPU completes 13.0 prompts a second at 16 requests/s.
  for (const auto& row : rows) {
    if (row.at("variant") == "pd-1-3" && row.at("workload.arrival.rate") == "16") {
      EXPECT_NEAR(std::stod(row.at("requests_per_s")), 13.0, 0.05);
    }
  }
}

// docs/lessons/parallel-pools.md
TEST(Lessons, ParallelPools) {
  const fs::path dir = temp_dir("lesson_parallel_pools");
  const fs::path out = compare("parallel-pools.yaml", dir);
  const char* const names[] = {"unified-4x-tp2", "unified-2x-tp4",          "unified-1x-tp8",
                               "pd-tp2x1-tp2x3", "pd-tp2x2-tp2x2",          "pd-tp4x1-tp2x2",
                               "pd-tp2x2-tp4x1", "pd-tp2x2-tp4x1-two-nodes"};
  // The page's first table: TTFT p50, p99, TPOT p50, p99, ITL p99 (ms), goodput (req/s), the
  // share meeting the SLO (%).
  const double table[8][7] = {{249.2, 744.2, 30.73, 41.50, 298.1, 0.37, 6.7},
                              {177.9, 699.0, 23.57, 35.87, 226.6, 3.79, 66.4},
                              {185.6, 847.8, 31.72, 57.31, 283.9, 0.81, 14.1},
                              {46308.6, 89199.1, 20.82, 21.24, 21.3, 0.01, 0.2},
                              {319.6, 1433.4, 22.05, 23.06, 23.2, 5.53, 99.3},
                              {519.8, 2172.3, 22.05, 22.86, 23.0, 5.05, 90.8},
                              {319.6, 1433.4, 14.97, 15.91, 16.0, 5.67, 99.3},
                              {319.6, 1433.4, 15.02, 16.01, 16.0, 5.67, 99.3}};
  json s[8];
  for (int v = 0; v < 8; ++v) {
    SCOPED_TRACE(names[v]);
    s[v] = summary(out / names[v]);
    EXPECT_EQ(s[v]["requests"]["completed"], 1500);
    EXPECT_EQ(s[v]["cluster"]["gpus"], 8);  // every layout uses the whole node
    EXPECT_NEAR(s[v]["ttft_ms"]["p50"].get<double>(), table[v][0], 0.05);
    EXPECT_NEAR(s[v]["ttft_ms"]["p99"].get<double>(), table[v][1], 0.05);
    EXPECT_NEAR(s[v]["tpot_ms"]["p50"].get<double>(), table[v][2], 0.005);
    EXPECT_NEAR(s[v]["tpot_ms"]["p99"].get<double>(), table[v][3], 0.005);
    EXPECT_NEAR(s[v]["itl_ms"]["p99"].get<double>(), table[v][4], 0.05);
    EXPECT_NEAR(s[v]["goodput"]["requests_per_s"].get<double>(), table[v][5], 0.005);
    EXPECT_NEAR(100 * s[v]["goodput"]["slo_attainment"].get<double>(), table[v][6], 0.05);
  }
  // The prefill pools' busy share: 79 % of the run for the wide replica, 65 % for the narrow
  // ones, 85 % and 70 % of the arrivals' window (the run's last 19 s only drain the decodes).
  for (const auto& [v, run, window] : {std::tuple{5, 0.79, 0.85}, std::tuple{4, 0.65, 0.70}}) {
    SCOPED_TRACE(names[v]);
    const json& pool = s[v]["cluster"]["pools"][0];
    ASSERT_EQ(pool["role"], "prefill");
    const double busy = pool["busy_fraction"].get<double>();
    double first = 1e300, last = 0;
    for (const auto& r : read_csv(out / names[v] / "requests.csv")) {
      first = std::min(first, std::stod(r.at("arrival_s")));
      last = std::max(last, std::stod(r.at("arrival_s")));
    }
    EXPECT_NEAR(busy, run, 0.005);
    EXPECT_NEAR(busy * s[v]["duration_s"].get<double>() / (last - first), window, 0.005);
  }
  // The workload: prompts of 2,015 tokens and answers of 247 on average.
  {
    double prompt = 0, output = 0;
    const auto rows = read_csv(out / names[0] / "requests.csv");
    for (const auto& r : rows) {
      prompt += std::stod(r.at("prompt_tokens"));
      output += std::stod(r.at("output_tokens"));
    }
    EXPECT_NEAR(prompt / rows.size(), 2015, 0.5);
    EXPECT_NEAR(output / rows.size(), 247, 0.5);
  }
  // Steps: decode-only ones (ms, sequences) and prompt ones (ms, prompt tokens), the share of
  // time in prompt steps.
  struct Steps {
    double decode_ms, decode_seqs, prompt_ms, prompt_tokens, prompt_share;
  };
  auto steps = [&](const char* name) {
    double dn = 0, dms = 0, dseq = 0, pn = 0, pms = 0, ptok = 0;
    for (const auto& row : read_csv(out / name / "steps.csv")) {
      const double ms = std::stod(row.at("duration_ms"));
      if (std::stoll(row.at("prefill_tokens")) > 0) {
        ++pn;
        pms += ms;
        ptok += std::stod(row.at("prefill_tokens"));
      } else {
        ++dn;
        dms += ms;
        dseq += std::stod(row.at("decode_tokens"));
      }
    }
    return Steps{dms / dn, dseq / dn, pms / pn, ptok / pn, pms / (pms + dms)};
  };
  const Steps tp2 = steps("unified-4x-tp2"), tp4 = steps("unified-2x-tp4"),
              tp8 = steps("unified-1x-tp8");
  EXPECT_NEAR(tp2.decode_ms, 21.18, 0.005);
  EXPECT_NEAR(tp2.decode_seqs, 10.7, 0.05);
  EXPECT_NEAR(tp4.decode_ms, 14.42, 0.005);
  EXPECT_NEAR(tp4.decode_seqs, 16.7, 0.05);
  EXPECT_NEAR(tp8.decode_ms, 13.95, 0.005);
  EXPECT_NEAR(tp8.decode_seqs, 41.2, 0.05);
  EXPECT_NEAR(tp2.prompt_ms, 239.18, 0.005);
  EXPECT_NEAR(tp4.prompt_ms, 156.88, 0.005);
  EXPECT_NEAR(tp8.prompt_ms, 137.42, 0.005);
  EXPECT_NEAR(100 * tp8.prompt_share, 59, 0.5);
  // Prefill pools: 0.115 ms a prompt token on a replica of two, 0.070 on one of four; 17,300
  // and 14,200 tokens a second from the pools; 12,100 of work at 6 requests/s.
  const Steps pd22 = steps("pd-tp2x2-tp2x2"), pd41 = steps("pd-tp4x1-tp2x2");
  const double per_token_tp2 = pd22.prompt_ms / pd22.prompt_tokens;
  const double per_token_tp4 = pd41.prompt_ms / pd41.prompt_tokens;
  EXPECT_NEAR(per_token_tp2, 0.115, 0.0005);
  EXPECT_NEAR(per_token_tp4, 0.070, 0.0005);
  EXPECT_NEAR(2 * 1000 / per_token_tp2, 17300, 50);
  EXPECT_NEAR(1000 / per_token_tp4, 14200, 50);
  EXPECT_NEAR(1000 / per_token_tp2, 8700, 50);
  EXPECT_NEAR(6 * 2015, 12100, 50);
  EXPECT_NEAR(8 * 2015, 16100, 50);
  // Busy prefill pools: one replica of four 79 %, two of two about 65 %.
  EXPECT_NEAR(s[5]["cluster"]["pools"][0]["busy_fraction"].get<double>(), 0.79, 0.005);
  EXPECT_NEAR(s[4]["cluster"]["pools"][0]["busy_fraction"].get<double>(), 0.65, 0.01);
  EXPECT_NEAR(s[6]["cluster"]["pools"][0]["busy_fraction"].get<double>(), 0.65, 0.02);
  // Who misses: unified layouts by TPOT (1,399 and 504), split ones by TTFT (11 and 138).
  auto misses = [&](const char* name) {
    int ttft = 0, tpot = 0;
    for (const auto& row : read_csv(out / name / "requests.csv")) {
      ttft += std::stod(row.at("ttft_ms")) > 1500;
      tpot += std::stod(row.at("tpot_ms")) > 25;
    }
    return std::array<int, 2>{ttft, tpot};
  };
  EXPECT_EQ(misses("unified-4x-tp2"), (std::array<int, 2>{0, 1399}));
  EXPECT_EQ(misses("unified-2x-tp4"), (std::array<int, 2>{0, 504}));
  EXPECT_EQ(misses("pd-tp2x2-tp4x1"), (std::array<int, 2>{11, 0}));
  EXPECT_EQ(misses("pd-tp4x1-tp2x2"), (std::array<int, 2>{138, 0}));
  // The two layouts sharing a prefill pool have the same first tokens, request by request.
  {
    const auto a = read_csv(out / "pd-tp2x2-tp2x2" / "requests.csv");
    const auto b = read_csv(out / "pd-tp2x2-tp4x1" / "requests.csv");
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].at("ttft_ms"), b[i].at("ttft_ms"));
  }
  // 1.5 times the best unified layout's goodput.
  EXPECT_NEAR(s[6]["goodput"]["requests_per_s"].get<double>() /
                  s[1]["goodput"]["requests_per_s"].get<double>(),
              1.5, 0.05);
  // The KV: 320 KiB a token, 662.8 MB a request, 994 GB in all; 1.16 ms a transfer over NVLink,
  // 10.42 over InfiniBand with 1.73 ms of waiting.
  EXPECT_EQ(80 * 8 * 128 * 2 * 2, 320 * 1024);
  const json& kv = s[6]["cluster"]["kv_transfers"];
  EXPECT_NEAR(kv["bytes"].get<double>() / kv["count"].get<double>() / 1e6, 662.8, 0.05);
  EXPECT_NEAR(kv["bytes"].get<double>() / 1e9, 994, 0.5);
  EXPECT_NEAR(kv["transfer_mean_ms"].get<double>(), 1.16, 0.005);
  const json& ib = s[7]["cluster"]["kv_transfers"];
  EXPECT_NEAR(ib["transfer_mean_ms"].get<double>(), 10.42, 0.005);
  EXPECT_NEAR(ib["wait_mean_ms"].get<double>(), 1.73, 0.005);
  // Without the cluster topology: through host memory, 6.5 ms a transfer.
  {
    std::string text = read_file(fs::path(kLessons) / "parallel-pools.yaml");
    const std::string line = "  topology: {nodes: 1, gpus_per_node: 8}\n";
    ASSERT_NE(text.find(line), std::string::npos);
    text.erase(text.find(line), line.size());
    write_file(dir / "no-topology.yaml", text);
    const Cli r = run_sim("run " + (dir / "no-topology.yaml").string() +
                              " --quiet --set 'cluster.pools=[{name: p, count: 2, role: prefill, "
                              "parallel: {tensor: 2}}, {name: d, role: decode, parallel: {tensor: "
                              "4}}]' --out " +
                              (dir / "no-topology").string(),
                          dir);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NEAR(
        summary(dir / "no-topology")["cluster"]["kv_transfers"]["transfer_mean_ms"].get<double>(),
        6.5, 0.05);
  }

  // The sweep: the highest rate of the grid with >= 90 % meeting the SLO, the highest goodput.
  const Cli r = run_sim("sweep " + kLessons + "parallel-pools.yaml --quiet --no-plot --out " +
                            (dir / "sweep").string(),
                        dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = read_csv(dir / "sweep" / "sweep.csv");
  ASSERT_EQ(rows.size(), 35u);
  const int highest[] = {2, 4, 2, 2, 6, 6, 6};
  const double best[] = {1.86, 3.81, 3.48, 2.18, 5.71, 5.05, 5.90};
  std::map<std::string, std::map<int, json>> at;  // variant -> rate -> row
  for (int v = 0; v < 7; ++v) {
    SCOPED_TRACE(names[v]);
    int top = 0;
    double goodput = 0;
    for (const auto& row : rows) {
      if (row.at("variant") != names[v]) continue;
      const int rate = std::stoi(row.at("workload.arrival.rate"));
      if (std::stod(row.at("slo_attainment")) >= 0.9) top = std::max(top, rate);
      goodput = std::max(goodput, std::stod(row.at("goodput_requests_per_s")));
      at[names[v]][rate] = {{"ttft_p50", std::stod(row.at("ttft_p50_ms"))},
                            {"tpot_p50", std::stod(row.at("tpot_p50_ms"))},
                            {"met", 100 * std::stod(row.at("slo_attainment"))}};
    }
    EXPECT_EQ(top, highest[v]);
    EXPECT_NEAR(goodput, best[v], 0.005);
  }
  // At 2 requests/s: one replica of eight has the lowest TTFT (112 ms; TPOT 14.6), one of four
  // prefills faster than two of two (156 against 220).
  for (int v = 0; v < 7; ++v) {  // the swept layouts
    const char* n = names[v];
    if (std::string(n) != "unified-1x-tp8") {
      EXPECT_GT(at[n][2]["ttft_p50"].get<double>(), at["unified-1x-tp8"][2]["ttft_p50"]) << n;
    }
  }
  EXPECT_NEAR(at["unified-1x-tp8"][2]["ttft_p50"].get<double>(), 112, 0.5);
  EXPECT_NEAR(at["unified-1x-tp8"][2]["tpot_p50"].get<double>(), 14.6, 0.05);
  EXPECT_NEAR(at["pd-tp4x1-tp2x2"][2]["ttft_p50"].get<double>(), 156, 0.5);
  EXPECT_NEAR(at["pd-tp2x2-tp2x2"][2]["ttft_p50"].get<double>(), 220, 0.5);
  EXPECT_NEAR(at["unified-1x-tp8"][4]["met"].get<double>(), 89.5, 0.05);
  // At 8: 79.1 % with two prefill replicas of two, 4.7 % with one of four; at 10 the decode
  // replica of four still decodes at 16.0 ms.
  EXPECT_NEAR(at["pd-tp2x2-tp2x2"][8]["met"].get<double>(), 79.1, 0.05);
  EXPECT_NEAR(at["pd-tp2x2-tp4x1"][8]["met"].get<double>(), 79.1, 0.05);
  EXPECT_NEAR(at["pd-tp4x1-tp2x2"][8]["met"].get<double>(), 4.7, 0.05);
  EXPECT_NEAR(at["pd-tp2x2-tp4x1"][10]["tpot_p50"].get<double>(), 16.0, 0.05);
}

// docs/lessons/fleet-sizing.md
TEST(Lessons, FleetSizing) {
  const fs::path dir = temp_dir("lesson-fleet-sizing");
  const Cli r = run_sim(
      "sweep " + kLessons + "fleet-sizing.yaml --quiet --no-plot --out " + (dir / "sweep").string(),
      dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = read_csv(dir / "sweep" / "sweep.csv");
  ASSERT_EQ(rows.size(), 12u);
  // The page's table: replicas; met steady, bursty (%); TPOT p50 steady (ms); sequences per
  // step steady; goodput per GPU steady, bursty.
  struct Row {
    int replicas;
    double met[2], tpot_p50, seqs, per_gpu[2];
  };
  const Row table[] = {{5, {2.02, 2.03}, 49.77, 186.4, {0.38, 0.38}},
                       {6, {87.10, 57.65}, 22.43, 85.2, {14.03, 9.32}},
                       {7, {99.98, 95.16}, 16.20, 54.7, {13.82, 13.21}},
                       {8, {100.00, 99.81}, 13.46, 40.5, {12.11, 12.12}},
                       {10, {100.00, 100.00}, 10.95, 26.8, {9.70, 9.73}},
                       {12, {100.00, 100.00}, 9.76, 20.0, {8.09, 8.12}}};
  std::map<std::string, std::map<int, json>> at;  // variant -> replicas -> summary.json
  for (const auto& row : rows) {
    const int n = std::stoi(row.at("cluster.pools[0].count"));
    EXPECT_EQ(row.at("gpus"), row.at("cluster.pools[0].count"));
    at[row.at("variant")][n] = summary(dir / "sweep" / row.at("point"));
    EXPECT_NEAR(std::stod(row.at("goodput_per_gpu")),
                std::stod(row.at("goodput_requests_per_s")) / n, 1e-6);
  }
  const char* variants[] = {"poisson", "bursty"};
  for (const Row& t : table) {
    SCOPED_TRACE(t.replicas);
    for (int v = 0; v < 2; ++v) {
      const json& s = at[variants[v]][t.replicas];
      EXPECT_NEAR(100 * s["goodput"]["slo_attainment"].get<double>(), t.met[v], 0.005);
      EXPECT_NEAR(s["goodput"]["requests_per_s_per_gpu"].get<double>(), t.per_gpu[v], 0.005);
      // Busy at every size: at least 98.7 % of the time.
      EXPECT_GE(s["cluster"]["pools"][0]["busy_fraction"].get<double>(), 0.987);
    }
    const json& s = at["poisson"][t.replicas];
    EXPECT_NEAR(s["tpot_ms"]["p50"].get<double>(), t.tpot_p50, 0.005);
    EXPECT_NEAR(s["batch"]["seqs_mean"].get<double>(), t.seqs, 0.05);
  }
  // Headroom costs energy (steady): 7 replicas 0.102 J per output token at 2.47 kW, 12 0.152 J
  // (+48 %) at 3.67 kW, about 240 W a replica; MFU 25.7 % -> 15.1 %; 6 replicas 0.092 J.
  const auto energy = [&](int n, const char* key) {
    return at["poisson"][n]["energy"][key].get<double>();
  };
  EXPECT_NEAR(energy(7, "joules_per_output_token"), 0.102, 0.0005);
  EXPECT_NEAR(energy(12, "joules_per_output_token"), 0.152, 0.0005);
  EXPECT_NEAR(energy(6, "joules_per_output_token"), 0.092, 0.0005);
  EXPECT_NEAR(energy(5, "joules_per_output_token"), 0.083, 0.0005);  // fewer spend less still
  EXPECT_NEAR(energy(7, "average_power_w") / 1e3, 2.47, 0.005);
  EXPECT_NEAR(energy(12, "average_power_w") / 1e3, 3.67, 0.005);
  EXPECT_NEAR(
      100 * (energy(12, "joules_per_output_token") / energy(7, "joules_per_output_token") - 1), 48,
      0.5);
  EXPECT_NEAR((energy(12, "average_power_w") - energy(7, "average_power_w")) / 5, 240, 1);
  EXPECT_NEAR(100 * at["poisson"][7]["utilization"]["mfu"].get<double>(), 25.7, 0.05);
  EXPECT_NEAR(100 * at["poisson"][12]["utilization"]["mfu"].get<double>(), 15.1, 0.05);
  // Five replicas: 94.19 req/s of 100, TTFT p50 768.5 ms.
  EXPECT_NEAR(at["poisson"][5]["throughput"]["requests_per_s"].get<double>(), 94.19, 0.005);
  EXPECT_NEAR(at["poisson"][5]["ttft_ms"]["p50"].get<double>(), 768.5, 0.05);
  // Six: every first token within 500 ms, 3,867 of 29,982 too slow (12.9 %), 5.6 s in the
  // system on average (Little's law: 93 held per replica).
  const json& six = at["poisson"][6];
  EXPECT_LE(six["ttft_ms"]["max"].get<double>(), 500);
  const std::int64_t completed = six["requests"]["completed"].get<std::int64_t>();
  EXPECT_EQ(completed, 29982);
  EXPECT_EQ(completed - std::llround(six["goodput"]["slo_attainment"].get<double>() * completed),
            3867);
  EXPECT_NEAR(six["e2e_ms"]["mean"].get<double>() / 1000, 5.6, 0.05);
  EXPECT_NEAR(100 * six["e2e_ms"]["mean"].get<double>() / 1000 / 6, 93, 0.5);
  // Seven: all but 5 meet the SLO, 1.5 % less goodput per GPU than six; twelve 42 % less.
  const json& seven = at["poisson"][7];
  EXPECT_EQ(completed - std::llround(seven["goodput"]["slo_attainment"].get<double>() * completed),
            5);
  const double per_gpu_6 = six["goodput"]["requests_per_s_per_gpu"].get<double>();
  EXPECT_NEAR(100 * (1 - seven["goodput"]["requests_per_s_per_gpu"].get<double>() / per_gpu_6), 1.5,
              0.05);
  EXPECT_NEAR(
      100 * (1 - at["poisson"][12]["goodput"]["requests_per_s_per_gpu"].get<double>() / per_gpu_6),
      42, 0.5);
  EXPECT_NEAR(at["poisson"][12]["throughput"]["requests_per_s"].get<double>(), 97, 0.5);
  // The peak of goodput per GPU is six replicas for steady traffic, seven for bursty; bursty
  // seven fails on TPOT, not TTFT.
  for (const char* v : variants) {
    int best = 0;
    for (const auto& [n, s] : at[v]) {
      if (best == 0 || s["goodput"]["requests_per_s_per_gpu"].get<double>() >
                           at[v][best]["goodput"]["requests_per_s_per_gpu"].get<double>()) {
        best = n;
      }
    }
    EXPECT_EQ(best, std::string(v) == "poisson" ? 6 : 7) << v;
  }
  EXPECT_LT(at["bursty"][7]["ttft_ms"]["p99"].get<double>(), 500);
  EXPECT_GT(at["bursty"][7]["tpot_ms"]["p99"].get<double>(), 25);
  // The comparison at seven replicas is the sweep's two points at seven, byte for byte.
  const fs::path cmp = compare("fleet-sizing.yaml", dir);
  for (const auto& row : rows) {
    if (row.at("cluster.pools[0].count") != "7") continue;
    EXPECT_EQ(read_file(cmp / row.at("variant") / "summary.json"),
              read_file(dir / "sweep" / row.at("point") / "summary.json"));
  }
}

// docs/lessons/async-scheduling.md
TEST(Lessons, AsyncScheduling) {
  const fs::path dir = temp_dir("lesson-async-scheduling");
  const Cli r =
      run_sim("sweep " + kLessons + "async-scheduling.yaml --quiet --no-plot --jobs 2 --out " +
                  (dir / "sweep").string(),
              dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = read_csv(dir / "sweep" / "sweep.csv");
  ASSERT_EQ(rows.size(), 14u);
  std::map<std::string, std::map<int, std::map<std::string, std::string>>> at;
  for (const auto& row : rows)
    at[row.at("variant")][std::stoi(row.at("workload.arrival.rate"))] = row;
  const auto num = [&](const char* v, int rate, const char* column) {
    return std::stod(at[v][rate].at(column));
  };
  // The page's table: served (req/s), TTFT p50 (ms), TPOT p50 (ms), sequences per step.
  struct Row {
    int rate;
    double sync[4], async[4];
  };
  const Row table[] = {{50, {50.52, 4.1, 2.22, 21.9}, {50.82, 3.1, 1.55, 15.3}},
                       {100, {99.04, 6.0, 2.86, 54.9}, {99.92, 3.5, 1.83, 35.9}},
                       {125, {107.57, 4611.9, 2.95, 62.4}, {126.03, 4.0, 2.03, 50.1}},
                       {150, {108.00, 11136.4, 2.95, 62.7}, {144.34, 950.9, 2.19, 62.1}},
                       {200, {107.46, 25643.6, 2.95, 62.7}, {143.92, 11628.6, 2.19, 62.4}}};
  const char* columns[] = {"requests_per_s", "ttft_p50_ms", "tpot_p50_ms", "batch_seqs_mean"};
  const double digits[] = {0.005, 0.05, 0.005, 0.05};
  for (const Row& t : table) {
    SCOPED_TRACE(t.rate);
    for (int c = 0; c < 4; ++c) {
      EXPECT_NEAR(num("sync", t.rate, columns[c]), t.sync[c], digits[c]) << columns[c];
      EXPECT_NEAR(num("async", t.rate, columns[c]), t.async[c], digits[c]) << columns[c];
    }
  }
  // Mean steps at 150 requests/s: 2.94 and 2.18 ms; capacity 108 -> 144 (+34 %).
  EXPECT_NEAR(num("sync", 150, "step_ms_mean"), 2.94, 0.005);
  EXPECT_NEAR(num("async", 150, "step_ms_mean"), 2.18, 0.005);
  EXPECT_NEAR(100 * (num("async", 150, "requests_per_s") / num("sync", 150, "requests_per_s") - 1),
              34, 0.5);
  // At 125: sync overloaded (goodput 6.29), async every request within the SLO.
  EXPECT_NEAR(num("sync", 125, "goodput_requests_per_s"), 6.29, 0.005);
  EXPECT_DOUBLE_EQ(num("async", 125, "slo_attainment"), 1.0);
  // The host part: decode-only steps at 150 requests/s, sync less async, is 0.5 ms + about 63 x
  // 4 us; the async decode step (the device part) 1.88 ms.
  const auto decode_mean = [&](const char* v) {
    double sum = 0;
    int n = 0;
    for (const auto& step : read_csv(dir / "sweep" / at[v][150].at("point") / "steps.csv")) {
      if (step.at("prefill_tokens") != "0") continue;
      sum += std::stod(step.at("duration_ms"));
      ++n;
    }
    return sum / n;
  };
  EXPECT_NEAR(decode_mean("async"), 1.88, 0.005);
  EXPECT_NEAR(decode_mean("sync") - decode_mean("async"), 0.5 + 63 * 0.004, 0.01);
  // 256 seats at 150 requests/s: both keep up; TPOT p50 4.00 against 2.27 ms, 115.3 and 66.4
  // sequences a step; sync serves 148.75 req/s, all within the SLO.
  for (const char* mode : {"false", "true"}) {
    const fs::path run = dir / (std::string("seats256-") + mode);
    const Cli c = run_sim("run " + kLessons +
                              "async-scheduling.yaml --quiet --set serving.max_num_seqs=256 "
                              "--set serving.async_scheduling=" +
                              mode + " --out " + run.string(),
                          dir);
    ASSERT_EQ(c.code, 0) << c.err;
    const json s = summary(run);
    const bool async = std::string(mode) == "true";
    EXPECT_NEAR(s["tpot_ms"]["p50"].get<double>(), async ? 2.27 : 4.00, 0.005);
    EXPECT_NEAR(s["batch"]["seqs_mean"].get<double>(), async ? 66.4 : 115.3, 0.05);
    if (!async) {
      EXPECT_NEAR(s["throughput"]["requests_per_s"].get<double>(), 148.75, 0.005);
      EXPECT_DOUBLE_EQ(s["goodput"]["slo_attainment"].get<double>(), 1.0);
    }
  }
  // Llama-3-8B at 10 requests/s: TPOT p50 7.52 -> 6.86 ms (9 %).
  double tpot8b[2];
  for (int a = 0; a < 2; ++a) {
    const fs::path run = dir / ("8b-" + std::to_string(a));
    const Cli c = run_sim("run " + kLessons +
                              "async-scheduling.yaml --quiet --set model=Llama-3-8B --set "
                              "workload.arrival.rate=10 --set serving.async_scheduling=" +
                              (a ? "true" : "false") + " --out " + run.string(),
                          dir);
    ASSERT_EQ(c.code, 0) << c.err;
    tpot8b[a] = summary(run)["tpot_ms"]["p50"].get<double>();
  }
  EXPECT_NEAR(tpot8b[0], 7.52, 0.005);
  EXPECT_NEAR(tpot8b[1], 6.86, 0.005);
  EXPECT_NEAR(100 * (1 - tpot8b[1] / tpot8b[0]), 9, 0.5);
  // The comparison is the sweep's points at 150 requests/s, byte for byte.
  const fs::path cmp = compare("async-scheduling.yaml", dir);
  for (const char* v : {"sync", "async"}) {
    EXPECT_EQ(read_file(cmp / v / "requests.csv"),
              read_file(dir / "sweep" / at[v][150].at("point") / "requests.csv"))
        << v;
  }
}

// docs/lessons/scoring-prompts.md: the page's table, the prefill arithmetic, the 10.4x and the
// LM-head rows' 5.9 %.
TEST(Lessons, ScoringPrompts) {
  const fs::path dir = temp_dir("lesson-scoring-prompts");
  const fs::path out = compare("scoring-prompts.yaml", dir);
  struct Row {
    const char* variant;
    std::int64_t computed;
    double hit_pct, makespan_s, ttft_p50_ms, joules;
  };
  const Row table[] = {{"cached", 8320, 90.4, 0.201, 192.6, 99.5},
                       {"uncached", 86400, 0, 1.979, 1124.8, 1001.4},
                       {"scored", 86400, 0, 2.095, 1190.8, 1069.3}};
  std::map<std::string, double> makespan;
  for (const Row& r : table) {
    SCOPED_TRACE(r.variant);
    const fs::path run = out / r.variant;
    const json s = summary(run);
    EXPECT_EQ(sum_column(run / "steps.csv", "prefill_tokens"), r.computed);
    EXPECT_NEAR(100 * s["prefix_cache"]["hit_rate"].get<double>(), r.hit_pct, 0.05);
    EXPECT_NEAR(s["duration_s"].get<double>(), r.makespan_s, 0.0005);
    EXPECT_NEAR(s["ttft_ms"]["p50"].get<double>(), r.ttft_p50_ms, 0.05);
    EXPECT_NEAR(s["energy"]["joules"].get<double>(), r.joules, 0.05);
    makespan[r.variant] = s["duration_s"].get<double>();
  }
  EXPECT_EQ(8320, 320 + 50 * 96 + 200 * 16);  // the header once, each question once, each answer
  EXPECT_NEAR(makespan["scored"] / makespan["cached"], 10.4, 0.05);
  EXPECT_NEAR(100 * (makespan["scored"] / makespan["uncached"] - 1), 5.9, 0.05);
  // The first step of the cached run admits 197 requests, sharing what it computes.
  EXPECT_EQ(read_csv(out / "cached" / "steps.csv").at(0).at("num_seqs"), "197");
}

// docs/lessons/saying-no.md
// Lesson docs/lessons/preemptive-scheduling.md: the page's table at 3 requests/s and the numbers
// it quotes at 2 and 4, and with swap preemption.
TEST(Lessons, PreemptiveScheduling) {
  const fs::path dir = temp_dir("lesson-preemptive-scheduling");
  const Cli r =
      run_sim("sweep " + kLessons + "preemptive-scheduling.yaml --quiet --no-plot --jobs 2 --out " +
                  (dir / "sweep").string(),
              dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = read_csv(dir / "sweep" / "sweep.csv");
  ASSERT_EQ(rows.size(), 28u);
  std::map<std::string, std::map<int, json>> at;  // variant -> offered rate -> summary.json
  for (const auto& row : rows) {
    at[row.at("variant")][std::stoi(row.at("workload.arrival.rate"))] =
        summary(dir / "sweep" / row.at("point"));
  }
  // TTFT p50, p99, TPOT p50, p99, E2E p50 (ms), preemptions, recomputed tokens, goodput.
  struct Row {
    const char* variant;
    double ttft_p50, ttft_p99, tpot_p50, tpot_p99, e2e_p50;
    int preemptions, recomputed;
    double goodput;
  };
  const Row table[] = {{"fcfs", 155.7, 3091.2, 10.59, 16.53, 4841.4, 0, 0, 2.60},
                       {"sjf", 135.4, 4400.2, 10.63, 16.35, 4575.5, 0, 0, 2.69},
                       {"srtf", 78.2, 2491.9, 10.68, 18.47, 4371.5, 245, 1773, 2.78},
                       {"ltr", 76.7, 3363.1, 10.66, 29.29, 4478.8, 291, 2150, 2.79},
                       {"fastserve", 70.4, 430.0, 11.01, 30.86, 5064.2, 566, 4325, 2.81},
                       {"fastserve-starve", 70.4, 430.0, 11.01, 30.86, 5064.2, 566, 4325, 2.81},
                       {"mlfq-queue", 134.9, 6443.4, 10.63, 16.76, 4773.6, 0, 0, 2.65}};
  for (const Row& t : table) {
    SCOPED_TRACE(t.variant);
    const json& s = at[t.variant][3];
    EXPECT_EQ(s["requests"]["total"].get<int>(), 861);
    EXPECT_EQ(s["requests"]["completed"].get<int>(), 861);
    EXPECT_NEAR(s["ttft_ms"]["p50"].get<double>(), t.ttft_p50, 0.05);
    EXPECT_NEAR(s["ttft_ms"]["p99"].get<double>(), t.ttft_p99, 0.05);
    EXPECT_NEAR(s["tpot_ms"]["p50"].get<double>(), t.tpot_p50, 0.005);
    EXPECT_NEAR(s["tpot_ms"]["p99"].get<double>(), t.tpot_p99, 0.005);
    EXPECT_NEAR(s["e2e_ms"]["p50"].get<double>(), t.e2e_p50, 0.05);
    EXPECT_EQ(s["preemption"]["preemptions"].get<int>(), t.preemptions);
    EXPECT_EQ(s["preemption"]["recomputed_tokens"].get<int>(), t.recomputed);
    EXPECT_NEAR(s["goodput"]["requests_per_s"].get<double>(), t.goodput, 0.005);
  }
  // Below capacity (2 requests/s, 566 arrivals) the order does not matter.
  for (const auto& [variant, by_rate] : at) {
    SCOPED_TRACE(variant);
    const json& s = by_rate.at(2);
    EXPECT_EQ(s["requests"]["total"].get<int>(), 566);
    EXPECT_NEAR(s["ttft_ms"]["p50"].get<double>(), 63.2, 0.05);
    EXPECT_NEAR(s["e2e_ms"]["p50"].get<double>() / 1000, 3.7, 0.05);
    EXPECT_LE(s["preemption"]["preemptions"].get<int>(), 5);
  }
  // Past capacity (4 requests/s): fastserve recomputes 2.0 million tokens and completes 2.81
  // requests/s against fcfs's 3.18; with starvation prevention it collapses.
  const auto num = [&](const char* v, int rate, const char* a, const char* b) {
    return at[v][rate][a][b].get<double>();
  };
  EXPECT_NEAR(num("fastserve", 4, "preemption", "recomputed_tokens") / 1e6, 2.0, 0.05);
  EXPECT_NEAR(num("fastserve", 4, "throughput", "requests_per_s"), 2.81, 0.005);
  EXPECT_NEAR(num("fcfs", 4, "throughput", "requests_per_s"), 3.18, 0.005);
  EXPECT_NEAR(num("fastserve", 4, "tpot_ms", "p50"), 138.2, 0.05);
  EXPECT_EQ(at["fastserve-starve"][4]["preemption"]["preemptions"].get<int>(), 18591);
  EXPECT_NEAR(num("fastserve-starve", 4, "preemption", "recomputed_tokens") / 1e6, 41.9, 0.05);
  EXPECT_NEAR(num("fastserve-starve", 4, "throughput", "requests_per_s"), 0.85, 0.005);
  for (const char* v : {"srtf", "sjf"}) {
    EXPECT_NEAR(num(v, 4, "throughput", "requests_per_s"), 3.16, 0.005) << v;
  }
  EXPECT_NEAR(num("srtf", 4, "e2e_ms", "p50") / 1000, 4.9, 0.05);
  EXPECT_NEAR(num("sjf", 4, "e2e_ms", "p50") / 1000, 5.5, 0.05);
  EXPECT_NEAR(num("fcfs", 4, "e2e_ms", "p50") / 1000, 34.3, 0.05);
  EXPECT_NEAR(num("srtf", 4, "e2e_ms", "p99") / 1000, 281, 0.5);
  // Swapping instead: at 3 requests/s (4 GB of host memory) and at 4 with 64 GB.
  const auto fastserve_swapped = [&](const std::string& sets, const std::string& name) {
    const Cli c =
        run_sim("run " + kLessons + "preemptive-scheduling.yaml --quiet --set " +
                    "policies.batch=preemptive --set policies.queue=mlfq --set " +
                    "policies.preemption=swap " + sets + " --out " + (dir / name).string(),
                dir);
    EXPECT_EQ(c.code, 0) << c.err;
    return summary(dir / name);
  };
  const json s3 = fastserve_swapped("", "swap-3");
  EXPECT_NEAR(s3["ttft_ms"]["p99"].get<double>(), 327.6, 0.05);
  EXPECT_EQ(s3["preemption"]["recomputed_tokens"].get<int>(), 713);
  EXPECT_NEAR(s3["tpot_ms"]["p50"].get<double>(), 14.17, 0.005);
  const json s4 =
      fastserve_swapped("--set workload.arrival.rate=4 --set serving.swap_space_gb=64", "swap-4");
  EXPECT_EQ(s4["preemption"]["recomputed_tokens"].get<int>(), 798127);
  EXPECT_NEAR(s4["throughput"]["requests_per_s"].get<double>(), 2.86, 0.005);
}

TEST(Lessons, SayingNo) {
  const fs::path dir = temp_dir("lesson-saying-no");
  const Cli r = run_sim("sweep " + kLessons + "saying-no.yaml --quiet --no-plot --jobs 2 --out " +
                            (dir / "sweep").string(),
                        dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = read_csv(dir / "sweep" / "sweep.csv");
  ASSERT_EQ(rows.size(), 40u);
  std::map<std::string, std::map<int, json>> at;   // variant -> offered rate -> summary.json
  std::map<std::string, std::string> point_at_30;  // variant -> point folder
  for (const auto& row : rows) {
    const int rate = std::stoi(row.at("workload.arrival.rate"));
    at[row.at("variant")][rate] = summary(dir / "sweep" / row.at("point"));
    if (rate == 30) point_at_30[row.at("variant")] = row.at("point");
  }
  const auto goodput = [&](const char* v, int rate) {
    return at[v][rate]["goodput"]["requests_per_s"].get<double>();
  };
  // The page's table at 30 requests/s: served, shed, capped, TTFT p50 and p99, TPOT p50 (ms),
  // goodput (req/s), arrivals served within the SLO (%).
  struct Row {
    const char* variant;
    int served, shed, capped;
    double ttft_p50, ttft_p99, tpot_p50, goodput, within;
  };
  const Row table[] = {{"admit-all", 3544, 0, 0, 25994.8, 54389.8, 52.09, 1.64, 8.7},
                       {"queue-32", 2520, 1024, 0, 1553.3, 2009.2, 51.72, 2.30, 8.7},
                       {"queue-12", 2476, 1068, 0, 573.3, 894.4, 51.69, 18.82, 69.9},
                       {"wait-0.5s", 2490, 1054, 0, 526.0, 885.2, 51.94, 18.56, 70.2},
                       {"cap-64", 3544, 0, 2539, 1879.5, 3129.1, 87.84, 6.71, 24.7}};
  for (const Row& t : table) {
    SCOPED_TRACE(t.variant);
    const json& s = at[t.variant][30];
    EXPECT_EQ(s["requests"]["total"].get<int>(), 3544);
    EXPECT_EQ(s["requests"]["completed"].get<int>(), t.served);
    EXPECT_EQ(s["requests"].value("shed", 0), t.shed);
    EXPECT_EQ(s["requests"].value("capped", 0), t.capped);
    EXPECT_NEAR(s["ttft_ms"]["p50"].get<double>(), t.ttft_p50, 0.05);
    EXPECT_NEAR(s["ttft_ms"]["p99"].get<double>(), t.ttft_p99, 0.05);
    EXPECT_NEAR(s["tpot_ms"]["p50"].get<double>(), t.tpot_p50, 0.005);
    EXPECT_NEAR(goodput(t.variant, 30), t.goodput, 0.005);
    const double good = goodput(t.variant, 30) * s["duration_s"].get<double>();
    EXPECT_NEAR(100 * good / 3544, t.within, 0.05);
  }
  // The collapse without control: goodput 17.99 at 20 (all within the SLO), 2.68 at 25, 0.13 at
  // 80, while the server completes 18.6 to 19.4 requests/s.
  EXPECT_NEAR(goodput("admit-all", 20), 17.99, 0.005);
  EXPECT_DOUBLE_EQ(at["admit-all"][20]["goodput"]["slo_attainment"].get<double>(), 1.0);
  EXPECT_NEAR(goodput("admit-all", 25), 2.68, 0.005);
  EXPECT_NEAR(goodput("admit-all", 80), 0.13, 0.005);
  for (int rate : {25, 30, 40, 60, 80}) {
    const double done = at["admit-all"][rate]["throughput"]["requests_per_s"].get<double>();
    EXPECT_GE(done, 18.6) << rate;
    EXPECT_LE(done, 19.4) << rate;
  }
  // The bounds and the prediction hold goodput near capacity at every load; queue-32 does not.
  EXPECT_NEAR(goodput("queue-12", 80), 18.29, 0.005);
  EXPECT_NEAR(goodput("wait-0.5s", 80), 18.35, 0.005);
  for (int rate : {25, 30, 40, 60, 80}) {
    EXPECT_GT(goodput("queue-12", rate), 17.9) << rate;
    EXPECT_GT(goodput("wait-0.5s", rate), 17.6) << rate;
    EXPECT_LT(goodput("queue-32", rate), 3.4) << rate;
  }
  // Little's law: queue-32 holds 1.7 s of work, queue-12 0.64 s.
  EXPECT_NEAR(32 / at["queue-32"][30]["throughput"]["requests_per_s"].get<double>(), 1.7, 0.05);
  EXPECT_NEAR(12 / at["queue-12"][30]["throughput"]["requests_per_s"].get<double>(), 0.64, 0.005);
  // The same 309 requests meet the SLO under admit-all and queue-32, all arrived within 10.3 s.
  const auto good_ids = [&](const char* v, double* last_arrival) {
    std::set<std::string> ids;
    for (const auto& row : read_csv(dir / "sweep" / point_at_30[v] / "requests.csv")) {
      if (row.at("status") != "finished" || std::stod(row.at("ttft_ms")) > 1000) continue;
      if (!row.at("tpot_ms").empty() && std::stod(row.at("tpot_ms")) > 100) continue;
      ids.insert(row.at("id"));
      *last_arrival = std::max(*last_arrival, std::stod(row.at("arrival_s")));
    }
    return ids;
  };
  double last_all = 0, last_32 = 0;
  const std::set<std::string> all = good_ids("admit-all", &last_all);
  EXPECT_EQ(all.size(), 309u);
  EXPECT_EQ(good_ids("queue-32", &last_32), all);
  EXPECT_NEAR(last_all, 10.3, 0.05);
  // The cap: 27.16 and 33.85 requests/s completed at 30 and 80; goodput 15.22 at 25, 6.71 at 30,
  // 0.00 at 80.
  EXPECT_NEAR(at["cap-64"][30]["throughput"]["requests_per_s"].get<double>(), 27.16, 0.005);
  EXPECT_NEAR(at["cap-64"][80]["throughput"]["requests_per_s"].get<double>(), 33.85, 0.005);
  EXPECT_NEAR(goodput("cap-64", 25), 15.22, 0.005);
  EXPECT_NEAR(goodput("cap-64", 80), 0.0, 0.005);
  EXPECT_NEAR(at["wait-0.5s"][30]["batch"]["seqs_mean"].get<double>(), 169, 0.5);
  // The comparison is the sweep's points at 30 requests/s, byte for byte.
  const fs::path cmp = compare("saying-no.yaml", dir);
  for (const auto& [variant, point] : point_at_30) {
    EXPECT_EQ(read_file(cmp / variant / "requests.csv"),
              read_file(dir / "sweep" / point / "requests.csv"))
        << variant;
  }
  // A 50 ms TPOT objective: wait-0.5s keeps 3.63 req/s; with 128 seats TPOT p50 29.0 ms, goodput
  // 16.43 req/s, 1,348 shed.
  const std::string wait = " --set 'policies.admission={name: predicted-wait, max_wait_s: 0.5}'";
  for (int seats : {256, 128}) {
    const fs::path run = dir / ("tpot50-" + std::to_string(seats));
    const Cli c = run_sim("run " + kLessons + "saying-no.yaml --quiet --set slo.tpot_ms=50" + wait +
                              " --set serving.max_num_seqs=" + std::to_string(seats) + " --out " +
                              run.string(),
                          dir);
    ASSERT_EQ(c.code, 0) << c.err;
    const json s = summary(run);
    EXPECT_NEAR(s["goodput"]["requests_per_s"].get<double>(), seats == 256 ? 3.63 : 16.43, 0.005);
    if (seats == 128) {
      EXPECT_NEAR(s["tpot_ms"]["p50"].get<double>(), 29.0, 0.05);
      EXPECT_EQ(s["requests"]["shed"].get<int>(), 1348);
    }
  }
}

// docs/lessons/mixture-of-experts.md
TEST(Lessons, MixtureOfExperts) {
  const std::string catalog = default_catalog_dir();
  const HardwareConfig h200 = load_hardware("H200", catalog);
  const char* names[] = {"Llama-3-8B", "Qwen3-30B-A3B", "Mixtral-8x7B"};
  // The parameter table.
  const std::int64_t params[] = {8'030'261'248, 30'532'122'624, 46'702'792'704};
  const std::int64_t active[] = {8'030'261'248, 3'353'032'704, 12'879'925'248};
  const std::int64_t kv_per_token[] = {131'072, 98'304, 131'072};
  for (int i = 0; i < 3; ++i) {
    const ModelConfig m = load_model(names[i], catalog);
    EXPECT_EQ(m.num_params(), params[i]) << names[i];
    EXPECT_EQ(m.active_params(), active[i]) << names[i];
    EXPECT_EQ(m.kv_bytes_per_token(), kv_per_token[i]) << names[i];
  }
  // Experts touched: Mixtral 2 and 7.2 of 8; Qwen3 8, 51.6 and 111.8 of 128.
  const RooflineCostModel qwen3(load_model("Qwen3-30B-A3B", catalog), h200, 16);
  const RooflineCostModel mixtral(load_model("Mixtral-8x7B", catalog), h200, 16);
  EXPECT_NEAR(mixtral.experts_touched(1), 2.0, 1e-9);
  EXPECT_NEAR(mixtral.experts_touched(8), 7.2, 0.05);
  EXPECT_NEAR(qwen3.experts_touched(8), 51.6, 0.05);
  EXPECT_NEAR(qwen3.experts_touched(32), 111.8, 0.05);
  // The decode table (batch 1, 8, 64 at context 1,024) and a 4,096-token prefill, as
  // servelab.step_cost prices them.
  const double decode_ms[3][3] = {{5.06, 5.36, 8.07}, {4.25, 9.01, 18.57}, {7.85, 21.62, 26.60}};
  const double decode_gb[3][3] = {{15.2, 16.2, 24.3}, {6.2, 26.8, 66.9}, {25.6, 85.3, 102.9}};
  const double prefill_ms[3] = {98.98, 72.42, 173.73};
  for (int i = 0; i < 3; ++i) {
    const RooflineCostModel cm(load_model(names[i], catalog), h200, 16);
    const int batches[] = {1, 8, 64};
    for (int j = 0; j < 3; ++j) {
      const StepCostBreakdown b = cm.breakdown(decode_plan(batches[j], 1024));
      EXPECT_NEAR(b.total() * 1e3, decode_ms[i][j], 0.005) << names[i] << " x" << batches[j];
      EXPECT_NEAR(b.bytes / 1e9, decode_gb[i][j], 0.05) << names[i] << " x" << batches[j];
    }
    const StepPlan prefill = prefill_plan(0, 4096, true);
    EXPECT_NEAR(cm.breakdown(prefill).total() * 1e3, prefill_ms[i], 0.005) << names[i];
  }
  // Serving the same load at 8 requests/s.
  const fs::path dir = temp_dir("lesson_moe");
  const fs::path out = compare("mixture-of-experts.yaml", dir);
  const json l = summary(out / "llama-3-8b"), q = summary(out / "qwen3-30b-a3b"),
             x = summary(out / "mixtral-8x7b");
  EXPECT_EQ(l["run"]["num_gpu_blocks"], "56291");
  EXPECT_EQ(q["run"]["num_gpu_blocks"], "46737");
  EXPECT_EQ(x["run"]["num_gpu_blocks"], "19121");
  const std::pair<const json*, std::array<double, 9>> rows[] = {
      {&l, {29.4, 106.8, 6.82, 8.90, 2109, 7.05, 0.020, 1.0, 0}},
      {&q, {37.8, 84.0, 18.44, 20.63, 2058, 6.88, 0.063, 1.0, 0}},
      {&x, {85.9, 238.4, 36.53, 42.53, 1926, 5.91, 0.285, 0.918, 0}}};
  for (const auto& [s, v] : rows) {
    const json& j = *s;
    const std::string who = j["run"]["model"].get<std::string>();
    EXPECT_NEAR(j["ttft_ms"]["p50"].get<double>(), v[0], 0.05) << who;
    EXPECT_NEAR(j["ttft_ms"]["p99"].get<double>(), v[1], 0.05) << who;
    EXPECT_NEAR(j["tpot_ms"]["p50"].get<double>(), v[2], 0.005) << who;
    EXPECT_NEAR(j["tpot_ms"]["p99"].get<double>(), v[3], 0.005) << who;
    EXPECT_NEAR(j["throughput"]["output_tokens_per_s"].get<double>(), v[4], 0.5) << who;
    EXPECT_NEAR(j["goodput"]["requests_per_s"].get<double>(), v[5], 0.005) << who;
    EXPECT_NEAR(j["kv_cache"]["usage_mean"].get<double>(), v[6], 0.0005) << who;
    EXPECT_NEAR(j["goodput"]["slo_attainment"].get<double>(), v[7], 0.0005) << who;
    EXPECT_EQ(j["preemption"]["preemptions"], v[8]) << who;
  }
}

TEST(Lessons, MixtureOfExpertsSweep) {
  const SweepRows at = sweep_by("mixture-of-experts.yaml", temp_dir("lesson_moe_sweep"), "model",
                                "workload.arrival.rate");  // "model@rate"
  ASSERT_EQ(at.size(), 12u);
  auto v = [&](const std::string& k, const char* col) { return std::stod(at.at(k).at(col)); };
  EXPECT_NEAR(v("Llama-3-8B@2", "tpot_p50_ms"), 5.39, 0.005);
  EXPECT_NEAR(v("Llama-3-8B@16", "tpot_p50_ms"), 10.57, 0.005);
  EXPECT_NEAR(v("Qwen3-30B-A3B@2", "tpot_p50_ms"), 7.37, 0.005);
  EXPECT_NEAR(v("Qwen3-30B-A3B@16", "tpot_p50_ms"), 24.20, 0.005);
  EXPECT_NEAR(v("Mixtral-8x7B@16", "ttft_p50_ms"), 2249.2, 0.05);
  EXPECT_NEAR(v("Mixtral-8x7B@16", "kv_usage_mean"), 0.726, 0.0005);
  EXPECT_NEAR(v("Mixtral-8x7B@16", "goodput_requests_per_s"), 0.01, 0.005);
  EXPECT_EQ(v("Mixtral-8x7B@16", "preemptions"), 78);
  // The compare run at 8 requests/s is the sweep's point at 8.
  EXPECT_NEAR(v("Qwen3-30B-A3B@8", "tpot_p50_ms"), 18.44, 0.005);
}

// The roofline of an experiment with `sets`, built as `sim run` and servelab.step_cost build it.
RooflineCostModel experiment_roofline(const std::string& experiment,
                                      const std::vector<std::string>& sets) {
  const ExperimentConfig config = load_experiment(kLessons + experiment, sets);
  const std::string catalog = default_catalog_dir();
  ModelConfig model = load_model(config.model, catalog);
  apply_model_storage(config, model);
  const HardwareConfig hardware = load_hardware(config.hardware, catalog);
  return RooflineCostModel(model, hardware, config.scheduler.block_size,
                           resolve_parallel(config.parallel, model, hardware));
}

TEST(Lessons, ExpertParallelism) {
  // The step tables: decode batches 1, 8, 64 at context 1,024 and a 4,096-token prefill, for
  // tensor and expert parallelism under the uniform router and the three splits under skew 1.
  const std::vector<std::vector<std::string>> variants = {
      {},
      {"parallel.expert=true"},
      {"model.router_skew=1.0"},
      {"parallel.expert=true", "model.router_skew=1.0"},
      {"parallel.expert=true", "model.router_skew=1.0", "parallel.expert_placement=balanced"}};
  const double ms[5][4] = {{4.51, 6.27, 10.12, 41.57},
                           {4.72, 6.69, 10.15, 38.74},
                           {4.51, 5.67, 9.22, 41.57},
                           {4.82, 6.20, 9.55, 40.87},
                           {4.71, 6.11, 9.54, 38.77}};
  const double gb[2][3] = {{6.3, 27.0, 68.3}, {6.3, 19.7, 57.5}};
  for (std::size_t v = 0; v < variants.size(); ++v) {
    const RooflineCostModel cm = experiment_roofline("expert-parallelism.yaml", variants[v]);
    const int batches[] = {1, 8, 64};
    for (int j = 0; j < 3; ++j) {
      const StepCostBreakdown b = cm.breakdown(decode_plan(batches[j], 1024));
      EXPECT_NEAR(b.total() * 1e3, ms[v][j], 0.005) << v << " x" << batches[j];
      EXPECT_NEAR(b.bytes / 1e9, gb[v < 2 ? 0 : 1][j], 0.05) << v << " x" << batches[j];
    }
    EXPECT_NEAR(cm.breakdown(prefill_plan(0, 4096, true)).total() * 1e3, ms[v][3], 0.005) << v;
  }
  // The busiest GPU: 3.41 of one token's 8 rows (2 + 1.03 sqrt(32/16 * 15/16)).
  EXPECT_NEAR(
      experiment_roofline("expert-parallelism.yaml", variants[1]).busiest_expert_load(1).rows, 3.41,
      0.005);
  // Serving at 32 requests/s.
  const fs::path dir = temp_dir("lesson_ep");
  const fs::path out = compare("expert-parallelism.yaml", dir);
  const char* names[] = {"tensor", "expert", "tensor-skewed", "expert-skewed-linear",
                         "expert-skewed-balanced"};
  const double rows[5][6] = {{28.1, 63.4, 14.68, 16.02, 7247, 154490},
                             {26.8, 60.8, 14.07, 15.29, 7225, 154490},
                             {28.2, 64.1, 14.31, 15.77, 7363, 154490},
                             {27.0, 62.6, 14.31, 15.68, 7301, 154490},
                             {26.6, 60.4, 13.92, 15.16, 7318, 154490}};
  for (int i = 0; i < 5; ++i) {
    const json j = summary(out / names[i]);
    EXPECT_NEAR(j["ttft_ms"]["p50"].get<double>(), rows[i][0], 0.05) << names[i];
    EXPECT_NEAR(j["ttft_ms"]["p99"].get<double>(), rows[i][1], 0.05) << names[i];
    EXPECT_NEAR(j["tpot_ms"]["p50"].get<double>(), rows[i][2], 0.005) << names[i];
    EXPECT_NEAR(j["tpot_ms"]["p99"].get<double>(), rows[i][3], 0.005) << names[i];
    EXPECT_NEAR(j["throughput"]["output_tokens_per_s"].get<double>(), rows[i][4], 0.5) << names[i];
    EXPECT_EQ(j["run"]["num_gpu_blocks"], std::to_string(static_cast<int>(rows[i][5])));
  }
  // The decode-steps figure: the median decode-only step of 4 and of 16 sequences in each run
  // (numpy's median: the mean of the middle two of an even count).
  auto decode_median = [&](const char* name, int batch) {
    std::vector<double> d;
    for (const auto& row : read_csv(out / name / "steps.csv")) {
      if (row.at("prefill_tokens") == "0" && std::stoi(row.at("decode_tokens")) == batch) {
        d.push_back(std::stod(row.at("duration_ms")));
      }
    }
    std::sort(d.begin(), d.end());
    if (d.empty()) return 0.0;
    const std::size_t n = d.size();
    return n % 2 == 1 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
  };
  const double decode_ms[3][2] = {{5.37, 7.68}, {5.74, 7.99}, {5.12, 6.63}};
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(decode_median(names[i], 4), decode_ms[i][0], 0.005) << names[i];
    EXPECT_NEAR(decode_median(names[i], 16), decode_ms[i][1], 0.005) << names[i];
  }
}

TEST(Lessons, ExpertParallelismSweep) {
  const SweepRows at = sweep_by("expert-parallelism.yaml", temp_dir("lesson_ep_sweep"),
                                "parallel.expert", "workload.arrival.rate");  // "expert@rate"
  ASSERT_EQ(at.size(), 8u);
  auto v = [&](const std::string& k, const char* col) { return std::stod(at.at(k).at(col)); };
  EXPECT_NEAR(v("false@8", "tpot_p50_ms"), 8.39, 0.005);
  EXPECT_NEAR(v("true@8", "tpot_p50_ms"), 8.82, 0.005);
  EXPECT_NEAR(v("false@16", "tpot_p50_ms"), 10.75, 0.005);
  EXPECT_NEAR(v("true@16", "tpot_p50_ms"), 10.78, 0.005);
  EXPECT_NEAR(v("false@48", "ttft_p99_ms"), 1147.6, 0.05);
  EXPECT_NEAR(v("true@48", "ttft_p99_ms"), 684.8, 0.05);
  EXPECT_NEAR(v("false@48", "slo_attainment"), 0.93, 0.0005);
  EXPECT_NEAR(v("true@48", "slo_attainment"), 1.0, 0.0005);
  EXPECT_NEAR(v("false@48", "goodput_requests_per_s"), 28.75, 0.005);
  EXPECT_NEAR(v("true@48", "goodput_requests_per_s"), 31.21, 0.005);
  // The compare run at 32 requests/s is the sweep's point at 32.
  EXPECT_NEAR(v("true@32", "tpot_p50_ms"), 14.07, 0.005);
}

// docs/lessons/quantized-weights.md
TEST(Lessons, QuantizedWeights) {
  const std::string catalog = default_catalog_dir();
  // Memory: the weights of each format and the KV blocks left on an 80 GB GPU.
  const char* formats[] = {"none", "fp8", "awq"};
  const double weights_gb[] = {16.06, 9.08, 5.73};
  for (int i = 0; i < 3; ++i) {
    ModelConfig m = load_model("Llama-3-8B", catalog);
    m.quantization = formats[i];
    EXPECT_NEAR(static_cast<double>(m.weight_bytes()) / 1e9, weights_gb[i], 0.005) << formats[i];
  }
  // The step table: decode at context 1,024 (1 and 32 sequences) and a 4,096-token prefill, on
  // each GPU, as servelab.step_cost prices them.
  const char* gpus[] = {"H100-SXM", "A100-80GB"};
  const char* kernels[] = {"none", "fp8", "awq_marlin", "awq"};
  const double step_ms[2][4][3] = {
      {{6.58, 8.78, 105.36}, {4.39, 6.47, 67.16}, {3.18, 5.49, 103.66}, {3.41, 6.16, 111.80}},
      {{10.54, 14.15, 317.11}, {6.59, 10.44, 316.63}, {4.69, 8.85, 316.43}, {5.29, 11.27, 328.00}}};
  for (int g = 0; g < 2; ++g) {
    for (int i = 0; i < 4; ++i) {
      const RooflineCostModel cm = experiment_roofline(
          "quantized-weights.yaml",
          {std::string("hardware=") + gpus[g], std::string("model.quantization=") + kernels[i]});
      const std::string who = std::string(gpus[g]) + " " + kernels[i];
      EXPECT_NEAR(cm.breakdown(decode_plan(1, 1024)).total() * 1e3, step_ms[g][i][0], 0.005) << who;
      EXPECT_NEAR(cm.breakdown(decode_plan(32, 1024)).total() * 1e3, step_ms[g][i][1], 0.005)
          << who;
      EXPECT_NEAR(cm.breakdown(prefill_plan(0, 4096, true)).total() * 1e3, step_ms[g][i][2], 0.005)
          << who;
    }
  }
  // Serving the chat load at 6 requests/s.
  const fs::path dir = temp_dir("lesson_quantized");
  const fs::path out = compare("quantized-weights.yaml", dir);
  const char* variants[] = {"h100-bf16", "h100-fp8", "h100-awq-marlin", "h100-awq-legacy",
                            "a100-bf16", "a100-fp8", "a100-awq-marlin", "a100-awq-legacy"};
  const char* blocks[] = {"28183", "31511", "33110", "33110"};
  const std::array<double, 5> rows[] = {
      {32.5, 104.9, 8.76, 11.39, 1.0},     {19.5, 62.1, 5.45, 6.72, 1.0},
      {27.0, 101.4, 4.27, 5.92, 1.0},      {37.1, 113.3, 4.95, 7.94, 1.0},
      {115.1, 489.8, 26.13, 40.86, 0.988}, {105.3, 468.0, 17.31, 31.87, 0.998},
      {100.9, 459.9, 13.00, 26.53, 0.999}, {136.2, 524.0, 28.50, 50.30, 0.77}};
  for (int i = 0; i < 8; ++i) {
    const json j = summary(out / variants[i]);
    const auto& v = rows[i];
    EXPECT_EQ(j["run"]["num_gpu_blocks"], blocks[i % 4]) << variants[i];
    EXPECT_NEAR(j["ttft_ms"]["p50"].get<double>(), v[0], 0.05) << variants[i];
    EXPECT_NEAR(j["ttft_ms"]["p99"].get<double>(), v[1], 0.05) << variants[i];
    EXPECT_NEAR(j["tpot_ms"]["p50"].get<double>(), v[2], 0.005) << variants[i];
    EXPECT_NEAR(j["tpot_ms"]["p99"].get<double>(), v[3], 0.005) << variants[i];
    EXPECT_NEAR(j["goodput"]["slo_attainment"].get<double>(), v[4], 0.0005) << variants[i];
  }
  EXPECT_NEAR(summary(out / "a100-bf16")["batch"]["seqs_mean"].get<double>(), 37.9, 0.05);
  EXPECT_NEAR(summary(out / "h100-bf16")["batch"]["seqs_mean"].get<double>(), 13.6, 0.05);
  // Llama-3-70B on one H100: bf16 refused, fp8 and AWQ leave 305 and 6,578 blocks.
  const std::string seventy = "run " + kLessons +
                              "quantized-weights.yaml --set model=Llama-3-70B "
                              "--set workload.num_requests=10 --quiet --out ";
  const Cli refused = run_sim(seventy + (dir / "70b").string(), dir);
  EXPECT_EQ(refused.code, 2);
  EXPECT_NE(refused.err.find("weights 131.42 GiB"), std::string::npos) << refused.err;
  const char* fit[][2] = {{"fp8", "305"}, {"awq", "6578"}};
  for (const auto& [format, n] : fit) {
    const fs::path run = dir / (std::string("70b-") + format);
    const Cli r = run_sim(seventy + run.string() + " --set model.quantization=" + format, dir);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(summary(run)["run"]["num_gpu_blocks"], n) << format;
  }
}

// docs/lessons/quantized-weights.md, "What it costs in accuracy": the tiny model widened to the
// smallest width AWQ can group (hidden 128, 8 heads of 16, MLP 256), random weights of seed 7,
// the KV probe's 8 requests of 48 prompt tokens each decoding 32.
TEST(Lessons, QuantizedWeightsAccuracy) {
  LlamaConfig config = load_llama_config("tiny", default_catalog_dir());
  config.model.hidden_size = 128;
  config.model.num_heads = 8;
  config.model.intermediate_size = 256;
  const LlamaWeights weights = LlamaWeights::random(config, 7, 1);
  const std::vector<KvProbeDifference> d =
      compare_weight_quantizations(weights, KvProbeSetup{}, {"fp8", "awq"});
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].steps, 256);
  EXPECT_EQ(d[1].steps, 256);
  EXPECT_NEAR(d[0].max_logit, 17.88, 0.005);
  EXPECT_NEAR(d[0].max_abs, 0.82, 0.005);
  EXPECT_NEAR(100 * d[0].max_abs / d[0].max_logit, 4.6, 0.05);
  EXPECT_EQ(d[0].differing, 13);
  EXPECT_NEAR(d[1].max_abs, 2.96, 0.005);
  EXPECT_NEAR(100 * d[1].max_abs / d[1].max_logit, 16.5, 0.05);
  EXPECT_EQ(d[1].differing, 47);
  EXPECT_NEAR(d[1].max_abs / d[0].max_abs, 3.6, 0.05);
}

TEST(Lessons, QuantizedWeightsSweep) {
  const SweepRows at = sweep_by("quantized-weights.yaml", temp_dir("lesson_quantized_sweep"),
                                "model.quantization", "workload.arrival.rate");  // "q@rate"
  ASSERT_EQ(at.size(), 24u);
  auto v = [&](const std::string& k, const char* col) { return std::stod(at.at(k).at(col)); };
  EXPECT_NEAR(v("awq_marlin@4", "tpot_p50_ms"), 3.82, 0.005);
  EXPECT_NEAR(v("awq_marlin@16", "tpot_p50_ms"), 10.57, 0.005);
  EXPECT_NEAR(v("fp8@16", "tpot_p50_ms"), 9.14, 0.005);
  EXPECT_NEAR(v("awq_marlin@24", "slo_attainment"), 0.306, 0.0005);
  EXPECT_NEAR(v("awq_marlin@24", "output_tokens_per_s"), 5068, 0.5);
  EXPECT_NEAR(v("awq@4", "tpot_p50_ms"), 4.30, 0.005);
  EXPECT_NEAR(v("fp8@4", "tpot_p50_ms"), 5.04, 0.005);
  EXPECT_NEAR(v("none@4", "tpot_p50_ms"), 7.85, 0.005);
  EXPECT_NEAR(v("awq@16", "tpot_p50_ms"), 26.75, 0.005);
  EXPECT_NEAR(v("none@16", "tpot_p50_ms"), 21.25, 0.005);
  EXPECT_NEAR(v("none@20", "slo_attainment"), 0.687, 0.0005);
  EXPECT_NEAR(v("awq@20", "slo_attainment"), 0.247, 0.0005);
  EXPECT_NEAR(v("fp8@24", "output_tokens_per_s"), 5627, 0.5);
  EXPECT_NEAR(v("none@24", "output_tokens_per_s"), 4635, 0.5);
  // fp8 meets the SLO for every request at every rate; AWQ with Marlin decodes fastest up to 12
  // requests/s, fp8 from 16, and the legacy AWQ kernel slowest of the four from 16.
  for (const char* rate : {"4", "8", "12", "16", "20", "24"}) {
    EXPECT_DOUBLE_EQ(v(std::string("fp8@") + rate, "slo_attainment"), 1.0) << rate;
  }
  for (const char* rate : {"4", "8", "12"}) {
    const std::string r = rate;
    EXPECT_LT(v("awq_marlin@" + r, "tpot_p50_ms"), v("fp8@" + r, "tpot_p50_ms")) << rate;
    EXPECT_LT(v("awq_marlin@" + r, "tpot_p50_ms"), v("awq@" + r, "tpot_p50_ms")) << rate;
  }
  for (const char* rate : {"16", "20", "24"}) {
    const std::string r = rate;
    EXPECT_GT(v("awq@" + r, "tpot_p50_ms"), v("none@" + r, "tpot_p50_ms")) << rate;
    EXPECT_GT(v("none@" + r, "tpot_p50_ms"), v("fp8@" + r, "tpot_p50_ms")) << rate;
    EXPECT_GT(v("awq_marlin@" + r, "tpot_p50_ms"), v("fp8@" + r, "tpot_p50_ms")) << rate;
  }
  // The compare run at 6 requests/s is not a sweep point; the sweep's lowest rate agrees with it
  // in order: AWQ with Marlin decodes fastest, fp8 has the first token first.
  EXPECT_LT(v("fp8@4", "ttft_p50_ms"), v("none@4", "ttft_p50_ms"));
  EXPECT_LT(v("none@4", "ttft_p50_ms"), v("awq@4", "ttft_p50_ms"));
}

// docs/lessons/energy-per-token.md: joules per output token by batch limit and load.
TEST(Lessons, EnergyPerToken) {
  const fs::path dir = temp_dir("lesson-energy-per-token");
  const Cli r =
      run_sim("sweep " + kLessons + "energy-per-token.yaml --quiet --no-plot --jobs 2 --out " +
                  (dir / "sweep").string(),
              dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto rows = read_csv(dir / "sweep" / "sweep.csv");
  ASSERT_EQ(rows.size(), 15u);
  std::map<std::pair<int, std::string>, std::map<std::string, std::string>> at;
  for (const auto& row : rows) {
    at[{std::stoi(row.at("serving.max_num_seqs")), row.at("workload.arrival.rate")}] = row;
  }
  const auto num = [&](int seats, const std::string& rate, const char* column) {
    return std::stod(at.at({seats, rate}).at(column));
  };
  // The page's table at 24 requests/s: served, sequences per step, TPOT p50, average power (W),
  // MFU and MBU (%), joules per output token.
  struct Row {
    int seats;
    double v[7];
  };
  const Row table[] = {{1, {0.50, 1.0, 6.56, 241, 0.7, 68.4, 1.595}},
                       {4, {1.91, 4.0, 6.83, 251, 2.5, 67.4, 0.432}},
                       {16, {6.47, 15.8, 7.98, 280, 8.5, 63.9, 0.142}},
                       {64, {15.37, 57.4, 12.88, 333, 20.2, 55.6, 0.071}},
                       {256, {19.69, 106.3, 24.96, 355, 25.9, 49.7, 0.059}}};
  const char* columns[] = {
      "requests_per_s",         "batch_seqs_mean", "tpot_p50_ms", "average_power_w", "mfu", "mbu",
      "joules_per_output_token"};
  const double scale[] = {1, 1, 1, 1, 100, 100, 1};
  const double digits[] = {0.005, 0.05, 0.005, 0.5, 0.05, 0.05, 0.0005};
  for (const Row& t : table) {
    SCOPED_TRACE(t.seats);
    for (int c = 0; c < 7; ++c) {
      EXPECT_NEAR(num(t.seats, "24", columns[c]) * scale[c], t.v[c], digits[c]) << columns[c];
    }
  }
  // 27 times less per token with 256 seats; power +47 %, the step 3.8 times as long.
  EXPECT_NEAR(num(1, "24", "joules_per_output_token") / num(256, "24", "joules_per_output_token"),
              27, 0.5);
  EXPECT_NEAR(num(256, "24", "average_power_w") / num(1, "24", "average_power_w"), 1.47, 0.005);
  // 2 requests/s: every limit from 16 gives the same run, 0.429 J, 7 times the saturated figure.
  for (int seats : {16, 64, 256}) {
    EXPECT_NEAR(num(seats, "2", "joules_per_output_token"), 0.429, 0.0005) << seats;
    EXPECT_NEAR(num(seats, "2", "batch_seqs_mean"), 4.1, 0.05) << seats;
  }
  EXPECT_NEAR(num(64, "2", "joules_per_output_token") / num(256, "24", "joules_per_output_token"),
              7.24, 0.005);
  // 0.2 requests/s (64 seats): busy 29 %, 49.7 % of the joules idle, 3.1 J a token (52 times).
  const nlohmann::json quiet = nlohmann::json::parse(
      read_file(dir / "sweep" / at.at({64, "0.2"}).at("point") / "summary.json"));
  EXPECT_NEAR(quiet["utilization"]["busy_fraction"].get<double>(), 0.294, 0.0005);
  EXPECT_NEAR(
      quiet["energy"]["idle_joules"].get<double>() / quiet["energy"]["joules"].get<double>(), 0.497,
      0.0005);
  EXPECT_NEAR(num(1, "0.2", "joules_per_output_token"), 3.109, 0.0005);
  EXPECT_NEAR(num(64, "0.2", "joules_per_output_token"), 3.071, 0.0005);
  // Async scheduling at 256 seats: 20.22 req/s, 367 W, 0.060 J, within 2 % of synchronous.
  const Cli a = run_sim("run " + kLessons +
                            "energy-per-token.yaml --quiet --set serving.max_num_seqs=256 "
                            "--set serving.async_scheduling=true --out " +
                            (dir / "async").string(),
                        dir);
  ASSERT_EQ(a.code, 0) << a.err;
  const nlohmann::json as = nlohmann::json::parse(read_file(dir / "async" / "summary.json"));
  EXPECT_NEAR(as["throughput"]["requests_per_s"].get<double>(), 20.22, 0.005);
  EXPECT_NEAR(as["energy"]["average_power_w"].get<double>(), 367, 0.5);
  const double async_j = as["energy"]["joules_per_output_token"].get<double>();
  EXPECT_NEAR(async_j, 0.060, 0.0005);
  EXPECT_LT(std::abs(async_j / num(256, "24", "joules_per_output_token") - 1), 0.02);
  // Against ML.ENERGY's 0.12 J at batch 64: 40 % less (not fitted to it).
  EXPECT_NEAR(1 - num(64, "24", "joules_per_output_token") / 0.12, 0.41, 0.005);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
