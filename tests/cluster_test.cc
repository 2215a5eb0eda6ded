// Clusters: the `cluster:` section, the routers, the multi-replica simulator, prefill/decode
// disaggregation (Scheduler::add_prefilled_request, PrefillHandoff, KV transfers).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/scheduler.h"
#include "policies/registry.h"
#include "policies/router_prefix_index.h"
#include "serving/direct_kv_links.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "serving/kv_transfer.h"
#include "serving/model_config.h"
#include "serving/replica.h"
#include "sim/run.h"
#include "sim/sim_backend.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using namespace servelab::test_util;

const char* kWorkload =
    "workload:\n  type: synthetic\n  num_requests: 80\n  arrival: {process: poisson, rate: 200}\n"
    "  prompt_len: {dist: uniform, min: 20, max: 200}\n"
    "  output_len: {dist: uniform, min: 2, max: 40}\n"
    "  shared_prefix: {num_prefixes: 4, length: 64, fraction: 0.8}\n";

std::string experiment(const std::string& cluster, const std::string& extra = "") {
  return std::string("name: cl\nseed: 3\nmodel: tiny\nhardware: H100-SXM\nserving:\n") +
         "  block_size: 16\n  num_gpu_blocks: 96\n  max_model_len: 512\n" + extra + kWorkload +
         cluster;
}

ExperimentConfig load_text(const fs::path& dir, const std::string& text) {
  fs::create_directories(dir);
  const fs::path f = dir / "exp.yaml";
  write_file(f, text);
  return load_experiment(f.string(), {});
}

std::string load_error(const std::string& text) {
  const fs::path dir = temp_dir("cluster_err");
  try {
    load_text(dir, text);
  } catch (const ConfigError& e) {
    fs::remove_all(dir);
    return e.what();
  }
  fs::remove_all(dir);
  return "no error";
}

const char* kPd =
    "cluster:\n  router: round_robin\n  kv_transfer: {bandwidth_gb_s: 10, latency_us: 20}\n"
    "  pools:\n"
    "    - {name: p, count: 2, role: prefill}\n"
    "    - {name: d, count: 2, role: decode}\n";

TEST(ClusterConfig, ParsesPoolsAndDefaults) {
  const fs::path dir = temp_dir("cluster_cfg");
  const ExperimentConfig c = load_text(
      dir, experiment("cluster:\n  router: {name: prefix_affinity, cache_threshold: 0.5}\n"
                      "  pools:\n    - {count: 3}\n    - {name: big, model: tiny, count: 1}\n"));
  ASSERT_TRUE(c.cluster.set);
  ASSERT_EQ(c.cluster.pools.size(), 2u);
  EXPECT_EQ(c.cluster.pools[0].name, "pool0");
  EXPECT_EQ(c.cluster.pools[0].model, "tiny");
  EXPECT_EQ(c.cluster.pools[0].hardware, "H100-SXM");
  EXPECT_EQ(c.cluster.pools[0].role, ReplicaRole::kUnified);
  EXPECT_EQ(c.cluster.num_replicas(), 4);
  EXPECT_FALSE(c.cluster.disaggregated());
  EXPECT_EQ(c.cluster.router.name, "prefix_affinity");
  EXPECT_EQ(c.cluster.router.get_double("cache_threshold"), 0.5);
  const std::string yaml = resolved_config_yaml(c, {});
  EXPECT_NE(yaml.find("cluster:"), std::string::npos);
  EXPECT_NE(yaml.find("name: big"), std::string::npos);
  // No section: no cluster, and config.yaml says nothing of one.
  const ExperimentConfig plain = load_text(dir, experiment(""));
  EXPECT_FALSE(plain.cluster.set);
  EXPECT_EQ(resolved_config_yaml(plain, {}).find("cluster"), std::string::npos);
  fs::remove_all(dir);
}

// max_model_len unset: the fewest positions of a model the pools serve. The top-level model is
// only the pools' default: when every pool names its own, its positions do not count (a cluster
// of Llama-3-8B under a top-level Llama-2-7B rejected prompts over 4,096 tokens).
TEST(ClusterConfig, DefaultMaxModelLenComesFromThePoolsModels) {
  const fs::path dir = temp_dir("cluster_mml");
  const std::string head = "name: cl\nseed: 3\nmodel: Llama-2-7B\nhardware: H100-SXM\n";
  const ExperimentConfig own = load_text(
      dir, head + kWorkload + "cluster:\n  pools:\n    - {count: 2, model: Llama-3-8B}\n");
  EXPECT_EQ(own.scheduler.max_model_len, 8192);
  // summary.json's run.model names what the pools run, not the unused default.
  EXPECT_EQ(served_model(own), "Llama-3-8B");
  EXPECT_EQ(served_hardware(own), "H100-SXM");
  const ExperimentConfig inherits = load_text(
      dir, head + kWorkload +
               "cluster:\n  pools:\n    - {count: 2, model: Llama-3-8B}\n    - {count: 1}\n");
  EXPECT_EQ(inherits.scheduler.max_model_len, 4096);  // the second pool runs Llama-2-7B
  EXPECT_EQ(served_model(inherits), "Llama-3-8B + Llama-2-7B");
  EXPECT_EQ(load_text(dir, head + kWorkload).scheduler.max_model_len, 4096);
  fs::remove_all(dir);
}

