// Helpers the router plugins share (policies/router_*.cc): picking the candidate that minimises
// a key, ties to the lowest index (core/router.h: ties go to the lowest index).
#pragma once

#include <cstddef>
#include <span>

#include "core/router.h"

namespace servelab {

// The index of the candidate with the smallest key(load); the first of equals.
template <class KeyFn>
std::size_t argmin_candidate(std::span<const ReplicaLoad> candidates, KeyFn key) {
  std::size_t best = 0;
  auto best_key = key(candidates[0]);
  for (std::size_t i = 1; i < candidates.size(); ++i) {
    const auto k = key(candidates[i]);
    if (k < best_key) {
      best = i;
      best_key = k;
    }
  }
  return best;
}

// Least outstanding requests, then fewest waiting: the fallback of the affinity routers.
inline std::size_t least_outstanding_candidate(std::span<const ReplicaLoad> candidates) {
  return argmin_candidate(candidates, [](const ReplicaLoad& l) {
    return static_cast<std::int64_t>(l.outstanding) * (1LL << 32) + l.waiting;
  });
}

}  // namespace servelab
