// Deterministic random numbers, identical on every platform.
//
// std::*_distribution results differ between standard libraries, so ServeLab draws all its
// randomness through this file: xoshiro256** seeded by SplitMix64, and distributions written
// here. A subsystem gets its own stream with Rng::stream(seed, "name"), so adding draws in one
// subsystem never shifts the numbers another one sees.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace servelab {

// SplitMix64 finaliser: a bijective 64-bit mix. Also used to derive content ids.
inline constexpr std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a of a name, for deriving named streams.
inline constexpr std::uint64_t name_hash(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    std::uint64_t x = seed;
    for (auto& w : s_) {
      x += 0x9e3779b97f4a7c15ULL;
      w = mix64(x);
    }
  }
  // The stream named `name` under experiment seed `seed`.
  static Rng stream(std::uint64_t seed, std::string_view name) {
    return Rng(mix64(seed ^ name_hash(name)));
  }

  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1), 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform in (0, 1]: safe for log().
  double uniform_pos() { return 1.0 - uniform(); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [lo, hi], both inclusive. REQUIRES: lo <= hi.
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) {
    const std::uint64_t span = static_cast<std::uint64_t>(hi - lo) + 1;
    if (span == 0) return static_cast<std::int64_t>(next_u64());
    // Lemire's nearly-divisionless method with rejection: exact uniformity.
    __uint128_t m = static_cast<__uint128_t>(next_u64()) * span;
    std::uint64_t l = static_cast<std::uint64_t>(m);
    if (l < span) {
      const std::uint64_t threshold = (0 - span) % span;
      while (l < threshold) {
        m = static_cast<__uint128_t>(next_u64()) * span;
        l = static_cast<std::uint64_t>(m);
      }
    }
    return lo + static_cast<std::int64_t>(m >> 64);
  }
  double exponential(double rate) { return -std::log(uniform_pos()) / rate; }
  // Standard normal by Box-Muller (no cached second value, so the stream is simple to reason on).
  double normal() {
    const double u1 = uniform_pos(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
  }
  double normal(double mean, double stddev) { return mean + stddev * normal(); }
  double lognormal(double mu, double sigma) { return std::exp(normal(mu, sigma)); }
  // Gamma(shape k, scale theta) by Marsaglia and Tsang. REQUIRES: k > 0, theta > 0.
  double gamma(double k, double theta) {
    if (k < 1.0) {
      const double u = uniform_pos();
      return gamma(k + 1.0, theta) * std::pow(u, 1.0 / k);
    }
    const double d = k - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x, v;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0.0);
      v = v * v * v;
      const double u = uniform_pos();
      if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * theta;
      if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v * theta;
    }
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

}  // namespace servelab
