// Summaries of relative errors (docs/validation.md, "Definitions"): a set of signed relative
// errors (sim - measured) / measured in, the statistics of their absolute values out (mean, p50,
// p90, p99 and max, percentiles as docs/metrics.md interpolates them), plus the signed mean.
// Shared by `sim validate` and the Vidur profile fit.
#pragma once

#include <cstdint>
#include <vector>

namespace servelab {

struct ErrorStats {
  std::int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // of |relative error|
  double mean_signed = 0;                               // of the signed relative error
};

// All zero (count 0) for no errors.
ErrorStats error_stats(const std::vector<double>& signed_errors);

}  // namespace servelab
