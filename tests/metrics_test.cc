// Distribution summaries: the percentile rule and the bounded-error histogram.
#include "core/metrics.h"

#include <gtest/gtest.h>

#include "core/rng.h"

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

}  // namespace
}  // namespace servelab
