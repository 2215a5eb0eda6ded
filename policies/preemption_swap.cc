// Preemption mode `swap`: vLLM v0 --preemption-mode swap (vllm/core/scheduler.py
// _preempt_by_swap, _schedule_swapped); the same idea as FastServe's KV offload. The victim's
// device blocks are copied to host blocks and copied back before new admissions (the vllm
// formation's swap-in pass); the scheduler recomputes a victim the host pool cannot take.
#include "core/preemption_mode.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class SwapPreemption final : public PreemptionMode {
 public:
  std::string_view name() const override { return "swap"; }
  bool uses_host_memory() const override { return true; }
  bool swap(const Request&, const SchedulerConfig&) const override { return true; }
};

const PolicyRegistrar kRegistrar(
    {PolicyKind::kPreemption, "swap",
     "move the victim's KV to host memory (serving.swap_space_gb) and copy it back before "
     "new admissions; recompute instead when the host pool is full",
     "vLLM v0 --preemption-mode swap (vllm/core/scheduler.py _preempt_by_swap)",
     preemption_params(), preemption_factory<SwapPreemption>(),
     /*rank=*/1});

}  // namespace
}  // namespace servelab
