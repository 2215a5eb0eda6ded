// PythonPolicyError: a policy written in Python (servelab.register_queue_order, ...) failed: it
// raised, or returned something the scheduler cannot use. The message names the policy, its
// kind and what went wrong (with the Python traceback); the module raises it as
// servelab.PolicyError, and the run that called the policy stops.
#pragma once

#include <stdexcept>
#include <string>

namespace servelab::python {

class PythonPolicyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace servelab::python