// A pool's model or hardware file is found beside the experiment, as the top-level one is,
// whatever the current folder, and named by its absolute path from then on.
TEST(ClusterConfig, PoolFilesResolveBesideTheExperiment) {
  const fs::path dir = temp_dir("cluster_pool_files");
  fs::create_directories(dir / "cat");
  fs::copy_file(servelab_home() / "experiments/catalog/hardware/H100-SXM.yaml",
                dir / "cat" / "hw.yaml");
  const ExperimentConfig c =
      load_text(dir, experiment("cluster:\n  pools:\n    - {name: a, hardware: cat/hw.yaml}\n"));
  ASSERT_EQ(c.cluster.pools.size(), 1u);
  EXPECT_EQ(c.cluster.pools[0].hardware, (dir / "cat" / "hw.yaml").lexically_normal().string());
  fs::remove_all(dir);
}

TEST(ClusterConfig, BadClustersNameTheKey) {
  std::string e = load_error(experiment("cluster:\n  pools:\n    - {count: 1, role: decode}\n"));
  EXPECT_NE(e.find("exp.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("cluster.pools"), std::string::npos) << e;
  EXPECT_NE(e.find("needs a prefill pool"), std::string::npos) << e;
  e = load_error(experiment("cluster:\n  pools:\n    - {count: 1, role: prefill}\n"));
  EXPECT_NE(e.find("needs a decode pool"), std::string::npos) << e;
  e = load_error(experiment("cluster:\n  pools:\n    - {count: 1, role: leader}\n"));
  EXPECT_NE(e.find("unified"), std::string::npos) << e;
  EXPECT_NE(e.find("leader"), std::string::npos) << e;
  e = load_error(experiment("cluster:\n  pools:\n    - {count: 0}\n"));
  EXPECT_NE(e.find("count"), std::string::npos) << e;
  e = load_error(experiment("cluster:\n  router: fastest\n  pools:\n    - {count: 2}\n"));
  EXPECT_NE(e.find("round_robin"), std::string::npos) << e;  // lists the known routers
  EXPECT_NE(e.find("fastest"), std::string::npos) << e;
  e = load_error(experiment("cluster:\n  pools:\n    - {count: 2, model: no-such-model}\n"));
  EXPECT_NE(e.find("cluster.pools"), std::string::npos) << e;
  EXPECT_NE(e.find("no-such-model"), std::string::npos) << e;
  e = load_error(experiment("cluster:\n  pools:\n    - {count: 2, hardware: no-such-gpu}\n"));
  EXPECT_NE(e.find("no-such-gpu"), std::string::npos) << e;
  e = load_error(experiment("cluster:\n  pools:\n    - {count: 2, tensor_parallel: 2}\n"));
  EXPECT_NE(e.find("parallel: {tensor: N"), std::string::npos) << e;
  e = load_error(experiment("cluster:\n  pools:\n    - {name: a}\n    - {name: a}\n"));
  EXPECT_NE(e.find("used twice"), std::string::npos) << e;
  e = load_error(experiment("cluster:\n  pools:\n    - {name: ''}\n"));
  EXPECT_NE(e.find("cluster.pools[0].name': expected a non-empty pool name"), std::string::npos)
      << e;
  e = load_error(experiment("cluster:\n  pools: []\n"));
  EXPECT_NE(e.find("non-empty list"), std::string::npos) << e;
  e = load_error(experiment("cluster:\n  kv_transfer: {latency_us: 1}\n  pools:\n    - {}\n"));
  EXPECT_NE(e.find("only meaningful"), std::string::npos) << e;
  // A weighted router with every weight 0 would send everything to replica 0.
  e = load_error(experiment(
      "cluster:\n  router: {name: weighted, prefix_weight: 0, queue_weight: 0, kv_weight: 0}\n"
      "  pools:\n    - {count: 2}\n"));
  EXPECT_NE(
      e.find("key 'cluster.router': weighted: prefix_weight, queue_weight and kv_weight are all "
             "0, so every replica scores the same"),
      std::string::npos)
      << e;
}

// --- routers ---

std::unique_ptr<Router> make_router(const std::string& name, std::int32_t n,
                                    const std::map<std::string, ParamValue>& params = {},
                                    std::uint64_t seed = 1) {
  PolicySpec spec = default_policy_spec(PolicyKind::kRouter, name);
  for (const auto& [k, v] : params) spec.params[k] = v;
  SchedulerConfig scratch;
  RouterMaker maker;
  PolicyTarget t{&scratch, nullptr, seed, &maker};
  build_policy(PolicyKind::kRouter, spec, t);
  return maker({n, 16, seed});
}

std::vector<ReplicaLoad> loads(std::initializer_list<std::int32_t> outstanding) {
  std::vector<ReplicaLoad> v;
  std::uint32_t i = 0;
  for (std::int32_t o : outstanding) {
    ReplicaLoad l;
    l.replica = i++;
    l.outstanding = o;
    l.kv_blocks_usable = 100;
    v.push_back(l);
  }
  return v;
}

RequestSpec prompt(RequestId id, std::uint64_t stream, std::int32_t len) {
  return make_request(id, 0, {{stream, 0, static_cast<std::uint32_t>(len)}}, 4);
}

TEST(Routers, AllAreRegisteredAndListed) {
  for (const char* n : {"round_robin", "random", "least_outstanding", "least_kv_load",
                        "power_of_two", "prefix_affinity", "weighted", "session_affinity"}) {
    EXPECT_NE(PolicyRegistry::instance().find(PolicyKind::kRouter, n), nullptr) << n;
    EXPECT_EQ(make_router(n, 3)->name(), n);
  }
  EXPECT_NE(format_catalogue().find("router (cluster.router):"), std::string::npos);
}

TEST(Routers, RoundRobinAndLoadBased) {
  auto rr = make_router("round_robin", 3);
  const auto l = loads({5, 0, 9});
  std::vector<std::size_t> got;
  for (int k = 0; k < 4; ++k) got.push_back(rr->route(prompt(k, 1, 32), l));
  EXPECT_EQ(got, (std::vector<std::size_t>{0, 1, 2, 0}));
  EXPECT_EQ(make_router("least_outstanding", 3)->route(prompt(0, 1, 32), l), 1u);
  auto kv = loads({1, 1, 1});
  kv[0].kv_blocks_used = 50;
  kv[1].kv_blocks_used = 10;
  kv[2].kv_blocks_used = 10;
  kv[2].outstanding = 0;
  EXPECT_EQ(make_router("least_kv_load", 3)->route(prompt(0, 1, 32), kv), 2u);
}

TEST(Routers, RandomOnesAreSeededAndPowerOfTwoPicksTheLighter) {
  const auto l = loads({3, 3, 3, 3, 3, 3, 3, 3});
  auto a = make_router("random", 8, {}, 5), b = make_router("random", 8, {}, 5);
  auto c = make_router("random", 8, {}, 6);
  std::vector<std::size_t> ra, rb, rc;
  for (int k = 0; k < 50; ++k) {
    ra.push_back(a->route(prompt(k, 1, 32), l));
    rb.push_back(b->route(prompt(k, 1, 32), l));
    rc.push_back(c->route(prompt(k, 1, 32), l));
  }
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, rc);
  EXPECT_GT(std::set<std::size_t>(ra.begin(), ra.end()).size(), 4u);
  // With one idle replica among two, power of two never picks the loaded one when both are
  // sampled, so it picks the idle one at least as often as a coin would.
  auto p2 = make_router("power_of_two", 2);
  const auto two = loads({7, 0});
  for (int k = 0; k < 20; ++k) EXPECT_EQ(p2->route(prompt(k, 1, 32), two), 1u);
}

TEST(Routers, PrefixAffinityFollowsTheCacheUnlessImbalanced) {
  auto r = make_router("prefix_affinity", 3, {{"balance_abs_threshold", std::int64_t{4}}});
  const auto even = loads({0, 0, 0});
  // Three different prefixes spread out (the least-cached replica each time).
  const std::size_t a = r->route(prompt(0, 100, 160), even);
  const std::size_t b = r->route(prompt(1, 200, 160), even);
  const std::size_t c = r->route(prompt(2, 300, 160), even);
  EXPECT_EQ(std::set<std::size_t>({a, b, c}).size(), 3u);
  // A request sharing prefix 200 goes where 200 went, even if that replica is a bit busier.
  auto busier = loads({0, 0, 0});
  busier[b].outstanding = 3;
  EXPECT_EQ(r->route(prompt(3, 200, 200), busier), b);
  // Past the imbalance threshold the least loaded replica wins.
  auto imbalanced = loads({1, 1, 1});
  imbalanced[b].outstanding = 20;
  const std::size_t got = r->route(prompt(4, 200, 200), imbalanced);
  EXPECT_NE(got, b);
}

TEST(Routers, PrefixIndexForgetsTheLeastRecentlySentBlocks) {
  RouterPrefixIndex index(2, 16);
  std::vector<std::vector<BlockHash>> prompts;
  for (int k = 0; k < 400; ++k) prompts.push_back(index.prompt_hashes(prompt(k, 1000 + k, 160)));
  ASSERT_EQ(prompts[0].size(), 10u);
  // 400 prompts of 10 blocks into a 1,000-block memory: the last 100 prompts stay.
  for (const auto& p : prompts) index.insert(0, p, 1000);
  EXPECT_EQ(index.size(0), 1000);
  EXPECT_EQ(index.size(1), 0);
  for (int k = 0; k < 400; ++k) {
    EXPECT_EQ(index.matched_blocks(0, prompts[k]), k >= 300 ? 10 : 0) << k;
    EXPECT_EQ(index.matched_blocks(1, prompts[k]), 0);
  }
  // Sending an old prompt again refreshes it; it then outlives newer ones.
  index.insert(0, prompts[300], 1000);
  index.insert(0, index.prompt_hashes(prompt(999, 5000, 160)), 1000);
  EXPECT_EQ(index.matched_blocks(0, prompts[300]), 10);
  EXPECT_EQ(index.matched_blocks(0, prompts[301]), 0);
  EXPECT_EQ(index.size(0), 1000);
  // A shared prefix matches as far as it goes.
  RequestSpec longer = prompt(1, 1300, 160);
  longer.prompt.push_back({77, 0, 64});
  longer.prompt_len += 64;
  EXPECT_EQ(index.matched_blocks(0, index.prompt_hashes(longer)), 10);
}

TEST(Routers, WeightedAndSessionAffinity) {
  auto w = make_router("weighted", 2, {{"prefix_weight", 0.0}, {"kv_weight", 0.0}});
  EXPECT_EQ(w->route(prompt(0, 1, 64), loads({4, 2})), 1u);  // queue score only
  auto s = make_router("session_affinity", 3);
  RequestSpec first = prompt(0, 1, 32);
  first.session = 7;
  EXPECT_EQ(s->route(first, loads({2, 0, 1})), 1u);  // least outstanding
  RequestSpec later = prompt(1, 1, 64);
  later.session = 7;
  EXPECT_EQ(s->route(later, loads({0, 9, 0})), 1u);  // sticks to its session
}

// --- P/D pieces ---

DirectKvLinks ports_of(KvLinkLayout layout, double bytes_per_s) {
  return DirectKvLinks(layout, [bytes_per_s](std::uint32_t) { return bytes_per_s; });
}

TEST(KvTransfer, PairLinksSerialiseAndAddLatency) {
  DirectLinkKvTransfer t(ports_of(KvLinkLayout::kPerPair, 1e9), 1000);
  const KvTransferTimes a = t.transfer(1'000'000, 0, 1, 0);  // 1 ms on the wire
  EXPECT_EQ(a.begin, 0);
  EXPECT_EQ(a.finish, 1000 + 1'000'000);
  // Queues behind a's data, not its latency: the link is free once a's last byte has left
  // (as over a topology's links and under `sharing: fair`).
  const KvTransferTimes b = t.transfer(1'000'000, 0, 1, 10);
  EXPECT_EQ(b.begin, 1'000'000);
  EXPECT_EQ(b.finish, 2'000'000 + 1000);
  const KvTransferTimes c = t.transfer(1'000'000, 0, 2, 10);  // another link: no wait
  EXPECT_EQ(c.begin, 10);
}

TEST(KvTransfer, AReplicasPortCarriesOneTransferAtATimeEachWay) {
  // Ports of 1 GB/s (1 B/ns), replica 5's of 0.5 GB/s.
  DirectLinkKvTransfer t(DirectKvLinks(KvLinkLayout::kPerReplica,
                                       [](std::uint32_t r) { return r == 5 ? 0.5e9 : 1e9; }),
                         1000);
  EXPECT_EQ(t.transfer(1'000'000, 0, 1, 0).begin, 0);
  // Out of 0 again, to another replica: waits for 0's port (a pair link would not).
  const KvTransferTimes b = t.transfer(1'000'000, 0, 2, 10);
  EXPECT_EQ(b.begin, 1'000'000);
  EXPECT_EQ(b.finish, 2'000'000 + 1000);
  // Into 1 from another replica: waits for 1's port in; 3's port out is booked from 1 to 2 ms.
  EXPECT_EQ(t.transfer(1'000'000, 3, 1, 10).begin, 1'000'000);
  // Out of 3 into 2: both ports are idle until 1 ms (backfilled), then both busy until 2 ms: the
  // last 10 ns leave after that.
  const KvTransferTimes e = t.transfer(1'000'000, 3, 2, 10);
  EXPECT_EQ(e.begin, 10);
  EXPECT_EQ(e.finish, 2'000'010 + 1000);
  // 1 -> 0 runs the other way of both ports: no wait. 4 -> 5 at the slower port's rate.
  EXPECT_EQ(t.transfer(1'000'000, 1, 0, 10).begin, 10);
  const KvTransferTimes f = t.transfer(1'000'000, 4, 5, 10);
  EXPECT_EQ(f.begin, 10);
  EXPECT_EQ(f.finish, 10 + 2'000'000 + 1000);
  // The same calls over pair links: every one of them starts at once.
  DirectLinkKvTransfer pairs(ports_of(KvLinkLayout::kPerPair, 1e9), 1000);
  EXPECT_EQ(pairs.transfer(1'000'000, 0, 1, 0).begin, 0);
  EXPECT_EQ(pairs.transfer(1'000'000, 0, 2, 10).begin, 10);
  EXPECT_EQ(pairs.transfer(1'000'000, 3, 1, 10).begin, 10);
}

TEST(KvTransfer, DirectLinksRefuseAPortOfNoBandwidth) {
  DirectLinkKvTransfer t(ports_of(KvLinkLayout::kPerReplica, 0), 1000);
  EXPECT_THROW(t.transfer(1, 0, 1, 0), std::invalid_argument);
  EXPECT_THROW(DirectLinkKvTransfer(ports_of(KvLinkLayout::kPerPair, 1e9), -1),
               std::invalid_argument);
}

TEST(KvTransfer, LayerwisePiecesLeaveAsTheirLayersAreComputed) {
  DirectLinkKvTransfer t(ports_of(KvLinkLayout::kPerPair, 1e9), 1000);  // 1 B/ns
  // 1 MB ready at 0, 1 MB ready at 5 ms: the second waits for its layer, not for the link.
  const std::vector<KvPiece> pieces{{1'000'000, 0}, {1'000'000, 5'000'000}};
  const KvTransferTimes a = t.transfer_pieces(pieces, 0, 1);
  EXPECT_EQ(a.begin, 0);
  EXPECT_EQ(a.finish, 6'000'000 + 1000);  // latency once, after the last piece
  // Pieces ready faster than the link sends them queue behind each other.
  const std::vector<KvPiece> dense{{1'000'000, 7'000'000}, {1'000'000, 7'000'001}};
  const KvTransferTimes b = t.transfer_pieces(dense, 0, 1);
  EXPECT_EQ(b.begin, 7'000'000);
  EXPECT_EQ(b.finish, 9'000'000 + 1000);
  // A transfer booked next with data ready earlier (a layer-wise one) fills the first idle gap
  // the earlier bookings left; a longer one is split over the gaps.
  EXPECT_EQ(t.transfer(10, 0, 1, 0).begin, 1'000'000);
  const KvTransferTimes c =
      t.transfer(6'000'000, 0, 1, 0);  // free: [1, 5) and [6, 7) ms, then from 9
  EXPECT_EQ(c.begin, 1'000'010);
  EXPECT_EQ(c.finish, 9'000'000 + 1'000'010 + 1000);
  EXPECT_THROW(t.transfer_pieces({}, 0, 1), std::invalid_argument);
}

TEST(KvTransfer, LayerwisePiecesFollowThePrefillSteps) {
  const auto bytes_of = [](const std::vector<KvPiece>& v) {
    std::int64_t sum = 0;
    for (const KvPiece& p : v) sum += p.bytes;
    return sum;
  };
  // Two chunks of a 100-token prompt, 4 layers: each chunk's share in 4 pieces, layer l ready at
  // (l + 1) / 4 of its step.
  std::vector<PrefillChunk> chunks{{0, 100, 60}, {100, 200, 40}};
  std::vector<KvPiece> p = layerwise_kv_pieces(1000, 100, chunks, 4, 999);
  ASSERT_EQ(p.size(), 8u);
  EXPECT_EQ(p[0].bytes, 150);
  EXPECT_EQ(p[0].ready, 25);
  EXPECT_EQ(p[3].ready, 100);
  EXPECT_EQ(p[4].bytes, 100);
  EXPECT_EQ(p[4].ready, 125);
  EXPECT_EQ(p[7].ready, 200);
  EXPECT_EQ(bytes_of(p), 1000);
  // A prefix hit of 70 tokens: their KV is there when the step that computes the rest starts.
  p = layerwise_kv_pieces(1000, 100, std::vector<PrefillChunk>{{10, 20, 30}}, 2, 999);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].bytes, 700);
  EXPECT_EQ(p[0].ready, 10);
  EXPECT_EQ(p[1].ready, 15);
  EXPECT_EQ(p[2].ready, 20);
  EXPECT_EQ(bytes_of(p), 1000);
  // Preempted and recomputed: only the last chunks, up to the prompt's length, count; the
  // earliest of them in part.
  chunks = {{0, 10, 80}, {20, 30, 50}, {40, 50, 50}};
  p = layerwise_kv_pieces(1000, 100, chunks, 1, 999);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].ready, 30);
  EXPECT_EQ(p[1].ready, 50);
  chunks = {{0, 10, 80}, {20, 30, 50}};
  p = layerwise_kv_pieces(1000, 100, chunks, 1, 999);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].bytes, 500);  // 50 of the first chunk's 80 tokens
  EXPECT_EQ(p[0].ready, 10);
  // Uneven splits still sum to the bytes; no chunk: one piece at the fallback.
  p = layerwise_kv_pieces(1001, 7, std::vector<PrefillChunk>{{0, 9, 4}, {9, 19, 3}}, 3, 19);
  EXPECT_EQ(bytes_of(p), 1001);
  for (std::size_t i = 1; i < p.size(); ++i) EXPECT_LE(p[i - 1].ready, p[i].ready);
  p = layerwise_kv_pieces(1000, 100, {}, 32, 999);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].ready, 999);
  // A step launched before the prefill's end was known (async scheduling) is not the prefill's.
  p = layerwise_kv_pieces(1000, 100, std::vector<PrefillChunk>{{0, 10, 100}, {10, 20, 1}}, 1, 10);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].bytes, 1000);
  EXPECT_EQ(p[0].ready, 10);
  EXPECT_THROW(layerwise_kv_pieces(1000, 0, {}, 32, 0), std::invalid_argument);
}

