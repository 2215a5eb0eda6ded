// Exceptions: bad input (ConfigError, UsageError, which is one, and a wrong ServeLab home)
// becomes servelab.ConfigError, a ValueError carrying the message the commands print
// (FILE:LINE:COL, the key, what was expected); a signal (serving/interrupt.h) becomes
// KeyboardInterrupt; a failing Python policy servelab.PolicyError (a RuntimeError).
#include <pybind11/pybind11.h>

#include <exception>

#include "core/config_error.h"
#include "python/bindings.h"
#include "python/python_policy_error.h"
#include "serving/home.h"
#include "serving/interrupt.h"

namespace py = pybind11;

namespace servelab::python {

namespace {
py::exception<PythonPolicyError>* policy_error_type = nullptr;  // set once by bind_errors
}  // namespace

bool is_policy_error(const py::error_already_set& e) {
  return policy_error_type != nullptr && e.matches(*policy_error_type);
}

void bind_errors(py::module_& m) {
  static py::exception<ConfigError> config_error(m, "ConfigError", PyExc_ValueError);
  static py::exception<PythonPolicyError> policy_error(m, "PolicyError", PyExc_RuntimeError);
  policy_error_type = &policy_error;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ConfigError& e) {
      config_error(e.what());
    } catch (const HomeError& e) {
      config_error(e.what());
    } catch (const PythonPolicyError& e) {
      policy_error(e.what());
    } catch (const Interrupted& e) {
      PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
    }
  });
}

}  // namespace servelab::python
