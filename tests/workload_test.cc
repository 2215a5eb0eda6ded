// Tests of the workloads: the synthetic generator's processes and distributions, the Azure 2023
// trace reader, timestamp parsing, and the errors bad inputs must give.
#include "traces/workload.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "serving/config_node.h"
#include "serving/home.h"
#include "tests/test_util.h"
#include "traces/azure_trace.h"
#include "traces/length_table.h"
#include "traces/synthetic_workload.h"

namespace servelab {
namespace {

using ::testing::HasSubstr;

const std::string kRepo = servelab_home().string();
const std::string kConv = kRepo + "/traces/azure2023/AzureLLMInferenceTrace_conv.csv";
const std::string kCode = kRepo + "/traces/azure2023/AzureLLMInferenceTrace_code.csv";
const std::string kShareGpt =
    kRepo + "/traces/lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv";

std::unique_ptr<Workload> from_yaml(const std::string& yaml, std::uint64_t seed = 7,
                                    const std::string& base_dir = ".") {
  const ConfigNode root = ConfigNode::load_string(yaml, "test.yaml");
  return make_workload(root.at("workload"), seed, base_dir);
}

std::vector<RequestSpec> drain(Workload& w) {
  std::vector<RequestSpec> out;
  while (std::optional<RequestSpec> r = w.next()) out.push_back(std::move(*r));
  return out;
}

std::vector<RequestSpec> generate(const std::string& yaml, std::uint64_t seed = 7) {
  return drain(*from_yaml(yaml, seed));
}

// The message of the ConfigError that `f` throws ("" if none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

struct Moments {
  double mean = 0, cv = 0;
};
Moments moments(const std::vector<double>& xs) {
  double sum = 0, sq = 0;
  for (double x : xs) sum += x;
  const double mean = sum / static_cast<double>(xs.size());
  for (double x : xs) sq += (x - mean) * (x - mean);
  const double sd = std::sqrt(sq / static_cast<double>(xs.size() - 1));
  return {mean, sd / mean};
}

std::vector<double> gaps_s(const std::vector<RequestSpec>& rs) {
  std::vector<double> g;
  for (std::size_t i = 1; i < rs.size(); ++i) {
    g.push_back(ns_to_s(rs[i].arrival_ns - rs[i - 1].arrival_ns));
  }
  return g;
}

std::string synthetic(const std::string& arrival, const std::string& extra = "",
                      int num_requests = 20000) {
  return "workload:\n  type: synthetic\n  num_requests: " + std::to_string(num_requests) +
         "\n  arrival: " + arrival + "\n" + extra +
         (extra.find("prompt_len:") == std::string::npos &&
                  extra.find("lengths:") == std::string::npos
              ? "  prompt_len: {dist: fixed, value: 100}\n"
              : "") +
         (extra.find("output_len:") == std::string::npos &&
                  extra.find("lengths:") == std::string::npos
              ? "  output_len: {dist: fixed, value: 10}\n"
              : "");
}

// A file in a fresh temporary directory holding `text`.
std::string temp_file(const std::string& name, const std::string& text) {
  const auto dir = servelab::test_util::kept_temp_dir("workload_test");
  const auto path = dir / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

void expect_well_formed(const std::vector<RequestSpec>& rs) {
  for (std::size_t i = 0; i < rs.size(); ++i) {
    ASSERT_EQ(rs[i].id, i);
    if (i > 0) {
      ASSERT_GE(rs[i].arrival_ns, rs[i - 1].arrival_ns);
    }
    std::int64_t total = 0;
    for (const PromptSegment& s : rs[i].prompt) total += s.length;
    ASSERT_EQ(total, rs[i].prompt_len);
    ASSERT_GE(rs[i].prompt_len, 1);
    ASSERT_GE(rs[i].max_output_tokens, 1);
  }
}

// ---- Synthetic: determinism and stopping ----

TEST(WorkloadSynthetic, SameSeedSameStreamDifferentSeedDiffers) {
  const std::string yaml =
      synthetic("{process: gamma, rate: 20, cv: 2}",
                "  prompt_len: {dist: lognormal, mean: 800, stddev: 400}\n"
                "  shared_prefix: {num_prefixes: 3, length: 50, fraction: 0.3}\n",
                2000);
  const auto a = generate(yaml, 1), b = generate(yaml, 1), c = generate(yaml, 2);
  ASSERT_EQ(a.size(), 2000u);
  ASSERT_EQ(b.size(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].arrival_ns, b[i].arrival_ns);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].max_output_tokens, b[i].max_output_tokens);
  }
  int same_arrival = 0, same_len = 0;
  for (std::size_t i = 1; i < a.size(); ++i) {
    same_arrival += a[i].arrival_ns == c[i].arrival_ns;
    same_len += a[i].prompt_len == c[i].prompt_len;
  }
  EXPECT_LT(same_arrival, 10);
  EXPECT_LT(same_len, 100);
  expect_well_formed(a);
}

