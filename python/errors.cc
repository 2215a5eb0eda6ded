// Exceptions: bad input (ConfigError, UsageError, which is one, and a wrong ServeLab home)
// becomes servelab.ConfigError, a ValueError carrying the message the commands print
// (FILE:LINE:COL, the key, what was expected; the commands' options named as the module's
// arguments: "pass force=True", "device=cpu"); a signal (serving/interrupt.h) becomes
// KeyboardInterrupt; a failing Python policy servelab.PolicyError (a RuntimeError).
#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <string_view>
#include <utility>

#include "core/config_error.h"
#include "python/bindings.h"
#include "python/python_plugins.h"
#include "python/python_policy_error.h"
#include "serving/home.h"
#include "serving/interrupt.h"
#include "sim/simulator.h"

namespace py = pybind11;

namespace servelab::python {

namespace {
py::exception<PythonPolicyError>* policy_error_type = nullptr;  // set once by bind_errors

// The commands' messages name their options; from Python the same choices are arguments.
std::string python_words(std::string text) {
  static const std::pair<std::string_view, std::string_view> kWords[] = {
      {"pass --force to replace it", "pass force=True to replace it"},
      {"choose another --out", "choose another folder"},
      {"--device ", "device="},
      {"--reps and --rounds", "reps and rounds"}};
  for (const auto& [from, to] : kWords) {
    for (std::size_t at = text.find(from); at != std::string::npos;
         at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  }
  return text;
}
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
      config_error(python_words(e.what()).c_str());
    } catch (const HomeError& e) {
      config_error(e.what());
    } catch (const PythonPolicyError& e) {
      policy_error(e.what());
    } catch (const SimulationStalled& e) {
      if (!python_plugins_registered()) throw;  // an internal error: RuntimeError
      policy_error((std::string(e.what()) +
                    " (a Python policy is registered: the requests it left out of every step "
                    "never finished)")
                       .c_str());
    } catch (const Interrupted& e) {
      PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
    }
  });
}

}  // namespace servelab::python
