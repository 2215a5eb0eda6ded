// Checked time arithmetic for times computed from user input (rates, time scales, trace
// timestamps): nullopt instead of signed overflow. Callers turn nullopt into a ConfigError that
// names the file, line or key.
#pragma once

#include <cmath>
#include <optional>

#include "core/time.h"

namespace servelab {

// Seconds to nanoseconds (as seconds_to_ns) when finite and within +-2^62 ns (~146 years).
inline std::optional<TimeNs> checked_seconds_to_ns(double s) {
  if (!(std::fabs(s * 1e9) < 0x1p62)) return std::nullopt;
  return seconds_to_ns(s);
}
// A nanosecond count (a double) rounded as std::llround when finite and within +-2^62.
inline std::optional<TimeNs> checked_round_ns(double ns) {
  if (!(std::fabs(ns) < 0x1p62)) return std::nullopt;
  return static_cast<TimeNs>(std::llround(ns));
}
inline std::optional<TimeNs> checked_add(TimeNs a, TimeNs b) {
  TimeNs r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<TimeNs> checked_sub(TimeNs a, TimeNs b) {
  TimeNs r;
  if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<TimeNs> checked_mul(TimeNs a, TimeNs b) {
  TimeNs r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace servelab
