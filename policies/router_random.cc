// Router `random`: a uniformly random candidate, from the experiment seed's `router` stream.
#include "core/rng.h"
#include "core/router.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class RandomRouter final : public Router {
 public:
  explicit RandomRouter(std::uint64_t seed) : rng_(Rng::stream(seed, "router-random")) {}
  std::string_view name() const override { return "random"; }
  std::size_t route(const RequestSpec&, std::span<const ReplicaLoad> candidates) override {
    return static_cast<std::size_t>(
        rng_.uniform_int(0, static_cast<std::int64_t>(candidates.size()) - 1));
  }

 private:
  Rng rng_;
};

const PolicyRegistrar kRegistrar({PolicyKind::kRouter,
                                  "random",
                                  "a uniformly random replica (seeded by the experiment seed)",
                                  "SGLang router and llm-d's random picker",
                                  {},
                                  [](const PolicySpec&, PolicyTarget& t) {
                                    *t.router = [](const RouterContext& c) {
                                      return std::make_unique<RandomRouter>(c.seed);
                                    };
                                  },
                                  20});

}  // namespace
}  // namespace servelab
