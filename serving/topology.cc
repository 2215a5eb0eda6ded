#include "serving/topology.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/dijkstra_shortest_paths.hpp>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <utility>

#include "serving/config_node.h"

namespace servelab {

namespace {

struct EdgeProps {
  std::int32_t link = 0;
};
using BoostGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS,
                                         boost::no_property, EdgeProps>;
using Vertex = boost::graph_traits<BoostGraph>::vertex_descriptor;
using Edge = boost::graph_traits<BoostGraph>::edge_descriptor;

// What a path adds up to, in the order routes are compared: latency, then hops, then the
// widest bottleneck.
struct PathCost {
  TimeNs latency = 0;
  std::int32_t hops = 0;
  double bottleneck = std::numeric_limits<double>::infinity();
};
struct PathCostLess {
  bool operator()(const PathCost& x, const PathCost& y) const {
    if (x.latency != y.latency) return x.latency < y.latency;
    if (x.hops != y.hops) return x.hops < y.hops;
    return x.bottleneck > y.bottleneck;
  }
};
struct PathCostCombine {
  const std::vector<TopologyLink>* links;
  PathCost operator()(const PathCost& d, std::int32_t link) const {
    if (d.latency == std::numeric_limits<TimeNs>::max()) return d;
    const TopologyLink& l = (*links)[link];
    return {d.latency + l.latency_ns, d.hops + 1, std::min(d.bottleneck, l.bandwidth)};
  }
};

// Remembers the edge that last improved each vertex (parallel links make the predecessor
// vertex alone ambiguous).
class EdgeRecorder : public boost::default_dijkstra_visitor {
 public:
  explicit EdgeRecorder(std::vector<Edge>* pred) : pred_(pred) {}
  void edge_relaxed(Edge e, const BoostGraph& g) const { (*pred_)[boost::target(e, g)] = e; }

 private:
  std::vector<Edge>* pred_;
};

std::string gbps_text(double bandwidth) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g GB/s", bandwidth / 1e9);
  return buf;
}

std::string us_text(TimeNs ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g us", static_cast<double>(ns) / 1e3);
  return buf;
}

}  // namespace

struct Topology::Graph {
  BoostGraph g;
  std::vector<std::string> node_names;
  std::vector<std::string> names;
  std::vector<std::int32_t> gpu_node;
  std::vector<TopologyLink> links;
};

// ---------------------------------------------------------------------------------------------
// TopologyBuilder

std::int32_t TopologyBuilder::add_node(std::string name) {
  if (std::find(node_names_.begin(), node_names_.end(), name) != node_names_.end()) {
    throw ConfigError("topology: two nodes are named '" + name + "'");
  }
  node_names_.push_back(std::move(name));
  return static_cast<std::int32_t>(node_names_.size()) - 1;
}

GpuId TopologyBuilder::add_gpu(std::int32_t node, std::string name, std::string location) {
  if (node < 0 || node >= static_cast<std::int32_t>(node_names_.size())) {
    throw ConfigError("topology: GPU '" + name + "' in a node that does not exist");
  }
  if (names_.size() != gpu_node_.size()) {
    throw ConfigError("topology: GPU '" + name + "' declared after a switch");
  }
  if (find(name) >= 0) throw ConfigError("topology: two GPUs or switches are named '" + name + "'");
  names_.push_back(std::move(name));
  gpu_node_.push_back(node);
  gpu_location_.push_back(std::move(location));
  return static_cast<GpuId>(gpu_node_.size()) - 1;
}

std::int32_t TopologyBuilder::add_switch(std::string name) {
  if (find(name) >= 0) throw ConfigError("topology: two GPUs or switches are named '" + name + "'");
  names_.push_back(std::move(name));
  return static_cast<std::int32_t>(names_.size()) - 1;
}

