// Router `least_outstanding`: the candidate with the fewest requests routed to it and not yet
// finished (ties: fewer waiting, then the lowest index).
#include "core/router.h"
#include "policies/registry.h"
#include "policies/router_simple.h"

namespace servelab {
namespace {

class LeastOutstandingRouter final : public Router {
 public:
  std::string_view name() const override { return "least_outstanding"; }
  std::size_t route(const RequestSpec&, std::span<const ReplicaLoad> candidates) override {
    return least_outstanding_candidate(candidates);
  }
};

const PolicyRegistrar kRegistrar({PolicyKind::kRouter,
                                  "least_outstanding",
                                  "the replica with the fewest outstanding requests",
                                  "Vidur's least-outstanding-requests global scheduler",
                                  {},
                                  [](const PolicySpec&, PolicyTarget& t) {
                                    *t.router = [](const RouterContext&) {
                                      return std::make_unique<LeastOutstandingRouter>();
                                    };
                                  },
                                  30});

}  // namespace
}  // namespace servelab