TEST(PrefilledRequest, DecodesWithoutRecomputingThePrompt) {
  SchedulerConfig sc;
  sc.block_size = 16;
  sc.max_model_len = 1024;
  BlockPool pool(64);
  KvCacheManager kv(pool, 16, 1024, true);
  Scheduler s(sc, kv, nullptr);
  RequestSpec spec = prompt(9, 42, 100);
  spec.max_output_tokens = 5;
  Scheduler::PrefilledState st;
  st.first_token_ns = 123;
  st.first_scheduled_ns = 100;
  s.add_prefilled_request(spec, st, 1000);
  const StepPlan& plan = s.schedule(1000);
  ASSERT_EQ(plan.requests.size(), 1u);
  EXPECT_EQ(plan.requests[0].first_token, 100);  // the first output token's KV
  EXPECT_EQ(plan.requests[0].num_tokens, 1);
  EXPECT_FALSE(plan.requests[0].is_prefill);
  EXPECT_EQ(plan.requests[0].block_table.size(), 7u);  // 101 tokens
  EXPECT_EQ(plan.num_prefill_tokens, 0);
  StepResult r;
  r.duration_ns = 1;
  r.sampled_tokens = {0};
  s.complete(r, 2000);
  EXPECT_EQ(s.num_running(), 1u);
  // A one-token request cannot be split.
  RequestSpec one = prompt(10, 42, 100);
  one.max_output_tokens = 1;
  EXPECT_THROW(s.add_prefilled_request(one, st, 3000), std::invalid_argument);
}

