// run_engine_cluster(): `engine run` of an experiment with a `cluster:` section of unified pools,
// on CPU replicas (run_engine calls it when the experiment has the section).
//
// Each replica is a Replica (scheduler, KV pool) over its own CpuExecutor; the executors share
// one read-only copy of the weights (load_engine_cluster). Each replica is driven by its own
// thread running the engine's wall-clock loop (engine/engine_loop.h); the caller's thread is the
// routing thread. It replays the arrivals in wall-clock time as run_engine does (through the
// front end when serving.frontend is enabled) and routes each request, in arrival order, with
// the Router plugin the simulator uses (serving/cluster_router.h: the same registry, parameters
// and seed), into that replica's inbox; the replica's thread moves its inbox into its scheduler
// before forming each plan. The router's view of a replica (core/router.h ReplicaLoad) is what
// its thread published at its last admission or step end (waiting and swapped, running, KV blocks
// in use) plus the requests in its inbox.
//
// One lock (the run's) serialises routing, each replica's admission and publication, and every
// report to the shared observers (Recorder, token capture, a dependent workload's feedback);
// plans are formed, executed and completed outside it, so replicas compute in parallel.
//
// Determinism: the routing thread routes every request that has arrived before it starts the
// replica threads, so when all arrivals are at the first arrival's time, every routing decision
// sees only the inboxes (as the simulator's see only the routed requests at that instant), and
// each replica's schedule (its schedule.csv rows) is that of the simulated cluster: it depends on
// no thread's timing. Otherwise routing sees the replicas as they are when a request arrives,
// which depends on measured step times, as in a real cluster. steps.csv / schedule.csv rows are
// written as steps end, interleaved across replicas; each replica's rows keep its step order.
//
// Outputs: the run folder of a simulated cluster (serving/cluster_summary.h: summary.json's
// `cluster` object with per-pool and per-replica counters, a `replica` column in steps.csv and
// schedule.csv, `route` rows in events.csv when outputs.record_events), with backend
// engine-cpu. KV capacity (serving.num_gpu_blocks or --kv-memory-gb) is per replica.
#pragma once

#include "engine/engine_driver.h"
#include "serving/experiment.h"
#include "serving/run_folder.h"

namespace servelab {

// Throws as run_engine does (ConfigError from load_engine_cluster for what the engine cannot
// run); an exception in any replica's thread stops the others and is rethrown here.
// REQUIRES: config.cluster.set.
RunOutput run_engine_cluster(const ExperimentConfig& config, const EngineOptions& options);

}  // namespace servelab
