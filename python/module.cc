// The extension module `servelab._servelab`: each area of the API binds itself (bindings.h);
// the package python/servelab/ wraps it in the Python API of docs/python.md.
#include <pybind11/pybind11.h>

#include "python/bindings.h"

PYBIND11_MODULE(_servelab, m) {
  m.doc() = "ServeLab's C++ core (use the `servelab` package, docs/python.md)";
  servelab::python::bind_errors(m);
  servelab::python::bind_home(m);
  servelab::python::bind_runs(m);
  servelab::python::bind_groups(m);
  servelab::python::bind_policies(m);
  servelab::python::bind_step_cost(m);
  servelab::python::bind_kv_probe(m);
  servelab::python::bind_calibration(m);
}