// --- simulations ---

std::map<std::string, std::string> run_files(const ExperimentConfig& c, const fs::path& out) {
  RunOptions o;
  o.out_dir = out.string();
  run_simulation(c, o);
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(out)) {
    files[e.path().filename().string()] = read_file(e.path());
  }
  return files;
}

TEST(ClusterRun, UnifiedReplicasShareTheWorkDeterministically) {
  const fs::path dir = temp_dir("cluster_run");
  ExperimentConfig c = load_text(
      dir, experiment("cluster:\n  router: least_outstanding\n  pools:\n    - {count: 3}\n"));
  c.outputs.record_events = true;
  c.outputs.record_schedule = true;
  const auto a = run_files(c, dir / "a");
  const auto b = run_files(c, dir / "b");
  EXPECT_EQ(a, b);  // byte-identical, every file
  const auto summary = nlohmann::json::parse(a.at("summary.json"));
  EXPECT_EQ(summary["requests"]["completed"], 80);
  const auto& pool = summary["cluster"]["pools"][0];
  EXPECT_EQ(pool["count"], 3);
  std::int64_t routed = 0;
  for (const auto& r : pool["replicas"]) {
    EXPECT_GT(r["requests_routed"].get<std::int64_t>(), 5) << r;  // all of them get work
    routed += r["requests_routed"].get<std::int64_t>();
  }
  EXPECT_EQ(routed, 80);
  const auto steps = read_csv(dir / "a" / "steps.csv");
  std::set<std::string> seen;
  for (const auto& row : steps) seen.insert(row.at("replica"));
  EXPECT_EQ(seen, (std::set<std::string>{"0", "1", "2"}));
  EXPECT_NE(a.at("events.csv").find(",route,replica=2"), std::string::npos);
  fs::remove_all(dir);
}

