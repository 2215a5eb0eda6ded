// Topology (serving/topology.h) and collectives over it (serving/collectives.h): routes,
// tie-breaks, the YAML forms and their errors, and ring collectives against hand-computed times.
#include "serving/topology.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serving/collectives.h"
#include "serving/config_node.h"
#include "serving/hardware_config.h"
#include "serving/model_config.h"
#include "tests/cost_fixtures.h"

namespace servelab {
namespace {

using test_util::expect_config_error;

// NVLink 450 GB/s, 1 us per hop; InfiniBand 50 GB/s, 2.5 us per hop; no Ethernet.
InterconnectSpec h100_like() {
  InterconnectSpec p;
  p.gpus_per_node = 8;
  p[LinkKind::kNvlink] = {450e9, 1e-6};
  p[LinkKind::kPcie] = {64e9, 1e-6};
  p[LinkKind::kInfiniband] = {50e9, 2.5e-6};
  return p;
}

Topology two_by_four() {
  UniformTopologySpec s;
  s.nodes = 2;
  s.gpus_per_node = 4;
  return build_uniform_topology(s, h100_like(), "test");
}

Topology parse(const std::string& yaml, const InterconnectSpec& ports = h100_like()) {
  const ConfigNode doc = ConfigNode::load_string(yaml, "topo.yaml");
  return parse_topology(doc.at("topology"), ports, "test");
}

TEST(Topology, UniformRoutesInsideAndAcrossNodes) {
  const Topology t = two_by_four();
  EXPECT_EQ(t.num_gpus(), 8);
  EXPECT_EQ(t.num_nodes(), 2);
  EXPECT_EQ(t.max_gpus_per_node(), 4);
  EXPECT_EQ(t.node_of(5), 1);
  EXPECT_EQ(t.vertex_name(5), "node1.gpu1");
  // Inside a node: GPU -> NVSwitch -> GPU, two NVLink hops.
  const Route in = t.route(0, 1);
  EXPECT_EQ(in.hops(), 2);
  EXPECT_EQ(in.latency_ns, 2000);
  EXPECT_DOUBLE_EQ(in.bottleneck, 450e9);
  // Link 0 is node0.gpu0 <-> node0.switch (forward: channel 0); link 1 is node0.gpu1 <->
  // node0.switch, crossed backward (switch -> gpu1: channel 3).
  EXPECT_EQ(in.channels, (std::vector<std::int32_t>{0, 3}));
  // Across nodes: GPU -> network switch -> GPU, two InfiniBand hops.
  const Route across = t.route(0, 4);
  EXPECT_EQ(across.hops(), 2);
  EXPECT_EQ(across.latency_ns, 5000);
  EXPECT_DOUBLE_EQ(across.bottleneck, 50e9);
  EXPECT_EQ(t.latency_ns(6, 3), 5000);
  EXPECT_DOUBLE_EQ(t.bottleneck_bandwidth(6, 7), 450e9);
  // The reverse route crosses the same links the other way.
  const Route back = t.route(1, 0);
  EXPECT_EQ(back.channels, (std::vector<std::int32_t>{2, 1}));
  EXPECT_TRUE(t.route(3, 3).channels.empty());
  EXPECT_EQ(t.route(3, 3).latency_ns, 0);
}

TEST(Topology, TieBreaksAreLatencyThenHopsThenBandwidthThenDeclarationOrder) {
  // Two two-hop paths of equal latency between g.gpu0 and g.gpu1: through s1 (100 GB/s) and s2
  // (200 GB/s); the wider one wins.
  const Topology wide = parse(R"(topology:
  nodes: [{name: g, gpus: 2}]
  switches: [s1, s2]
  links:
    - {endpoints: [g.*, s1], kind: nvlink, gbps: 100, latency_us: 1}
    - {endpoints: [g.*, s2], kind: nvlink, gbps: 200, latency_us: 1}
)");
  Route r = wide.route(0, 1);
  EXPECT_DOUBLE_EQ(r.bottleneck, 200e9);
  EXPECT_EQ(wide.vertex_name(wide.link(r.channels[0] / 2).b), "s2");
  // Equal in everything: the path declared first (s1).
  const Topology same = parse(R"(topology:
  nodes: [{name: g, gpus: 2}]
  switches: [s1, s2]
  links:
    - {endpoints: [g.*, s1], kind: nvlink, gbps: 100, latency_us: 1}
    - {endpoints: [g.*, s2], kind: nvlink, gbps: 100, latency_us: 1}
)");
  r = same.route(0, 1);
  EXPECT_EQ(same.vertex_name(same.link(r.channels[0] / 2).b), "s1");
  EXPECT_EQ(same.route(0, 1).channels, same.route(0, 1).channels);
  // Equal latency, one hop against two: the direct link, though narrower.
  const Topology direct = parse(R"(topology:
  nodes: [{name: g, gpus: 2}]
  switches: [s]
  links:
    - {endpoints: [g.*, s], kind: nvlink, gbps: 400, latency_us: 1}
    - {endpoints: [g.gpu0, g.gpu1], kind: pcie, gbps: 10, latency_us: 2}
)");
  r = direct.route(0, 1);
  EXPECT_EQ(r.hops(), 1);
  EXPECT_DOUBLE_EQ(r.bottleneck, 10e9);
  // Lower latency beats everything: a slow but short path.
  const Topology fast = parse(R"(topology:
  nodes: [{name: g, gpus: 2}]
  switches: [s]
  links:
    - {endpoints: [g.*, s], kind: nvlink, gbps: 400, latency_us: 1}
    - {endpoints: [g.gpu0, g.gpu1], kind: ethernet, gbps: 1, latency_us: 1.5}
)");
  EXPECT_EQ(fast.route(0, 1).latency_ns, 1500);
}

TEST(Topology, CompactYamlUsesTheHardwarePortsAndOverrides) {
  const Topology t =
      parse(R"(topology: {nodes: 2, gpus_per_node: 8, intra: nvlink, inter: infiniband}
)");
  EXPECT_EQ(t.num_gpus(), 16);
  EXPECT_EQ(t.num_links(), 32);  // 16 NVLink ports + 16 InfiniBand ports
  EXPECT_DOUBLE_EQ(t.bottleneck_bandwidth(0, 15), 50e9);
  // gpus_per_node and intra default to the hardware's (8, NVLink); overrides win.
  const Topology o = parse(R"(topology: {nodes: 1, intra_gbps: 100, intra_latency_us: 3}
)");
  EXPECT_EQ(o.num_gpus(), 8);
  EXPECT_DOUBLE_EQ(o.bottleneck_bandwidth(0, 7), 100e9);
  EXPECT_EQ(o.latency_ns(0, 7), 6000);
  EXPECT_EQ(o.link(0).kind, LinkKind::kNvlink);
  // A PCIe-only GPU (no NVLink port) gets PCIe inside the node.
  InterconnectSpec pcie_only = h100_like();
  pcie_only[LinkKind::kNvlink] = {};
  const Topology p = parse("topology: {nodes: 1, gpus_per_node: 4}\n", pcie_only);
  EXPECT_EQ(p.link(0).kind, LinkKind::kPcie);
  EXPECT_NE(p.describe().find("node0.gpu0 <-> node0.switch pcie 64 GB/s 1 us"), std::string::npos)
      << p.describe();
}

TEST(Topology, YamlErrorsNameFileLineAndWhatWasExpected) {
  // Unknown link kind.
  expect_config_error(
      [] {
        parse(R"(topology:
  nodes: [{name: a, gpus: 2}]
  links:
    - {endpoints: [a.gpu0, a.gpu1], kind: nvlnk}
)");
      },
      {"topo.yaml:4:", "links", "kind", "nvlink", "nvlnk"});
  // An endpoint that names nothing.
  expect_config_error(
      [] {
        parse(R"(topology:
  nodes: [{name: a, gpus: 2}]
  links:
    - {endpoints: [a.gpu0, a.gpu2], kind: nvlink}
)");
      },
      {"topo.yaml:4:", "endpoints", "a.gpu2"});
  // Non-positive bandwidth.
  expect_config_error(
      [] {
        parse(R"(topology:
  nodes: [{name: a, gpus: 2}]
  links:
    - {endpoints: [a.gpu0, a.gpu1], kind: pcie, gbps: 0}
)");
      },
      {"topo.yaml:4:", "gbps", "a bandwidth in GB/s in [0.001, 1e6]"});
  expect_config_error([] { parse("topology: {nodes: 1, intra_gbps: -5}\n"); },
                      {"topo.yaml:1:", "intra_gbps", "a bandwidth in GB/s in [0.001, 1e6]"});
  // Below 1 MB/s: a collective or a transfer would end past the simulated clock.
  expect_config_error([] { parse("topology: {nodes: 1, intra_gbps: 1e-15}\n"); },
                      {"topo.yaml:1:", "intra_gbps", "got '1e-15'"});
  // A GPU with no path to the others.
  expect_config_error(
      [] {
        parse(R"(topology:
  nodes: [{name: a, gpus: 2}, {name: b, gpus: 1}]
  links:
    - {endpoints: [a.gpu0, a.gpu1], kind: nvlink}
)");
      },
      {"topo.yaml:2:", "b.gpu0", "no path"});
  // A kind the hardware lacks, with no bandwidth given.
  InterconnectSpec no_eth = h100_like();
  expect_config_error(
      [&] { parse("topology: {nodes: 2, gpus_per_node: 2, inter: ethernet}\n", no_eth); },
      {"topo.yaml:1:", "inter", "ethernet", "ethernet_gbps"});
  // A link to itself, two wildcard endpoints, unknown keys.
  expect_config_error(
      [] {
        parse(R"(topology:
  nodes: [{name: a, gpus: 2}]
  links: [{endpoints: [a.gpu0, a.gpu0], kind: nvlink}]
)");
      },
      {"topo.yaml:3:", "itself"});
  expect_config_error(
      [] {
        parse(R"(topology:
  nodes: [{name: a, gpus: 2}, {name: b, gpus: 2}]
  links: [{endpoints: [a.*, b.*], kind: nvlink}]
)");
      },
      {"topo.yaml:3:", "NODE.*"});
  expect_config_error([] { parse("topology: {nodes: 1, gpus: 4}\n"); }, {"topo.yaml:1:", "gpus"});
}

TEST(Topology, HardwareCatalogueStatesInterconnectPorts) {
  const HardwareConfig h100 = load_hardware("H100-SXM", default_catalog_dir());
  EXPECT_EQ(h100.interconnect.gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(h100.interconnect[LinkKind::kNvlink].bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(h100.interconnect[LinkKind::kInfiniband].bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(h100.interconnect[LinkKind::kPcie].bandwidth, 64e9);
  const HardwareConfig l40s = load_hardware("L40S", default_catalog_dir());
  EXPECT_EQ(l40s.interconnect[LinkKind::kNvlink].bandwidth, 0);  // no NVLink on the L40S
  for (const std::string& name : catalog_names(default_catalog_dir(), "hardware")) {
    const HardwareConfig hw = load_hardware(name, default_catalog_dir());
    EXPECT_GT(hw.interconnect.gpus_per_node, 0) << name;
    EXPECT_GT(hw.interconnect[LinkKind::kPcie].bandwidth, 0) << name;
  }
}

TEST(Collectives, RingAllReduceOnOneNvlinkNodeHandComputed) {
  UniformTopologySpec s;
  s.gpus_per_node = 8;
  const Topology t = build_uniform_topology(s, h100_like(), "test");
  const std::vector<GpuId> group = {0, 1, 2, 3, 4, 5, 6, 7};
  // Each ring edge: 2 NVLink hops (2 us), its own up and down channels (450 GB/s each).
  const RingTerms rt = ring_terms(t, group);
  EXPECT_DOUBLE_EQ(rt.alpha_s, 2e-6);
  EXPECT_DOUBLE_EQ(rt.bandwidth, 450e9);
  // all-reduce: 2 * 7 * 2 us = 28 us, plus 2 * 7 / 8 = 1.75 bytes per byte at 450 GB/s.
  const CollectiveCost ar = ring_all_reduce(t, group);
  EXPECT_NEAR(ar.latency_s, 28e-6, 1e-15);
  EXPECT_NEAR(ar.s_per_byte, 1.75 / 450e9, 1e-24);
  EXPECT_NEAR(ar.seconds(450e6), 28e-6 + 1.75e-3, 1e-12);
  // all-gather: half of that.
  const CollectiveCost ag = ring_all_gather(t, group);
  EXPECT_NEAR(ag.seconds(450e6), 14e-6 + 0.875e-3, 1e-12);
  // Two GPUs: 2 * 1 * 2 us + 1 * S / 450 GB/s.
  EXPECT_NEAR(ring_all_reduce(t, {0, 1}).seconds(450e6), 4e-6 + 1e-3, 1e-12);
  // One GPU or no bytes: free.
  EXPECT_TRUE(ring_all_reduce(t, {3}).free());
  EXPECT_EQ(ar.seconds(0), 0);
}

TEST(Collectives, RingAcrossNodesIsLimitedByTheNetwork) {
  UniformTopologySpec s;
  s.nodes = 2;
  s.gpus_per_node = 2;
  const Topology t = build_uniform_topology(s, h100_like(), "test");
  // Ring 0 -> 1 (NVLink, 2 us) -> 2 (InfiniBand, 5 us) -> 3 (NVLink) -> 0 (InfiniBand).
  const RingTerms rt = ring_terms(t, {0, 1, 2, 3});
  EXPECT_DOUBLE_EQ(rt.alpha_s, 5e-6);
  EXPECT_DOUBLE_EQ(rt.bandwidth, 50e9);
  // n = 4: 2 * 3 * 5 us = 30 us; 1.5 bytes per byte at 50 GB/s.
  EXPECT_NEAR(ring_all_reduce(t, {0, 1, 2, 3}).seconds(1e9), 30e-6 + 1.5 / 50, 1e-12);
  // Point to point across nodes: 5 us + S / 50 GB/s.
  EXPECT_NEAR(point_to_point(t, 0, 3).seconds(50e6), 5e-6 + 1e-3, 1e-12);
}

TEST(Collectives, RingEdgesSharingAChannelSplitItsBandwidth) {
  // GPUs 0, 1 on switch A, GPUs 2, 3 on switch B, one 100 GB/s link A - B. The ring 0 -> 2 ->
  // 1 -> 3 -> 0 crosses A -> B twice and B -> A twice: 50 GB/s each.
  const Topology t = parse(R"(topology:
  nodes: [{name: a, gpus: 2}, {name: b, gpus: 2}]
  switches: [A, B]
  links:
    - {endpoints: [a.*, A], kind: nvlink, gbps: 400, latency_us: 1}
    - {endpoints: [b.*, B], kind: nvlink, gbps: 400, latency_us: 1}
    - {endpoints: [A, B], kind: infiniband, gbps: 100, latency_us: 2}
)");
  const RingTerms rt = ring_terms(t, {0, 2, 1, 3});
  EXPECT_DOUBLE_EQ(rt.bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(rt.alpha_s, 4e-6);
  // The ring 0 -> 1 -> 2 -> 3 crosses A -> B once and B -> A once: 100 GB/s.
  EXPECT_DOUBLE_EQ(ring_terms(t, {0, 1, 2, 3}).bandwidth, 100e9);
  expect_config_error([&] { ring_terms(t, {0, 0}); }, {"distinct"});
}

}  // namespace
}  // namespace servelab
