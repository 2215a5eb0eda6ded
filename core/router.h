// Router: which replica of a cluster gets a request (a policy; the plugins are in policies/,
// `sim policies` lists them under `router`).
//
// Contract. The driver asks route() once per decision with the request's spec and a read-only
// view of the candidate replicas' load, taken at the decision's instant; the router answers an
// index into that view. A router sees nothing else: no scheduler, no KV manager, no clock but
// what the view says. It may keep its own state between calls (a round-robin position, an
// approximate per-replica prefix index, session bindings), updated only from what route() saw
// and answered, so a decision depends only on the sequence of calls. Determinism: the same calls
// give the same answers; randomness only from the RouterContext's seed (core/rng.h); no decision
// iterates an unordered container or depends on an address. Ties go to the lowest index.
//
// With prefill/decode disaggregation the driver holds one router per stage (built from the same
// plugin): the first routes arrivals over the prefill (or unified) replicas, the second routes
// each prefilled request over the decode replicas, so their states never mix.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "core/request.h"

namespace servelab {

// One candidate replica's state at the decision's instant.
struct ReplicaLoad {
  std::uint32_t replica = 0;     // the replica's index in the cluster (stable over the run)
  std::int32_t outstanding = 0;  // requests routed to it and not finished there (including
                                 // those still travelling to it: a KV transfer in flight)
  std::int32_t waiting = 0;      // in its scheduler's waiting queue (and swapped)
  std::int32_t running = 0;      // admitted, holding blocks
  std::int32_t kv_blocks_used = 0;
  std::int32_t kv_blocks_usable = 1;  // >= 1
  double kv_usage() const {
    return static_cast<double>(kv_blocks_used) / static_cast<double>(kv_blocks_usable);
  }
};

// What a router is built for.
struct RouterContext {
  std::int32_t num_candidates = 1;  // size of every view it will be shown (>= 1)
  std::int32_t block_size = 16;     // the replicas' KV block size (for prefix hashing)
  std::uint64_t seed = 0;           // the experiment seed, already split for this router
};

class Router {
 public:
  virtual ~Router() = default;
  virtual std::string_view name() const = 0;
  // The chosen candidate: an index into `candidates`, which has RouterContext::num_candidates
  // entries in cluster order. REQUIRES: !candidates.empty().
  virtual std::size_t route(const RequestSpec& spec, std::span<const ReplicaLoad> candidates) = 0;
};

using RouterMaker = std::function<std::unique_ptr<Router>(const RouterContext&)>;

}  // namespace servelab
