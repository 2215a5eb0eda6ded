// Router `least_kv_load`: the candidate whose KV cache is least used (blocks held by requests
// over usable blocks), ties to fewer outstanding requests, then the lowest index.
#include "core/router.h"
#include "policies/registry.h"
#include "policies/router_simple.h"

namespace servelab {
namespace {

class LeastKvLoadRouter final : public Router {
 public:
  std::string_view name() const override { return "least_kv_load"; }
  std::size_t route(const RequestSpec&, std::span<const ReplicaLoad> candidates) override {
    // Compared as exact fractions (used * other's usable), never as rounded doubles.
    std::size_t best = 0;
    for (std::size_t i = 1; i < candidates.size(); ++i) {
      const ReplicaLoad& a = candidates[i];
      const ReplicaLoad& b = candidates[best];
      const std::int64_t lhs = static_cast<std::int64_t>(a.kv_blocks_used) * b.kv_blocks_usable;
      const std::int64_t rhs = static_cast<std::int64_t>(b.kv_blocks_used) * a.kv_blocks_usable;
      if (lhs < rhs || (lhs == rhs && a.outstanding < b.outstanding)) best = i;
    }
    return best;
  }
};

const PolicyRegistrar kRegistrar({PolicyKind::kRouter,
                                  "least_kv_load",
                                  "the replica with the lowest KV cache usage",
                                  "llm-d's kv-cache-utilization scorer; BLIS's kv-utilization",
                                  {},
                                  [](const PolicySpec&, PolicyTarget& t) {
                                    *t.router = [](const RouterContext&) {
                                      return std::make_unique<LeastKvLoadRouter>();
                                    };
                                  },
                                  40});

}  // namespace
}  // namespace servelab
