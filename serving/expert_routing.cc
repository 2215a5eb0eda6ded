#include "serving/expert_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace servelab {

namespace {

// splitmix64 (Steele, Lea and Flood, 2014): a fixed, portable stream for the popularity
// permutation.
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr std::uint64_t kPermutationSeed = 0x5e7e1abULL;

}  // namespace

std::string_view expert_placement_name(ExpertPlacement placement) {
  switch (placement) {
    case ExpertPlacement::kLinear:
      return "linear";
    case ExpertPlacement::kRoundRobin:
      return "round_robin";
    case ExpertPlacement::kBalanced:
      return "balanced";
  }
  return "linear";
}

bool parse_expert_placement(std::string_view name, ExpertPlacement& placement) {
  for (ExpertPlacement p :
       {ExpertPlacement::kLinear, ExpertPlacement::kRoundRobin, ExpertPlacement::kBalanced}) {
    if (name == expert_placement_name(p)) {
      placement = p;
      return true;
    }
  }
  return false;
}

std::vector<double> expert_selection_probabilities(const ModelConfig& model) {
  const std::int32_t n = model.is_moe() ? model.num_experts : 0;
  const double k = model.experts_per_token;
  std::vector<double> q(static_cast<std::size_t>(n), n > 0 ? k / n : 0.0);
  if (n == 0 || model.router_skew == 0) return q;
  // rank_of[e]: expert e's popularity rank, from a Fisher-Yates shuffle of the ranks.
  std::vector<std::int32_t> rank_of(static_cast<std::size_t>(n));
  std::iota(rank_of.begin(), rank_of.end(), 0);
  std::uint64_t state = kPermutationSeed;
  for (std::int32_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int32_t>(splitmix64(state) % static_cast<std::uint64_t>(i + 1));
    std::swap(rank_of[static_cast<std::size_t>(i)], rank_of[static_cast<std::size_t>(j)]);
  }
  std::vector<double> w(q.size());
  for (std::size_t e = 0; e < w.size(); ++e) {
    w[e] = std::pow(1.0 + rank_of[e], -model.router_skew);
  }
  // Water-filling: scale the uncapped weights to the probability left, cap at 1, repeat until
  // no new expert reaches the cap (at most n rounds; the capped set only grows).
  std::vector<bool> capped(q.size(), false);
  for (std::int32_t round = 0; round <= n; ++round) {
    double left = k, weight = 0;
    for (std::size_t e = 0; e < w.size(); ++e) {
      if (capped[e]) {
        left -= 1;
      } else {
        weight += w[e];
      }
    }
    bool changed = false;
    for (std::size_t e = 0; e < w.size(); ++e) {
      if (capped[e]) continue;
      q[e] = left * w[e] / weight;
      if (q[e] >= 1) {
        capped[e] = changed = true;
        q[e] = 1;
      }
    }
    if (!changed) break;
  }
  return q;
}

std::vector<std::vector<std::int32_t>> place_experts(const std::vector<double>& q,
                                                     std::int32_t ranks,
                                                     ExpertPlacement placement) {
  const auto n = static_cast<std::int32_t>(q.size());
  const std::int32_t per_rank = n / ranks;
  std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(ranks));
  switch (placement) {
    case ExpertPlacement::kLinear:
      for (std::int32_t e = 0; e < n; ++e) out[static_cast<std::size_t>(e / per_rank)].push_back(e);
      break;
    case ExpertPlacement::kRoundRobin:
      for (std::int32_t e = 0; e < n; ++e) out[static_cast<std::size_t>(e % ranks)].push_back(e);
      break;
    case ExpertPlacement::kBalanced: {
      std::vector<std::int32_t> order(static_cast<std::size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
        return q[static_cast<std::size_t>(a)] > q[static_cast<std::size_t>(b)];
      });
      std::vector<double> load(static_cast<std::size_t>(ranks), 0.0);
      for (std::int32_t e : order) {
        std::size_t best = out.size();
        for (std::size_t r = 0; r < out.size(); ++r) {
          if (static_cast<std::int32_t>(out[r].size()) == per_rank) continue;
          if (best == out.size() || load[r] < load[best]) best = r;
        }
        out[best].push_back(e);
        load[best] += q[static_cast<std::size_t>(e)];
      }
      for (auto& experts : out) std::sort(experts.begin(), experts.end());
      break;
    }
  }
  return out;
}

