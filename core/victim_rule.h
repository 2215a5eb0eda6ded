// VictimRule: which running request a preemption evicts when a running request cannot get KV
// slots (the `victim` parameter of the `preemption` plugins; registered as PolicyKind::kVictim).
//
// pick() is called only when an allocation fails (rarely, so a virtual call costs nothing
// measurable). It returns an index into `running`, the scheduler's running list in its order
// (admission order, forked samples after their parent). The scheduler handles the rest: a victim
// already scheduled in this step is refunded (its plan entry removed, its tokens returned to the
// budget, its progress undone), a victim that is a forked sample takes its group with it, and a
// request that picks itself ends its own scheduling for the step.
//
// Contract: deterministic (ties end on a request field or the list order, never on addresses),
// immutable after construction (one object may serve several schedulers at once).
//
// LastRunningVictim is vLLM v1's rule and the scheduler's default, so it lives here; the others
// (lowest-priority, fewest-computed, most-blocks) are plugins in policies/.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace servelab {

struct Request;

class VictimRule {
 public:
  virtual ~VictimRule() = default;
  // The registry name ("last-running", ...), for messages.
  virtual std::string_view name() const = 0;
  // The index of the victim in `running`. REQUIRES: !running.empty().
  virtual std::size_t pick(std::span<Request* const> running) const = 0;
};

// vLLM v1 FCFS (`self.running.pop()`): the most recently admitted request. In the vllm formation
// it is never one already scheduled in the step (those lie before the requester).
class LastRunningVictim final : public VictimRule {
 public:
  std::string_view name() const override { return "last-running"; }
  std::size_t pick(std::span<Request* const> running) const override { return running.size() - 1; }
};

}  // namespace servelab