TEST(ClusterRun, OneReplicaClusterMatchesThePlainRun) {
  // The same replica behind a (trivial) router does the same work: requests.csv is identical.
  const fs::path dir = temp_dir("cluster_one");
  const ExperimentConfig plain = load_text(dir, experiment(""));
  const ExperimentConfig one = load_text(dir, experiment("cluster:\n  pools:\n    - {}\n"));
  const auto a = run_files(plain, dir / "a");
  const auto b = run_files(one, dir / "b");
  EXPECT_EQ(a.at("requests.csv"), b.at("requests.csv"));
  EXPECT_EQ(a.count("summary.json"), 1u);
  EXPECT_EQ(nlohmann::json::parse(a.at("summary.json")).count("cluster"), 0u);
  EXPECT_EQ(nlohmann::json::parse(b.at("summary.json")).count("cluster"), 1u);
  fs::remove_all(dir);
}

TEST(ClusterRun, PrefillDecodeDisaggregation) {
  const fs::path dir = temp_dir("cluster_pd");
  ExperimentConfig c = load_text(dir, experiment(kPd));
  c.outputs.record_events = true;
  c.outputs.record_schedule = true;
  const auto a = run_files(c, dir / "a");
  EXPECT_EQ(a, run_files(c, dir / "b"));
  const auto summary = nlohmann::json::parse(a.at("summary.json"));
  EXPECT_EQ(summary["requests"]["completed"], 80);
  const auto& pools = summary["cluster"]["pools"];
  EXPECT_EQ(pools[0]["role"], "prefill");
  EXPECT_EQ(pools[1]["role"], "decode");
  EXPECT_GT(pools[0]["prefill_tokens"].get<std::int64_t>(), 0);
  // Prefill replicas only compute prompts (a prompt cached but for its last token is a
  // one-token step, which the step counts call a decode token).
  EXPECT_LT(pools[0]["decode_tokens"].get<std::int64_t>(), 80);
  EXPECT_EQ(pools[1]["prefill_tokens"].get<std::int64_t>(), 0);  // decoders never recompute
  EXPECT_GT(pools[1]["decode_tokens"].get<std::int64_t>(), 0);
  const auto& t = summary["cluster"]["kv_transfers"];
  // Every request with more than one output token was transferred once.
  const auto requests = read_csv(dir / "a" / "requests.csv");
  std::int64_t multi = 0, outputs = 0;
  for (const auto& r : requests) {
    const std::int64_t n = std::stoll(r.at("output_tokens"));
    outputs += n;
    if (n >= 2) ++multi;
  }
  EXPECT_EQ(t["count"].get<std::int64_t>(), multi);
  EXPECT_GT(t["transfer_mean_ms"].get<double>(), 0.02);  // at least the 20 us latency
  EXPECT_EQ(summary["throughput"]["output_tokens"].get<std::int64_t>(), outputs);
  // Tokens: prefill replicas sample each first token; decode replicas the rest.
  EXPECT_EQ(pools[1]["decode_tokens"].get<std::int64_t>(), outputs - 80);
  EXPECT_NE(a.at("events.csv").find(",transfer,"), std::string::npos);
  EXPECT_NE(a.at("events.csv").find(",route_decode,replica="), std::string::npos);
  // TTFT is the prefill side's: never later than the first decode step.
  for (const auto& r : requests) {
    EXPECT_FALSE(r.at("ttft_ms").empty());
  }
  fs::remove_all(dir);
}