TEST(WorkloadSynthetic, IdsOrderStartAndExhaustion) {
  auto w = from_yaml(synthetic("{process: poisson, rate: 5}", "  start_s: 2.5\n", 100));
  const auto rs = drain(*w);
  ASSERT_EQ(rs.size(), 100u);
  expect_well_formed(rs);
  EXPECT_EQ(rs.front().arrival_ns, 2'500'000'000);
  EXPECT_FALSE(w->next().has_value());  // stays exhausted
  EXPECT_THAT(w->describe(), HasSubstr("poisson"));
}

TEST(WorkloadSynthetic, DurationStopsAtWhicheverComesFirst) {
  const auto by_time = generate(
      "workload:\n  type: synthetic\n  duration_s: 10\n  start_s: 1\n"
      "  arrival: {process: poisson, rate: 100}\n"
      "  prompt_len: {dist: fixed, value: 8}\n  output_len: {dist: fixed, value: 8}\n");
  ASSERT_GT(by_time.size(), 850u);
  ASSERT_LT(by_time.size(), 1150u);
  EXPECT_LT(by_time.back().arrival_ns, 11 * kNsPerS);
  const auto by_count = generate(
      "workload:\n  type: synthetic\n  duration_s: 10\n  num_requests: 50\n"
      "  arrival: {process: poisson, rate: 100}\n"
      "  prompt_len: {dist: fixed, value: 8}\n  output_len: {dist: fixed, value: 8}\n");
  EXPECT_EQ(by_count.size(), 50u);
}

// ---- Synthetic: arrival processes ----

TEST(WorkloadSynthetic, PoissonRateAndUnitCv) {
  const auto rs = generate(synthetic("{process: poisson, rate: 20}"));
  const Moments m = moments(gaps_s(rs));
  EXPECT_NEAR(1.0 / m.mean, 20.0, 20.0 * 0.03);
  EXPECT_NEAR(m.cv, 1.0, 0.05);
}

TEST(WorkloadSynthetic, GammaRateAndCv) {
  for (double cv : {0.5, 3.0}) {
    const auto rs =
        generate(synthetic("{process: gamma, rate: 20, cv: " + std::to_string(cv) + "}"));
    const Moments m = moments(gaps_s(rs));
    EXPECT_NEAR(1.0 / m.mean, 20.0, 20.0 * 0.1) << "cv " << cv;
    EXPECT_NEAR(m.cv, cv, cv * 0.15) << "cv " << cv;
  }
}

TEST(WorkloadSynthetic, FixedRateIsExact) {
  const auto rs = generate(synthetic("{process: fixed, rate: 3}", "", 1000));
  for (std::size_t i = 0; i < rs.size(); ++i) {
    ASSERT_EQ(rs[i].arrival_ns, std::llround(static_cast<double>(i) * 1e9 / 3.0));
  }
}

TEST(WorkloadSynthetic, OnOffHasNoArrivalsDuringOffPeriods) {
  const auto rs =
      generate(synthetic("{process: onoff, rate: 50, on_s: 2, off_s: 3}", "  start_s: 10\n"));
  const TimeNs cycle = 5 * kNsPerS;
  for (const RequestSpec& r : rs) {
    ASSERT_LT((r.arrival_ns - 10 * kNsPerS) % cycle, 2 * kNsPerS) << "request " << r.id;
  }
  // Mean rate over whole cycles: 50 req/s for 2 s of every 5.
  const double span = ns_to_s(rs.back().arrival_ns - rs.front().arrival_ns);
  EXPECT_NEAR(static_cast<double>(rs.size()) / span, 20.0, 20.0 * 0.05);
  // Both the on and the off periods are actually reached.
  EXPECT_GT(rs.back().arrival_ns, 100 * kNsPerS);
}

// ---- Synthetic: lengths ----

TEST(WorkloadSynthetic, LengthDistributionsRespectClampsAndMeans) {
  struct Case {
    std::string dist;
    double mean;  // expected mean of the clamped draws
    double tolerance;
    std::int32_t lo, hi;
  };
  const std::vector<Case> cases = {
      {"{dist: fixed, value: 123}", 123, 0, 123, 123},
      {"{dist: uniform, min: 16, max: 512}", 264, 4, 16, 512},
      {"{dist: normal, mean: 500, stddev: 100, min: 1, max: 10000}", 500, 3, 1, 10000},
      {"{dist: normal, mean: 100, stddev: 200, min: 50, max: 300}", -1, 0, 50, 300},
      {"{dist: lognormal, mean: 800, stddev: 400, min: 16, max: 100000}", 800, 16, 16, 100000},
      {"{dist: lognormal, mean: 800, stddev: 400, min: 600, max: 900}", -1, 0, 600, 900},
  };
  for (const Case& c : cases) {
    const auto rs =
        generate(synthetic("{process: poisson, rate: 1}",
                           "  prompt_len: " + c.dist + "\n  output_len: " + c.dist + "\n"));
    std::vector<double> p, o;
    for (const RequestSpec& r : rs) {
      ASSERT_GE(r.prompt_len, c.lo) << c.dist;
      ASSERT_LE(r.prompt_len, c.hi) << c.dist;
      ASSERT_GE(r.max_output_tokens, c.lo) << c.dist;
      ASSERT_LE(r.max_output_tokens, c.hi) << c.dist;
      p.push_back(r.prompt_len);
      o.push_back(r.max_output_tokens);
    }
    if (c.mean > 0) {
      EXPECT_NEAR(moments(p).mean, c.mean, c.tolerance) << c.dist;
      EXPECT_NEAR(moments(o).mean, c.mean, c.tolerance) << c.dist;
    }
  }
  // The lognormal's stddev is that of the lengths, not of their logarithm.
  const auto rs =
      generate(synthetic("{process: poisson, rate: 1}",
                         "  prompt_len: {dist: lognormal, mean: 800, stddev: 400}\n", 50000));
  std::vector<double> p;
  for (const RequestSpec& r : rs) p.push_back(r.prompt_len);
  EXPECT_NEAR(moments(p).cv, 0.5, 0.05);
}

TEST(WorkloadSynthetic, TableSamplingReturnsTableValues) {
  const auto table = LengthTable::load(kShareGpt);
  ASSERT_EQ(table->size(), 30731u);
  std::set<std::int32_t> prefill, decode;
  for (std::size_t i = 0; i < table->size(); ++i) {
    prefill.insert(table->prefill(i));
    decode.insert(table->decode(i));
  }
  const auto rs = generate(synthetic(
      "{process: poisson, rate: 1}",
      "  prompt_len: {dist: table, file: " + kShareGpt +
          "}\n"
          "  output_len: {dist: table, file: traces/lengths/"
          "sharegpt_8k_filtered_stats_llama2_tokenizer.csv}\n"));  // repo-relative fallback
  std::vector<double> p;
  for (const RequestSpec& r : rs) {
    ASSERT_TRUE(prefill.count(r.prompt_len)) << r.prompt_len;
    ASSERT_TRUE(decode.count(r.max_output_tokens)) << r.max_output_tokens;
    p.push_back(r.prompt_len);
  }
  EXPECT_NEAR(moments(p).mean, 2340.0, 2340.0 * 0.05);
  // Column and clamps.
  const auto clamped = generate(synthetic(
      "{process: poisson, rate: 1}",
      "  prompt_len: {dist: table, file: " + kShareGpt + ", column: decode, min: 100, max: 400}\n",
      2000));
  for (const RequestSpec& r : clamped) {
    ASSERT_GE(r.prompt_len, 100);
    ASSERT_LE(r.prompt_len, 400);
  }
}

TEST(WorkloadSynthetic, PairedLengthsComeFromOneRow) {
  const auto table = LengthTable::load(kShareGpt);
  std::set<std::pair<std::int32_t, std::int32_t>> rows;
  for (std::size_t i = 0; i < table->size(); ++i)
    rows.insert({table->prefill(i), table->decode(i)});
  const auto rs = generate(
      synthetic("{process: poisson, rate: 1}", "  lengths: {table: " + kShareGpt + "}\n", 5000));
  for (const RequestSpec& r : rs) {
    ASSERT_TRUE(rows.count({r.prompt_len, r.max_output_tokens}))
        << r.prompt_len << "," << r.max_output_tokens;
  }
  const auto clamped = generate(
      synthetic("{process: poisson, rate: 1}",
                "  lengths: {table: " + kShareGpt + ", prompt_max: 1000, output_min: 64}\n", 5000));
  for (const RequestSpec& r : clamped) {
    ASSERT_LE(r.prompt_len, 1000);
    ASSERT_GE(r.max_output_tokens, 64);
  }
}

TEST(WorkloadSynthetic, SharedPrefixFractionAndIdenticalFirstSegments) {
  const std::uint64_t seed = 11;
  const auto rs = generate(synthetic("{process: poisson, rate: 10}",
                                     "  prompt_len: {dist: uniform, min: 100, max: 600}\n"
                                     "  shared_prefix: {num_prefixes: 4, length: 256, "
                                     "fraction: 0.5}\n"),
                           seed);
  expect_well_formed(rs);
  std::set<std::uint64_t> prefix_ids;
  int with_prefix = 0;
  for (const RequestSpec& r : rs) {
    const PromptSegment own = r.prompt.back();
    EXPECT_EQ(own.content_id, unique_content_id(seed, r.id));
    EXPECT_EQ(own.offset, 0u);
    EXPECT_GE(own.length, 1u);
    if (r.prompt.size() == 2) {
      ++with_prefix;
      const PromptSegment& p = r.prompt.front();
      EXPECT_EQ(p.offset, 0u);
      EXPECT_EQ(p.length, 256u);
      prefix_ids.insert(p.content_id);
      // prompt_len is the total: own tokens make up the rest, at least one.
      EXPECT_GE(r.prompt_len, 257);
    } else {
      ASSERT_EQ(r.prompt.size(), 1u);
    }
  }
  EXPECT_NEAR(with_prefix / static_cast<double>(rs.size()), 0.5, 0.02);
  ASSERT_EQ(prefix_ids.size(), 4u);
  for (std::uint64_t p = 0; p < 4; ++p)
    EXPECT_TRUE(prefix_ids.count(shared_prefix_content_id(seed, p)));
  // Two requests with the same prefix start with the same tokens.
  const RequestSpec* first = nullptr;
  for (const RequestSpec& r : rs) {
    if (r.prompt.size() != 2) continue;
    if (first == nullptr) {
      first = &r;
    } else if (r.prompt[0] == first->prompt[0]) {
      for (std::int32_t pos = 0; pos < 256; ++pos) {
        const TokenId a = token_identity(*first, pos), b = token_identity(r, pos);
        ASSERT_EQ(a.content_id, b.content_id);
        ASSERT_EQ(a.offset, b.offset);
      }
      const TokenId a = token_identity(*first, 256), b = token_identity(r, 256);
      EXPECT_NE(a.content_id, b.content_id);
      break;
    }
  }
}

TEST(WorkloadSynthetic, RandomStreamsAreIndependent) {
  const auto a = generate(synthetic("{process: poisson, rate: 10}",
                                    "  prompt_len: {dist: uniform, min: 1, max: 1000}\n"
                                    "  output_len: {dist: uniform, min: 1, max: 100}\n",
                                    1000));
  const auto b = generate(synthetic("{process: poisson, rate: 10}",
                                    "  prompt_len: {dist: uniform, min: 1, max: 1000}\n"
                                    "  output_len: {dist: lognormal, mean: 50, stddev: 20}\n"
                                    "  shared_prefix: {num_prefixes: 2, length: 8, fraction: 0}\n",
                                    1000));
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].arrival_ns, b[i].arrival_ns);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
  }
}

