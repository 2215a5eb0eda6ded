#include "python/python_batch_formation.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/scheduler.h"
#include "python/request_view.h"

namespace py = pybind11;

namespace servelab::python {

// What fill()'s callable forms the step with (the header's contract). Python holds a copy; the
// copy's state is shared, so invalidating it here reaches the one Python holds.
class StepBuilder {
 public:
  StepBuilder(Scheduler& s, TimeNs now, bool admit, const PythonPolicy& policy)
      : state_(std::make_shared<State>(State{&s, now, admit, &policy, py::list(), false})) {}

  // Ends the builder's life and that of every view it handed out. REQUIRES: the GIL.
  void invalidate() const {
    for (const py::handle v : state_->views) invalidate_request_view(v);
    state_->views = py::list();
    state_->scheduler = nullptr;
  }

  Scheduler& s() const {
    if (state_->scheduler == nullptr) {
      throw std::runtime_error(
          "servelab.StepBuilder used after the batch formation call it was passed to returned");
    }
    return *state_->scheduler;
  }
  TimeNs now() const {
    s();
    return state_->now;
  }
  bool admit() const {
    s();
    return state_->admit;
  }
  std::int32_t budget_left() const {
    return s().config().max_num_batched_tokens - s().plan().num_tokens();
  }

  py::list running() const {
    py::list out;
    for (const Request* r : s().running()) {
      py::object v = make_request_view(*r);
      state_->views.append(v);
      out.append(v);
    }
    return out;
  }

  std::int32_t schedule_running(std::int32_t budget, const py::function& tokens_for,
                                bool stop_at_self_preemption) const {
    check_not_nested("schedule_running");
    check_budget("schedule_running", budget);
    const PythonPolicy& policy = *state_->policy;
    const auto on_self = stop_at_self_preemption ? Scheduler::OnSelfPreemption::kStop
                                                 : Scheduler::OnSelfPreemption::kNext;
    return s().schedule_running(
        budget, state_->now, on_self, [&](const Request& r, std::int32_t left) -> std::int32_t {
          const py::object view = make_request_view(r);
          py::object n;
          state_->in_tokens_for = true;
          try {
            n = tokens_for(view, left);
          } catch (py::error_already_set& e) {
            state_->in_tokens_for = false;
            invalidate_request_view(view);
            policy.fail(e);
          } catch (...) {
            state_->in_tokens_for = false;
            throw;
          }
          state_->in_tokens_for = false;
          invalidate_request_view(view);
          const std::int32_t to_compute = r.num_tokens() - r.num_computed_tokens;
          n = as_index(n);
          if (!PyLong_Check(n.ptr()) || PyBool_Check(n.ptr())) {
            policy.fail("tokens_for must return an int (the tokens to schedule for request " +
                        std::to_string(r.id()) + ", <= 0 to skip it), got " +
                        py::repr(n).cast<std::string>());
          }
          int overflow = 0;
          const long long tokens = PyLong_AsLongLongAndOverflow(n.ptr(), &overflow);
          if (overflow != 0 || tokens > std::min(to_compute, left)) {
            policy.fail("tokens_for returned " + py::repr(n).cast<std::string>() + " for request " +
                        std::to_string(r.id()) + ", which has " + std::to_string(to_compute) +
                        " tokens to compute, with " + std::to_string(left) +
                        " tokens of budget left");
          }
          return tokens <= 0 ? 0 : static_cast<std::int32_t>(tokens);
        });
  }

  std::int32_t swap_in(std::int32_t budget) const {
    check_not_nested("swap_in");
    check_admit("swap_in");
    check_budget("swap_in", budget);
    return s().swap_in_phase(budget, state_->now);
  }

  std::int32_t admit_waiting(std::int32_t budget, std::int32_t token_cap, bool whole_prompt,
                             const py::object& watermark, bool reserve_max_length,
                             std::int32_t max_admissions) const {
    check_not_nested("admit_waiting");
    check_admit("admit_waiting");
    check_budget("admit_waiting", budget);
    Scheduler::AdmissionRule rule;
    if (token_cap < 0 || max_admissions < 0) {
      state_->policy->fail("admit_waiting: token_cap and max_admissions must be >= 0 (0: none)");
    }
    rule.token_cap = token_cap;
    rule.whole_prompt = whole_prompt;
    rule.reserve_max_length = reserve_max_length;
    rule.max_admissions = max_admissions;
    if (!watermark.is_none()) {
      const double w = watermark.cast<double>();
      if (!(w >= 0 && w <= 0.99)) {
        state_->policy->fail("admit_waiting: watermark must be a fraction in [0, 0.99], got " +
                             py::repr(watermark).cast<std::string>());
      }
      rule.watermark_blocks = s().watermark_blocks(w);
    }
    return s().admit_waiting(budget, rule, state_->now);
  }

