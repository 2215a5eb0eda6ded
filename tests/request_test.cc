// Request specs (segments, canonical form, token identity), request state, and the
// deterministic random-number streams everything else draws from.
#include "core/request.h"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "core/config_error.h"
#include "core/request_state.h"
#include "core/rng.h"

namespace servelab {
namespace {

// Golden values from an independent (Python) implementation of the documented algorithm:
// SplitMix64-derived state, xoshiro256**. They pin the streams across platforms and releases.
TEST(Rng, MatchesReferenceImplementation) {
  EXPECT_EQ(mix64(0), 0xe220a8397b1dcdafULL);  // the first SplitMix64 output for seed 0
  EXPECT_EQ(mix64(1), 0x910a2dec89025cc1ULL);
  Rng r(42);
  EXPECT_EQ(r.next_u64(), 0xbe15272cdf80b6c2ULL);
  EXPECT_EQ(r.next_u64(), 0xaf6e2ee49ff5d0e3ULL);
  EXPECT_EQ(r.next_u64(), 0xca56edd0338a318fULL);
  EXPECT_EQ(Rng::stream(7, "arrivals").next_u64(), 0xd47c8929028ac8f0ULL);
}

TEST(Rng, SameSeedSameStreamDifferentSeedOrNameDiffers) {
  Rng a(5), b(5), c(6);
  Rng s1 = Rng::stream(5, "lengths"), s2 = Rng::stream(5, "lengths");
  Rng s3 = Rng::stream(5, "arrivals"), s4 = Rng::stream(6, "lengths");
  int same_ac = 0, same_s13 = 0, same_s14 = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t x = a.next_u64();
    ASSERT_EQ(x, b.next_u64());
    same_ac += x == c.next_u64();
    const std::uint64_t y = s1.next_u64();
    ASSERT_EQ(y, s2.next_u64());
    same_s13 += y == s3.next_u64();
    same_s14 += y == s4.next_u64();
  }
  EXPECT_EQ(same_ac, 0);
  EXPECT_EQ(same_s13, 0);
  EXPECT_EQ(same_s14, 0);
  EXPECT_NE(name_hash("a"), name_hash("b"));
}

TEST(Rng, UniformAndIntegerRanges) {
  Rng r(1);
  constexpr int kN = 200000;
  double sum = 0;
  std::vector<int> counts(7, 0);
  bool saw_lo = false, saw_hi = false;
  for (int i = 0; i < kN; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    const double p = r.uniform_pos();
    ASSERT_GT(p, 0.0);
    ASSERT_LE(p, 1.0);
    const double v = r.uniform(-3.0, 5.0);
    ASSERT_GE(v, -3.0);
    ASSERT_LT(v, 5.0);
    const std::int64_t k = r.uniform_int(10, 16);
    ASSERT_GE(k, 10);
    ASSERT_LE(k, 16);
    ++counts[static_cast<std::size_t>(k - 10)];
    saw_lo |= k == 10;
    saw_hi |= k == 16;
  }
  EXPECT_NEAR(sum / kN, 0.5, 0.005);
  EXPECT_TRUE(saw_lo && saw_hi);  // both ends are inclusive
  // Chi-square with 6 degrees of freedom: 22.5 is far in the tail (p ~ 0.001).
  double chi2 = 0;
  const double expected = kN / 7.0;
  for (int c : counts) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 22.5);
  EXPECT_EQ(r.uniform_int(3, 3), 3);
  EXPECT_EQ(r.uniform_int(-2, -2), -2);
}

TEST(Rng, ContinuousDistributionsHaveTheirMoments) {
  Rng r(2);
  constexpr int kN = 100000;
  double exp_sum = 0, n_sum = 0, n_sq = 0, g_sum = 0, gs_sum = 0;
  int below_median = 0;
  for (int i = 0; i < kN; ++i) {
    const double e = r.exponential(4.0);
    ASSERT_GE(e, 0.0);
    exp_sum += e;
    const double z = r.normal();
    n_sum += z;
    n_sq += z * z;
    const double g = r.gamma(3.0, 2.0);
    ASSERT_GT(g, 0.0);
    g_sum += g;
    gs_sum += r.gamma(0.5, 1.0);  // the k < 1 branch
    below_median += r.lognormal(1.0, 0.5) < std::exp(1.0);
  }
  EXPECT_NEAR(exp_sum / kN, 0.25, 0.005);
  EXPECT_NEAR(n_sum / kN, 0.0, 0.02);
  EXPECT_NEAR(n_sq / kN, 1.0, 0.02);
  EXPECT_NEAR(g_sum / kN, 6.0, 0.05);
  EXPECT_NEAR(gs_sum / kN, 0.5, 0.02);
  EXPECT_NEAR(static_cast<double>(below_median) / kN, 0.5, 0.01);
  EXPECT_NEAR(r.normal(10.0, 0.0), 10.0, 1e-12);
}