std::vector<std::vector<ExpertCopy>> place_expert_copies(const std::vector<double>& q,
                                                         std::int32_t ranks,
                                                         ExpertPlacement placement,
                                                         std::int32_t redundant) {
  std::vector<std::vector<ExpertCopy>> out(static_cast<std::size_t>(ranks));
  if (redundant == 0) {
    const auto experts = place_experts(q, ranks, placement);
    for (std::size_t r = 0; r < experts.size(); ++r) {
      for (std::int32_t e : experts[r]) out[r].push_back({e, q[static_cast<std::size_t>(e)]});
    }
    return out;
  }
  const auto n = static_cast<std::int32_t>(q.size());
  // Copies: one more at a time to the expert whose copies carry the most (ties: the lower id).
  std::vector<std::int32_t> copies(q.size(), 1);
  for (std::int32_t i = 0; i < redundant; ++i) {
    std::size_t best = q.size();
    for (std::size_t e = 0; e < q.size(); ++e) {
      if (copies[e] == ranks) continue;
      if (best == q.size() || q[e] / copies[e] > q[best] / copies[best]) best = e;
    }
    ++copies[best];
  }
  // Every copy, heaviest first (ties: the lower id), each to the least loaded GPU with room,
  // preferring GPUs that do not hold the expert yet.
  std::vector<ExpertCopy> all;
  for (std::int32_t e = 0; e < n; ++e) {
    const auto k = static_cast<std::size_t>(e);
    for (std::int32_t c = 0; c < copies[k]; ++c) all.push_back({e, q[k] / copies[k]});
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const ExpertCopy& a, const ExpertCopy& b) { return a.q > b.q; });
  const std::size_t per_rank = all.size() / static_cast<std::size_t>(ranks);
  std::vector<double> load(out.size(), 0.0);
  for (const ExpertCopy& copy : all) {
    std::size_t best = out.size();
    bool best_fresh = false;
    for (std::size_t r = 0; r < out.size(); ++r) {
      if (out[r].size() == per_rank) continue;
      const bool fresh = std::none_of(out[r].begin(), out[r].end(),
                                      [&](const ExpertCopy& c) { return c.expert == copy.expert; });
      if (best == out.size() || (fresh && !best_fresh) ||
          (fresh == best_fresh && load[r] < load[best])) {
        best = r;
        best_fresh = fresh;
      }
    }
    out[best].push_back(copy);
    load[best] += copy.q;
  }
  for (auto& gpu : out) {
    std::stable_sort(gpu.begin(), gpu.end(),
                     [](const ExpertCopy& a, const ExpertCopy& b) { return a.expert < b.expert; });
  }
  return out;
}

double expected_max_standard_normal(std::int32_t n) {
  if (n <= 1) return 0;
  // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx; the integrand is negligible outside
  // [-10, 10] for any n this is asked about. Simpson's rule over 4,000 intervals.
  constexpr int kIntervals = 4000;
  constexpr double kLo = -10, kHi = 10, kStep = (kHi - kLo) / kIntervals;
  const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * M_PI);
  auto f = [&](double x) {
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    return x * n * inv_sqrt_2pi * std::exp(-0.5 * x * x) * std::pow(cdf, n - 1);
  };
  double sum = f(kLo) + f(kHi);
  for (int i = 1; i < kIntervals; ++i) sum += (i % 2 ? 4 : 2) * f(kLo + i * kStep);
  return sum * kStep / 3;
}

}  // namespace servelab
