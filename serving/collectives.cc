#include "serving/collectives.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "core/config_error.h"

namespace servelab {

RingTerms ring_terms(const Topology& topology, const std::vector<GpuId>& group) {
  std::set<GpuId> seen;
  for (GpuId g : group) {
    if (g < 0 || g >= topology.num_gpus() || !seen.insert(g).second) {
      throw ConfigError("collective over GPU " + std::to_string(g) +
                        ": not a distinct GPU of the topology");
    }
  }
  RingTerms t;
  const std::size_t n = group.size();
  if (n < 2) return t;
  std::vector<Route> edges;
  edges.reserve(n);
  std::map<std::int32_t, int> load;  // channel -> ring edges crossing it
  for (std::size_t i = 0; i < n; ++i) {
    edges.push_back(topology.route(group[i], group[(i + 1) % n]));
    for (std::int32_t c : edges.back().channels) ++load[c];
  }
  t.bandwidth = std::numeric_limits<double>::infinity();
  for (const Route& r : edges) {
    t.alpha_s = std::max(t.alpha_s, static_cast<double>(r.latency_ns) * 1e-9);
    for (std::int32_t c : r.channels) {
      t.bandwidth = std::min(t.bandwidth, topology.channel_bandwidth(c) / load[c]);
    }
  }
  return t;
}

CollectiveCost ring_all_reduce(const Topology& topology, const std::vector<GpuId>& group) {
  const RingTerms t = ring_terms(topology, group);
  const double n = static_cast<double>(group.size());
  if (group.size() < 2) return {};
  return {2 * (n - 1) * t.alpha_s, 2 * (n - 1) / n / t.bandwidth};
}

CollectiveCost ring_all_gather(const Topology& topology, const std::vector<GpuId>& group) {
  const RingTerms t = ring_terms(topology, group);
  const double n = static_cast<double>(group.size());
  if (group.size() < 2) return {};
  return {(n - 1) * t.alpha_s, (n - 1) / n / t.bandwidth};
}

CollectiveCost point_to_point(const Topology& topology, GpuId from, GpuId to) {
  if (from == to) return {};
  const Route r = topology.route(from, to);
  return {static_cast<double>(r.latency_ns) * 1e-9, 1.0 / r.bottleneck};
}

}  // namespace servelab