// RunOptions::before_step (the Python module's invariant checks) sees every replica's plans,
// prefill and decode ones included, and an exception from it stops the run.
TEST(ClusterRun, StepHookSeesEveryReplica) {
  const fs::path dir = temp_dir("cluster_hook");
  const ExperimentConfig c = load_text(dir, experiment(kPd));
  std::map<const Scheduler*, std::int64_t> steps;
  RunOptions o;
  o.out_dir = (dir / "a").string();
  o.before_step = [&](const Scheduler& s, const StepPlan&) { ++steps[&s]; };
  run_simulation(c, o);
  EXPECT_EQ(steps.size(), 4u);  // 2 prefill + 2 decode replicas
  std::int64_t total = 0;
  for (const auto& [scheduler, n] : steps) total += n;
  const auto summary = nlohmann::json::parse(read_file(dir / "a" / "summary.json"));
  std::int64_t recorded = 0;
  for (const auto& pool : summary["cluster"]["pools"])
    recorded += pool["steps"].get<std::int64_t>();
  EXPECT_EQ(total, recorded);
  // The hook runs before the step executes: a hook that throws stops the run.
  o.out_dir = (dir / "b").string();
  o.before_step = [calls = 0](const Scheduler&, const StepPlan&) mutable {
    if (++calls == 5) throw std::logic_error("invariant broken");
  };
  EXPECT_THROW(run_simulation(c, o), std::logic_error);
  fs::remove_all(dir);
}

