// RequestView: what a Python policy sees of a request (servelab.Request): read-only attributes
// of the scheduler's Request. A view is valid only during the policy call it was passed to: the
// scheduler owns and deletes requests, so the adapters invalidate every view when the call
// returns, and a view kept beyond it raises instead of reading freed memory.
#pragma once

#include <pybind11/pybind11.h>

#include "core/request_state.h"

namespace servelab::python {

class RequestView {
 public:
  explicit RequestView(const Request* request) : request_(request) {}
  // Throws std::runtime_error (a Python RuntimeError) once invalidated.
  const Request& get() const;
  void invalidate() { request_ = nullptr; }

 private:
  const Request* request_;
};

// A Python object viewing `r`, and its invalidation (REQUIRES: the GIL).
pybind11::object make_request_view(const Request& r);
void invalidate_request_view(const pybind11::handle& view);

// Registers servelab.Request.
void bind_request_view(pybind11::module_& m);

}  // namespace servelab::python
