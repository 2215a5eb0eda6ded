// Router `round_robin`: candidates in turn, whatever their load (Vidur's round-robin global
// scheduler; the baseline every router comparison starts from).
#include "core/router.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class RoundRobinRouter final : public Router {
 public:
  std::string_view name() const override { return "round_robin"; }
  std::size_t route(const RequestSpec&, std::span<const ReplicaLoad> candidates) override {
    const std::size_t i = next_ % candidates.size();
    next_ = i + 1;
    return i;
  }

 private:
  std::size_t next_ = 0;
};

const PolicyRegistrar kRegistrar({PolicyKind::kRouter,
                                  "round_robin",
                                  "each request to the next replica in turn, ignoring load",
                                  "Vidur's round-robin global scheduler; most load balancers",
                                  {},
                                  [](const PolicySpec&, PolicyTarget& t) {
                                    *t.router = [](const RouterContext&) {
                                      return std::make_unique<RoundRobinRouter>();
                                    };
                                  },
                                  10});

}  // namespace
}  // namespace servelab
