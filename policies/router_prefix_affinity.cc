// Router `prefix_affinity`: the replica believed to hold the longest prefix of the prompt,
// unless the load is imbalanced (SGLang's cache-aware router; llm-d's prefix-cache scorer).
//
// Per decision, with loads = outstanding requests of the candidates:
//   1. imbalanced (max - min > balance_abs_threshold and max > balance_rel_threshold * min):
//      the least loaded candidate (least outstanding, then fewest waiting);
//   2. else, when the best candidate's matched prompt blocks over the prompt's full blocks
//      exceed cache_threshold: that candidate (ties: fewer outstanding, then the lower index);
//   3. else the candidate believed to cache the least (the fewest remembered blocks; ties as
//      above), so new prefixes spread out.
// The prompt's blocks are then remembered for the chosen replica (RouterPrefixIndex, at most
// capacity_blocks per replica, 0 meaning the replica's usable KV blocks).
#include <algorithm>

#include "core/router.h"
#include "policies/registry.h"
#include "policies/router_prefix_index.h"
#include "policies/router_simple.h"

namespace servelab {
namespace {

class PrefixAffinityRouter final : public Router {
 public:
  PrefixAffinityRouter(const RouterContext& c, double cache_threshold, std::int64_t abs, double rel,
                       std::int64_t capacity)
      : index_(c.num_candidates, c.block_size),
        cache_threshold_(cache_threshold),
        abs_(abs),
        rel_(rel),
        capacity_(capacity) {}
  std::string_view name() const override { return "prefix_affinity"; }

  std::size_t route(const RequestSpec& spec, std::span<const ReplicaLoad> candidates) override {
    const std::vector<BlockHash> hashes = index_.prompt_hashes(spec);
    const auto [lo, hi] = std::minmax_element(
        candidates.begin(), candidates.end(),
        [](const ReplicaLoad& a, const ReplicaLoad& b) { return a.outstanding < b.outstanding; });
    std::size_t choice = 0;
    if (hi->outstanding - lo->outstanding > abs_ &&
        static_cast<double>(hi->outstanding) > rel_ * static_cast<double>(lo->outstanding)) {
      choice = least_outstanding_candidate(candidates);
    } else {
      std::size_t best = 0;
      std::int32_t best_match = -1;
      for (std::size_t i = 0; i < candidates.size(); ++i) {
        const std::int32_t m = index_.matched_blocks(static_cast<std::int32_t>(i), hashes);
        if (m > best_match ||
            (m == best_match && candidates[i].outstanding < candidates[best].outstanding)) {
          best = i;
          best_match = m;
        }
      }
      if (!hashes.empty() &&
          static_cast<double>(best_match) > cache_threshold_ * static_cast<double>(hashes.size())) {
        choice = best;
      } else {
        choice = argmin_candidate(candidates, [this, candidates](const ReplicaLoad& l) {
          const auto i = static_cast<std::int32_t>(&l - candidates.data());
          return std::pair(index_.size(i), l.outstanding);
        });
      }
    }
    const std::int64_t cap = capacity_ > 0 ? capacity_ : candidates[choice].kv_blocks_usable;
    index_.insert(static_cast<std::int32_t>(choice), hashes, cap);
    return choice;
  }

 private:
  RouterPrefixIndex index_;
  double cache_threshold_;
  std::int64_t abs_;
  double rel_;
  std::int64_t capacity_;
};

const PolicyRegistrar kRegistrar(
    {PolicyKind::kRouter,
     "prefix_affinity",
     "the replica believed to cache the longest prompt prefix, unless load is imbalanced",
     "SGLang's cache-aware router (sgl-router); llm-d's prefix-cache scorer",
     {{"cache_threshold",
       ParamType::kDouble,
       0.3,
       0.0,
       1.0,
       {},
       "follow the cache when the best match exceeds this fraction of the prompt's blocks"},
      {"balance_abs_threshold",
       ParamType::kInt,
       std::int64_t{64},
       0,
       1 << 30,
       {},
       "imbalanced when max - min outstanding requests exceeds this ..."},
      {"balance_rel_threshold",
       ParamType::kDouble,
       1.5,
       1.0,
       1e9,
       {},
       "... and max exceeds this times min: then the least loaded replica"},
      {"capacity_blocks",
       ParamType::kInt,
       std::int64_t{0},
       0,
       1LL << 40,
       {},
       "prompt blocks remembered per replica (0: the replica's usable KV blocks)"}},
     [](const PolicySpec& s, PolicyTarget& t) {
       const double cache = s.get_double("cache_threshold");
       const std::int64_t abs = s.get_int("balance_abs_threshold");
       const double rel = s.get_double("balance_rel_threshold");
       const std::int64_t cap = s.get_int("capacity_blocks");
       *t.router = [=](const RouterContext& c) {
         return std::make_unique<PrefixAffinityRouter>(c, cache, abs, rel, cap);
       };
     },
     60});

}  // namespace
}  // namespace servelab
