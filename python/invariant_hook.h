// The step hook that runs while Python policies may be active: the scheduler's invariants after
// every step (core/scheduler_invariants.h) and the KV pool's every max(1024, blocks) steps; a
// violation is reported as PythonPolicyError naming the policies in use. Thread-safe (sweeps
// call it from their workers).
#pragma once

#include "sim/run.h"

namespace servelab::python {

StepHook invariant_hook();

}  // namespace servelab::python
