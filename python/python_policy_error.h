// PythonPolicyError: a policy written in Python (servelab.register_queue_order, ...) failed: it
// raised, or returned something the scheduler cannot use. The message names the policy, its
// kind and what went wrong (with the Python traceback); the module raises it as
// servelab.PolicyError, and the run that called the policy stops. In a compare or sweep the
// message starts with the variant or point (sim/run_scoped_error.h).
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "sim/run_scoped_error.h"

namespace servelab::python {

class PythonPolicyError : public RunScopedError {
 public:
  using RunScopedError::RunScopedError;
  [[noreturn]] void rethrow_with_prefix(const std::string& prefix) const override {
    throw PythonPolicyError(prefix + what());
  }
};

// Whether `e` is a servelab.PolicyError: a PythonPolicyError that crossed Python, e.g. a check of
// a StepBuilder operation that failed inside a batch formation's callable. REQUIRES: the GIL and
// the module's errors bound (python/errors.cc).
bool is_policy_error(const pybind11::error_already_set& e);

}  // namespace servelab::python
