// A cluster on one topology (`cluster.topology`): TopologyKvTransfer's hand-computed times
// (routes, shards of wide replicas, links booked first come first served), replicas placed pool
// by pool, and the errors of a cluster that does not fit its topology; P/D transfers that share
// their links (SharedKvTransfer, `cluster.kv_transfer.sharing: fair`) against queued ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "serving/direct_kv_links.h"
#include "serving/kv_transfer.h"
#include "serving/topology.h"
#include "serving/topology_kv_transfer.h"
#include "sim/shared_kv_transfer.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using namespace servelab::test_util;

// Two nodes of four GPUs: NVLink at 100 GB/s (1 us a hop) inside a node, InfiniBand at 10 GB/s
// (5 us a hop) between nodes.
Topology two_nodes() {
  InterconnectSpec ports;
  ports[LinkKind::kNvlink] = {100e9, 1e-6};
  ports[LinkKind::kInfiniband] = {10e9, 5e-6};
  UniformTopologySpec s;
  s.nodes = 2;
  s.gpus_per_node = 4;
  return build_uniform_topology(s, ports, "test");
}

constexpr TimeNs kFixed = 10'000;  // the transfer's own latency (kv_transfer.latency_us: 10)

// Replicas: 0 on GPU 0, 1 on GPU 1, 2 on GPU 4 (the second node), 3 on GPUs 2-3, 4 on GPUs 6-7.
const std::vector<TopologyKvTransfer::Placement> kPlaces = {{0, 1}, {1, 1}, {4, 1}, {2, 2}, {6, 2}};
TopologyKvTransfer model() { return TopologyKvTransfer(two_nodes(), kPlaces, kFixed); }