std::int32_t TopologyBuilder::add_link(std::int32_t a, std::int32_t b, LinkKind kind,
                                       double bandwidth, TimeNs latency_ns, std::string location) {
  const std::string where = location.empty() ? "topology" : location;
  const std::int32_t n = num_vertices();
  if (a < 0 || a >= n || b < 0 || b >= n) {
    throw ConfigError(where + ": a link to a vertex that does not exist");
  }
  if (a == b) throw ConfigError(where + ": a link from '" + names_[a] + "' to itself");
  if (!(bandwidth > 0) || !std::isfinite(bandwidth)) {
    throw ConfigError(where + ": link bandwidth must be positive, got " + gbps_text(bandwidth));
  }
  if (latency_ns < 0) throw ConfigError(where + ": link latency must not be negative");
  links_.push_back({a, b, kind, bandwidth, latency_ns, std::move(location)});
  return static_cast<std::int32_t>(links_.size()) - 1;
}

std::int32_t TopologyBuilder::find(std::string_view name) const {
  for (std::size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return static_cast<std::int32_t>(i);
  }
  return -1;
}

// ---------------------------------------------------------------------------------------------
// Topology

Topology::Topology(TopologyBuilder b) {
  auto graph = std::make_shared<Graph>();
  if (b.gpu_node_.empty()) throw ConfigError("topology: no GPU");
  graph->g = BoostGraph(b.names_.size());
  for (std::size_t i = 0; i < b.links_.size(); ++i) {
    boost::add_edge(static_cast<Vertex>(b.links_[i].a), static_cast<Vertex>(b.links_[i].b),
                    EdgeProps{static_cast<std::int32_t>(i)}, graph->g);
  }
  // Every GPU must reach every other: in an undirected graph, reaching GPU 0 is enough.
  std::vector<boost::default_color_type> color(b.names_.size());
  boost::breadth_first_search(graph->g, 0,
                              boost::color_map(boost::make_iterator_property_map(
                                  color.begin(), boost::get(boost::vertex_index, graph->g))));
  for (std::size_t gpu = 1; gpu < b.gpu_node_.size(); ++gpu) {
    if (color[gpu] == boost::white_color) {
      const std::string& where = b.gpu_location_[gpu];
      throw ConfigError((where.empty() ? std::string("topology") : where) + ": GPU '" +
                        b.names_[gpu] + "' has no path to GPU '" + b.names_[0] +
                        "': every GPU must reach every other (add a link)");
    }
  }
  graph->node_names = std::move(b.node_names_);
  graph->names = std::move(b.names_);
  graph->gpu_node = std::move(b.gpu_node_);
  graph->links = std::move(b.links_);
  graph_ = std::move(graph);
}

std::int32_t Topology::num_gpus() const {
  return static_cast<std::int32_t>(graph_->gpu_node.size());
}
std::int32_t Topology::num_nodes() const {
  return static_cast<std::int32_t>(graph_->node_names.size());
}
std::int32_t Topology::num_vertices() const {
  return static_cast<std::int32_t>(graph_->names.size());
}
std::int32_t Topology::num_links() const { return static_cast<std::int32_t>(graph_->links.size()); }
std::int32_t Topology::node_of(GpuId gpu) const { return graph_->gpu_node.at(gpu); }

std::vector<GpuId> Topology::gpus_of_node(std::int32_t node) const {
  std::vector<GpuId> out;
  for (GpuId g = 0; g < num_gpus(); ++g) {
    if (graph_->gpu_node[g] == node) out.push_back(g);
  }
  return out;
}

std::int32_t Topology::max_gpus_per_node() const {
  std::vector<std::int32_t> count(graph_->node_names.size(), 0);
  for (std::int32_t n : graph_->gpu_node) ++count[n];
  return count.empty() ? 0 : *std::max_element(count.begin(), count.end());
}

const std::string& Topology::vertex_name(std::int32_t vertex) const {
  return graph_->names.at(vertex);
}
const std::string& Topology::node_name(std::int32_t node) const {
  return graph_->node_names.at(node);
}
const TopologyLink& Topology::link(std::int32_t index) const { return graph_->links.at(index); }
double Topology::channel_bandwidth(std::int32_t channel) const {
  return graph_->links.at(channel / 2).bandwidth;
}

