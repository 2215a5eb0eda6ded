// PythonPolicy: a Python callable registered as a ServeLab plugin (servelab.register_queue_order,
// servelab.register_victim_rule), shared by the registry's factory and every object the factory
// builds. The scheduler runs with the GIL released (python/run_bindings.cc), so every call takes
// the GIL, and so does releasing the callable: the last owner may be a sweep's worker thread.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace servelab::python {

class PythonPolicy {
 public:
  // `kind` names the plugin kind in messages ("queue order", "victim rule"). REQUIRES: the GIL.
  PythonPolicy(std::string name, std::string kind, pybind11::object fn);
  ~PythonPolicy();
  PythonPolicy(const PythonPolicy&) = delete;
  PythonPolicy& operator=(const PythonPolicy&) = delete;

  const std::string& name() const { return name_; }
  const std::string& kind() const { return kind_; }
  const pybind11::object& fn() const { return fn_; }

  // Throws PythonPolicyError "Python <kind> '<name>': <what>".
  [[noreturn]] void fail(const std::string& what) const;
  // The same for an exception the callable raised, with its Python traceback; a PolicyError
  // (a ServeLab check that failed inside the callable) keeps its own message, and
  // KeyboardInterrupt and SystemExit are rethrown as they are. REQUIRES: the GIL.
  [[noreturn]] void fail(pybind11::error_already_set& e) const;

 private:
  std::string name_, kind_;
  pybind11::object fn_;
};

// Releases `o`, taking the GIL, or abandons it when the interpreter is already gone (an object
// destroyed at exit): for the Python objects held by plugin objects, which the scheduler
// destroys without the GIL, possibly on a sweep's worker thread.
void release_python_object(pybind11::object& o);

// A policy's integer answer as a Python int: an int (bool included) as it is, an object that
// says it is an integer (`__index__`: NumPy's np.int64 from np.argmax, np.int32) converted, any
// other object unchanged (the caller refuses it). REQUIRES: the GIL.
pybind11::object as_index(const pybind11::object& v);

}  // namespace servelab::python
