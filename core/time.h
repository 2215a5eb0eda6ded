// Simulation and wall-clock time as integer nanoseconds.
//
// Every timestamp and duration in ServeLab is a TimeNs. Floating point appears only at the
// edges: when a cost model converts seconds to nanoseconds (rounded once, to nearest) and when a
// metric is written out in milliseconds or seconds.
#pragma once

#include <cmath>
#include <cstdint>

namespace servelab {

using TimeNs = std::int64_t;

inline constexpr TimeNs kNsPerUs = 1'000;
inline constexpr TimeNs kNsPerMs = 1'000'000;
inline constexpr TimeNs kNsPerS = 1'000'000'000;

// Seconds (a double) to nanoseconds, rounded to nearest, halves away from zero: std::llround's
// result, without the library call below 2^52 ns (every simulated step's duration goes through
// here). REQUIRES: s is finite.
inline TimeNs seconds_to_ns(double s) {
  const double x = s * 1e9;
  if (!(std::fabs(x) < 0x1p52)) return static_cast<TimeNs>(std::llround(x));
  const auto t = static_cast<TimeNs>(x);           // toward zero
  const double frac = x - static_cast<double>(t);  // exact
  return t + (frac >= 0.5 ? 1 : 0) - (frac <= -0.5 ? 1 : 0);
}
inline double ns_to_ms(TimeNs t) { return static_cast<double>(t) / 1e6; }
inline double ns_to_s(TimeNs t) { return static_cast<double>(t) / 1e9; }

}  // namespace servelab
