// run_simulation(): one experiment, end to end — workload, cost model, replica, simulator,
// recorder — and the run folder it writes (serving/run_folder.h). The `sim run` command is a
// thin wrapper around it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "serving/experiment.h"
#include "serving/hardware_config.h"
#include "serving/kv_capacity.h"
#include "serving/model_config.h"
#include "serving/parallel_config.h"
#include "serving/run_folder.h"
#include "sim/calibrated_cost_model.h"
#include "sim/roofline_cost_model.h"
#include "sim/sim_backend.h"
#include "sim/simulator.h"
#include "sim/speculation.h"

namespace servelab {

// What a driver calls with the scheduler and every plan before executing it (see below).
using StepHook = std::function<void(const Scheduler& scheduler, const StepPlan& plan)>;

struct RunOptions {
  std::string out_dir;      // empty: out/<experiment name>
  bool progress = false;    // progress line on stderr (callers pass isatty(stderr))
  bool write_files = true;  // false: compute the summary only (benchmarks, compare)
  // Called with the scheduler and every plan after schedule() formed it and before the backend
  // executes it (core/hooked_backend.h); an exception from it stops the run. Empty: no hook and
  // no cost (`sim run`). In a cluster run it sees each replica's scheduler and plans. The Python
  // module checks the scheduler's invariants here while a Python policy is active.
  StepHook before_step;
};

// Throws ConfigError for bad input and I/O failures (exit code 2 in the commands), Interrupted on
// SIGINT/SIGTERM. Refuses (ConfigError) to write into an existing directory that holds files
// other than a previous run's outputs, so nothing a user put there is overwritten. The run is
// written to a temporary sibling folder (.NAME.tmp-PID) that replaces the run folder only when
// the run completed: on any error or interrupt the previous folder (if any) is left as it was.
RunOutput run_simulation(const ExperimentConfig& config, const RunOptions& options);

// run_simulation for an experiment with a `cluster:` section (sim/cluster_run.cc): every pool's
// replicas, routers, KV transfers; the run folder gains the replica columns and summary.json
// its `cluster` object (docs/metrics.md).
RunOutput run_cluster_simulation(const ExperimentConfig& config, const RunOptions& options);

// The KV capacity of one replica of `model` on `hardware` split over `parallel`'s GPUs (one by
// default) under the experiment's serving settings. Throws ConfigError for more than 2^30
// blocks, a max_model_len beyond the model's, a model that does not fit, or a calibrated cost
// model with a `parallel:` section.
KvCapacity kv_capacity_for(const ExperimentConfig& config, const ModelConfig& model,
                           const HardwareConfig& hardware, const ParallelConfig& parallel = {});
// With serving.lora: `backend` keeps vLLM's max_loras slots and charges each adapter load (an
// adapter a step needs that is in no slot) at `roofline`'s lora_load_seconds. Nothing otherwise.
void set_lora_loads(const ExperimentConfig& config, const RooflineCostModel& roofline,
                    SimBackend& backend);
// The progress line `sim run` prints on stderr (at most about once per second).
std::function<void(std::int64_t arrivals, TimeNs now)> progress_printer();

// The simulator's speculative decoding for `config` (serving.speculative_config), or null when
// it is off. Throws ConfigError (naming the key) when the simulator lacks what it needs: an
// acceptance_rate, or a draft model the catalogue knows. `seed` seeds the acceptance draws
// (the experiment seed for one replica; a cluster run derives one per replica).
std::unique_ptr<SimSpeculation> make_sim_speculation(
    const ExperimentConfig& config, const RooflineCostModel& target, const HardwareConfig& hardware,
    const ParallelConfig& parallel, const std::string& catalog, std::uint64_t seed);

// The calibrated cost model the experiment asks for (cost_model.type calibrated), or null for
// the roofline. Throws ConfigError when the profile was calibrated for another model, when the
// model's weights are quantized (the profile measured unquantized ones) or when its KV cache
// holds another number of bytes per token than the profile's block_bytes (another KV dtype). A CPU
// calibration whose `machine:` names another CPU than this host's prints one warning line on
// stderr (once per file and process; serving/machine.h); a CUDA calibration never does here.
std::unique_ptr<const CalibratedCostModel> make_calibrated_cost_model(
    const ExperimentConfig& config, const ModelConfig& model);

}  // namespace servelab
