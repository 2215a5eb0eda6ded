#include "python/request_view.h"

#include <stdexcept>

#include "core/scheduler.h"

namespace py = pybind11;

namespace servelab::python {

const Request& RequestView::get() const {
  if (request_ == nullptr) {
    throw std::runtime_error(
        "servelab.Request used after the policy call it was passed to returned (copy the "
        "attributes you need instead of keeping the request)");
  }
  return *request_;
}

py::object make_request_view(const Request& r) { return py::cast(RequestView(&r)); }

void invalidate_request_view(const py::handle& view) { view.cast<RequestView&>().invalidate(); }

void bind_request_view(py::module_& m) {
  py::class_<RequestView>(m, "Request",
                          "A request as a Python policy sees it (read-only, valid during the "
                          "call only). Times are integer nanoseconds.")
      .def_property_readonly(
          "id", [](const RequestView& v) { return v.get().id(); },
          "the request id (a forked sample's id has the sample number in bits 48 and up)")
      .def_property_readonly(
          "arrival_ns", [](const RequestView& v) { return v.get().spec.arrival_ns; },
          "arrival time (ns)")
      .def_property_readonly(
          "prompt_tokens", [](const RequestView& v) { return v.get().spec.prompt_len; },
          "prompt length in tokens")
      .def_property_readonly(
          "max_output_tokens", [](const RequestView& v) { return v.get().spec.max_output_tokens; },
          "the output length the request stops at")
      .def_property_readonly(
          "output_tokens", [](const RequestView& v) { return v.get().num_output_tokens(); },
          "output tokens generated so far")
      .def_property_readonly(
          "computed_tokens", [](const RequestView& v) { return v.get().num_computed_tokens; },
          "tokens whose KV is computed (0 after a preemption by recompute)")
      .def_property_readonly(
          "tokens_to_compute",
          [](const RequestView& v) { return v.get().num_tokens() - v.get().num_computed_tokens; },
          "tokens (prompt and outputs) whose KV is not computed yet: what a step may schedule")
      .def_property_readonly(
          "prefill_pending",
          [](const RequestView& v) { return Scheduler::prefill_pending(v.get()); },
          "prompt (or, after a preemption, prompt and outputs) left to prefill")
      .def_property_readonly(
          "priority", [](const RequestView& v) { return v.get().spec.priority; },
          "smaller is served first (vLLM's convention)")
      .def_property_readonly(
          "tenant", [](const RequestView& v) { return v.get().spec.tenant; }, "tenant number")
      .def_property_readonly(
          "request_class", [](const RequestView& v) { return v.get().spec.request_class; },
          "request class: the index of its part of a `type: mix` workload (0 otherwise)")
      .def_property_readonly(
          "preemptions", [](const RequestView& v) { return v.get().num_preemptions; },
          "times preempted so far")
      .def_property_readonly(
          "num_blocks",
          [](const RequestView& v) {
            return static_cast<std::int64_t>(v.get().block_table.size());
          },
          "device KV blocks held")
      .def_property_readonly(
          "status", [](const RequestView& v) { return std::string(to_string(v.get().status)); },
          "waiting, running, preempted, swapped, ...")
      .def("__repr__", [](const RequestView& v) {
        const Request& r = v.get();
        return "<servelab.Request id=" + std::to_string(r.id()) +
               " arrival_ns=" + std::to_string(r.spec.arrival_ns) +
               " prompt_tokens=" + std::to_string(r.spec.prompt_len) +
               " output_tokens=" + std::to_string(r.num_output_tokens()) + ">";
      });
}

}  // namespace servelab::python