TEST(ClusterRun, RequestsRefusedWholeAreNotSplit) {
  // 200 + 400 tokens exceed max_model_len 512: the prefill replica refuses each request (it
  // would have accepted its one-token prefill part), and nothing is transferred.
  const fs::path dir = temp_dir("cluster_refuse");
  std::string text = experiment(kPd);
  text.replace(text.find("output_len: {dist: uniform, min: 2, max: 40}"), 44,
               "output_len: {dist: fixed, value: 400}");
  text.replace(text.find("min: 20, max: 200"), 17, "min: 150, max: 200");
  const ExperimentConfig c = load_text(dir, text);
  RunOptions o;
  o.out_dir = (dir / "a").string();
  const RunOutput out = run_simulation(c, o);
  EXPECT_EQ(out.summary.rejected, 80);
  const auto summary = nlohmann::json::parse(read_file(dir / "a" / "summary.json"));
  EXPECT_EQ(summary["cluster"]["kv_transfers"]["count"], 0);
  fs::remove_all(dir);
}

// The engine runs unified pools only (engine/engine_cluster.h): P/D pools are refused at the pool.
TEST(ClusterRun, EngineRefusesPrefillDecodePoolsByName) {
  const fs::path dir = temp_dir("cluster_engine");
  fs::create_directories(dir);
  write_file(dir / "exp.yaml", experiment(kPd));
  const std::string cmd = servelab_program("engine") + " run " + (dir / "exp.yaml").string() +
                          " --out " + (dir / "out").string() + " > /dev/null 2> " +
                          (dir / "err.txt").string();
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  const std::string err = read_file(dir / "err.txt");
  EXPECT_NE(err.find("exp.yaml:"), std::string::npos) << err;
  EXPECT_NE(err.find("key 'cluster.pools[0].role' (pool 'p'): role prefill"), std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(dir / "out"));
  fs::remove_all(dir);
}

TEST(ClusterRun, SlowLinksDelayDecoding) {
  const fs::path dir = temp_dir("cluster_slow");
  std::string slow = kPd;
  slow.replace(slow.find("bandwidth_gb_s: 10"), 18, "bandwidth_gb_s: 0.001");
  const ExperimentConfig fast_c = load_text(dir, experiment(kPd));
  const ExperimentConfig slow_c = load_text(dir, experiment(slow));
  RunOptions o;
  o.write_files = false;
  const RunOutput fast = run_simulation(fast_c, o);
  const RunOutput slow_run = run_simulation(slow_c, o);
  EXPECT_EQ(slow_run.summary.completed, 80);
  EXPECT_GT(slow_run.summary.e2e_ms.p50, fast.summary.e2e_ms.p50 * 2);
  EXPECT_NEAR(slow_run.summary.ttft_ms.p50, fast.summary.ttft_ms.p50,
              fast.summary.ttft_ms.p50 * 0.01 + 0.01);  // the prefill side is unchanged
  // Slower than 1 MB/s is refused: transfers would end past the representable times.
  std::string slower = kPd;
  slower.replace(slower.find("bandwidth_gb_s: 10"), 18, "bandwidth_gb_s: 1e-300");
  try {
    load_text(dir, experiment(slower));
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("GB/s in [0.001, 1e6]"), std::string::npos) << e.what();
  }
}

