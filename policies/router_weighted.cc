// Router `weighted`: the highest weighted sum of scorers, each in [0, 1] (llm-d's inference
// scheduler and BLIS combine scorers the same way):
//   prefix  matched prompt blocks / prompt's full blocks (RouterPrefixIndex, as prefix_affinity)
//   queue   (max - own) / (max - min) outstanding requests over the candidates (1 when all equal)
//   kv      1 - KV cache usage
// Ties go to the lowest index. A weight of 0 turns a scorer off (prefix: no hashing at all).
#include <algorithm>
#include <stdexcept>

#include "core/router.h"
#include "policies/registry.h"
#include "policies/router_prefix_index.h"

namespace servelab {
namespace {

class WeightedRouter final : public Router {
 public:
  WeightedRouter(const RouterContext& c, double wp, double wq, double wkv, std::int64_t capacity)
      : index_(c.num_candidates, c.block_size), wp_(wp), wq_(wq), wkv_(wkv), capacity_(capacity) {}
  std::string_view name() const override { return "weighted"; }

  std::size_t route(const RequestSpec& spec, std::span<const ReplicaLoad> candidates) override {
    std::vector<BlockHash> hashes;
    if (wp_ > 0) hashes = index_.prompt_hashes(spec);
    const auto [lo, hi] = std::minmax_element(
        candidates.begin(), candidates.end(),
        [](const ReplicaLoad& a, const ReplicaLoad& b) { return a.outstanding < b.outstanding; });
    const double spread = static_cast<double>(hi->outstanding - lo->outstanding);
    std::size_t best = 0;
    double best_score = -1;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const ReplicaLoad& l = candidates[i];
      double score = 0;
      if (wp_ > 0 && !hashes.empty()) {
        score += wp_ * index_.matched_blocks(static_cast<std::int32_t>(i), hashes) /
                 static_cast<double>(hashes.size());
      }
      score += wq_ * (spread > 0 ? (hi->outstanding - l.outstanding) / spread : 1.0);
      score += wkv_ * (1.0 - std::min(1.0, l.kv_usage()));
      if (score > best_score) {
        best = i;
        best_score = score;
      }
    }
    if (wp_ > 0) {
      const std::int64_t cap = capacity_ > 0 ? capacity_ : candidates[best].kv_blocks_usable;
      index_.insert(static_cast<std::int32_t>(best), hashes, cap);
    }
    return best;
  }

 private:
  RouterPrefixIndex index_;
  double wp_, wq_, wkv_;
  std::int64_t capacity_;
};

ParamInfo weight(const char* name, double def, const char* doc) {
  return {name, ParamType::kDouble, def, 0.0, 1e6, {}, doc};
}

const PolicyRegistrar kRegistrar(
    {PolicyKind::kRouter,
     "weighted",
     "the highest weighted sum of prefix-match, queue and KV-usage scores",
     "llm-d inference scheduler (weighted scorers); BLIS routing scorers",
     {weight("prefix_weight", 1.0, "weight of the prefix-match score"),
      weight("queue_weight", 1.0, "weight of the outstanding-requests score"),
      weight("kv_weight", 1.0, "weight of the free-KV score"),
      {"capacity_blocks",
       ParamType::kInt,
       std::int64_t{0},
       0,
       1LL << 40,
       {},
       "prompt blocks remembered per replica (0: the replica's usable KV blocks)"}},
     [](const PolicySpec& s, PolicyTarget& t) {
       const double wp = s.get_double("prefix_weight");
       const double wq = s.get_double("queue_weight");
       const double wkv = s.get_double("kv_weight");
       const std::int64_t cap = s.get_int("capacity_blocks");
       if (wp == 0 && wq == 0 && wkv == 0) {
         // Every replica would score 0, and ties go to the first: all requests to replica 0.
         throw std::invalid_argument(
             "weighted: prefix_weight, queue_weight and kv_weight are all 0, so every replica "
             "scores the same and replica 0 would get every request; give one a positive "
             "weight");
       }
       *t.router = [=](const RouterContext& c) {
         return std::make_unique<WeightedRouter>(c, wp, wq, wkv, cap);
       };
     },
     70});

}  // namespace
}  // namespace servelab
