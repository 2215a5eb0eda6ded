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

// The simulated clock's horizon, 2^62 ns (about 146 years): durations computed from the user's
// rates saturate here (seconds_to_ns) and the simulator's event queue refuses an event at or past
// it (a ConfigError: the experiment's rates are too slow for its workload), so sums of times
// below it never overflow.
inline constexpr TimeNs kTimeHorizonNs = TimeNs{1} << 62;

// Nanoseconds (a double) rounded as std::llround, saturated at +-kTimeHorizonNs (NaN: the
// horizon, so that a broken duration reaches the event queue's check instead of a wrapped value).
inline TimeNs saturated_ns(double x) {
  if (!(x < 0x1p62)) return kTimeHorizonNs;
  if (!(x > -0x1p62)) return -kTimeHorizonNs;
  return static_cast<TimeNs>(std::llround(x));
}

// Seconds (a double) to nanoseconds, rounded to nearest, halves away from zero: std::llround's
// result, without the library call below 2^52 ns (every simulated step's duration goes through
// here); saturated as saturated_ns beyond +-2^62 ns, and for NaN.
inline TimeNs seconds_to_ns(double s) {
  const double x = s * 1e9;
  if (!(std::fabs(x) < 0x1p52)) [[unlikely]]
    return saturated_ns(x);
  const auto t = static_cast<TimeNs>(x);           // toward zero
  const double frac = x - static_cast<double>(t);  // exact
  return t + (frac >= 0.5 ? 1 : 0) - (frac <= -0.5 ? 1 : 0);
}
// a + b for durations and times in [0, kTimeHorizonNs], saturated at the horizon.
inline TimeNs add_saturated(TimeNs a, TimeNs b) {
  TimeNs r;
  if (__builtin_add_overflow(a, b, &r) || r > kTimeHorizonNs) return kTimeHorizonNs;
  return r;
}
inline double ns_to_ms(TimeNs t) { return static_cast<double>(t) / 1e6; }
inline double ns_to_s(TimeNs t) { return static_cast<double>(t) / 1e9; }

}  // namespace servelab
