// LinkTransfers (sim/link_transfers.h): max-min fair sharing of channels between concurrent
// transfers, checked against hand-computed finish times.
#include "sim/link_transfers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace servelab {
namespace {

std::vector<FinishedTransfer> drain_all(LinkTransfers& m) {
  std::vector<FinishedTransfer> all;
  while (const auto next = m.next_finish()) {
    for (const FinishedTransfer& f : m.advance(*next)) all.push_back(f);
  }
  return all;
}

TEST(LinkTransfers, OneTransferTakesBytesOverBandwidthPlusLatency) {
  LinkTransfers m(std::vector<double>{100e9});
  // 1 GB at 100 GB/s: 10 ms, then 5 us of latency.
  EXPECT_EQ(m.start_on(0, {0}, 5000, 1'000'000'000), 0);
  EXPECT_DOUBLE_EQ(m.rate(0), 100e9);
  EXPECT_EQ(m.next_finish(), 10'005'000);
  EXPECT_TRUE(m.advance(10'004'999).empty());
  const auto done = m.advance(10'005'000);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].finish_ns, 10'005'000);
  EXPECT_EQ(m.in_flight(), 0u);
  EXPECT_FALSE(m.next_finish());
  // A zero-byte transfer: the latency alone.
  EXPECT_EQ(m.start_on(20'000'000, {0}, 700, 0), 1);
  EXPECT_EQ(m.next_finish(), 20'000'700);
}

TEST(LinkTransfers, TwoTransfersOnOneChannelShareIt) {
  LinkTransfers m(std::vector<double>{100e9});
  m.start_on(0, {0}, 0, 1'000'000'000);
  m.start_on(0, {0}, 0, 1'000'000'000);
  EXPECT_DOUBLE_EQ(m.rate(0), 50e9);
  const auto done = drain_all(m);
  ASSERT_EQ(done.size(), 2u);
  // 2 GB through 100 GB/s: both at 20 ms, in id order.
  EXPECT_EQ(done[0].id, 0);
  EXPECT_EQ(done[0].finish_ns, 20'000'000);
  EXPECT_EQ(done[1].id, 1);
  EXPECT_EQ(done[1].finish_ns, 20'000'000);
}

TEST(LinkTransfers, ALaterTransferSlowsAnEarlierOne) {
  LinkTransfers m(std::vector<double>{100e9});
  m.start_on(0, {0}, 0, 1'000'000'000);
  // A alone for 5 ms sends 0.5 GB; then both at 50 GB/s: A's last 0.5 GB takes 10 ms (done at
  // 15 ms) while B sends 0.5 GB; B's last 0.5 GB alone at 100 GB/s takes 5 ms (20 ms).
  EXPECT_TRUE(m.advance(5'000'000).empty());
  m.start_on(5'000'000, {0}, 0, 1'000'000'000);
  EXPECT_DOUBLE_EQ(m.rate(0), 50e9);
  EXPECT_EQ(m.next_finish(), 15'000'000);
  const auto done = drain_all(m);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].finish_ns, 15'000'000);
  EXPECT_EQ(done[1].finish_ns, 20'000'000);
}

// A transfer that sent its last byte before the next one starts (its latency still running, no
// advance() in between) has left the link: it neither shares it again nor finishes late.
TEST(LinkTransfers, ATransferDrainedBeforeTheNextStartsKeepsItsFinish) {
  LinkTransfers m(std::vector<double>{100e9});
  // A: 1 GB at 100 GB/s drains at 10 ms, finishes at 10 ms + 500 ms of latency.
  m.start_on(0, {0}, 500'000'000, 1'000'000'000);
  EXPECT_EQ(m.next_finish(), 510'000'000);
  // B starts at 20 ms, after A's data phase: alone on the link, at full rate.
  m.start_on(20'000'000, {0}, 500'000'000, 1'000'000'000);
  EXPECT_DOUBLE_EQ(m.rate(1), 100e9);
  EXPECT_DOUBLE_EQ(m.rate(0), 0);  // A is no longer sending
  const auto done = drain_all(m);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].finish_ns, 510'000'000);
  EXPECT_EQ(done[1].finish_ns, 530'000'000);
}

TEST(LinkTransfers, MaxMinFairShareAcrossPathsHandComputed) {
  // Channel X = 10 GB/s, channel Y = 4 GB/s. f1 crosses X, f2 crosses X and Y, f3 crosses Y.
  LinkTransfers m(std::vector<double>{10e9, 4e9});
  m.start_on(0, {0}, 0, 8'000'000'000);     // f1: 8 GB
  m.start_on(0, {0, 1}, 0, 4'000'000'000);  // f2: 4 GB
  m.start_on(0, {1}, 0, 1'000'000'000);     // f3: 1 GB
  // Y is the bottleneck: 2 GB/s each for f2 and f3; f1 gets the rest of X, 8 GB/s.
  EXPECT_DOUBLE_EQ(m.rate(0), 8e9);
  EXPECT_DOUBLE_EQ(m.rate(1), 2e9);
  EXPECT_DOUBLE_EQ(m.rate(2), 2e9);
  const auto done = drain_all(m);
  ASSERT_EQ(done.size(), 3u);
  // f3 done at 0.5 s (f1 has 4 GB left, f2 3 GB). Then X's fair share is 5 but f2 may use at
  // most Y's 4: f2 = 4, f1 = 6. f1's 4 GB take 2/3 s (done at 1.1667 s; f2 has 1/3 GB left),
  // then f2 alone at Y's 4 GB/s: 1/12 s more, done at 1.25 s.
  EXPECT_EQ(done[0].id, 2);
  EXPECT_EQ(done[0].finish_ns, 500'000'000);
  EXPECT_EQ(done[1].id, 0);
  EXPECT_NEAR(done[1].finish_ns, 1'166'666'667, 1);
  EXPECT_EQ(done[2].id, 1);
  EXPECT_NEAR(done[2].finish_ns, 1'250'000'000, 2);
}

TEST(LinkTransfers, OverATopologyPortsAreShared) {
  InterconnectSpec ports;
  ports[LinkKind::kNvlink] = {450e9, 1e-6};
  ports[LinkKind::kInfiniband] = {50e9, 2.5e-6};
  UniformTopologySpec s;
  s.nodes = 2;
  s.gpus_per_node = 2;
  const Topology t = build_uniform_topology(s, ports, "test");
  // GPU 0 -> 2 and GPU 1 -> 3: separate InfiniBand ports, 50 GB/s each: 1 GB in 20 ms + 5 us.
  std::vector<TimeNs> f =
      transfer_finish_times(t, {{0, 0, 2, 1'000'000'000}, {0, 1, 3, 1'000'000'000}});
  EXPECT_EQ(f, (std::vector<TimeNs>{20'005'000, 20'005'000}));
  // GPU 0 -> 2 and GPU 0 -> 3: both leave through GPU 0's port: 25 GB/s each, 40 ms + 5 us.
  f = transfer_finish_times(t, {{0, 0, 2, 1'000'000'000}, {0, 0, 3, 1'000'000'000}});
  EXPECT_EQ(f, (std::vector<TimeNs>{40'005'000, 40'005'000}));
  // Inside a node over NVLink: 450 MB at 450 GB/s = 1 ms, + 2 us. A transfer to itself: 0.
  f = transfer_finish_times(t, {{100, 0, 1, 450'000'000}, {200, 3, 3, 1'000}});
  EXPECT_EQ(f, (std::vector<TimeNs>{1'002'100, 200}));
}

TEST(LinkTransfers, SameInputsGiveTheSameFinishes) {
  InterconnectSpec ports;
  ports[LinkKind::kNvlink] = {450e9, 1e-6};
  ports[LinkKind::kInfiniband] = {50e9, 2.5e-6};
  UniformTopologySpec s;
  s.nodes = 2;
  s.gpus_per_node = 4;
  const Topology t = build_uniform_topology(s, ports, "test");
  std::vector<TransferSpec> specs;
  for (int i = 0; i < 40; ++i) {
    specs.push_back({i * 37'000, (i * 3) % 8, (i * 5 + 1) % 8, (i % 7 + 1) * 13'000'000LL});
  }
  const std::vector<TimeNs> a = transfer_finish_times(t, specs);
  const std::vector<TimeNs> b = transfer_finish_times(t, specs);
  EXPECT_EQ(a, b);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    // Never faster than alone on the route.
    const Route r = t.route(specs[i].from, specs[i].to);
    const double alone = r.channels.empty() ? 0 : specs[i].bytes / r.bottleneck * 1e9;
    EXPECT_GE(a[i] - specs[i].start_ns, static_cast<TimeNs>(alone) + r.latency_ns - 1) << i;
  }
}

TEST(LinkTransfers, ManyTransfersOnALargeTopologyNeverBeatTheirBottleneck) {
  InterconnectSpec ports;
  ports[LinkKind::kNvlink] = {450e9, 1e-6};
  ports[LinkKind::kInfiniband] = {50e9, 2.5e-6};
  UniformTopologySpec s;
  s.nodes = 64;
  s.gpus_per_node = 8;
  const Topology t = build_uniform_topology(s, ports, "test");
  std::vector<TransferSpec> specs;
  for (int i = 0; i < 400; ++i) {
    // Prefill GPUs in the first half send to decode GPUs in the second, several at a time.
    specs.push_back({i * 50'000, (i * 7) % 256, 256 + (i * 13) % 256, 200'000'000});
  }
  const std::vector<TimeNs> f = transfer_finish_times(t, specs);
  // Conservation: what leaves GPU g's InfiniBand port cannot leave faster than 50 GB/s.
  std::vector<std::int64_t> sent(256, 0);
  std::vector<TimeNs> last(256, 0);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const Route r = t.route(specs[i].from, specs[i].to);
    EXPECT_GE(f[i] - specs[i].start_ns,
              static_cast<TimeNs>(specs[i].bytes / r.bottleneck * 1e9) + r.latency_ns - 1);
    sent[specs[i].from] += specs[i].bytes;
    last[specs[i].from] = std::max(last[specs[i].from], f[i]);
  }
  for (int g = 0; g < 256; ++g) {
    if (sent[g] > 0) {
      EXPECT_GE(last[g], static_cast<TimeNs>(sent[g] / 50e9 * 1e9)) << g;
    }
  }
}

TEST(LinkTransfers, ChannelsAddedLaterAreSharedToo) {
  LinkTransfers m(std::vector<double>{});
  EXPECT_EQ(m.add_channel(10e9), 0);
  EXPECT_EQ(m.add_channel(40e9), 1);
  EXPECT_THROW(m.add_channel(0), std::invalid_argument);
  // Two flows on channel 1 share its 40 GB/s; one on channel 0 has its 10 alone.
  m.start_on(0, {1}, 0, 1'000'000'000);
  m.start_on(0, {1}, 0, 1'000'000'000);
  m.start_on(0, {0}, 0, 1'000'000'000);
  EXPECT_DOUBLE_EQ(m.rate(0), 20e9);
  EXPECT_DOUBLE_EQ(m.rate(2), 10e9);
  const auto done = drain_all(m);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].finish_ns, 50'000'000);
  EXPECT_EQ(done[2].finish_ns, 100'000'000);
  EXPECT_EQ(m.add_channel(1e9), 2);
  EXPECT_THROW(m.start_on(200'000'000, {3}, 0, 1), std::invalid_argument);
}

TEST(LinkTransfers, TimeMustNotGoBackwards) {
  LinkTransfers m(std::vector<double>{1e9});
  m.advance(100);
  EXPECT_THROW(m.start_on(50, {0}, 0, 10), std::invalid_argument);
  EXPECT_THROW(m.start_on(100, {3}, 0, 10), std::invalid_argument);
}

}  // namespace
}  // namespace servelab
