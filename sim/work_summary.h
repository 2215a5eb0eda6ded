// fill_work_summary: RunSummary::work (summary.json's `utilization` and `energy`) from the
// simulated replicas' backends (docs/metrics.md, "Energy and utilization").
#pragma once

#include <span>

#include "serving/experiment.h"
#include "serving/recorder.h"
#include "sim/sim_backend.h"

namespace servelab {

// Sums each backend's work (SimBackend::work) with its replica's GPUs and peaks (the
// backend's PowerModel, SimBackend::power) over a run of `duration_s`: GPU-seconds busy and in
// all, FLOPs, bytes, peaks x busy seconds; and, when every backend's power is known, the
// steps' joules plus each replica's idle watts x (duration_s - its busy seconds, at least 0).
// REQUIRES: every backend had set_work_model called with a PowerModel.
void fill_work_summary(std::span<const SimBackend* const> backends, double duration_s,
                       RunSummary& summary);

// Whether a simulation of `config` reports its energy: every hardware entry it runs on (the
// experiment's, or each cluster pool's) has `power:`. What `sim sweep` decides its columns by
// before any point has run. Throws ConfigError as load_hardware does.
bool reports_energy(const ExperimentConfig& config);

}  // namespace servelab
