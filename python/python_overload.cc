#include "python/python_overload.h"

#include <string>
#include <utility>

#include "python/python_router.h"

namespace py = pybind11;

namespace servelab::python {

ArrivalCall::ArrivalCall(std::shared_ptr<const PythonPolicy> policy, py::object params,
                         std::int32_t block_size)
    : policy_(std::move(policy)), params_(std::move(params)), block_size_(block_size) {}

ArrivalCall::~ArrivalCall() { release_python_object(params_); }

py::object ArrivalCall::ask(const RequestSpec& spec, const AdmissionLoad& load) const {
  try {
    py::object request = py::cast(RouteRequest{spec, block_size_});
    py::object view = py::cast(load);
    return params_.is_none() ? policy_->fn()(request, view) : policy_->fn()(request, view, params_);
  } catch (py::error_already_set& e) {
    policy_->fail(e);
  }
}

std::string PythonAdmission::shed_reason(const RequestSpec& spec, const AdmissionLoad& load) const {
  py::gil_scoped_acquire gil;
  const py::object result = call_.ask(spec, load);
  if (!py::isinstance<py::str>(result)) {
    call_.policy().fail(
        "expected a str (\"\" admits the request, anything else sheds it and is its reason), "
        "got " +
        py::repr(result).cast<std::string>() + " for request " + std::to_string(spec.id));
  }
  return result.cast<std::string>();
}

std::int32_t PythonLengthCap::cap(const RequestSpec& spec, const AdmissionLoad& load) const {
  py::gil_scoped_acquire gil;
  const py::object result = as_index(call_.ask(spec, load));
  const std::string range = "1 to the request's max_output_tokens " +
                            std::to_string(spec.max_output_tokens) + " (request " +
                            std::to_string(spec.id) + ")";
  if (!PyLong_Check(result.ptr()) || PyBool_Check(result.ptr())) {
    call_.policy().fail("expected the request's new max_output_tokens (an int from " + range +
                        "), got " + py::repr(result).cast<std::string>());
  }
  int overflow = 0;
  const long long cap = PyLong_AsLongLongAndOverflow(result.ptr(), &overflow);
  if (overflow != 0 || cap < 1 || cap > spec.max_output_tokens) {
    call_.policy().fail("returned " + py::repr(result).cast<std::string>() + ", expected " + range);
  }
  return static_cast<std::int32_t>(cap);
}

void bind_admission_load(py::module_& m) {
  py::class_<AdmissionLoad>(m, "AdmissionLoad",
                            "The load an admission rule or length cap sees when a request "
                            "arrives (before it is queued).")
      .def_readonly("now_ns", &AdmissionLoad::now)
      .def_readonly("waiting", &AdmissionLoad::num_waiting,
                    "requests in the waiting queue (new and preempted ones)")
      .def_readonly("running", &AdmissionLoad::num_running, "requests holding a seat")
      .def_readonly("waiting_tokens", &AdmissionLoad::waiting_tokens,
                    "tokens the waiting requests must compute before they all have run once")
      .def_readonly("prefill_tokens_per_s", &AdmissionLoad::prefill_tokens_per_s,
                    "recent prefill throughput (weighted mean over steps with prefill tokens; "
                    "0 until one completed)")
      .def("__repr__", [](const AdmissionLoad& l) {
        return "<servelab.AdmissionLoad now_ns=" + std::to_string(l.now) +
               " waiting=" + std::to_string(l.num_waiting) +
               " running=" + std::to_string(l.num_running) +
               " waiting_tokens=" + std::to_string(l.waiting_tokens) + ">";
      });
}

}  // namespace servelab::python
