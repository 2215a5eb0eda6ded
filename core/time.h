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

// Seconds (a double) to nanoseconds, rounded to nearest. REQUIRES: s is finite.
inline TimeNs seconds_to_ns(double s) { return static_cast<TimeNs>(std::llround(s * 1e9)); }
inline double ns_to_ms(TimeNs t) { return static_cast<double>(t) / 1e6; }
inline double ns_to_s(TimeNs t) { return static_cast<double>(t) / 1e9; }

}  // namespace servelab