// A link that the hardware file makes 1 B/s (host_link_gbps 0.001 x efficiency 1e-6, the P/D
// default with no kv_transfer.bandwidth_gb_s) would end transfers past the simulated clock's
// 2^62 ns: an error saying so (exit 2), not a wrapped time or an internal error.
TEST(ClusterRun, TransfersPastTheClocksHorizonAreErrors) {
  const fs::path dir = temp_dir("cluster_horizon");
  std::string hw = read_file(fs::path(default_catalog_dir()) / "hardware" / "H100-SXM.yaml");
  hw += "\n";
  std::string out;
  for (std::size_t at = 0; at < hw.size();) {
    const std::size_t end = hw.find('\n', at);
    const std::string line = hw.substr(at, end - at);
    at = end + 1;
    if (line.rfind("host_link_gbps:", 0) == 0) {
      out += "host_link_gbps: 0.001\n";
    } else if (line.rfind("  host_link:", 0) == 0) {
      out += "  host_link: 0.000001\n";
    } else {
      out += line + "\n";
    }
  }
  ASSERT_NE(out.find("  host_link: 0.000001"), std::string::npos);
  fs::create_directories(dir);
  write_file(dir / "slow.yaml", out);
  // Llama-3-8B's 128 KiB a token: a 7,000-token prompt's KV takes 29 years at 1 B/s.
  const ExperimentConfig c = load_text(
      dir, "name: horizon\nseed: 1\nmodel: Llama-3-8B\nhardware: " + (dir / "slow.yaml").string() +
               "\nworkload: {type: synthetic, num_requests: 20, arrival: {process: poisson, "
               "rate: 1000}, prompt_len: {dist: uniform, min: 7000, max: 8000}, output_len: "
               "{dist: uniform, min: 16, max: 32}}\n"
               "cluster:\n  pools:\n    - {name: p, count: 1, role: prefill}\n"
               "    - {name: d, count: 1, role: decode}\n");
  RunOptions o;
  o.write_files = false;
  try {
    run_simulation(c, o);
    FAIL() << "ran";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("past the end of the simulator's clock (2^62 ns, about "
                                         "146 years): the hardware's rates or link bandwidths "
                                         "are too slow"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// A request whose first token is EOS ends on the prefill replica, as on a unified one: it is
// not transferred and decoded further.
TEST(ClusterRun, AFirstTokenThatStopsEndsOnThePrefillReplica) {
  const fs::path dir = temp_dir("cluster_eos");
  std::string text = experiment(kPd);
  text.replace(text.find("output_len: {dist: uniform, min: 2, max: 40}"), 44,
               "output_len: {dist: uniform, min: 1, max: 4}\n  sampling: {max_tokens: 32}");
  const ExperimentConfig pd = load_text(dir / "pd", text);
  std::string unified = text;
  unified.replace(unified.find("cluster:"), std::string::npos,
                  "cluster:\n  pools:\n    - {count: 4}\n");
  const ExperimentConfig un = load_text(dir / "un", unified);
  run_files(pd, dir / "a");
  run_files(un, dir / "b");
  const auto outcome = [](const fs::path& f) {
    std::map<std::string, std::string> m;
    for (const auto& r : read_csv(f)) m[r.at("id")] = r.at("output_tokens") + "," + r.at("reason");
    return m;
  };
  const auto a = outcome(dir / "a" / "requests.csv");
  EXPECT_EQ(a, outcome(dir / "b" / "requests.csv"));
  std::int64_t first = 0, multi = 0;
  for (const auto& [id, o] : a) {
    if (o == "1,stop") ++first;
    if (o.rfind("1,", 0) != 0) ++multi;
  }
  EXPECT_GT(first, 5);  // output_len 1 is a first token that is EOS
  const auto summary = nlohmann::json::parse(read_file(dir / "a" / "summary.json"));
  EXPECT_EQ(summary["cluster"]["kv_transfers"]["count"].get<std::int64_t>(), multi);
  fs::remove_all(dir);
}

// The length cap sees a split request's real length at its arrival on the prefill replica, and
// the decode replica finishes it at the cap ("length (capped from N)").
TEST(ClusterRun, TheLengthCapAppliesToSplitRequests) {
  const fs::path dir = temp_dir("cluster_cap");
  // Every request arrives at once: most arrive while others wait at the prefill replica.
  std::string text = experiment(kPd,
                                "policies:\n  length_cap: {name: queue-length, max_tokens: 3, "
                                "when_waiting_over: 1}\n");
  text.replace(text.find("rate: 200"), 9, "rate: 1.0e9");
  const ExperimentConfig c = load_text(dir, text);
  run_files(c, dir / "a");
  std::int64_t capped = 0;
  for (const auto& r : read_csv(dir / "a" / "requests.csv")) {
    if (r.at("reason").rfind("length (capped from ", 0) != 0) continue;
    ++capped;
    EXPECT_EQ(r.at("output_tokens"), "3") << r.at("id");
  }
  EXPECT_GT(capped, 5);
  const auto summary = nlohmann::json::parse(read_file(dir / "a" / "summary.json"));
  EXPECT_EQ(summary["requests"]["capped"].get<std::int64_t>(), capped);
  fs::remove_all(dir);
}

// Layer-wise KV transfers over a slow link: most of each prompt's KV moves while the prefill
// runs, so decoding starts sooner; the prefill side is the same run.
TEST(ClusterRun, LayerwiseTransfersHideBehindThePrefill) {
  const fs::path dir = temp_dir("cluster_layerwise");
  // 100 MB/s: a prompt's KV takes about as long on the link as its prefill step.
  std::string slow = kPd;
  slow.replace(slow.find("bandwidth_gb_s: 10"), 18, "bandwidth_gb_s: 0.1");
  std::string layerwise = slow;
  layerwise.replace(layerwise.find("latency_us: 20}"), 15, "latency_us: 20, layerwise: true}");
  const ExperimentConfig whole_c = load_text(dir / "whole", experiment(slow));
  const ExperimentConfig layer_c = load_text(dir / "layer", experiment(layerwise));
  EXPECT_FALSE(whole_c.cluster.kv_transfer.layerwise);
  EXPECT_TRUE(layer_c.cluster.kv_transfer.layerwise);
  const auto a = run_files(whole_c, dir / "a");
  const auto b = run_files(layer_c, dir / "b");
  EXPECT_EQ(b, run_files(layer_c, dir / "c"));  // deterministic
  EXPECT_NE(b.at("config.yaml").find("layerwise: true"), std::string::npos);
  const auto sa = nlohmann::json::parse(a.at("summary.json"));
  const auto sb = nlohmann::json::parse(b.at("summary.json"));
  EXPECT_EQ(sb["requests"]["completed"], 80);
  const auto& ta = sa["cluster"]["kv_transfers"];
  const auto& tb = sb["cluster"]["kv_transfers"];
  EXPECT_EQ(ta["count"], tb["count"]);
  EXPECT_EQ(ta["bytes"], tb["bytes"]);
  // Whole transfers: exposed = wait + transfer; layer-wise ones expose less of the same bytes.
  EXPECT_NEAR(ta["exposed_mean_ms"].get<double>(),
              ta["wait_mean_ms"].get<double>() + ta["transfer_mean_ms"].get<double>(), 1e-6);
  EXPECT_LT(tb["exposed_mean_ms"].get<double>(), ta["exposed_mean_ms"].get<double>() * 0.5);
  EXPECT_GT(tb["exposed_mean_ms"].get<double>(), 0.02);  // at least the latency
  // The prefill replicas' schedule is unchanged, so is TTFT; the decodes start sooner.
  EXPECT_EQ(sa["ttft_ms"], sb["ttft_ms"]);
  EXPECT_LT(sb["e2e_ms"]["p50"].get<double>(), sa["e2e_ms"]["p50"].get<double>());
  std::string e = load_error(
      experiment("cluster:\n  kv_transfer: {layerwise: maybe}\n  pools:\n    - {role: prefill}\n"
                 "    - {role: decode}\n"));
  EXPECT_NE(e.find("exp.yaml:17:"), std::string::npos) << e;
  EXPECT_NE(e.find("cluster.kv_transfer.layerwise': expected true or false"), std::string::npos)
      << e;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
