#include "core/metrics.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/strings.h"

namespace servelab {

double percentile_sorted(const std::vector<double>& sorted, double p) {
  const double rank = (static_cast<double>(sorted.size()) - 1.0) * p / 100.0;
  const auto k = static_cast<std::size_t>(std::floor(rank));
  const double f = rank - static_cast<double>(k);
  if (k + 1 >= sorted.size()) return sorted.back();
  return sorted[k] + (sorted[k + 1] - sorted[k]) * f;
}

std::string stat_text(const DistributionSummary& d, double value, const char* format,
                      const char* empty) {
  return d.count > 0 ? format_text(format, value) : std::string(empty);
}

DistributionSummary summarize(std::vector<double>& values) {
  DistributionSummary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = static_cast<std::int64_t>(values.size());
  long double sum = 0;
  for (double v : values) sum += v;
  s.mean = static_cast<double>(sum / static_cast<long double>(values.size()));
  s.p50 = percentile_sorted(values, 50);
  s.p90 = percentile_sorted(values, 90);
  s.p95 = percentile_sorted(values, 95);
  s.p99 = percentile_sorted(values, 99);
  s.max = values.back();
  return s;
}

double LogHistogram::bucket_mid(std::size_t b) {
  constexpr std::uint64_t kSub = 1ULL << kSubBits;
  if (b < kSub) return static_cast<double>(b);
  const std::uint64_t shift = (b - kSub) / kSub;
  const std::uint64_t mantissa = (b - kSub) % kSub;
  const double lo = std::ldexp(static_cast<double>(kSub + mantissa), static_cast<int>(shift));
  const double width = std::ldexp(1.0, static_cast<int>(shift));
  return lo + (width - 1.0) / 2.0;
}

double LogHistogram::percentile(double p) const {
  if (count_ == 0) return 0;
  // Same interpolation rule as percentile_sorted, over bucket representatives.
  const double rank = (static_cast<double>(count_) - 1.0) * p / 100.0;
  const auto k = static_cast<std::int64_t>(std::floor(rank));
  const double f = rank - static_cast<double>(k);
  auto value_at = [&](std::int64_t idx) {
    std::int64_t seen = 0;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      seen += buckets_[b];
      if (seen > idx) return std::min(bucket_mid(b), static_cast<double>(max_));
    }
    return static_cast<double>(max_);
  };
  const double a = value_at(k);
  if (k + 1 >= count_) return a;
  return a + (value_at(k + 1) - a) * f;
}

DistributionSummary LogHistogram::summary() const {
  DistributionSummary s;
  if (count_ == 0) return s;
  s.count = count_;
  s.mean = static_cast<double>(static_cast<long double>(sum_) / static_cast<long double>(count_));
  s.p50 = percentile(50);
  s.p90 = percentile(90);
  s.p95 = percentile(95);
  s.p99 = percentile(99);
  s.max = static_cast<double>(max_);
  return s;
}

}  // namespace servelab