// ---- Azure trace ----

TEST(WorkloadAzure, ConversationTraceStatistics) {
  AzureTraceWorkload w(kConv);
  const auto rs = drain(w);
  ASSERT_EQ(rs.size(), 19366u);
  expect_well_formed(rs);
  EXPECT_EQ(rs.front().arrival_ns, 0);
  EXPECT_NEAR(ns_to_s(rs.back().arrival_ns), 3501.7, 0.1);
  double in = 0, out = 0;
  for (const RequestSpec& r : rs) {
    in += r.prompt_len;
    out += r.max_output_tokens;
    ASSERT_EQ(r.prompt.size(), 1u);
    ASSERT_EQ(r.prompt[0].content_id, unique_content_id(0, r.id));
  }
  EXPECT_NEAR(in / rs.size(), 1155, 1);
  EXPECT_NEAR(out / rs.size(), 211, 1);
  // First rows: 2023-11-16 18:15:46.6805900,374,44 then 18:15:50.9951690,396,109.
  EXPECT_EQ(rs[0].prompt_len, 374);
  EXPECT_EQ(rs[0].max_output_tokens, 44);
  EXPECT_EQ(rs[1].arrival_ns, 4'314'579'000);
  EXPECT_EQ(rs[1].prompt_len, 396);
}

TEST(WorkloadAzure, CodeTraceFromYaml) {
  auto w = from_yaml(
      "workload:\n  type: azure\n  path: traces/azure2023/AzureLLMInferenceTrace_code.csv\n", 3,
      "/nonexistent-dir");  // falls back to the repository root
  const auto rs = drain(*w);
  ASSERT_EQ(rs.size(), 8819u);
  EXPECT_NEAR(ns_to_s(rs.back().arrival_ns), 3435.9, 0.1);
  EXPECT_EQ(rs[5].prompt[0].content_id, unique_content_id(3, 5));
  EXPECT_THAT(w->describe(), HasSubstr("AzureLLMInferenceTrace_code.csv"));
}

TEST(WorkloadAzure, TimeScaleMaxRequestsAndStart) {
  const auto full = drain(*from_yaml("workload: {type: azure, path: " + kConv + "}"));
  const auto scaled = drain(*from_yaml("workload: {type: azure, path: " + kConv +
                                       ", time_scale: 0.5, max_requests: 100, start_s: 2}"));
  ASSERT_EQ(scaled.size(), 100u);
  for (std::size_t i = 0; i < scaled.size(); ++i) {
    EXPECT_EQ(scaled[i].arrival_ns, 2 * kNsPerS + std::llround(full[i].arrival_ns * 0.5));
    EXPECT_EQ(scaled[i].prompt_len, full[i].prompt_len);
  }
}

TEST(WorkloadAzure, ToleratesLfOffsetsFewerDigitsAndNoFinalNewline) {
  const std::string path =
      temp_file("azure2024.csv",
                "\xEF\xBB\xBFTIMESTAMP,ContextTokens,GeneratedTokens\n"
                "2024-05-10 00:00:00.5+00:00,10,2\n"
                "\n"
                "2024-05-10 00:00:01+00:00,20,3\n"
                "2024-05-10 02:00:01.25+02:00,30,4");  // the same instant as 00:00:01.25 UTC
  AzureTraceWorkload w(path,
                       {.max_requests = {}, .time_scale = 1.0, .start_ns = 0, .content_seed = 9});
  const auto rs = drain(w);
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[1].arrival_ns, 500'000'000);
  EXPECT_EQ(rs[2].arrival_ns, 750'000'000);
  EXPECT_EQ(rs[2].prompt_len, 30);
  EXPECT_EQ(rs[2].max_output_tokens, 4);
}

