// Router `power_of_two`: two distinct random candidates, the one with fewer outstanding requests
// (ties: the lower index). Mitzenmacher's power of two choices: nearly the balance of
// least-outstanding while looking at two replicas only.
#include "core/rng.h"
#include "core/router.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class PowerOfTwoRouter final : public Router {
 public:
  explicit PowerOfTwoRouter(std::uint64_t seed) : rng_(Rng::stream(seed, "router-p2c")) {}
  std::string_view name() const override { return "power_of_two"; }
  std::size_t route(const RequestSpec&, std::span<const ReplicaLoad> candidates) override {
    const auto n = static_cast<std::int64_t>(candidates.size());
    if (n == 1) return 0;
    auto a = static_cast<std::size_t>(rng_.uniform_int(0, n - 1));
    auto b = static_cast<std::size_t>(rng_.uniform_int(0, n - 2));
    if (b >= a) ++b;  // distinct
    if (b < a) std::swap(a, b);
    return candidates[b].outstanding < candidates[a].outstanding ? b : a;
  }

 private:
  Rng rng_;
};

const PolicyRegistrar kRegistrar({PolicyKind::kRouter,
                                  "power_of_two",
                                  "two random replicas, the one with fewer outstanding requests",
                                  "Mitzenmacher, power of two choices; SGLang router",
                                  {},
                                  [](const PolicySpec&, PolicyTarget& t) {
                                    *t.router = [](const RouterContext& c) {
                                      return std::make_unique<PowerOfTwoRouter>(c.seed);
                                    };
                                  },
                                  50});

}  // namespace
}  // namespace servelab
