// Victim rule `fewest-computed`: SGLang's retract_decode order
// (python/sglang/srt/managers/schedule_batch.py: running requests sorted by
// (len(output_ids), -len(input_ids)) descending with a stable sort, popped from the end): the
// request with the fewest output tokens, then the longest prompt, then the later one in running
// order. Losing the least decode work is cheapest to redo. A victim already scheduled in the step
// is refunded by the scheduler.
#include <tuple>

#include "core/request_state.h"
#include "core/victim_rule.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class FewestComputedVictim final : public VictimRule {
 public:
  std::string_view name() const override { return "fewest-computed"; }
  std::size_t pick(std::span<Request* const> running) const override {
    std::size_t best = 0;
    for (std::size_t k = 1; k < running.size(); ++k) {
      const Request& a = *running[k];
      const Request& b = *running[best];
      const auto ka = std::make_tuple(a.num_output_tokens(), -a.spec.prompt_len);
      const auto kb = std::make_tuple(b.num_output_tokens(), -b.spec.prompt_len);
      if (ka <= kb) best = k;
    }
    return best;
  }
};

const PolicyRegistrar kRegistrar(
    {PolicyKind::kVictim,
     "fewest-computed",
     "fewest output tokens, then longest prompt (SGLang retract order)",
     "SGLang retract_decode",
     {},
     victim_factory<FewestComputedVictim>(),
     /*rank=*/2});

}  // namespace
}  // namespace servelab