 private:
  struct State {
    Scheduler* scheduler;
    TimeNs now;
    bool admit;
    const PythonPolicy* policy;
    py::list views;
    // Inside schedule_running's tokens_for: its answers are checked against the budget left when
    // it was asked, so a step operation called from there could schedule past the step's budget
    // (512 tokens in a 256-token step) or nest one pass in another.
    bool in_tokens_for;
  };
  void check_not_nested(const char* what) const {
    if (state_->in_tokens_for) {
      state_->policy->fail(std::string(what) +
                           " called from inside schedule_running's tokens_for: answer with the "
                           "tokens to schedule, and call the step's operations after it returns");
    }
  }
  void check_budget(const char* what, std::int32_t budget) const {
    const std::int32_t left = budget_left();
    if (budget < 0 || budget > left) {
      state_->policy->fail(std::string(what) + ": budget " + std::to_string(budget) +
                           " outside [0, " + std::to_string(left) +
                           "], the step's tokens not yet scheduled (budget_left)");
    }
  }
  void check_admit(const char* what) const {
    if (!admit()) {
      state_->policy->fail(std::string(what) +
                           " called while step.admit is False (a step that preempted "
                           "admits and resumes nobody)");
    }
  }
  std::shared_ptr<State> state_;
};

PythonBatchFormation::PythonBatchFormation(std::shared_ptr<const PythonPolicy> policy,
                                           py::object params, bool resumes_swapped)
    : policy_(std::move(policy)), params_(std::move(params)), resumes_swapped_(resumes_swapped) {}

PythonBatchFormation::~PythonBatchFormation() { release_python_object(params_); }

void PythonBatchFormation::fill(Scheduler& s, TimeNs now, bool admit) const {
  py::gil_scoped_acquire gil;
  const std::size_t preempted_before = s.plan().preempted.size();
  const StepBuilder builder(s, now, admit, *policy_);
  const py::object step = py::cast(builder);
  try {
    if (params_.is_none()) {
      policy_->fn()(step);
    } else {
      policy_->fn()(step, params_);
    }
  } catch (py::error_already_set& e) {
    builder.invalidate();
    policy_->fail(e);
  } catch (...) {
    builder.invalidate();
    throw;
  }
  builder.invalidate();
  // The scheduler calls again, admit False, while a pass preempted and left the plan empty: a
  // pass that neither schedules nor preempts would be called forever.
  if (!admit && s.plan().requests.empty() && s.plan().preempted.size() == preempted_before &&
      !s.running().empty()) {
    policy_->fail(
        "called with step.admit False (a preemption left the plan empty while requests still "
        "run), it neither scheduled nor preempted anything: schedule the running requests "
        "(schedule_running) whatever step.admit says");
  }
  // Nothing runs and nothing was admitted: the run could never go on (the simulator would stop
  // on it as a stall, an internal error for the built-in formations); here it is the policy's.
  if (admit && s.plan().requests.empty() && s.running().empty() && s.num_waiting() > 0) {
    policy_->fail("scheduled nothing while " + std::to_string(s.num_waiting()) +
                  " requests wait and none runs, so the run would stall: admit from the waiting "
                  "queue (admit_waiting) when nothing runs");
  }
}

void bind_step_builder(py::module_& m) {
  py::class_<StepBuilder>(m, "StepBuilder",
                          "What a Python batch formation forms one step with (valid during the "
                          "call only); docs/python.md, \"Policies in Python\".")
      .def_property_readonly("now_ns", &StepBuilder::now)
      .def_property_readonly("admit", &StepBuilder::admit,
                             "False: admit and resume nobody (a step that preempted)")
      .def_property_readonly(
          "max_num_batched_tokens",
          [](const StepBuilder& b) { return b.s().config().max_num_batched_tokens; })
      .def_property_readonly("max_num_seqs",
                             [](const StepBuilder& b) { return b.s().config().max_num_seqs; })
      .def_property_readonly("budget_left", &StepBuilder::budget_left,
                             "the step's tokens not yet scheduled")
      .def_property_readonly("num_running",
                             [](const StepBuilder& b) { return b.s().running().size(); })
      .def_property_readonly("num_waiting",
                             [](const StepBuilder& b) { return b.s().num_waiting(); })
      .def_property_readonly("num_swapped",
                             [](const StepBuilder& b) { return b.s().num_swapped(); })
      .def_property_readonly("num_preempted",
                             [](const StepBuilder& b) { return b.s().plan().preempted.size(); })
      .def("running", &StepBuilder::running,
           "the running requests in the scheduler's order (servelab.Request views)")
      .def("schedule_running", &StepBuilder::schedule_running, py::arg("budget"),
           py::arg("tokens_for"), py::arg("stop_at_self_preemption") = false)
      .def("swap_in", &StepBuilder::swap_in, py::arg("budget"))
      .def("admit_waiting", &StepBuilder::admit_waiting, py::arg("budget"), py::kw_only(),
           py::arg("token_cap") = 0, py::arg("whole_prompt") = false,
           py::arg("watermark") = py::none(), py::arg("reserve_max_length") = false,
           py::arg("max_admissions") = 0);
}

}  // namespace servelab::python
