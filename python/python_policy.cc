#include "python/python_policy.h"

#include <utility>

#include "python/python_policy_error.h"

namespace py = pybind11;

namespace servelab::python {

PythonPolicy::PythonPolicy(std::string name, std::string kind, py::object fn)
    : name_(std::move(name)), kind_(std::move(kind)), fn_(std::move(fn)) {}

PythonPolicy::~PythonPolicy() { release_python_object(fn_); }

py::object as_index(const py::object& v) {
  if (PyLong_Check(v.ptr()) || !PyIndex_Check(v.ptr())) return v;
  PyObject* i = PyNumber_Index(v.ptr());
  if (i == nullptr) {
    PyErr_Clear();
    return v;
  }
  return py::reinterpret_steal<py::object>(i);
}

void release_python_object(py::object& o) {
  if (!Py_IsInitialized()) {
    (void)o.release();  // the interpreter is gone: nothing left to release
    return;
  }
  py::gil_scoped_acquire gil;
  o = py::object();
}

void PythonPolicy::fail(const std::string& what) const {
  throw PythonPolicyError("Python " + kind_ + " '" + name_ + "': " + what);
}

void PythonPolicy::fail(py::error_already_set& e) const {
  // A ServeLab check that failed inside the callable (a StepBuilder operation, a nested Python
  // policy) already names the policy and what went wrong: its message as it is.
  if (is_policy_error(e)) throw PythonPolicyError(py::str(e.value()).cast<std::string>());
  // Ctrl-C inside the callable, or sys.exit(): the program's to handle, as raised.
  if (e.matches(PyExc_KeyboardInterrupt) || e.matches(PyExc_SystemExit)) throw e;
  std::string text;
  try {
    const py::object lines =
        py::module_::import("traceback").attr("format_exception")(e.type(), e.value(), e.trace());
    text = py::str("").attr("join")(lines).cast<std::string>();
  } catch (const py::error_already_set&) {
    text = e.what();
  }
  while (!text.empty() && text.back() == '\n') text.pop_back();
  std::string what;
  try {
    what = py::str(e.type().attr("__name__")).cast<std::string>() + ": " +
           py::str(e.value()).cast<std::string>();
  } catch (const py::error_already_set&) {
    what = "an exception";
  }
  fail("raised " + what + "; the run stopped.\n" + text);
}

}  // namespace servelab::python
