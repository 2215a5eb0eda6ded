// Router `session_affinity`: every request of a multi-turn session (RequestSpec::session, set by
// the sessions workloads) goes where the session's first request went, so each turn finds the
// conversation's KV on its replica; a session's first request, and a request of no session, go
// to the least outstanding candidate. The binding lasts the run (one entry per session).
#include <unordered_map>

#include "core/router.h"
#include "policies/registry.h"
#include "policies/router_simple.h"

namespace servelab {
namespace {

class SessionAffinityRouter final : public Router {
 public:
  std::string_view name() const override { return "session_affinity"; }
  std::size_t route(const RequestSpec& spec, std::span<const ReplicaLoad> candidates) override {
    if (spec.session == 0) return least_outstanding_candidate(candidates);
    const auto it = bound_.find(spec.session);  // probed only, never iterated
    if (it != bound_.end()) return it->second;
    const std::size_t choice = least_outstanding_candidate(candidates);
    bound_.emplace(spec.session, choice);
    return choice;
  }

 private:
  std::unordered_map<std::uint64_t, std::size_t> bound_;
};

const PolicyRegistrar kRegistrar({PolicyKind::kRouter,
                                  "session_affinity",
                                  "every turn of a session to the replica of its first turn",
                                  "sticky sessions (SGLang router manual / consistent hashing)",
                                  {},
                                  [](const PolicySpec&, PolicyTarget& t) {
                                    *t.router = [](const RouterContext&) {
                                      return std::make_unique<SessionAffinityRouter>();
                                    };
                                  },
                                  80});

}  // namespace
}  // namespace servelab
