// Topology: GPUs in nodes, switches, and the links between them, held as a Boost.Graph.
//
// Vertices are GPUs and switches (an NVSwitch fabric, a PCIe switch, a network switch); edges
// are full-duplex links of one kind (serving/interconnect.h) with a bandwidth in each direction
// and a latency per hop. A link carries two independent channels, one per direction: channel
// 2 * link is a -> b, channel 2 * link + 1 is b -> a. Transfers and collectives are priced
// over routes (sim/link_transfers.h, serving/collectives.h).
//
// A route between two GPUs is the path of least total latency; among equal latencies, the one
// of fewest hops; then the one of widest bottleneck; then the first Dijkstra's algorithm settles,
// which depends only on the order in which GPUs, switches and links were declared: the same
// description always gives the same routes.
//
// Invariants: every GPU reaches every other GPU; bandwidths are positive and finite; latencies
// are non-negative integer nanoseconds; names are unique. The object is immutable after
// construction, cheap to copy (the graph is shared) and safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/time.h"
#include "serving/interconnect.h"

namespace servelab {

class ConfigNode;

using GpuId = std::int32_t;  // 0 .. num_gpus() - 1, in declaration order

struct TopologyLink {
  std::int32_t a = 0, b = 0;  // vertex ids (GPUs first: a GPU's vertex id is its GpuId)
  LinkKind kind = LinkKind::kNvlink;
  double bandwidth = 0;  // B/s in each direction
  TimeNs latency_ns = 0;
  std::string location;  // where it was declared ("" when built in code)
};

// A path from one GPU to another: the channels it crosses in order, and what they add up to.
struct Route {
  std::vector<std::int32_t> channels;  // 2 * link + direction (0: a -> b, 1: b -> a)
  TimeNs latency_ns = 0;               // sum over hops
  double bottleneck = 0;               // least bandwidth along the path, B/s (0 when from == to)
  std::int32_t hops() const { return static_cast<std::int32_t>(channels.size()); }
};

// Builds a Topology: declare nodes, their GPUs and switches, then links, then build().
class TopologyBuilder {
 public:
  // Returns the node's index. Names must be unique among nodes.
  std::int32_t add_node(std::string name);
  // A GPU in `node`; returns its GpuId. GPUs must all be added before any switch. `location`
  // names where it was declared, for errors.
  GpuId add_gpu(std::int32_t node, std::string name, std::string location = "");
  // A switch (no GPU); returns its vertex id.
  std::int32_t add_switch(std::string name);
  // A full-duplex link; returns its index. `location` names where it was declared, for errors.
  std::int32_t add_link(std::int32_t a, std::int32_t b, LinkKind kind, double bandwidth,
                        TimeNs latency_ns, std::string location = "");
  std::int32_t num_vertices() const { return static_cast<std::int32_t>(names_.size()); }
  // Vertex id of a GPU or switch by name; -1 when there is none.
  std::int32_t find(std::string_view name) const;

 private:
  friend class Topology;
  std::vector<std::string> node_names_;
  std::vector<std::string> names_;      // by vertex id
  std::vector<std::int32_t> gpu_node_;  // by GpuId
  std::vector<std::string> gpu_location_;
  std::vector<TopologyLink> links_;
};

class Topology {
 public:
  // Throws ConfigError when the invariants above do not hold (naming the GPU that cannot reach
  // GPU 0, the link with a bad bandwidth, the duplicate name), or when there is no GPU.
  explicit Topology(TopologyBuilder builder);

  std::int32_t num_gpus() const;
  std::int32_t num_nodes() const;
  std::int32_t num_vertices() const;
  std::int32_t num_links() const;
  std::int32_t node_of(GpuId gpu) const;
  // GPUs of `node`, in declaration order.
  std::vector<GpuId> gpus_of_node(std::int32_t node) const;
  // The most GPUs any node holds.
  std::int32_t max_gpus_per_node() const;
  const std::string& vertex_name(std::int32_t vertex) const;
  const std::string& node_name(std::int32_t node) const;
  const TopologyLink& link(std::int32_t index) const;
  // Bandwidth of a channel (2 * link + direction), B/s.
  double channel_bandwidth(std::int32_t channel) const;

  // The route from `from` to `to` (empty, latency 0, when from == to). O((V + E) log V).
  // REQUIRES: both are valid GpuIds.
  Route route(GpuId from, GpuId to) const;
  double bottleneck_bandwidth(GpuId from, GpuId to) const { return route(from, to).bottleneck; }
  TimeNs latency_ns(GpuId from, GpuId to) const { return route(from, to).latency_ns; }

  // One line per link ("a.gpu0 <-> a.switch nvlink 450 GB/s 1 us"), for logs and tests.
  std::string describe() const;

 private:
  struct Graph;
  std::shared_ptr<const Graph> graph_;
};

// A topology of `nodes` identical nodes of `gpus_per_node` GPUs each: every GPU has an `intra`
// link to its node's switch ("nodeK.switch") and, when nodes > 1, an `inter` link to one network
// switch ("network") (one NIC per GPU, as on HGX systems). Bandwidth and latency of each kind
// come from `ports` (bandwidth * ports.efficiency) unless the overrides (> 0 bandwidth, >= 0
// latency) are given; an override is the link's bandwidth as it is. GPU names are
// "nodeK.gpuJ". Throws ConfigError when a kind has no bandwidth in `ports`.
struct UniformTopologySpec {
  std::int32_t nodes = 1;
  std::int32_t gpus_per_node = 1;
  LinkKind intra = LinkKind::kNvlink;
  LinkKind inter = LinkKind::kInfiniband;
  double intra_bandwidth = 0, inter_bandwidth = 0;    // B/s; 0: from `ports`
  double intra_latency_s = -1, inter_latency_s = -1;  // < 0: from `ports`
};
Topology build_uniform_topology(const UniformTopologySpec& spec, const InterconnectSpec& ports,
                                const std::string& hardware_name);

// A `topology:` section, in one of two forms (reference: docs/experiments.md):
//   compact:  {nodes: 2, gpus_per_node: 8, intra: nvlink, inter: infiniband,
//              intra_gbps, intra_latency_us, inter_gbps, inter_latency_us (optional)}
//   explicit: {nodes: [{name: a, gpus: 4}, ...], switches: [s, ...],
//              links: [{endpoints: [X, Y], kind: nvlink, gbps: 450, latency_us: 1}, ...]}
// where an endpoint is a GPU ("a.gpu3"), a switch, or "a.*" (every GPU of node a, one link each).
// Missing bandwidths and latencies come from `ports` (the hardware catalogue's interconnect;
// bandwidth * efficiency); a given gbps is used as it is.
// Errors are ConfigErrors with FILE:LINE:COL: an unknown link kind, an endpoint that names
// nothing, a non-positive bandwidth, a link of a kind the hardware lacks and no gbps, a GPU
// with no path to the others.
Topology parse_topology(const ConfigNode& node, const InterconnectSpec& ports,
                        const std::string& hardware_name);

}  // namespace servelab
