// Victim rule `lowest-priority`: vLLM v1 priority scheduling (vllm/v1/core/sched/scheduler.py,
// `max(self.running, key=lambda r: (r.priority, r.arrival_time))`): the running request with the
// largest (priority, arrival), i.e. the least important and then the youngest. vLLM's arrival
// times are wall-clock floats that do not tie; traces' nanoseconds do (a burst at one instant),
// and Python's max (the first of equals in running order) would then preempt the request that
// was making progress, so two such requests evicted each other forever: ties go to the larger
// id (the later submission). It may be a request already scheduled in this step: the scheduler
// then refunds its entry (reference scenario 25).
#include <tuple>

#include "core/request_state.h"
#include "core/victim_rule.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class LowestPriorityVictim final : public VictimRule {
 public:
  std::string_view name() const override { return "lowest-priority"; }
  std::size_t pick(std::span<Request* const> running) const override {
    std::size_t best = 0;
    for (std::size_t k = 1; k < running.size(); ++k) {
      const RequestSpec& a = running[k]->spec;
      const RequestSpec& b = running[best]->spec;
      if (std::tie(a.priority, a.arrival_ns, a.id) > std::tie(b.priority, b.arrival_ns, b.id)) {
        best = k;
      }
    }
    return best;
  }
};

const PolicyRegistrar kRegistrar({PolicyKind::kVictim,
                                  "lowest-priority",
                                  "max (priority, arrival, id) over running (vLLM priority)",
                                  "vLLM v1 priority scheduling (_preempt_request victim choice)",
                                  {},
                                  victim_factory<LowestPriorityVictim>(),
                                  /*rank=*/1});

}  // namespace
}  // namespace servelab
