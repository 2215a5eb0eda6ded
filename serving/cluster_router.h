// make_cluster_router(): a cluster's router, built from the experiment's `cluster.router` (or
// `cluster.decode_router`) through the policy registry, the same way by both drivers (the
// simulator's cluster run and the engine's), so a router exists in one implementation only.
#pragma once

#include <cstdint>
#include <memory>

#include "core/router.h"
#include "serving/experiment.h"

namespace servelab {

// Which decisions a router makes: arrivals over the unified and prefill replicas, or prefilled
// requests over the decode replicas (P/D). Each stage's router has its own seed, split from the
// experiment seed ("router", "router-decode").
enum class RouterStage { kArrival, kDecode };

// The router of `stage` for `num_candidates` replicas (>= 1): the kArrival stage builds
// cluster.router, kDecode cluster.decode_router when set, else cluster.router. Throws
// ConfigError (naming the key) for an unknown plugin or a bad parameter.
std::unique_ptr<Router> make_cluster_router(const ExperimentConfig& config, RouterStage stage,
                                            std::int32_t num_candidates);

}  // namespace servelab
