// Collectives over a topology: how long a ring all-reduce, a ring all-gather or a point-to-point
// send takes for a group of GPUs, as an affine function of the bytes.
//
// Ring algorithms (as NCCL's ring): the group, in the order given, forms a ring; in each of
// its steps every GPU sends one n-th of the data to the next one, all at once. A ring step is
// as slow as its slowest edge: an edge's route shares each channel it crosses with the other
// ring edges crossing it (max-min fair share of a channel is capacity / edges on it), so
//   B     = min over ring edges of (min over its channels of capacity / ring edges on them)
//   alpha = max over ring edges of the route's latency
//   all-reduce(S) = 2 (n - 1) alpha + 2 (n - 1) / n * S / B    (reduce-scatter + all-gather)
//   all-gather(S) =   (n - 1) alpha +   (n - 1) / n * S / B    (S: the gathered output)
//   send(S)       = latency + S / bottleneck                   (one route)
// A group of one GPU costs nothing. Sources and the check against Vidur's NCCL measurements:
// docs/cost-model.md ("Collectives"), docs/validation.md.
#pragma once

#include <vector>

#include "serving/topology.h"

namespace servelab {

// latency_s + bytes * s_per_byte.
struct CollectiveCost {
  double latency_s = 0;
  double s_per_byte = 0;

  double seconds(double bytes) const { return bytes > 0 ? latency_s + bytes * s_per_byte : 0; }
  bool free() const { return latency_s == 0 && s_per_byte == 0; }
};

// REQUIRES: `group` holds distinct valid GpuIds (ConfigError otherwise).
CollectiveCost ring_all_reduce(const Topology& topology, const std::vector<GpuId>& group);
CollectiveCost ring_all_gather(const Topology& topology, const std::vector<GpuId>& group);
// One transfer from `from` to `to` alone on its route.
CollectiveCost point_to_point(const Topology& topology, GpuId from, GpuId to);

// The ring's per-step latency (alpha) and bandwidth (B) as defined above.
struct RingTerms {
  double alpha_s = 0;
  double bandwidth = 0;  // B/s; 0 for a group of one
};
RingTerms ring_terms(const Topology& topology, const std::vector<GpuId>& group);

}  // namespace servelab
