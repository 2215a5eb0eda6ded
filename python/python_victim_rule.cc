#include "python/python_victim_rule.h"

#include <pybind11/pybind11.h>

#include <string>

#include "python/request_view.h"

namespace py = pybind11;

namespace servelab::python {

std::size_t PythonVictimRule::pick(std::span<Request* const> running) const {
  py::gil_scoped_acquire gil;
  py::list views;
  for (const Request* r : running) views.append(make_request_view(*r));
  const auto invalidate = [&] {
    for (const py::handle v : views) invalidate_request_view(v);
  };
  py::object result;
  try {
    result = policy_->fn()(views);
  } catch (py::error_already_set& e) {
    invalidate();
    policy_->fail(e);
  }
  invalidate();
  result = as_index(result);
  if (!PyLong_Check(result.ptr()) || PyBool_Check(result.ptr())) {
    policy_->fail(
        "expected the index of the victim in the list of running requests (an int), "
        "got " +
        py::repr(result).cast<std::string>());
  }
  int overflow = 0;
  const long long index = PyLong_AsLongLongAndOverflow(result.ptr(), &overflow);
  if (overflow != 0 || index < 0 || index >= static_cast<long long>(running.size())) {
    policy_->fail("returned " + py::repr(result).cast<std::string>() +
                  ", expected an index into the " + std::to_string(running.size()) +
                  " running requests (0 to " + std::to_string(running.size() - 1) + ")");
  }
  return static_cast<std::size_t>(index);
}

}  // namespace servelab::python
