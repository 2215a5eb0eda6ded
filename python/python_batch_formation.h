// PythonBatchFormation: a BatchFormation (core/batch_formation.h) whose fill() is a Python
// callable, the adapter behind servelab.register_batch_formation, and StepBuilder
// (servelab.StepBuilder), what the callable gets to form the step with.
//
// The callable, fill(step) or fill(step, params) when the plugin declares parameters, forms one
// step's plan through the scheduler's own step-building operations, so that every formation
// keeps the scheduler's invariants (seats, blocks, plan totals) whatever it decides:
//   - step.schedule_running(budget, tokens_for, stop_at_self_preemption=False): the running
//     requests in list order while the budget lasts, each for tokens_for(request, budget_left)
//     tokens (<= 0: skipped, it keeps its place), room made by preempting the victim rule's
//     choice (Scheduler::schedule_running); returns the budget left;
//   - step.swap_in(budget): the swapped requests resume in order while they fit
//     (Scheduler::swap_in_phase); returns the budget left;
//   - step.admit_waiting(budget, token_cap=0, whole_prompt=False, watermark=None,
//     reserve_max_length=False, max_admissions=0): the one admission loop, from the waiting
//     queue's front in its order (Scheduler::admit_waiting); returns the budget left;
// and reads the step's state: now_ns, admit (False: admit nobody, the scheduler's second call
// after a preemption emptied the plan), max_num_batched_tokens, max_num_seqs, budget_left (the
// step's tokens not yet scheduled), num_running, num_waiting, num_swapped, num_preempted (in
// this step so far), running() (servelab.Request views). Checked at each call, with
// PythonPolicyError naming the plugin: a budget outside [0, budget_left], tokens_for answering
// other than an int, or more tokens than the request has left or than the budget left, an
// admission or a resume while admit is False, anything used after the callable returned.
// When the scheduler calls again with admit False (a pass preempted and left the plan empty),
// a pass that neither schedules nor preempts fails (it would be called forever).
// Registered with resumes_swapped=True it may run with swap preemption (it should call swap_in);
// it refuses nothing at arrival, does not run multi-step rounds and does not rank the running
// list. Contract, as for every formation: deterministic, a function of the scheduler's state.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string_view>

#include "core/batch_formation.h"
#include "core/time.h"
#include "python/python_policy.h"

namespace servelab::python {

class PythonBatchFormation final : public BatchFormation {
 public:
  // `params`: the parameter dict, or None when the plugin declares none. REQUIRES: the GIL.
  PythonBatchFormation(std::shared_ptr<const PythonPolicy> policy, pybind11::object params,
                       bool resumes_swapped);
  ~PythonBatchFormation() override;
  PythonBatchFormation(const PythonBatchFormation&) = delete;
  PythonBatchFormation& operator=(const PythonBatchFormation&) = delete;

  std::string_view name() const override { return policy_->name(); }
  void fill(Scheduler& s, TimeNs now, bool admit) const override;
  bool resumes_swapped() const override { return resumes_swapped_; }

 private:
  std::shared_ptr<const PythonPolicy> policy_;
  pybind11::object params_;
  bool resumes_swapped_;
};

// Registers servelab.StepBuilder.
void bind_step_builder(pybind11::module_& m);

}  // namespace servelab::python
