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

// Held (constructed before the GIL is released, destroyed after it is taken back) around work
// that reads the plugin registry without the GIL: runs, compares and sweeps parse experiments and
// build their plugins there. The registry has no lock of its own, so registering or replacing a
// Python plugin while one is held is refused (it crashed a sweep in another thread, or made it
// miss a plugin being replaced). REQUIRES: the GIL, for construction and destruction.
class RegistryReaders {
 public:
  RegistryReaders();
  ~RegistryReaders();
  RegistryReaders(const RegistryReaders&) = delete;
  RegistryReaders& operator=(const RegistryReaders&) = delete;
  // How many are held. REQUIRES: the GIL.
  static int count();
};

}  // namespace servelab::python