TEST(Request, CanonicalizeMergesContinuingSegmentsOnly) {
  RequestSpec s;
  s.prompt = {{1, 0, 10}, {1, 10, 6}, {1, 16, 0}, {2, 0, 4}, {2, 5, 3}, {1, 16, 2}, {1, 18, 2}};
  s.prompt_len = 999;  // stale; recomputed
  canonicalize(s);
  const std::vector<PromptSegment> want = {{1, 0, 16}, {2, 0, 4}, {2, 5, 3}, {1, 16, 4}};
  EXPECT_EQ(s.prompt, want);
  EXPECT_EQ(s.prompt_len, 27);
  canonicalize(s);  // idempotent
  EXPECT_EQ(s.prompt, want);
  EXPECT_EQ(s.prompt_len, 27);

  RequestSpec empty;
  empty.prompt = {{3, 0, 0}};
  canonicalize(empty);
  EXPECT_TRUE(empty.prompt.empty());
  EXPECT_EQ(empty.prompt_len, 0);
}

// A prompt past 2^31 - 1 tokens (lengths a workload added up) is an error naming the request,
// never a negative prompt_len.
TEST(Request, CanonicalizeRefusesAPromptPastInt32) {
  EXPECT_EQ(make_request(7, 0, {{1, 0, 0x7fffffffu}}, 1).prompt_len, INT32_MAX);
  try {
    make_request(7, 0, {{1, 0, 0x7fffffffu}, {2, 0, 1}}, 1);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("request 7: its prompt has 2147483648 tokens"),
              std::string::npos)
        << e.what();
  }
}

TEST(Request, MakeRequestCanonicalizesAndFillsFields) {
  const RequestSpec s = make_request(9, 1234, {{4, 0, 8}, {4, 8, 8}, {5, 2, 3}}, 17);
  EXPECT_EQ(s.id, 9u);
  EXPECT_EQ(s.arrival_ns, 1234);
  EXPECT_EQ(s.prompt, (std::vector<PromptSegment>{{4, 0, 16}, {5, 2, 3}}));
  EXPECT_EQ(s.prompt_len, 19);
  EXPECT_EQ(s.max_output_tokens, 17);
  EXPECT_EQ(s.total_tokens(), 36);
  EXPECT_EQ(s.priority, 0);
  EXPECT_EQ(s.n, 1);
}

TEST(Request, TokenIdentityWalksSegmentsThenOutputs) {
  const RequestSpec s = make_request(3, 0, {{7, 100, 4}, {8, 0, 2}}, 5);
  auto is = [](TokenId t, std::uint64_t cid, std::uint32_t off) {
    return t.content_id == cid && t.offset == off;
  };
  EXPECT_TRUE(is(token_identity(s, 0), 7, 100));
  EXPECT_TRUE(is(token_identity(s, 3), 7, 103));
  EXPECT_TRUE(is(token_identity(s, 4), 8, 0));
  EXPECT_TRUE(is(token_identity(s, 5), 8, 1));
  EXPECT_TRUE(is(token_identity(s, 6), output_content_id(3), 0));
  EXPECT_TRUE(is(token_identity(s, 9), output_content_id(3), 3));
}

TEST(Request, ContentStreamsAreDistinct) {
  std::set<std::uint64_t> ids;
  for (RequestId r = 0; r < 100; ++r) ids.insert(output_content_id(r));
  for (std::uint64_t i = 0; i < 100; ++i) {
    ids.insert(unique_content_id(1, i));
    ids.insert(unique_content_id(2, i));
  }
  EXPECT_EQ(ids.size(), 300u);
  EXPECT_EQ(unique_content_id(1, 5), unique_content_id(1, 5));
}

TEST(Request, TokenValueIsDeterministicAndInVocabulary) {
  constexpr std::int32_t kVocab = 32000;
  std::set<std::int32_t> values;
  for (std::uint32_t off = 0; off < 1000; ++off) {
    const std::int32_t v = token_value(12, off, kVocab);
    ASSERT_GE(v, 0);
    ASSERT_LT(v, kVocab);
    ASSERT_EQ(v, token_value(12, off, kVocab));
    values.insert(v);
  }
  EXPECT_GT(values.size(), 950u);  // ~16 collisions expected among 1000 draws from 32000
  EXPECT_NE(token_value(12, 0, kVocab), token_value(13, 0, kVocab));
  EXPECT_EQ(token_value(12, 0, 1), 0);
}

TEST(Request, StateCountsPromptAndOutputTokens) {
  Request r(make_request(4, 0, {{1, 0, 20}}, 8));
  EXPECT_EQ(r.id(), 4u);
  EXPECT_EQ(r.status, RequestStatus::kWaiting);
  EXPECT_EQ(r.num_tokens(), 20);
  EXPECT_EQ(r.num_cached_tokens, -1);
  r.output_tokens = {5, 6, 7};
  EXPECT_EQ(r.num_output_tokens(), 3);
  EXPECT_EQ(r.num_tokens(), 23);
  EXPECT_STREQ(to_string(RequestStatus::kPreempted), "preempted");
  EXPECT_STREQ(to_string(RequestStatus::kFinished), "finished");
  EXPECT_STREQ(to_string(RequestStatus::kRejected), "rejected");
}

}  // namespace
}  // namespace servelab
