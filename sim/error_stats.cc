#include "sim/error_stats.h"

#include <algorithm>
#include <cmath>

#include "core/metrics.h"

namespace servelab {

ErrorStats error_stats(const std::vector<double>& signed_errors) {
  ErrorStats s;
  s.count = static_cast<std::int64_t>(signed_errors.size());
  if (signed_errors.empty()) return s;
  std::vector<double> abs_errors;
  abs_errors.reserve(signed_errors.size());
  double sum = 0, sum_signed = 0;
  for (double e : signed_errors) {
    abs_errors.push_back(std::abs(e));
    sum += std::abs(e);
    sum_signed += e;
  }
  std::sort(abs_errors.begin(), abs_errors.end());
  s.mean = sum / static_cast<double>(s.count);
  s.mean_signed = sum_signed / static_cast<double>(s.count);
  s.p50 = percentile_sorted(abs_errors, 50);
  s.p90 = percentile_sorted(abs_errors, 90);
  s.p99 = percentile_sorted(abs_errors, 99);
  s.max = abs_errors.back();
  return s;
}

}  // namespace servelab
