// The areas of the extension module, each bound by its own file (python/*.cc):
//   bind_errors    exception types and the C++ -> Python translation (errors.cc)
//   bind_home      where the module finds the ServeLab home (home_bindings.cc)
//   bind_runs      run, engine_run, saving a run folder (run_bindings.cc)
//   bind_groups    compare, sweep, plot (group_bindings.cc)
//   bind_policies  the catalogue and Python policies (policy_bindings.cc)
//   bind_step_cost one step priced by an experiment's cost model (step_cost_bindings.cc)
//   bind_kv_probe  KV dtypes against bf16 KV, weight quantizations against the unquantized
//                  weights, on the CPU engine (kv_probe_bindings.cc)
//   bind_calibration engine profile, sim calibrate, sim validate (calibration_bindings.cc)
#pragma once

#include <pybind11/pybind11.h>

namespace servelab::python {

void bind_errors(pybind11::module_& m);
void bind_home(pybind11::module_& m);
void bind_runs(pybind11::module_& m);
void bind_groups(pybind11::module_& m);
void bind_policies(pybind11::module_& m);
void bind_step_cost(pybind11::module_& m);
void bind_kv_probe(pybind11::module_& m);
void bind_calibration(pybind11::module_& m);

}  // namespace servelab::python
