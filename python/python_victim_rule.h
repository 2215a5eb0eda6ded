// PythonVictimRule: a VictimRule (core/victim_rule.h) that asks a Python callable, the adapter
// behind servelab.register_victim_rule. The callable gets the running requests (a list of
// servelab.Request in the scheduler's running order) and returns the index of the victim; it is
// called only when a preemption happens. A callable that raises or returns anything but an int
// in range throws PythonPolicyError naming the plugin (before the scheduler changes anything).
// Like every VictimRule it must be deterministic (decide from the requests' attributes).
#pragma once

#include <memory>
#include <string_view>

#include "core/victim_rule.h"
#include "python/python_policy.h"

namespace servelab::python {

class PythonVictimRule final : public VictimRule {
 public:
  explicit PythonVictimRule(std::shared_ptr<const PythonPolicy> policy)
      : policy_(std::move(policy)) {}
  std::string_view name() const override { return policy_->name(); }
  std::size_t pick(std::span<Request* const> running) const override;

 private:
  std::shared_ptr<const PythonPolicy> policy_;
};

}  // namespace servelab::python
