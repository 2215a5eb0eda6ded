#include "kernels/sampling_ref.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <vector>

namespace servelab::kernels {

std::int32_t greedy_reference(std::span<const float> logits) {
  std::int32_t best = 0;
  for (std::size_t t = 1; t < logits.size(); ++t) {
    if (logits[t] > logits[best]) best = static_cast<std::int32_t>(t);
  }
  return best;
}

std::int32_t top_p_reference(std::span<const float> logits, double temperature, double top_p,
                             double u) {
  const auto n = static_cast<std::int32_t>(logits.size());
  double mx = logits[0];
  for (float l : logits) mx = std::max<double>(mx, l);
  std::vector<double> prob(n);
  double total = 0;
  for (std::int32_t t = 0; t < n; ++t) {
    prob[t] = std::exp((logits[t] - mx) / temperature);
    total += prob[t];
  }
  std::vector<std::int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return prob[a] > prob[b]; });
  std::int32_t keep = 0;
  double mass = 0;
  while (keep < n && (keep == 0 || mass < top_p * total)) mass += prob[order[keep++]];
  double x = u * mass;
  for (std::int32_t r = 0; r < keep; ++r) {
    x -= prob[order[r]];
    if (x < 0) return order[r];
  }
  return order[keep - 1];
}

namespace {

std::uint64_t key_of(float p, std::int32_t id) {
  return (std::uint64_t{std::bit_cast<std::uint32_t>(p)} << 32) |
         (0xffffffffULL - static_cast<std::uint32_t>(id));
}

// Largest key K in [lo, hi] with pred(mass of keys >= K), given that pred holds at lo.
template <typename Pred>
std::uint64_t bisect(const std::vector<float>& p, std::uint64_t lo, std::uint64_t hi, Pred pred) {
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2 + 1;
    float mass = 0;  // summed in index order, as each GPU thread does over its stride
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (key_of(p[i], static_cast<std::int32_t>(i)) >= mid) mass += p[i];
    }
    if (pred(mass)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace

std::int32_t top_p_bisect(std::span<const float> logits, float temperature, float top_p, float u) {
  float mx = logits[0];
  for (float l : logits) mx = std::max(mx, l);
  std::vector<float> p(logits.size());
  float total = 0;
  const float scale = 1.4426950408889634f / temperature;  // log2(e) / T, as the kernel
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] = std::exp2((logits[i] - mx) * scale);
    total += p[i];
  }
  const std::uint64_t hi = key_of(1.0f, 0);  // the largest possible key (p <= 1)
  const float target = top_p * total;
  const std::uint64_t last = bisect(p, 0, hi, [&](float m) { return m >= target; });
  float kept = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (key_of(p[i], static_cast<std::int32_t>(i)) >= last) kept += p[i];
  }
  const float x = u * kept;
  const std::uint64_t k = bisect(p, last, hi, [&](float m) { return m > x; });
  return static_cast<std::int32_t>(0xffffffffULL - (k & 0xffffffffULL));
}

}  // namespace servelab::kernels
