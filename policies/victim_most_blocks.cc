// Victim rule `most-blocks`: the running request holding the most KV blocks, so one preemption
// frees the most memory; ties go to the later arrival (then the larger id), which has waited
// least. A victim already scheduled in the step is refunded by the scheduler.
#include <tuple>

#include "core/request_state.h"
#include "core/victim_rule.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class MostBlocksVictim final : public VictimRule {
 public:
  std::string_view name() const override { return "most-blocks"; }
  std::size_t pick(std::span<Request* const> running) const override {
    std::size_t best = 0;
    for (std::size_t k = 1; k < running.size(); ++k) {
      const Request& a = *running[k];
      const Request& b = *running[best];
      if (std::make_tuple(a.block_table.size(), a.spec.arrival_ns, a.id()) >
          std::make_tuple(b.block_table.size(), b.spec.arrival_ns, b.id())) {
        best = k;
      }
    }
    return best;
  }
};

const PolicyRegistrar kRegistrar({PolicyKind::kVictim,
                                  "most-blocks",
                                  "most KV blocks held, ties to the later arrival",
                                  "ServeLab (frees the most memory per preemption)",
                                  {},
                                  victim_factory<MostBlocksVictim>(),
                                  /*rank=*/3});

}  // namespace
}  // namespace servelab
