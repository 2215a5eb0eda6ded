// The plugins registered from Python (servelab.register_queue_order / register_victim_rule /
// register_router): their names, so that a run knows when a Python policy is active (then the
// scheduler's invariants are checked after every step, core/scheduler_invariants.h).
#pragma once

#include <string>

#include "serving/experiment.h"

namespace servelab::python {

// Whether `config` uses a plugin registered from Python (queue order, victim rule, router).
// REQUIRES: the GIL (the set of names is the interpreter's).
bool uses_python_policy(const ExperimentConfig& config);
// Whether any plugin has been registered from Python (compare and sweep, which load their
// variants themselves, check invariants in every run then). REQUIRES: the GIL.
bool python_plugins_registered();

}  // namespace servelab::python