TEST(WorkloadAzure, TimestampParsingIsExact) {
  EXPECT_EQ(parse_timestamp_ns("1970-01-01 00:00:00"), 0);
  EXPECT_EQ(parse_timestamp_ns("2023-11-16 18:15:46.6805900"), 1700158546'000000000 + 680'590'000);
  EXPECT_EQ(parse_timestamp_ns("2023-11-16 18:15:46.1"), 1700158546'100000000);
  EXPECT_EQ(parse_timestamp_ns("2023-11-16T18:15:46.123456789Z"), 1700158546'123456789);
  EXPECT_EQ(parse_timestamp_ns(" 2023-11-16 18:15:46.000001 "), 1700158546'000001000);
  EXPECT_EQ(parse_timestamp_ns("2024-02-29 23:59:59"), 1709251199'000000000);
  EXPECT_EQ(parse_timestamp_ns("2024-05-10 12:00:00+05:30"), 1715322600'000000000);
  EXPECT_EQ(parse_timestamp_ns("2024-05-10 12:00:00+0530"), 1715322600'000000000);
  EXPECT_EQ(parse_timestamp_ns("2024-05-10 06:30:00-00:00"), 1715322600'000000000);
  EXPECT_EQ(parse_timestamp_ns("2024-05-10 01:30:00-05"), 1715322600'000000000);
  EXPECT_EQ(parse_timestamp_ns("1999-12-31 00:00:00"), 946598400'000000000);
  for (const char* bad :
       {"", "garbage", "2023-11-16", "2023-11-16 18:15", "2023-11-16 18:15:46.",
        "2023-11-16 18:15:46.1234567890", "2023-02-29 00:00:00", "2023-13-01 00:00:00",
        "2023-11-16 24:00:00", "2023-11-16 18:60:00", "2023-11-16 18:15:46 UTC",
        "2023-11-16 18:15:46+5", "23-11-16 18:15:46", "2023-11-16 18:15:46.5Z0"}) {
    EXPECT_FALSE(parse_timestamp_ns(bad).has_value()) << bad;
  }
}

TEST(WorkloadAzure, FileErrorsNameTheFileAndLine) {
  const std::string header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  const std::string row = "2023-11-16 18:15:46.6805900,374,44\n";
  EXPECT_THAT(error_of([] { AzureTraceWorkload w("/no/such/trace.csv"); }),
              HasSubstr("/no/such/trace.csv: cannot open file"));
  const std::string bad_header = temp_file("bad_header.csv", "TIME,Context,Generated\n" + row);
  EXPECT_THAT(error_of([&] { AzureTraceWorkload w(bad_header); }),
              HasSubstr(bad_header + ":1: expected the header TIMESTAMP,ContextTokens,"
                                     "GeneratedTokens, got 'TIME,Context,Generated'"));
  const std::string empty = temp_file("empty.csv", header);
  EXPECT_THAT(error_of([&] { AzureTraceWorkload w(empty); }), HasSubstr("empty trace"));
  const std::string nothing = temp_file("nothing.csv", "");
  EXPECT_THAT(error_of([&] { AzureTraceWorkload w(nothing); }), HasSubstr("empty file"));

  // Rows after the first are found while streaming.
  auto streamed_error = [&](const std::string& name, const std::string& bad_row) {
    const std::string path = temp_file(name, header + row + row + bad_row + row);
    return error_of([&] {
      AzureTraceWorkload w(path);
      drain(w);
    });
  };
  EXPECT_THAT(streamed_error("fields.csv", "2023-11-16 18:15:47,374\n"),
              HasSubstr("fields.csv:4: expected 3 comma-separated fields"));
  EXPECT_THAT(streamed_error("time.csv", "2023-11-16 18:15:4x,374,44\n"),
              HasSubstr("time.csv:4: expected a timestamp like 2023-11-16 18:15:46.6805900 "
                        "(years 1678 to 2261), got '2023-11-16 18:15:4x'"));
  EXPECT_THAT(streamed_error("zero.csv", "2023-11-16 18:15:47,0,44\n"),
              HasSubstr("zero.csv:4: expected a positive integer ContextTokens, got '0'"));
  EXPECT_THAT(streamed_error("negative.csv", "2023-11-16 18:15:47,374,-3\n"),
              HasSubstr("negative.csv:4: expected a positive integer GeneratedTokens, got '-3'"));
  EXPECT_THAT(streamed_error("order.csv", "2023-11-16 18:15:40,374,44\n"),
              HasSubstr("order.csv:4: expected a timestamp no earlier than line 3's"));
  // A malformed first row is found when the workload is built.
  const std::string first = temp_file("first.csv", header + "x,1,1\n");
  EXPECT_THAT(error_of([&] { AzureTraceWorkload w(first); }), HasSubstr("first.csv:2: expected"));
  // max_requests stops before the bad row: it is never read.
  const std::string late = temp_file("late.csv", header + row + row + "bad\n");
  AzureTraceWorkload w(late, {.max_requests = 2});
  EXPECT_EQ(drain(w).size(), 2u);
}

// ---- YAML errors ----

// A data path naming a folder is refused at its key (a sessions file read as "malformed JSON").
TEST(WorkloadYaml, AFolderIsNotADataFile) {
  const std::filesystem::path dir =
      servelab::test_util::kept_temp_dir("workload_test") / "a-folder";
  std::filesystem::create_directories(dir);
  for (const char* type : {"azure", "sessions"}) {
    const std::string msg = error_of([&] {
      from_yaml(std::string("workload:\n  type: ") + type + "\n  path: " + dir.string() + "\n");
    });
    EXPECT_THAT(msg, HasSubstr("test.yaml:3:")) << type;
    EXPECT_THAT(msg, HasSubstr("is a folder; expected a file")) << type;
  }
}

TEST(WorkloadYaml, ErrorsNameTheKeyAndWhatWasExpected) {
  const std::string lens =
      "  prompt_len: {dist: fixed, value: 10}\n  output_len: {dist: fixed, value: 10}\n";
  auto err = [](const std::string& yaml) { return error_of([&] { from_yaml(yaml); }); };
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n"
                  "  arrival: {process: poisson, rate: -5}\n" +
                  lens),
              HasSubstr("test.yaml:4:"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n"
                  "  arrival: {process: poisson, rate: -5}\n" +
                  lens),
              HasSubstr("key 'workload.arrival.rate': expected a number > 0, got '-5'"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n"
                  "  arrival: {process: poisson, rate: 0}\n" +
                  lens),
              HasSubstr("expected a number > 0, got '0'"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n"
                  "  arrival: {process: gamma, rate: 1, cv: -1}\n" +
                  lens),
              HasSubstr("key 'workload.arrival.cv'"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n"
                  "  arrival: {process: burst, rate: 1}\n" +
                  lens),
              HasSubstr("key 'workload.arrival.process': expected one of: poisson, gamma, fixed, "
                        "onoff, got 'burst'"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n"
                  "  arrival: {process: poisson, rate: 1}\n"
                  "  prompt_len: {dist: zipf, value: 3}\n  output_len: {dist: fixed, value: 1}\n"),
              HasSubstr("key 'workload.prompt_len.dist': expected one of: fixed, uniform, normal, "
                        "lognormal, table, got 'zipf'"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n  rate: 3\n"
                  "  arrival: {process: poisson, rate: 1}\n" +
                  lens),
              HasSubstr("unknown key 'workload.rate'"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n"
                  "  arrival: {process: poisson, rate: 1, cv: 2}\n" +
                  lens),
              HasSubstr("unknown key 'workload.arrival.cv'"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  arrival: {process: poisson, rate: 1}\n" + lens),
              HasSubstr("needs num_requests or duration_s"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n"
                  "  arrival: {process: poisson, rate: 1}\n"
                  "  prompt_len: {dist: uniform, min: 50, max: 10}\n"
                  "  output_len: {dist: fixed, value: 1}\n"),
              HasSubstr("key 'workload.prompt_len.max': expected an integer >= min (50)"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n"
                  "  arrival: {process: poisson, rate: 1}\n"
                  "  prompt_len: {dist: normal, mean: 10, stddev: 1, min: 0}\n"
                  "  output_len: {dist: fixed, value: 1}\n"),
              HasSubstr("key 'workload.prompt_len.min'"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n"
                  "  arrival: {process: poisson, rate: 1}\n"
                  "  lengths: {table: " +
                  kShareGpt + "}\n" + lens),
              HasSubstr("key 'workload.lengths': replaces prompt_len and output_len"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n"
                  "  arrival: {process: poisson, rate: 1}\n"
                  "  prompt_len: {dist: table, file: nowhere/lengths.csv}\n"
                  "  output_len: {dist: fixed, value: 1}\n"),
              HasSubstr("key 'workload.prompt_len.file': file 'nowhere/lengths.csv' not found"));
  EXPECT_THAT(err("workload:\n  type: synthetic\n  num_requests: 10\n"
                  "  arrival: {process: poisson, rate: 1}\n" +
                  lens + "  shared_prefix: {num_prefixes: 2, length: 8, fraction: 1.5}\n"),
              HasSubstr("key 'workload.shared_prefix.fraction'"));
  EXPECT_THAT(err("workload: {type: parquet}"),
              HasSubstr("key 'workload.type': expected one of: synthetic, azure"));
  EXPECT_THAT(err("workload: {type: azure, path: missing/trace.csv}"),
              HasSubstr("key 'workload.path': file 'missing/trace.csv' not found"));
  EXPECT_THAT(err("workload: {type: azure, path: " + kConv + ", time_scale: -2}"),
              HasSubstr("key 'workload.time_scale': expected a number > 0"));
  EXPECT_THAT(err("workload: {type: azure, path: " + kConv + ", speed: 2}"),
              HasSubstr("unknown key 'workload.speed'"));
}

TEST(WorkloadYaml, LengthTableErrors) {
  const std::string no_columns = temp_file("cols.csv", "a,b\n1,2\n");
  EXPECT_THAT(error_of([&] { LengthTable::load(no_columns); }),
              HasSubstr("cols.csv:1: expected a header with columns num_prefill_tokens and "
                        "num_decode_tokens"));
  const std::string bad_row =
      temp_file("rows.csv",
                "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
                "10,5,15,2.0\n10,x,15,2.0\n");
  EXPECT_THAT(error_of([&] { LengthTable::load(bad_row); }),
              HasSubstr("rows.csv:3: expected a positive integer num_decode_tokens, got 'x'"));
  const std::string empty = temp_file("empty_table.csv", "num_decode_tokens,num_prefill_tokens\n");
  EXPECT_THAT(error_of([&] { LengthTable::load(empty); }), HasSubstr("empty table"));
  // A line longer than the read buffer is still read whole, and the message shortens it.
  const std::string long_line =
      temp_file("long.csv", "num_prefill_tokens,num_decode_tokens\n1,2\n" +
                                std::string(600'000, '7') + "\n3,4\n");
  const std::string message = error_of([&] { LengthTable::load(long_line); });
  EXPECT_THAT(message, HasSubstr("long.csv:3: expected 2 comma-separated fields"));
  EXPECT_LT(message.size(), 300u);
  // Columns are found by name, in any order.
  const std::string swapped =
      temp_file("swapped.csv", "num_decode_tokens,num_prefill_tokens\r\n7,300\r\n");
  const auto t = LengthTable::load(swapped);
  ASSERT_EQ(t->size(), 1u);
  EXPECT_EQ(t->prefill(0), 300);
  EXPECT_EQ(t->decode(0), 7);
}

TEST(WorkloadYaml, DataPathsResolveAgainstBaseDirThenRepository) {
  const std::string local = temp_file("local.csv", "x");
  const std::string dir = std::filesystem::path(local).parent_path().string();
  EXPECT_EQ(resolve_data_path("local.csv", dir), dir + "/local.csv");
  EXPECT_EQ(resolve_data_path(local, "/elsewhere"), local);
  EXPECT_EQ(resolve_data_path("traces/lengths/README.md", dir),
            kRepo + "/traces/lengths/README.md");
  EXPECT_FALSE(resolve_data_path("no/such/file.csv", dir).has_value());
}

}  // namespace
}  // namespace servelab