Route Topology::route(GpuId from, GpuId to) const {
  Route r;
  if (from == to) return r;
  const BoostGraph& g = graph_->g;
  const std::size_t n = boost::num_vertices(g);
  std::vector<PathCost> dist(n);
  std::vector<Vertex> pred(n);
  std::vector<Edge> pred_edge(n);
  const auto index = boost::get(boost::vertex_index, g);
  const PathCost inf{std::numeric_limits<TimeNs>::max(), std::numeric_limits<std::int32_t>::max(),
                     0.0};
  boost::dijkstra_shortest_paths(
      g, static_cast<Vertex>(from),
      boost::predecessor_map(boost::make_iterator_property_map(pred.begin(), index))
          .distance_map(boost::make_iterator_property_map(dist.begin(), index))
          .weight_map(boost::get(&EdgeProps::link, g))
          .distance_compare(PathCostLess{})
          .distance_combine(PathCostCombine{&graph_->links})
          .distance_inf(inf)
          .distance_zero(PathCost{})
          .visitor(EdgeRecorder(&pred_edge)));
  // The invariant says every GPU is reachable.
  for (Vertex v = static_cast<Vertex>(to); v != static_cast<Vertex>(from);) {
    const Edge e = pred_edge[v];
    const Vertex u = boost::source(e, g) == v ? boost::target(e, g) : boost::source(e, g);
    const std::int32_t link = g[e].link;
    const bool forward = graph_->links[link].a == static_cast<std::int32_t>(u);
    r.channels.push_back(2 * link + (forward ? 0 : 1));
    v = u;
  }
  std::reverse(r.channels.begin(), r.channels.end());
  r.latency_ns = dist[to].latency;
  r.bottleneck = dist[to].bottleneck;
  return r;
}

