// Preemption mode `auto`: per victim, swap when the driver's cost oracle
// (SchedulerConfig::prefer_swap; the simulator's compares two host-link transfers of the
// victim's blocks with recomputing its computed tokens, sim/swap_cost.h) says swapping is
// cheaper, else recompute. vLLM v0 also chose the mode per victim (by sequence count rather than
// cost). Without an oracle every victim is recomputed, vLLM v0's choice for a single-sequence
// request.
#include "core/preemption_mode.h"
#include "core/scheduler_config.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class AutoPreemption final : public PreemptionMode {
 public:
  std::string_view name() const override { return "auto"; }
  bool uses_host_memory() const override { return true; }
  bool swap(const Request& victim, const SchedulerConfig& config) const override {
    return config.prefer_swap && config.prefer_swap(victim);
  }
};

const PolicyRegistrar kRegistrar(
    {PolicyKind::kPreemption, "auto",
     "per victim, swap when two host-link transfers of its blocks cost less than "
     "recomputing its computed tokens by the cost model, else recompute",
     "vLLM v0 preemption modes chosen per victim by cost (FastServe-style KV offload)",
     preemption_params(), preemption_factory<AutoPreemption>(),
     /*rank=*/2});

}  // namespace
}  // namespace servelab