TEST(TopologyKvTransfer, RoutesPriceTheTransfer) {
  TopologyKvTransfer m = model();
  // Inside a node: 1 GB over NVLink at 100 GB/s = 10 ms, two hops of 1 us.
  KvTransferTimes t = m.transfer(1'000'000'000, 0, 1, 0);
  EXPECT_EQ(t.begin, 0);
  EXPECT_EQ(t.finish, 10'000'000 + 2'000 + kFixed);
  // To the other node: 1 GB over InfiniBand at 10 GB/s = 100 ms, two hops of 5 us. It leaves
  // GPU 0 through its network port, not its NVLink: no wait for the first transfer.
  t = m.transfer(1'000'000'000, 0, 2, 0);
  EXPECT_EQ(t.begin, 0);
  EXPECT_EQ(t.finish, 100'000'000 + 10'000 + kFixed);
  // The same NVLink route again: it waits for the first transfer's data to leave.
  t = m.transfer(1'000'000'000, 0, 1, 1'000'000);
  EXPECT_EQ(t.begin, 10'000'000);
  EXPECT_EQ(t.finish, 20'000'000 + 2'000 + kFixed);
}

TEST(TopologyKvTransfer, WideReplicasSendTheirSharesInParallel) {
  TopologyKvTransfer m = model();
  // Two GPUs to two GPUs across the nodes: GPU 2 -> 6 and 3 -> 7, half a GB each over its own
  // port: 50 ms instead of 100.
  KvTransferTimes t = m.transfer(1'000'000'000, 3, 4, 0);
  EXPECT_EQ(t.finish, 50'000'000 + 10'000 + kFixed);
  // Two GPUs to one: both shares arrive through GPU 4's one port, one after the other.
  t = m.transfer(1'000'000'000, 3, 2, 100'000'000);
  EXPECT_EQ(t.begin, 100'000'000);
  EXPECT_EQ(t.finish, 200'000'000 + 10'000 + kFixed);
  // An odd byte count: the first stream takes the extra byte (ceil to whole nanoseconds).
  TopologyKvTransfer n = model();
  t = n.transfer(11, 3, 4, 0);
  EXPECT_EQ(t.finish, 1 + 10'000 + kFixed);
}

TEST(TopologyKvTransfer, PiecesLeaveWhenReady) {
  TopologyKvTransfer m = model();
  // A layer-wise transfer: 0.5 GB ready at 0 (5 ms over NVLink), 0.5 GB ready at 20 ms.
  const KvPiece pieces[] = {{500'000'000, 0}, {500'000'000, 20'000'000}};
  const KvTransferTimes t = m.transfer_pieces(pieces, 0, 1);
  EXPECT_EQ(t.begin, 0);
  EXPECT_EQ(t.finish, 25'000'000 + 2'000 + kFixed);
  // Zero bytes: the latencies alone.
  TopologyKvTransfer n = model();
  EXPECT_EQ(n.transfer(0, 0, 2, 7).finish, 7 + 10'000 + kFixed);
  EXPECT_THROW(TopologyKvTransfer(two_nodes(), {{7, 2}}, 0), std::invalid_argument);
}

// Many transfers between replicas of different widths, in booking order: each starts no earlier
// than its first piece is ready, lasts at least its bytes over its streams at the fastest link,
// is never faster than it would be alone, and the same calls give the same times.
TEST(TopologyKvTransfer, BookedTransfersKeepTheirBounds) {
  const std::vector<TopologyKvTransfer::Placement> at = {{0, 1}, {1, 1}, {2, 2}, {4, 4}};
  struct Call {
    std::int64_t bytes;
    std::uint32_t src, dst;
    TimeNs ready;
  };
  std::vector<Call> calls;
  std::uint64_t x = 12345;
  auto next = [&x](std::uint64_t n) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (x >> 33) % n;
  };
  TimeNs now = 0;
  for (int i = 0; i < 300; ++i) {
    now += static_cast<TimeNs>(next(2'000'000));
    std::uint32_t src = static_cast<std::uint32_t>(next(4)),
                  dst = static_cast<std::uint32_t>(next(4));
    if (src == dst) dst = (dst + 1) % 4;
    calls.push_back({static_cast<std::int64_t>(next(400'000'000)), src, dst, now});
  }
  const auto run = [&] {
    TopologyKvTransfer m(two_nodes(), at, kFixed);
    std::vector<KvTransferTimes> out;
    for (const Call& c : calls) out.push_back(m.transfer(c.bytes, c.src, c.dst, c.ready));
    return out;
  };
  const std::vector<KvTransferTimes> a = run(), b = run();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    SCOPED_TRACE(i);
    EXPECT_EQ(a[i].begin, b[i].begin);
    EXPECT_EQ(a[i].finish, b[i].finish);
    EXPECT_GE(a[i].begin, c.ready);
    const double streams = std::max(at[c.src].count, at[c.dst].count);
    EXPECT_GE(static_cast<double>(a[i].finish - a[i].begin),
              std::floor(static_cast<double>(c.bytes) / streams / 100e9 * 1e9));
    TopologyKvTransfer alone(two_nodes(), at, kFixed);
    const KvTransferTimes fresh = alone.transfer(c.bytes, c.src, c.dst, c.ready);
    EXPECT_LE(fresh.finish, a[i].finish);
  }
}

// SharedKvTransfer (sim/shared_kv_transfer.h): transfers sharing their links max-min fairly,
// against hand-computed ends and, alone on their links, the booked models.
constexpr std::int64_t kGB = 1'000'000'000;

std::vector<FinishedTransfer> drain_all(SharedKvTransfer& m) {
  std::vector<FinishedTransfer> all;
  while (const auto next = m.next_finish()) {
    for (const FinishedTransfer& f : m.advance(*next)) all.push_back(f);
  }
  return all;
}

// Ports of 100 GB/s, except replica 2's of 10 GB/s.
DirectKvLinks ports(KvLinkLayout layout) {
  return DirectKvLinks(layout, [](std::uint32_t r) { return r == 2 ? 10e9 : 100e9; });
}

// Pair links of 100 GB/s, except those to and from 2 at 10 GB/s.
SharedKvTransfer pairs() { return SharedKvTransfer(ports(KvLinkLayout::kPerPair), kFixed); }

TEST(SharedKvTransfer, AloneOnAPairLinkItTakesWhatTheQueueGivesIt) {
  SharedKvTransfer m = pairs();
  DirectLinkKvTransfer booked(ports(KvLinkLayout::kPerPair), kFixed);
  m.start(0, 7, kGB, 0, 2);
  const std::vector<FinishedTransfer> done = drain_all(m);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 7);
  EXPECT_EQ(done[0].finish_ns, booked.transfer(kGB, 0, 2, 0).finish);
  EXPECT_EQ(done[0].finish_ns, 100'000'000 + kFixed);
  EXPECT_EQ(m.in_flight(), 0u);
}

TEST(SharedKvTransfer, TransfersOnOnePairLinkShareIt) {
  SharedKvTransfer m = pairs();
  // Two 1 GB transfers 0 -> 1 at once: 50 GB/s each, both drain at 20 ms (queued: the first
  // would end at 10 ms + latency, the second at 20 ms + two latencies). Ties end in start
  // order, whatever the ids.
  m.start(0, 20, kGB, 0, 1);
  m.start(0, 10, kGB, 0, 1);
  // 1 -> 0 is another link (the opposite direction): 10 ms.
  m.start(0, 30, kGB, 1, 0);
  EXPECT_EQ(m.in_flight(), 3u);
  const std::vector<FinishedTransfer> done = drain_all(m);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].id, 30);
  EXPECT_EQ(done[0].finish_ns, 10'000'000 + kFixed);
  EXPECT_EQ(done[1].id, 20);
  EXPECT_EQ(done[1].finish_ns, 20'000'000 + kFixed);
  EXPECT_EQ(done[2].id, 10);
  EXPECT_EQ(done[2].finish_ns, 20'000'000 + kFixed);
}

TEST(SharedKvTransfer, ALaterTransferSlowsOneInFlight) {
  SharedKvTransfer m = pairs();
  m.start(0, 0, kGB, 0, 1);
  EXPECT_EQ(m.next_finish(), 10'000'000 + kFixed);
  // At 5 ms the first has 0.5 GB left; the second shares: 50 GB/s each, so the first drains at
  // 15 ms and the second, alone again with 0.5 GB left, at 20 ms.
  EXPECT_TRUE(m.advance(5'000'000).empty());
  m.start(5'000'000, 1, kGB, 0, 1);
  EXPECT_EQ(m.next_finish(), 15'000'000 + kFixed);
  const std::vector<FinishedTransfer> done = drain_all(m);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].finish_ns, 15'000'000 + kFixed);
  EXPECT_EQ(done[1].finish_ns, 20'000'000 + kFixed);
}

TEST(SharedKvTransfer, TransfersThroughOneReplicasPortShareIt) {
  SharedKvTransfer m(ports(KvLinkLayout::kPerReplica), kFixed);
  DirectLinkKvTransfer booked(ports(KvLinkLayout::kPerReplica), kFixed);
  // 0 -> 1 and 0 -> 3 leave through 0's one port: 50 GB/s each, both drain at 20 ms (over pair
  // links, 10 ms each). 1 -> 2 (into the 10 GB/s port) goes the other way of 1's port: alone
  // it takes 100 ms, as booked.
  m.start(0, 0, kGB, 0, 1);
  m.start(0, 1, kGB, 0, 3);
  m.start(0, 2, kGB, 1, 2);
  const std::vector<FinishedTransfer> done = drain_all(m);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].finish_ns, 20'000'000 + kFixed);
  EXPECT_EQ(done[1].finish_ns, 20'000'000 + kFixed);
  EXPECT_EQ(done[2].id, 2);
  EXPECT_EQ(done[2].finish_ns, booked.transfer(kGB, 1, 2, 0).finish);
  EXPECT_EQ(done[2].finish_ns, 100'000'000 + kFixed);
  // 3 -> 2 and 0 -> 2 meet at 2's port in: 5 GB/s each; 0's port gives the rest to 0 -> 1.
  SharedKvTransfer n(ports(KvLinkLayout::kPerReplica), kFixed);
  n.start(0, 0, kGB / 2, 3, 2);
  n.start(0, 1, kGB / 2, 0, 2);
  n.start(0, 2, kGB, 0, 1);
  const std::vector<FinishedTransfer> into2 = drain_all(n);
  ASSERT_EQ(into2.size(), 3u);
  EXPECT_EQ(into2[0].id, 2);  // 95 GB/s: 10.53 ms
  EXPECT_NEAR(static_cast<double>(into2[0].finish_ns), 1e9 / 95 + kFixed, 2);
  EXPECT_EQ(into2[1].finish_ns, 100'000'000 + kFixed);
  EXPECT_EQ(into2[2].finish_ns, 100'000'000 + kFixed);
}

TEST(SharedKvTransfer, AloneOnATopologyItTakesWhatTheBookingGivesIt) {
  struct Case {
    std::uint32_t src, dst;
    std::int64_t bytes;
  };
  // NVLink, InfiniBand, two shards over two ports, two shards into one port, an odd byte count.
  for (const Case c :
       {Case{0, 1, kGB}, Case{0, 2, kGB}, Case{3, 4, kGB}, Case{3, 2, kGB}, Case{3, 4, 11}}) {
    SCOPED_TRACE(testing::Message() << c.src << "->" << c.dst << " " << c.bytes);
    SharedKvTransfer m(two_nodes(), kPlaces, kFixed);
    TopologyKvTransfer booked(two_nodes(), kPlaces, kFixed);
    m.start(3'000, 0, c.bytes, c.src, c.dst);
    const std::vector<FinishedTransfer> done = drain_all(m);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].finish_ns, booked.transfer(c.bytes, c.src, c.dst, 3'000).finish);
  }
}

TEST(SharedKvTransfer, PrefillsIntoOneGpuShareItsPort) {
  SharedKvTransfer m(two_nodes(), kPlaces, kFixed);
  // GPUs 0 and 1 both send 1 GB to GPU 4: its one InfiniBand port in takes 5 GB/s from each,
  // so both drain at 200 ms and arrive two 5 us hops later (queued: 100 and 200 ms).
  m.start(0, 5, kGB, 0, 2);
  m.start(0, 4, kGB, 1, 2);
  // Meanwhile 3 -> 4 goes GPU 2 -> 6 and 3 -> 7 over ports of their own: 50 ms.
  m.start(0, 9, kGB, 3, 4);
  const std::vector<FinishedTransfer> done = drain_all(m);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].id, 9);
  EXPECT_EQ(done[0].finish_ns, 50'000'000 + 10'000 + kFixed);
  EXPECT_EQ(done[1].id, 5);
  EXPECT_EQ(done[1].finish_ns, 200'000'000 + 10'000 + kFixed);
  EXPECT_EQ(done[2].id, 4);
  EXPECT_EQ(done[2].finish_ns, 200'000'000 + 10'000 + kFixed);
}

TEST(SharedKvTransfer, AWideTransferEndsWithItsLastStream) {
  SharedKvTransfer m(two_nodes(), kPlaces, kFixed);
  // 3 -> 2: GPUs 2 and 3 each send 0.5 GB into GPU 4. Replica 0 joins at 50 ms with 0.5 GB:
  // until then the two streams had 5 GB/s each (0.25 GB sent); then three flows share the
  // port at 10/3 GB/s: the streams' 0.25 GB drain at 125 ms, replica 0's last 0.25 GB alone at
  // 10 GB/s by 150 ms.
  m.start(0, 0, kGB, 3, 2);
  m.start(50'000'000, 1, kGB / 2, 0, 2);
  const std::vector<FinishedTransfer> done = drain_all(m);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].id, 0);
  EXPECT_NEAR(static_cast<double>(done[0].finish_ns), 125'000'000 + 10'000 + kFixed, 2);
  EXPECT_EQ(done[1].id, 1);
  EXPECT_NEAR(static_cast<double>(done[1].finish_ns), 150'000'000 + 10'000 + kFixed, 2);
}

TEST(SharedKvTransfer, RefusesWhatItCannotModel) {
  EXPECT_THROW(SharedKvTransfer(two_nodes(), {{7, 2}}, kFixed), std::invalid_argument);
  EXPECT_THROW(SharedKvTransfer(two_nodes(), kPlaces, -1), std::invalid_argument);
  SharedKvTransfer m(two_nodes(), kPlaces, kFixed);
  EXPECT_THROW(m.start(0, 0, kGB, 0, 9), std::invalid_argument);
  EXPECT_THROW(m.start(0, 0, -1, 0, 1), std::invalid_argument);
  m.start(10, 0, kGB, 0, 1);
  EXPECT_THROW(m.start(5, 1, kGB, 0, 1), std::invalid_argument);   // time went backwards
  EXPECT_THROW(m.start(20, 0, kGB, 0, 1), std::invalid_argument);  // id 0 is in flight
  EXPECT_EQ(m.in_flight(), 1u);
  SharedKvTransfer zero(DirectKvLinks(KvLinkLayout::kPerReplica, [](std::uint32_t) { return 0.0; }),
                        kFixed);
  EXPECT_THROW(zero.start(0, 0, kGB, 0, 1), std::invalid_argument);
}

// Llama-3-8B on H100s; `cluster` is the last section (lines 1-12 fixed, `cluster:` on 13).
std::string experiment(const std::string& cluster, const std::string& extra = "") {
  return "name: topo\nseed: 5\nmodel: Llama-3-8B\nhardware: H100-SXM\nserving:\n"
         "  max_model_len: 4096\n"
         "workload:\n  type: synthetic\n  num_requests: 40\n"
         "  arrival: {process: poisson, rate: 4}\n"
         "  prompt_len: {dist: uniform, min: 200, max: 1500}\n"
         "  output_len: {dist: uniform, min: 10, max: 60}\n" +
         extra + cluster;
}

Cli run(const fs::path& dir, const std::string& name, const std::string& text) {
  write_file(dir / (name + ".yaml"), text);
  return run_sim("run " + (dir / (name + ".yaml")).string() + " --out " + (dir / name).string(),
                 dir);
}

nlohmann::json summary(const fs::path& run) {
  return nlohmann::json::parse(read_file(run / "summary.json"));
}

// A replica placed at GPU 0 of the cluster's topology is priced as the single-replica run on
// that topology.
TEST(ClusterTopology, OneReplicaMatchesThePlainRunOnTheSameTopology) {
  const fs::path dir = temp_dir("cluster-topo-one");
  Cli cli = run(dir, "plain",
                experiment("", "parallel: {tensor: 4}\ntopology: {nodes: 1, gpus_per_node: 8}\n"));
  ASSERT_EQ(cli.code, 0) << cli.err;
  cli = run(dir, "cluster",
            experiment("cluster:\n  topology: {nodes: 1, gpus_per_node: 8}\n  pools:\n"
                       "    - {name: a, parallel: {tensor: 4}}\n"));
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_EQ(read_file(dir / "plain" / "requests.csv"), read_file(dir / "cluster" / "requests.csv"));
  EXPECT_NE(read_file(dir / "cluster" / "config.yaml").find("gpus_per_node: 8"), std::string::npos);
  fs::remove_all(dir);
}

// P/D on one topology: a prefill and a decode replica of two GPUs each, in one node (NVLink) or
// in two (InfiniBand). The transfer time is the prompt's KV in two shards at the link's rate.
TEST(ClusterTopology, PrefillToDecodeOverNvlinkOrInfiniband) {
  const fs::path dir = temp_dir("cluster-topo-pd");
  const std::string pools =
      "  pools:\n    - {name: p, role: prefill, parallel: {tensor: 2}}\n"
      "    - {name: d, role: decode, parallel: {tensor: 2}}\n";
  Cli cli =
      run(dir, "one", experiment("cluster:\n  topology: {nodes: 1, gpus_per_node: 4}\n" + pools));
  ASSERT_EQ(cli.code, 0) << cli.err;
  cli = run(dir, "two", experiment("cluster:\n  topology: {nodes: 2, gpus_per_node: 2}\n" + pools));
  ASSERT_EQ(cli.code, 0) << cli.err;
  // H100-SXM ports at NCCL's efficiency 0.64: NVLink 450 GB/s -> 288, InfiniBand 50 -> 32.
  const struct {
    const char* run;
    double bytes_per_s, hops_us;
  } cases[] = {{"one", 450e9 * 0.64, 2 * 1.0}, {"two", 50e9 * 0.64, 2 * 2.5}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.run);
    const nlohmann::json s = summary(dir / c.run);
    EXPECT_EQ(s["requests"]["completed"], 40);
    const nlohmann::json& kv = s["cluster"]["kv_transfers"];
    const double mean_bytes = kv["bytes"].get<double>() / kv["count"].get<double>();
    const double expect_ms = mean_bytes / 2 / c.bytes_per_s * 1e3 + (c.hops_us + 10) / 1e3;
    EXPECT_NEAR(kv["transfer_mean_ms"].get<double>(), expect_ms, 1e-5) << kv;
    EXPECT_EQ(s["cluster"]["gpus"], 4);
  }
  EXPECT_EQ(summary(dir / "one")["cluster"]["kv_transfers"]["bytes"],
            summary(dir / "two")["cluster"]["kv_transfers"]["bytes"]);
  // A run's config.yaml (its derived: section, a topology without kv_transfer.bandwidth_gb_s)
  // runs again, to the same requests.
  cli = run_sim(
      "run " + (dir / "two" / "config.yaml").string() + " --out " + (dir / "again").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_EQ(read_file(dir / "again" / "requests.csv"), read_file(dir / "two" / "requests.csv"));
  fs::remove_all(dir);
}

TEST(ClusterTopology, BadClustersNameKeyAndLine) {
  const fs::path dir = temp_dir("cluster-topo-errors");
  struct Case {
    std::string cluster;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      // More GPUs than the topology has.
      {"cluster:\n  topology: {nodes: 1, gpus_per_node: 4}\n  pools:\n"
       "    - {name: a, count: 3, parallel: {tensor: 2}}\n",
       {"e.yaml:14:", "cluster.topology", "need 6 GPUs (a 3 x 2)", "has 4"}},
      // Placed after three one-GPU replicas, a tensor group of two spans the nodes.
      {"cluster:\n  topology: {nodes: 2, gpus_per_node: 4}\n  pools:\n"
       "    - {name: a, count: 3}\n    - {name: b, parallel: {tensor: 2}}\n",
       {"e.yaml:17:", "cluster.pools[1].parallel.tensor", "pool 'b', replica 0 from GPU node0.gpu3",
        "spans two nodes"}},
      // A pool's own topology under a cluster's.
      {"cluster:\n  topology: {nodes: 1, gpus_per_node: 8}\n  pools:\n"
       "    - {name: a, topology: {nodes: 1, gpus_per_node: 2}}\n",
       {"e.yaml:16:", "cluster.pools[0].topology", "remove the pool's topology"}},
      // A fixed link bandwidth under a topology.
      {"cluster:\n  topology: {nodes: 1, gpus_per_node: 8}\n  kv_transfer: {bandwidth_gb_s: 5}\n"
       "  pools:\n    - {name: p, role: prefill}\n    - {name: d, role: decode}\n",
       {"e.yaml:15:", "kv_transfer.bandwidth_gb_s", "topology's links"}},
      // A bad topology.
      {"cluster:\n  topology: {nodes: 1, intra: nvlnk}\n  pools:\n    - {name: a}\n",
       {"e.yaml:14:", "cluster.topology.intra", "nvlink"}},
      // Sharing: an unknown rule, and fair with layer-wise transfers.
      {"cluster:\n  kv_transfer: {sharing: fast}\n  pools:\n    - {name: p, role: prefill}\n"
       "    - {name: d, role: decode}\n",
       {"e.yaml:14:", "cluster.kv_transfer.sharing", "queue", "fair", "fast"}},
      {"cluster:\n  kv_transfer: {layerwise: true, sharing: fair}\n  pools:\n"
       "    - {name: p, role: prefill}\n    - {name: d, role: decode}\n",
       {"e.yaml:14:", "cluster.kv_transfer.sharing", "layer-wise"}},
      // Links: an unknown layout, and any layout under a topology (its links carry the KV).
      {"cluster:\n  kv_transfer: {links: per_gpu}\n  pools:\n    - {name: p, role: prefill}\n"
       "    - {name: d, role: decode}\n",
       {"e.yaml:14:", "cluster.kv_transfer.links", "per_replica", "per_pair", "per_gpu"}},
      {"cluster:\n  topology: {nodes: 1, gpus_per_node: 8}\n  kv_transfer: {links: per_pair}\n"
       "  pools:\n    - {name: p, role: prefill}\n    - {name: d, role: decode}\n",
       {"e.yaml:15:", "kv_transfer.links", "topology's links"}},
  };
  for (const Case& c : cases) {
    write_file(dir / "e.yaml", experiment(c.cluster));
    const Cli cli =
        run_sim("run " + (dir / "e.yaml").string() + " --out " + (dir / "o").string(), dir);
    EXPECT_EQ(cli.code, 2) << c.cluster << cli.err;
    for (const std::string& p : c.parts) {
      EXPECT_NE(cli.err.find(p), std::string::npos) << "'" << p << "' not in: " << cli.err;
    }
    EXPECT_FALSE(fs::exists(dir / "o")) << c.cluster;
  }
  fs::remove_all(dir);
}

// A burst of eight equal prompts prefilled in one step, sent to one decode replica over one pair
// link of 1 GB/s with 100 us per transfer: queued, each arrives one wire time after the one
// before (the link is free once a transfer's last byte has left; the latency is propagation),
// the last after eight wire times and one latency; shared, all arrive together then.
std::string burst(const std::string& sharing, const std::string& extra = "") {
  return "name: burst\nseed: 3\nmodel: Llama-3-8B\nhardware: H100-SXM\nserving:\n"
         "  max_model_len: 4096\n  max_num_batched_tokens: 16384\n"
         "workload:\n  type: synthetic\n  num_requests: 8\n"
         "  arrival: {process: fixed, rate: 1.0e12}\n"
         "  prompt_len: {dist: fixed, value: 1000}\n"
         "  output_len: {dist: fixed, value: 20}\n"
         "outputs: {record_events: true}\n"
         "cluster:\n  kv_transfer: {bandwidth_gb_s: 1, latency_us: 100, sharing: " +
         sharing + extra + "}\n  pools:\n    - {name: p, role: prefill}\n" +
         "    - {name: d, role: decode}\n";
}

TEST(KvSharing, ABurstSharesTheLinkInsteadOfQueueing) {
  const fs::path dir = temp_dir("kv-sharing-burst");
  for (const char* mode : {"queue", "fair"}) {
    const Cli cli = run(dir, mode, burst(mode));
    ASSERT_EQ(cli.code, 0) << cli.err;
  }
  const nlohmann::json q = summary(dir / "queue")["cluster"]["kv_transfers"];
  const nlohmann::json f = summary(dir / "fair")["cluster"]["kv_transfers"];
  EXPECT_EQ(q["count"], 8);
  EXPECT_EQ(f["count"], 8);
  EXPECT_EQ(q["bytes"], f["bytes"]);
  // 1000 tokens in 63 blocks of 16 tokens of Llama-3-8B's 128 KiB per token: 132.12 ms at 1 GB/s.
  const double wire_ms = f["bytes"].get<double>() / 8 / 1e9 * 1e3;
  EXPECT_NEAR(wire_ms, 132.120576, 1e-6);
  EXPECT_NEAR(q["max_ms"].get<double>(), 8 * wire_ms + 0.1, 1e-5) << q;
  EXPECT_NEAR(q["exposed_mean_ms"].get<double>(), 4.5 * wire_ms + 0.1, 1e-5) << q;
  EXPECT_NEAR(f["max_ms"].get<double>(), 8 * wire_ms + 0.1, 1e-5) << f;
  EXPECT_GT(q["wait_mean_ms"].get<double>(), 0);
  EXPECT_EQ(f["wait_mean_ms"].get<double>(), 0);
  EXPECT_NEAR(f["transfer_mean_ms"].get<double>(), f["max_ms"].get<double>(), 1e-5);
  EXPECT_NE(read_file(dir / "fair" / "config.yaml").find("sharing: fair"), std::string::npos);
  // events.csv's start_s is the first byte's start: the event's time plus the wait when queued
  // (the event is at the prefill's end), its time less the transfer when shared (at its end).
  for (const char* mode : {"queue", "fair"}) {
    int transfers = 0;
    for (const auto& row : read_csv(dir / mode / "events.csv")) {
      if (row.at("event") != "transfer") continue;
      ++transfers;
      const std::string& d = row.at("detail");
      double wait = 0, move = 0, start = 0;
      ASSERT_EQ(
          std::sscanf(d.c_str() + d.find(' '), " bytes=%*f wait_ms=%lf transfer_ms=%lf start_s=%lf",
                      &wait, &move, &start),
          3)
          << d;
      const double t = std::stod(row.at("time_s"));
      EXPECT_NEAR(start, std::string(mode) == "fair" ? t - move / 1e3 : t + wait / 1e3, 2e-9) << d;
    }
    EXPECT_EQ(transfers, 8) << mode;
  }
  // Every request still decodes to the end, and the same experiment gives the same bytes.
  EXPECT_EQ(summary(dir / "fair")["requests"]["completed"], 8);
  const Cli again = run(dir, "again", burst("fair"));
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(read_file(dir / "fair" / "requests.csv"), read_file(dir / "again" / "requests.csv"));
  EXPECT_EQ(read_file(dir / "fair" / "steps.csv"), read_file(dir / "again" / "steps.csv"));
  fs::remove_all(dir);
}

// The same burst sent to two decode replicas (round robin): through the prefill replica's one
// port (the default) the eight transfers still leave one after another; over a link per pair
// (`links: per_pair`) four go each way at once, so the last arrives after four wire times.
TEST(KvSharing, EveryTransferLeavingAReplicaSharesItsPort) {
  const fs::path dir = temp_dir("kv-sharing-ports");
  const auto two_decoders = [](std::string e) {
    const std::string one = "{name: d, role: decode}";
    return e.replace(e.find(one), one.size(), "{name: d, role: decode, count: 2}");
  };
  for (const char* mode : {"queue", "fair"}) {
    const std::string m(mode);
    ASSERT_EQ(run(dir, m + "-port", two_decoders(burst(m))).code, 0);
    ASSERT_EQ(run(dir, m + "-pair", two_decoders(burst(m, ", links: per_pair"))).code, 0);
    const nlohmann::json port = summary(dir / (m + "-port"))["cluster"]["kv_transfers"];
    const nlohmann::json pair = summary(dir / (m + "-pair"))["cluster"]["kv_transfers"];
    const double wire_ms = port["bytes"].get<double>() / 8 / 1e9 * 1e3;
    EXPECT_NEAR(port["max_ms"].get<double>(), 8 * wire_ms + 0.1, 1e-5) << mode << port;
    EXPECT_NEAR(pair["max_ms"].get<double>(), 4 * wire_ms + 0.1, 1e-5) << mode << pair;
  }
  EXPECT_NE(read_file(dir / "queue-port" / "config.yaml").find("links: per_replica"),
            std::string::npos);
  EXPECT_NE(read_file(dir / "queue-pair" / "config.yaml").find("links: per_pair"),
            std::string::npos);
  fs::remove_all(dir);
}

// blocks.csv of a P/D run: a `replica` column (block ids are per replica), and a request's
// prefill blocks close when its prefill ends (its first token), not at its first decode step.
TEST(KvSharing, BlocksOfAPrefilledRequestCloseWhenItsPrefillEnds) {
  const fs::path dir = temp_dir("kv-sharing-blocks");
  write_file(dir / "pd.yaml", burst("queue"));
  const Cli cli = run_sim(
      "run " + (dir / "pd.yaml").string() + " --record-blocks --out " + (dir / "pd").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  std::map<std::string, double> first_token;
  for (const auto& row : read_csv(dir / "pd" / "requests.csv")) {
    first_token[row.at("id")] = std::stod(row.at("first_token_s"));
  }
  ASSERT_EQ(first_token.size(), 8u);
  std::map<std::string, double> prefill_end, decode_start;
  for (const auto& row : read_csv(dir / "pd" / "blocks.csv")) {
    const std::string& id = row.at("request");
    if (row.at("replica") == "0") {
      prefill_end[id] = std::max(prefill_end[id], std::stod(row.at("end_s")));
    } else {
      ASSERT_EQ(row.at("replica"), "1");
      const double s = std::stod(row.at("start_s"));
      decode_start[id] = decode_start.contains(id) ? std::min(decode_start[id], s) : s;
    }
  }
  ASSERT_EQ(prefill_end.size(), 8u);
  ASSERT_EQ(decode_start.size(), 8u);
  for (const auto& [id, end] : prefill_end) {
    EXPECT_NEAR(end, first_token.at(id), 1e-9) << id;
    EXPECT_LT(end, decode_start.at(id)) << id;  // the transfer lies between
  }
  fs::remove_all(dir);
}

// Over a topology, shared transfers are never faster than alone on their route, and never wait.
TEST(KvSharing, OverATopologyNoTransferBeatsItsRoute) {
  const fs::path dir = temp_dir("kv-sharing-topo");
  const std::string cluster =
      "cluster:\n  topology: {nodes: 2, gpus_per_node: 2}\n  kv_transfer: {sharing: fair}\n"
      "  pools:\n    - {name: p, role: prefill, parallel: {tensor: 2}}\n"
      "    - {name: d, role: decode, parallel: {tensor: 2}}\n";
  const Cli cli = run(dir, "fair", experiment(cluster));
  ASSERT_EQ(cli.code, 0) << cli.err;
  const nlohmann::json s = summary(dir / "fair");
  EXPECT_EQ(s["requests"]["completed"], 40);
  const nlohmann::json& kv = s["cluster"]["kv_transfers"];
  EXPECT_EQ(kv["count"], 40);
  EXPECT_EQ(kv["wait_mean_ms"].get<double>(), 0);
  // Two shards over InfiniBand (50 GB/s x 0.64), two 2.5 us hops and 10 us.
  const double mean_bytes = kv["bytes"].get<double>() / 40;
  EXPECT_GE(kv["transfer_mean_ms"].get<double>(),
            mean_bytes / 2 / (50e9 * 0.64) * 1e3 + 15e-3 - 1e-6);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