std::string Topology::describe() const {
  std::string out;
  for (const TopologyLink& l : graph_->links) {
    out += graph_->names[l.a] + " <-> " + graph_->names[l.b] + " " +
           std::string(to_string(l.kind)) + " " + gbps_text(l.bandwidth) + " " +
           us_text(l.latency_ns) + "\n";
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Builders

namespace {

// Bandwidth and latency of `kind`: the override when given, else the hardware's port.
LinkSpec port_or(LinkKind kind, double bandwidth, double latency_s, const InterconnectSpec& ports,
                 const std::string& hardware_name, const std::string& where) {
  LinkSpec s = ports[kind];
  s.bandwidth *= ports.efficiency;
  if (bandwidth > 0) {
    s.bandwidth = bandwidth;
  } else if (!(s.bandwidth > 0)) {
    throw ConfigError(where + ": hardware '" + hardware_name + "' states no " +
                      std::string(to_string(kind)) + " bandwidth (interconnect." +
                      std::string(to_string(kind)) + "_gbps in its catalogue entry); give the " +
                      "link's bandwidth");
  }
  if (latency_s >= 0) s.latency_s = latency_s;
  return s;
}

}  // namespace

Topology build_uniform_topology(const UniformTopologySpec& spec, const InterconnectSpec& ports,
                                const std::string& hardware_name) {
  if (spec.nodes < 1 || spec.gpus_per_node < 1) {
    throw ConfigError("topology: nodes and gpus_per_node must be at least 1");
  }
  const LinkSpec intra = port_or(spec.intra, spec.intra_bandwidth, spec.intra_latency_s, ports,
                                 hardware_name, "topology (intra)");
  LinkSpec inter;
  if (spec.nodes > 1) {
    inter = port_or(spec.inter, spec.inter_bandwidth, spec.inter_latency_s, ports, hardware_name,
                    "topology (inter)");
  }
  TopologyBuilder b;
  for (std::int32_t n = 0; n < spec.nodes; ++n) {
    const std::int32_t node = b.add_node("node" + std::to_string(n));
    for (std::int32_t j = 0; j < spec.gpus_per_node; ++j) {
      b.add_gpu(node, "node" + std::to_string(n) + ".gpu" + std::to_string(j));
    }
  }
  for (std::int32_t n = 0; n < spec.nodes; ++n) {
    const std::int32_t sw = b.add_switch("node" + std::to_string(n) + ".switch");
    for (std::int32_t j = 0; j < spec.gpus_per_node; ++j) {
      b.add_link(n * spec.gpus_per_node + j, sw, spec.intra, intra.bandwidth,
                 seconds_to_ns(intra.latency_s));
    }
  }
  if (spec.nodes > 1) {
    const std::int32_t net = b.add_switch("network");
    for (GpuId g = 0; g < spec.nodes * spec.gpus_per_node; ++g) {
      b.add_link(g, net, spec.inter, inter.bandwidth, seconds_to_ns(inter.latency_s));
    }
  }
  return Topology(std::move(b));
}

namespace {

LinkKind parse_kind(const ConfigNode& n) {
  return *link_kind_from_string(n.as_choice({"nvlink", "pcie", "infiniband", "ethernet"}));
}

// An optional positive bandwidth in GB/s (0 when absent) and latency in us (-1 when absent).
double parse_gbps(const ConfigNode& parent, std::string_view key) {
  const auto n = parent.find(key);
  if (!n) return 0;
  const double v = n->as_double();
  // Slower links would take transfers past the simulator's clock (as kv_transfer.bandwidth_gb_s).
  if (!(v >= 1e-3) || !std::isfinite(v) || v > 1e6) n->fail("a bandwidth in GB/s in [0.001, 1e6]");
  return v * 1e9;
}
double parse_latency(const ConfigNode& parent, std::string_view key) {
  const auto n = parent.find(key);
  if (!n) return -1;
  return n->as_double(0.0, 1e6) * 1e-6;
}

Topology parse_compact(const ConfigNode& n, const InterconnectSpec& ports,
                       const std::string& hardware_name) {
  n.allow_keys({"nodes", "gpus_per_node", "intra", "inter", "intra_gbps", "intra_latency_us",
                "inter_gbps", "inter_latency_us"});
  UniformTopologySpec spec;
  spec.nodes = static_cast<std::int32_t>(n.at("nodes").as_int(1, 4096));
  spec.gpus_per_node = static_cast<std::int32_t>(
      n.has("gpus_per_node") ? n.at("gpus_per_node").as_int(1, 1024)
                             : (ports.gpus_per_node > 0 ? ports.gpus_per_node
                                                        : n.at("gpus_per_node").as_int(1, 1024)));
  // Default kinds: NVLink inside a node when the GPU has it, else PCIe; InfiniBand between.
  spec.intra = n.has("intra")                           ? parse_kind(n.at("intra"))
               : ports[LinkKind::kNvlink].bandwidth > 0 ? LinkKind::kNvlink
                                                        : LinkKind::kPcie;
  spec.inter = n.has("inter") ? parse_kind(n.at("inter")) : LinkKind::kInfiniband;
  spec.intra_bandwidth = parse_gbps(n, "intra_gbps");
  spec.intra_latency_s = parse_latency(n, "intra_latency_us");
  spec.inter_bandwidth = parse_gbps(n, "inter_gbps");
  spec.inter_latency_s = parse_latency(n, "inter_latency_us");
  // Name the key the missing figure belongs to.
  auto check_port = [&](LinkKind kind, double override, const char* key) {
    if (override > 0 || ports[kind].bandwidth > 0) return;
    const ConfigNode at = n.has(key) ? n.at(key) : n;
    at.fail_message("hardware '" + hardware_name + "' states no " + std::string(to_string(kind)) +
                    " bandwidth (interconnect." + std::string(to_string(kind)) +
                    "_gbps in its catalogue entry); choose another kind or give " + key + "_gbps");
  };
  check_port(spec.intra, spec.intra_bandwidth, "intra");
  if (spec.nodes > 1) check_port(spec.inter, spec.inter_bandwidth, "inter");
  return build_uniform_topology(spec, ports, hardware_name);
}

Topology parse_explicit(const ConfigNode& n, const InterconnectSpec& ports,
                        const std::string& hardware_name) {
  n.allow_keys({"nodes", "switches", "links"});
  TopologyBuilder b;
  // Node name -> its GPUs, for "node.*" endpoints.
  std::map<std::string, std::vector<GpuId>, std::less<>> node_gpus;
  const ConfigNode nodes = n.at("nodes");
  if (nodes.elements().empty()) nodes.fail("at least one node");
  for (const ConfigNode& e : nodes.elements()) {
    e.allow_keys({"name", "gpus"});
    const ConfigNode name_node = e.at("name");
    const std::string name = name_node.as_string();
    if (name.empty() || name.find('.') != std::string::npos ||
        name.find('*') != std::string::npos) {
      name_node.fail("a node name without '.' or '*'");
    }
    if (node_gpus.count(name)) name_node.fail_message("a second node named '" + name + "'");
    const std::int32_t node = b.add_node(name);
    const auto gpus = e.at("gpus").as_int(1, 1024);
    for (std::int64_t j = 0; j < gpus; ++j) {
      node_gpus[name].push_back(b.add_gpu(node, name + ".gpu" + std::to_string(j), e.location()));
    }
  }
  if (auto sw = n.find("switches")) {
    for (const ConfigNode& s : sw->elements()) {
      const std::string name = s.as_string();
      if (name.empty() || name.find('*') != std::string::npos) s.fail("a switch name without '*'");
      if (b.find(name) >= 0) s.fail_message("'" + name + "' names a GPU or switch already");
      b.add_switch(name);
    }
  }
  const ConfigNode links = n.at("links");
  for (const ConfigNode& l : links.elements()) {
    l.allow_keys({"endpoints", "kind", "gbps", "latency_us"});
    const ConfigNode ends = l.at("endpoints");
    const std::vector<ConfigNode> two = ends.elements();
    if (two.size() != 2) ends.fail("a list of two endpoints");
    const LinkKind kind = parse_kind(l.at("kind"));
    const double gbps = parse_gbps(l, "gbps");
    if (!(gbps > 0) && !(ports[kind].bandwidth > 0)) {
      l.at("kind").fail_message("hardware '" + hardware_name + "' states no " +
                                std::string(to_string(kind)) + " bandwidth (interconnect." +
                                std::string(to_string(kind)) +
                                "_gbps in its catalogue entry); give the link's gbps");
    }
    const LinkSpec spec =
        port_or(kind, gbps, parse_latency(l, "latency_us"), ports, hardware_name, l.location());
    // Each endpoint resolves to one vertex, or to every GPU of a node ("node.*").
    std::vector<std::int32_t> side[2];
    for (int i = 0; i < 2; ++i) {
      const std::string name = two[i].as_string();
      if (name.size() > 2 && name.compare(name.size() - 2, 2, ".*") == 0) {
        const auto it = node_gpus.find(std::string_view(name).substr(0, name.size() - 2));
        if (it == node_gpus.end()) {
          two[i].fail("NODE.* with a declared node, or a GPU (NODE.gpuJ) or switch name");
        }
        side[i] = it->second;
      } else {
        const std::int32_t v = b.find(name);
        if (v < 0) two[i].fail("a declared GPU (NODE.gpuJ), switch, or NODE.*");
        side[i] = {v};
      }
    }
    if (side[0].size() > 1 && side[1].size() > 1) {
      ends.fail_message("at most one endpoint may be NODE.* (it links each GPU to the other end)");
    }
    for (std::int32_t x : side[0]) {
      for (std::int32_t y : side[1]) {
        if (x == y) ends.fail_message("a link from '" + two[0].as_string() + "' to itself");
        b.add_link(x, y, kind, spec.bandwidth, seconds_to_ns(spec.latency_s), l.location());
      }
    }
  }
  return Topology(std::move(b));
}

}  // namespace

Topology parse_topology(const ConfigNode& node, const InterconnectSpec& ports,
                        const std::string& hardware_name) {
  if (!node.is_map()) {
    node.fail(
        "a mapping: {nodes: N, gpus_per_node: G, intra: KIND, inter: KIND} or {nodes: [...], "
        "switches: [...], links: [...]}");
  }
  const ConfigNode nodes = node.at("nodes");
  if (nodes.is_sequence()) return parse_explicit(node, ports, hardware_name);
  return parse_compact(node, ports, hardware_name);
}

}  // namespace servelab
