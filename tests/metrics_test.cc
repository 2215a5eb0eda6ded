// Distribution summaries: the percentile rule and the bounded-error histogram.
#include "core/metrics.h"

#include <gtest/gtest.h>

#include "core/rng.h"
#include "core/scheduler_observer.h"
#include "serving/recorder.h"

namespace servelab {
namespace {

TEST(Metrics, PercentileInterpolatesLikeNumpy) {
  std::vector<double> v = {4, 1, 3, 2};  // sorted 1 2 3 4
  const DistributionSummary s = summarize(v);
  EXPECT_EQ(s.count, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.p50, 2.5);   // rank 1.5
  EXPECT_DOUBLE_EQ(s.p90, 3.7);   // rank 2.7
  EXPECT_DOUBLE_EQ(s.p99, 3.97);  // rank 2.97
  EXPECT_DOUBLE_EQ(s.max, 4);
}

TEST(Metrics, EmptyAndSingle) {
  std::vector<double> none;
  EXPECT_EQ(summarize(none).count, 0);
  EXPECT_EQ(summarize(none).p99, 0);
  std::vector<double> one = {7};
  const DistributionSummary s = summarize(one);
  EXPECT_DOUBLE_EQ(s.p50, 7);
  EXPECT_DOUBLE_EQ(s.p99, 7);
}

TEST(Metrics, HistogramExactForSmallValuesAndBoundedAbove) {
  LogHistogram h;
  for (int i = 0; i < 100; ++i) h.add(i);
  EXPECT_EQ(h.count(), 100);
  EXPECT_DOUBLE_EQ(h.percentile(50), 49.5);  // exact below 2^9
  EXPECT_DOUBLE_EQ(h.summary().max, 99);
  EXPECT_DOUBLE_EQ(h.summary().mean, 49.5);

  LogHistogram big;
  std::vector<double> exact;
  Rng rng(3);
  for (int i = 0; i < 20000; ++i) {
    const std::int64_t v = rng.uniform_int(1'000'000, 80'000'000);
    big.add(v);
    exact.push_back(static_cast<double>(v));
  }
  const DistributionSummary e = summarize(exact);
  const DistributionSummary a = big.summary();
  EXPECT_DOUBLE_EQ(a.mean, e.mean);
  EXPECT_DOUBLE_EQ(a.max, e.max);
  for (auto [approx, truth] : {std::pair{a.p50, e.p50}, {a.p90, e.p90}, {a.p99, e.p99}}) {
    EXPECT_NEAR(approx, truth, truth * 0.002);
  }
}

TEST(Metrics, HistogramAddWithCountEqualsRepeatedAdds) {
  LogHistogram once, repeated;
  const std::pair<std::int64_t, std::int64_t> adds[] = {{5, 3},  {700, 1}, {12'345'678, 40},
                                                        {-2, 2}, {512, 7}, {12'345'678, 1}};
  for (const auto& [value, times] : adds) {
    once.add(value, times);
    for (std::int64_t k = 0; k < times; ++k) repeated.add(value);
  }
  EXPECT_EQ(once.count(), repeated.count());
  const DistributionSummary a = once.summary(), b = repeated.summary();
  EXPECT_DOUBLE_EQ(a.mean, b.mean);
  EXPECT_DOUBLE_EQ(a.max, b.max);
  for (double p : {0.0, 10.0, 50.0, 90.0, 99.0, 100.0}) {
    EXPECT_DOUBLE_EQ(once.percentile(p), repeated.percentile(p)) << "p" << p;
  }
}

// The batched token report gives the same inter-token latencies as one report per token,
// whatever the runs of equal previous times, and skips first tokens (previous time -1).
TEST(Metrics, RecorderStepTokensMatchPerTokenReports) {
  Recorder batched(SloConfig{}, "", ""), single(SloConfig{}, "", "");
  Request r(RequestSpec{});
  const TimeNs now = 1'000'000;
  const std::vector<TimeNs> prev = {-1, 400'000, 400'000, 400'000, -1, 900'000, 400'000, 5};
  const std::vector<const Request*> reqs(prev.size(), &r);
  batched.on_step_tokens(reqs, prev, now);
  for (const TimeNs p : prev) single.on_token(r, p, now);
  batched.finalize(0, now, PrefixCacheStats{});
  single.finalize(0, now, PrefixCacheStats{});
  const DistributionSummary a = batched.summary().itl_ms, b = single.summary().itl_ms;
  EXPECT_EQ(a.count, 6);
  EXPECT_EQ(a.count, b.count);
  EXPECT_DOUBLE_EQ(a.mean, b.mean);
  EXPECT_DOUBLE_EQ(a.p50, b.p50);
  EXPECT_DOUBLE_EQ(a.p99, b.p99);
  EXPECT_DOUBLE_EQ(a.max, b.max);
}

// An observer that overrides only on_token still hears every token of a step, in order.
TEST(Metrics, DefaultStepTokensForwardsEachToken) {
  struct Tokens : SchedulerObserver {
    std::vector<std::pair<RequestId, TimeNs>> seen;
    void on_token(const Request& req, TimeNs prev, TimeNs) override {
      seen.emplace_back(req.id(), prev);
    }
  } obs;
  RequestSpec s1, s2;
  s1.id = 7;
  s2.id = 3;
  Request a(s1), b(s2);
  const std::vector<const Request*> reqs = {&a, &b, &a};
  const std::vector<TimeNs> prev = {10, -1, 20};
  obs.on_step_tokens(reqs, prev, 30);
  const std::vector<std::pair<RequestId, TimeNs>> want = {{7, 10}, {3, -1}, {7, 20}};
  EXPECT_EQ(obs.seen, want);
}

// TPOT of a parallel-sampling request is per sequence over the samples' mean length: samples of
// 30, 8 and 30 tokens (68) give (E2E - TTFT) / (68 / 3 - 1), not / (68 / 3 - 1) in integers (21).
TEST(Metrics, ParallelSamplesTpotUsesTheMeanSampleLength) {
  Recorder rec(SloConfig{}, "", "");
  RequestRecord r;
  r.arrival_ns = 0;
  r.first_scheduled_ns = 0;
  r.first_token_ns = 10'000'000;
  r.finish_ns = 142'000'000;  // 132 ms after the first token
  r.prompt_tokens = 20;
  r.output_tokens = 68;
  r.samples = 3;
  r.status = RequestStatus::kFinished;
  rec.add_measured(r, {});
  rec.finalize(0, 142'000'000, PrefixCacheStats{});
  EXPECT_NEAR(rec.summary().tpot_ms.mean, 132.0 / (68.0 / 3.0 - 1.0), 1e-9);
}

}  // namespace
}  // namespace servelab
