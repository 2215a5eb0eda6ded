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

std::int32_t sample_reference(std::span<const float> logits, double temperature,
                              const Truncation& keep, double u) {
  const auto n = static_cast<std::int32_t>(logits.size());
  double mx = logits[0];
  for (float l : logits) mx = std::max<double>(mx, l);
  std::vector<double> prob(n);  // unnormalised: the largest is 1
  for (std::int32_t t = 0; t < n; ++t) prob[t] = std::exp((logits[t] - mx) / temperature);
  std::vector<std::int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return prob[a] > prob[b]; });
  // min_p, then top_k: a prefix of the order (the first token always stays).
  std::int32_t allowed = 1;
  while (allowed < n && prob[order[allowed]] >= keep.min_p) ++allowed;
  if (keep.top_k > 0) allowed = std::min(allowed, keep.top_k);
  double total = 0;
  for (std::int32_t r = 0; r < allowed; ++r) total += prob[order[r]];
  std::int32_t kept = 0;
  double mass = 0;
  while (kept < allowed && (kept == 0 || mass < keep.top_p * total)) mass += prob[order[kept++]];
  double x = u * mass;
  for (std::int32_t r = 0; r < kept; ++r) {
    x -= prob[order[r]];
    if (x < 0) return order[r];
  }
  return order[kept - 1];
}

namespace {

std::uint64_t key_of(float p, std::int32_t id) {
  return (std::uint64_t{std::bit_cast<std::uint32_t>(p)} << 32) |
         (0xffffffffULL - static_cast<std::uint32_t>(id));
}

// Sum over the tokens whose key is >= k of weight(p), in index order (as each GPU thread sums
// over its stride).
template <typename Weight>
float sum_ge(const std::vector<float>& p, std::uint64_t k, Weight weight) {
  float sum = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (key_of(p[i], static_cast<std::int32_t>(i)) >= k) sum += weight(p[i]);
  }
  return sum;
}

// Largest key K in [lo, hi] with pred(sum_ge(K)), given that pred holds at lo.
template <typename Weight, typename Pred>
std::uint64_t bisect(const std::vector<float>& p, std::uint64_t lo, std::uint64_t hi, Weight weight,
                     Pred pred) {
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2 + 1;
    if (pred(sum_ge(p, mid, weight))) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace

std::int32_t sample_bisect(std::span<const float> logits, float temperature, const Truncation& keep,
                           float u) {
  float mx = logits[0];
  for (float l : logits) mx = std::max(mx, l);
  std::vector<float> p(logits.size());
  const float scale = 1.4426950408889634f / temperature;  // log2(e) / T, as the kernel
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = std::exp2((logits[i] - mx) * scale);
  const std::uint64_t hi = key_of(1.0f, 0);  // the largest possible key (p <= 1)
  const auto mass = [](float q) { return q; };
  // The lowest key min_p and top_k allow.
  std::uint64_t lowest = std::uint64_t{std::bit_cast<std::uint32_t>(static_cast<float>(keep.min_p))}
                         << 32;
  if (keep.top_k > 0 && static_cast<std::size_t>(keep.top_k) < p.size()) {
    const auto k = static_cast<float>(keep.top_k);
    lowest = std::max(
        lowest, bisect(
                    p, 0, hi, [](float) { return 1.0f; }, [&](float count) { return count >= k; }));
  }
  lowest = std::min(lowest, hi);
  const float target = static_cast<float>(keep.top_p) * sum_ge(p, lowest, mass);
  const std::uint64_t last = bisect(p, lowest, hi, mass, [&](float m) { return m >= target; });
  const float x = u * sum_ge(p, last, mass);
  const std::uint64_t k = bisect(p, last, hi, mass, [&](float m) { return m > x; });
  return static_cast<std::int32_t>(0xffffffffULL - (k & 0xffffffffULL));
}

}  // namespace servelab::kernels
