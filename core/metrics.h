// Distribution summaries used by every metric (definitions in docs/metrics.md).
//
// Percentiles use linear interpolation between closest ranks (numpy's default): for sorted
// values v[0..n-1], p-th percentile = v[k] + (v[k+1]-v[k]) * f where k + f = (n-1) * p / 100.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

namespace servelab {

struct DistributionSummary {
  std::int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;
};

// Summary of `values` (sorted in place). All zero when empty.
DistributionSummary summarize(std::vector<double>& values);

// `value`, one of d's statistics, printed with the printf `format` (one double), or `empty` when d
// has no values: its zeros would read as the best latency there is (docs/metrics.md). Tables
// print "-", CSV files an empty field.
std::string stat_text(const DistributionSummary& d, double value, const char* format,
                      const char* empty);

// Percentile p in [0, 100] of sorted values. REQUIRES: !sorted.empty().
double percentile_sorted(const std::vector<double>& sorted, double p);

// A histogram of non-negative integers with bounded relative error, for streams too long to
// keep (inter-token latencies of millions of requests). Values below 2^kSubBits are exact;
// above, each power-of-two range is split into 2^kSubBits buckets, so a value is represented
// by its bucket's midpoint within 1/2^(kSubBits+1) relative error (0.1 %). count, mean and max
// are exact.
class LogHistogram {
 public:
  static constexpr int kSubBits = 9;
  // Inline: called once per generated token. Buckets grow in a separate, cold function.
  void add(std::int64_t value) {
    const std::uint64_t v = value < 0 ? 0 : static_cast<std::uint64_t>(value);
    const std::size_t b = bucket_of(v);
    if (b >= buckets_.size()) [[unlikely]]
      grow(b);
    ++buckets_[b];
    ++count_;
    sum_ += static_cast<std::int64_t>(v);
    if (static_cast<std::int64_t>(v) > max_) max_ = static_cast<std::int64_t>(v);
  }
  // add(value) `times` times over, in one update. REQUIRES: times >= 1.
  void add(std::int64_t value, std::int64_t times) {
    const std::uint64_t v = value < 0 ? 0 : static_cast<std::uint64_t>(value);
    const std::size_t b = bucket_of(v);
    if (b >= buckets_.size()) [[unlikely]]
      grow(b);
    buckets_[b] += times;
    count_ += times;
    sum_ += static_cast<std::int64_t>(v) * times;
    if (static_cast<std::int64_t>(v) > max_) max_ = static_cast<std::int64_t>(v);
  }
  std::int64_t count() const { return count_; }
  DistributionSummary summary() const;
  double percentile(double p) const;

 private:
  static std::size_t bucket_of(std::uint64_t v) {
    constexpr std::uint64_t kSub = 1ULL << kSubBits;
    if (v < kSub) return static_cast<std::size_t>(v);
    const int msb = 63 - std::countl_zero(v);            // >= kSubBits
    const int shift = msb - kSubBits;                    // bits dropped
    const std::uint64_t mantissa = (v >> shift) - kSub;  // in [0, kSub)
    return static_cast<std::size_t>(kSub + static_cast<std::uint64_t>(shift) * kSub + mantissa);
  }
  [[gnu::noinline]] void grow(std::size_t b) { buckets_.resize(b + 1, 0); }
  static double bucket_mid(std::size_t b);
  std::vector<std::int64_t> buckets_;
  std::int64_t count_ = 0;
  std::int64_t sum_ = 0;  // exact: nanosecond gaps of a run sum far below 2^63
  std::int64_t max_ = 0;
};

}  // namespace servelab
