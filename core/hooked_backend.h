// HookedBackend: a Backend that shows every plan to a hook before its inner backend executes
// it. Drivers use it to check a run step by step (check_scheduler_invariants while a policy
// written outside the project is active) without a branch in their loops; an exception from the
// hook stops the run before the step executes.
#pragma once

#include <functional>
#include <string_view>
#include <utility>

#include "core/backend.h"

namespace servelab {

class HookedBackend final : public Backend {
 public:
  using Hook = std::function<void(const StepPlan& plan)>;
  // `inner` must outlive this backend. REQUIRES: hook is set.
  HookedBackend(Backend& inner, Hook hook) : inner_(inner), hook_(std::move(hook)) {}
  HookedBackend(const HookedBackend&) = delete;
  HookedBackend& operator=(const HookedBackend&) = delete;

  std::string_view name() const override { return inner_.name(); }
  StepResult execute(const StepPlan& plan) override {
    hook_(plan);
    return inner_.execute(plan);
  }
  void execute_into(const StepPlan& plan, StepResult& result) override {
    hook_(plan);
    inner_.execute_into(plan, result);
  }

 private:
  Backend& inner_;
  Hook hook_;
};

}  // namespace servelab
