// SharedKvTransfer (sim/shared_kv_transfer.h): P/D transfers sharing their links max-min fairly,
// checked against hand-computed ends and, for a transfer alone on its links, against the booked
// models (PairLinkKvTransfer, TopologyKvTransfer).
#include "sim/shared_kv_transfer.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "serving/kv_transfer.h"
#include "serving/topology_kv_transfer.h"

namespace servelab {
namespace {

constexpr TimeNs kFixed = 10'000;  // the transfer's own latency
constexpr std::int64_t kGB = 1'000'000'000;

std::vector<FinishedTransfer> drain_all(SharedKvTransfer& m) {
  std::vector<FinishedTransfer> all;
  while (const auto next = m.next_finish()) {
    for (const FinishedTransfer& f : m.advance(*next)) all.push_back(f);
  }
  return all;
}

// Pair links of 100 GB/s, except 0 -> 2 at 10 GB/s.
SharedKvTransfer pairs() {
  return SharedKvTransfer(
      [](std::uint32_t src, std::uint32_t dst) { return src == 0 && dst == 2 ? 10e9 : 100e9; },
      kFixed);
}

TEST(SharedKvTransfer, AloneOnAPairLinkItTakesWhatTheQueueGivesIt) {
  SharedKvTransfer m = pairs();
  PairLinkKvTransfer booked(
      [](std::uint32_t src, std::uint32_t dst) { return src == 0 && dst == 2 ? 10e9 : 100e9; },
      kFixed);
  EXPECT_EQ(m.start(0, kGB, 0, 2), 0);
  const std::vector<FinishedTransfer> done = drain_all(m);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].finish_ns, booked.transfer(kGB, 0, 2, 0).finish);
  EXPECT_EQ(done[0].finish_ns, 100'000'000 + kFixed);
  EXPECT_EQ(m.in_flight(), 0u);
}

TEST(SharedKvTransfer, TransfersOnOnePairLinkShareIt) {
  SharedKvTransfer m = pairs();
  // Two 1 GB transfers 0 -> 1 at once: 50 GB/s each, both drain at 20 ms (queued: the first
  // would end at 10 ms + latency, the second at 20 ms + two latencies).
  m.start(0, kGB, 0, 1);
  m.start(0, kGB, 0, 1);
  // 1 -> 0 is another link (the opposite direction): 10 ms.
  m.start(0, kGB, 1, 0);
  EXPECT_EQ(m.in_flight(), 3u);
  const std::vector<FinishedTransfer> done = drain_all(m);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].id, 2);
  EXPECT_EQ(done[0].finish_ns, 10'000'000 + kFixed);
  EXPECT_EQ(done[1].id, 0);
  EXPECT_EQ(done[1].finish_ns, 20'000'000 + kFixed);
  EXPECT_EQ(done[2].id, 1);
  EXPECT_EQ(done[2].finish_ns, 20'000'000 + kFixed);
}

TEST(SharedKvTransfer, ALaterTransferSlowsOneInFlight) {
  SharedKvTransfer m = pairs();
  m.start(0, kGB, 0, 1);
  EXPECT_EQ(m.next_finish(), 10'000'000 + kFixed);
  // At 5 ms the first has 0.5 GB left; the second shares: 50 GB/s each, so the first drains at
  // 15 ms and the second, alone again with 0.5 GB left, at 20 ms.
  EXPECT_TRUE(m.advance(5'000'000).empty());
  m.start(5'000'000, kGB, 0, 1);
  EXPECT_EQ(m.next_finish(), 15'000'000 + kFixed);
  const std::vector<FinishedTransfer> done = drain_all(m);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].finish_ns, 15'000'000 + kFixed);
  EXPECT_EQ(done[1].finish_ns, 20'000'000 + kFixed);
}

// Two nodes of four GPUs: NVLink at 100 GB/s (1 us a hop) inside a node, InfiniBand at 10 GB/s
// (5 us a hop) between nodes. Replicas: 0 on GPU 0, 1 on GPU 1, 2 on GPU 4 (the second node),
// 3 on GPUs 2-3, 4 on GPUs 6-7.
Topology two_nodes() {
  InterconnectSpec ports;
  ports[LinkKind::kNvlink] = {100e9, 1e-6};
  ports[LinkKind::kInfiniband] = {10e9, 5e-6};
  UniformTopologySpec s;
  s.nodes = 2;
  s.gpus_per_node = 4;
  return build_uniform_topology(s, ports, "test");
}
const std::vector<TopologyKvTransfer::Placement> kPlaces = {{0, 1}, {1, 1}, {4, 1}, {2, 2}, {6, 2}};

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
    m.start(3'000, c.bytes, c.src, c.dst);
    const std::vector<FinishedTransfer> done = drain_all(m);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].finish_ns, booked.transfer(c.bytes, c.src, c.dst, 3'000).finish);
  }
}

TEST(SharedKvTransfer, PrefillsIntoOneGpuShareItsPort) {
  SharedKvTransfer m(two_nodes(), kPlaces, kFixed);
  // GPUs 0 and 1 both send 1 GB to GPU 4: its one InfiniBand port in takes 5 GB/s from each,
  // so both drain at 200 ms and arrive two 5 us hops later (queued: 100 and 200 ms).
  m.start(0, kGB, 0, 2);
  m.start(0, kGB, 1, 2);
  // Meanwhile 3 -> 4 goes GPU 2 -> 6 and 3 -> 7 over ports of their own: 50 ms.
  m.start(0, kGB, 3, 4);
  const std::vector<FinishedTransfer> done = drain_all(m);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].id, 2);
  EXPECT_EQ(done[0].finish_ns, 50'000'000 + 10'000 + kFixed);
  EXPECT_EQ(done[1].id, 0);
  EXPECT_EQ(done[1].finish_ns, 200'000'000 + 10'000 + kFixed);
  EXPECT_EQ(done[2].id, 1);
  EXPECT_EQ(done[2].finish_ns, 200'000'000 + 10'000 + kFixed);
}

TEST(SharedKvTransfer, AWideTransferEndsWithItsLastStream) {
  SharedKvTransfer m(two_nodes(), kPlaces, kFixed);
  // 3 -> 2: GPUs 2 and 3 each send 0.5 GB into GPU 4. Replica 0 joins at 50 ms with 0.5 GB:
  // until then the two streams had 5 GB/s each (0.25 GB sent); then three flows share the
  // port at 10/3 GB/s: the streams' 0.25 GB drain at 125 ms, replica 0's last 0.25 GB alone at
  // 10 GB/s by 150 ms.
  m.start(0, kGB, 3, 2);
  m.start(50'000'000, kGB / 2, 0, 2);
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
  EXPECT_THROW(m.start(0, kGB, 0, 9), std::invalid_argument);
  EXPECT_THROW(m.start(0, -1, 0, 1), std::invalid_argument);
  m.start(10, kGB, 0, 1);
  EXPECT_THROW(m.start(5, kGB, 0, 1), std::invalid_argument);  // time went backwards
  SharedKvTransfer zero([](std::uint32_t, std::uint32_t) { return 0.0; }, kFixed);
  EXPECT_THROW(zero.start(0, kGB, 0, 1), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
