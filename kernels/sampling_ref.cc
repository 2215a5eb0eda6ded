#include "kernels/sampling_ref.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <utility>
#include <vector>

namespace servelab::kernels {

std::int32_t greedy_reference(std::span<const float> logits) {
  std::int32_t best = 0;
  for (std::size_t t = 1; t < logits.size(); ++t) {
    if (logits[t] > logits[best]) best = static_cast<std::int32_t>(t);
  }
  return best;
}

namespace {

// A token and its unnormalised probability, ordered as the draw walks them: probability
// descending, id ascending.
struct Ranked {
  double p;
  std::int32_t id;
};

bool before(const Ranked& a, const Ranked& b) { return a.p > b.p || (a.p == b.p && a.id < b.id); }

// The shortest prefix (in `before` order) of v whose mass m satisfies reached(m) (monotone in m),
// found without sorting v: a quickselect that partitions the range holding the boundary around a
// median-of-three pivot and sums, in the same pass, the mass that goes before it. Rearranges v so
// that v[0..r] are that prefix (v[r] its last element) and returns r and the prefix mass; where
// rounding leaves reached() false for the whole of v (the mass was summed in another order), the
// whole of v. Expected O(|v|).
template <typename Reached>
std::pair<std::size_t, double> shortest_prefix(std::vector<Ranked>& v, Reached reached) {
  constexpr std::size_t kSortBelow = 32;
  std::size_t lo = 0, hi = v.size();
  double above = 0;  // the mass of v[0..lo), all of it before v[lo..hi)
  while (hi - lo > kSortBelow) {
    const Ranked& a = v[lo];
    const Ranked& b = v[lo + (hi - lo) / 2];
    const Ranked& c = v[hi - 1];
    const Ranked pivot = before(a, b) ? (before(b, c) ? b : (before(a, c) ? c : a))
                                      : (before(a, c) ? a : (before(b, c) ? c : b));
    std::size_t split = lo;
    double left = 0;
    for (std::size_t j = lo; j < hi; ++j) {
      if (before(v[j], pivot)) {
        left += v[j].p;
        std::swap(v[split++], v[j]);
      }
    }
    if (split == lo) {  // the pivot comes first in the range: take it alone
      for (std::size_t j = lo; j < hi; ++j) {
        if (v[j].id == pivot.id) std::swap(v[lo], v[j]);
      }
      above += v[lo].p;
      if (reached(above)) return {lo, above};
      ++lo;
    } else if (reached(above + left)) {
      hi = split;  // the boundary is before the pivot
    } else {
      above += left;
      lo = split;
    }
  }
  std::sort(v.begin() + static_cast<std::ptrdiff_t>(lo),
            v.begin() + static_cast<std::ptrdiff_t>(hi), before);
  for (std::size_t i = lo; i < hi; ++i) {
    above += v[i].p;
    if (reached(above)) return {i, above};
  }
  return {hi - 1, above};
}

}  // namespace

std::int32_t sample_reference(std::span<const float> logits, double temperature,
                              const Truncation& keep, double u) {
  // The largest logit: eight running maxima, so that the comparisons do not wait on each other.
  std::array<float, 8> lane;
  lane.fill(logits[0]);
  for (std::size_t t = 0; t < logits.size(); ++t) lane[t % 8] = std::max(lane[t % 8], logits[t]);
  const double mx = *std::max_element(lane.begin(), lane.end());
  if (mx == -INFINITY) return 0;  // every token masked
  // min_p: the tokens whose probability (against the largest, 1) is at least min_p.
  std::vector<Ranked> v;
  v.reserve(logits.size());
  double mass = 0;
  for (std::size_t t = 0; t < logits.size(); ++t) {
    const double p = std::exp((logits[t] - mx) / temperature);
    if (p >= keep.min_p) {
      v.push_back({p, static_cast<std::int32_t>(t)});
      mass += p;
    }
  }
  // top_k: the first k of those.
  if (keep.top_k > 0 && v.size() > static_cast<std::size_t>(keep.top_k)) {
    const auto k = static_cast<std::ptrdiff_t>(keep.top_k);
    std::nth_element(v.begin(), v.begin() + k - 1, v.end(), before);
    v.resize(static_cast<std::size_t>(k));
    mass = 0;
    for (const Ranked& r : v) mass += r.p;
  }
  // top_p: the shortest prefix whose mass reaches top_p x what is left.
  if (keep.top_p < 1.0) {
    const double target = keep.top_p * mass;
    const auto [last, kept] = shortest_prefix(v, [&](double m) { return m >= target; });
    v.resize(last + 1);
    mass = kept;
  }
  // The draw: the first token in order whose running mass exceeds u x the kept mass.
  const double x = u * mass;
  const std::size_t r = shortest_prefix(v, [&](double m) { return m > x; }).first;
  return v[r].id;
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
  if (mx == -INFINITY) return 0;  // every token masked
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
