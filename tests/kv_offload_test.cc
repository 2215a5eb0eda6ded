// Pinned prefixes and KV offload tiers (issue 22, items 4 and 5): the tiers' LRU demotion, the
// KV cache manager's loads from a tier and its pinned blocks, and whole simulations with the
// `prefix_cache:` and `kv_offload:` sections (hit tokens per tier, load time, config errors).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/kv_cache_manager.h"
#include "core/kv_offload_tiers.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace servelab::test_util;

constexpr std::int32_t kBs = 16;

BlockHash h(std::uint64_t i) { return BlockHash{i, i * 7 + 1}; }

TEST(KvOffloadTiers, LruEntriesMoveDownAndFallOffTheLastTier) {
  KvOffloadTiers tiers({2, 2});
  tiers.offload(h(1));
  tiers.offload(h(2));
  EXPECT_EQ(tiers.find(h(1)), kHostTier);
  tiers.offload(h(3));  // host full: h(1), the least recent, moves to disk
  EXPECT_EQ(tiers.find(h(1)), kDiskTier);
  EXPECT_EQ(tiers.find(h(3)), kHostTier);
  tiers.on_loaded(h(2), kHostTier);  // refreshed: h(3) is now the least recent on the host
  tiers.offload(h(4));
  EXPECT_EQ(tiers.find(h(3)), kDiskTier);
  EXPECT_EQ(tiers.find(h(2)), kHostTier);
  tiers.offload(h(5));  // h(2) down; disk (1, 3) overflows: h(1) dropped
  EXPECT_EQ(tiers.find(h(1)), -1);
  EXPECT_EQ(tiers.dropped_blocks(), 1);
  EXPECT_EQ(tiers.stats(kHostTier).stored_blocks, 5);
  EXPECT_EQ(tiers.stats(kHostTier).evicted_blocks, 3);
  EXPECT_EQ(tiers.stats(kHostTier).loaded_blocks, 1);
  EXPECT_EQ(tiers.stats(kDiskTier).stored_blocks, 3);
  // Offloaded again while on disk: back to the host, not in two tiers; the disk copy it lets go
  // is counted as the disk's eviction, so every tier holds stored - evicted blocks.
  const std::int64_t disk_evicted = tiers.stats(kDiskTier).evicted_blocks;
  tiers.offload(h(3));
  EXPECT_EQ(tiers.find(h(3)), kHostTier);
  EXPECT_NO_THROW(tiers.check_invariants());
  EXPECT_EQ(tiers.size(kHostTier), 2);
  EXPECT_LE(tiers.size(kDiskTier), 2);
  EXPECT_EQ(tiers.stats(kDiskTier).evicted_blocks, disk_evicted + 1);
  EXPECT_EQ(tiers.dropped_blocks(), 1);  // not lost: the fresh copy is on the host
  for (const int t : {kHostTier, kDiskTier}) {
    EXPECT_EQ(tiers.stats(t).stored_blocks - tiers.stats(t).evicted_blocks, tiers.size(t)) << t;
  }
  // Offloaded again while the host still holds it (a load copies): refreshed, not stored twice
  // (docs/metrics.md: the host's stored_blocks can be below kv_cache.offloaded_blocks).
  const std::int64_t stored = tiers.stats(kHostTier).stored_blocks;
  tiers.offload(h(3));
  EXPECT_EQ(tiers.stats(kHostTier).stored_blocks, stored);
  EXPECT_EQ(tiers.find(h(3)), kHostTier);
  EXPECT_THROW(KvOffloadTiers({}), std::invalid_argument);
  EXPECT_THROW(KvOffloadTiers({0}), std::invalid_argument);
}

Request make_req(RequestId id, std::uint64_t stream, std::uint32_t len) {
  return Request(make_request(id, 0, {{stream, 0, len}}, 4));
}

// Admits req as the scheduler would: lookup, allocate the rest, advance computed tokens.
PrefixHit admit(KvCacheManager& kv, Request& req) {
  PrefixHit hit = kv.get_computed_blocks(req);
  const std::int32_t n = req.num_tokens() - hit.num_tokens;
  EXPECT_TRUE(kv.allocate_slots(req, n, &hit));
  req.num_computed_tokens = hit.num_tokens + n;
  kv.check_invariants();
  return hit;
}

TEST(KvOffload, EvictedBlocksComeBackFromTheHostTier) {
  for (const bool offload_on : {false, true}) {
    BlockPool pool(5);  // 4 usable blocks
    KvOffloadTiers tiers({8});
    KvCacheOptions options;
    if (offload_on) options.offload = &tiers;
    KvCacheManager kv(pool, kBs, 1024, true, options);
    std::vector<TierLoad> loads;
    kv.set_load_sink(&loads);
    Request a = make_req(1, 100, 3 * kBs + 1);  // 4 blocks, 3 full
    admit(kv, a);
    kv.free(a);
    Request b = make_req(2, 200, 3 * kBs + 1);  // evicts a's cached blocks
    admit(kv, b);
    kv.free(b);
    Request a2 = make_req(3, 100, 3 * kBs + 1);
    const PrefixHit hit = admit(kv, a2);
    if (!offload_on) {
      EXPECT_EQ(hit.num_tokens, 0);
      EXPECT_TRUE(loads.empty());
      continue;
    }
    EXPECT_EQ(hit.num_tokens, 3 * kBs);
    ASSERT_EQ(loads.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(loads[i].tier, kHostTier);
      EXPECT_EQ(loads[i].dst, a2.block_table[i]);  // fresh device blocks, in position order
      EXPECT_NE(loads[i].dst, kNullBlock);
    }
    EXPECT_EQ(kv.stats().tier_hit_tokens[kHostTier], 3 * kBs);
    EXPECT_EQ(tiers.stats(kHostTier).loaded_blocks, 3);
    // The loaded blocks are registered again: a fourth request hits them on the device.
    Request a3 = make_req(4, 100, 3 * kBs + 1);
    loads.clear();
    const PrefixHit again = kv.get_computed_blocks(a3);
    EXPECT_EQ(again.num_tokens, 3 * kBs);
    EXPECT_TRUE(again.tiers.empty());
    kv.free(a2);
    kv.check_invariants();
    tiers.check_invariants();
  }
}

TEST(KvOffload, OffloadNeedsTheHashCache) {
  BlockPool pool(5);
  KvOffloadTiers tiers({8});
  KvCacheOptions options;
  options.offload = &tiers;
  EXPECT_THROW(KvCacheManager(pool, kBs, 1024, false, options), std::invalid_argument);
}

TEST(PinnedPrefix, PinnedBlocksAreHeldAndNeverEvicted) {
  BlockPool pool(9);  // 8 usable
  KvCacheManager kv(pool, kBs, 1024, true);
  const RequestSpec sys = make_request(0, 0, {{42, 0, 2 * kBs + 5}}, 1);
  EXPECT_EQ(kv.num_blocks_to_pin(sys), 2);
  EXPECT_EQ(kv.pin_prefix(sys), 2);
  EXPECT_EQ(kv.num_pinned_blocks(), 2);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  EXPECT_EQ(kv.num_blocks_to_pin(sys), 0);  // pinned already: found cached and held
  // Fill the rest of the pool twice over with other content: nothing evicts the pinned blocks.
  for (RequestId id = 1; id <= 4; ++id) {
    Request r = make_req(id, 1000 + id, 5 * kBs + 1);
    admit(kv, r);
    kv.free(r);
  }
  Request r(make_request(9, 0, {{42, 0, 2 * kBs}, {77, 0, 10}}, 4));
  const PrefixHit hit = admit(kv, r);
  EXPECT_EQ(hit.num_tokens, 2 * kBs);
  kv.free(r);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  kv.check_invariants();
}

const std::string kExperiment =
    "name: tiers\nseed: 3\nmodel: tiny\nhardware: H100-SXM\n"
    "serving: {block_size: 16, num_gpu_blocks: 40, max_model_len: 2048}\n"
    "workload:\n"
    "  type: multiturn\n  num_sessions: 12\n"
    "  session_arrival: {process: poisson, rate: 20}\n"
    "  turns: {dist: uniform, min: 3, max: 3}\n"
    "  think_time_s: {dist: exponential, mean: 0.2, max: 1}\n"
    "  first_prompt_len: {dist: uniform, min: 100, max: 200}\n"
    "  new_tokens: {dist: uniform, min: 20, max: 40}\n"
    "  output_len: {dist: uniform, min: 10, max: 20}\n"
    "  system_prompt: {num_prefixes: 2, length: 64, fraction: 1.0}\n";

// `{tokens: [1, 2, ..., n]}`: a pinned prompt of n literal tokens.
std::string literal_tokens(int n) {
  std::string s = "{tokens: [";
  for (int i = 1; i <= n; ++i) s += std::to_string(i) + (i < n ? ", " : "]}");
  return s;
}

RunOutput simulate(const std::string& extra) {
  const ExperimentConfig c =
      load_experiment_text(kExperiment + extra, "tiers.yaml", ".", "tiers", {});
  RunOptions o;
  o.write_files = false;
  return run_simulation(c, o);
}

TEST(KvOffloadSim, HostAndDiskTiersTurnLostPrefixesIntoHits) {
  const RunOutput none = simulate("");
  const RunOutput host = simulate("kv_offload: {host: {blocks: 40}}\n");
  const RunOutput both = simulate("kv_offload: {host: {blocks: 20}, disk: {blocks: 200}}\n");
  EXPECT_TRUE(none.summary.offload_tiers.empty());
  ASSERT_EQ(host.summary.offload_tiers.size(), 1u);
  ASSERT_EQ(both.summary.offload_tiers.size(), 2u);
  // The host tier finds prefixes the 40-block pool lost; the disk tier adds what the host lost.
  EXPECT_GT(host.summary.prefix_hit_tokens, none.summary.prefix_hit_tokens);
  EXPECT_GT(host.summary.offload_tiers[0].hit_tokens, 0);
  EXPECT_GT(both.summary.offload_tiers[1].hit_tokens, 0);
  EXPECT_GT(host.summary.offload_load_s, 0);
  // A hit is counted on every lookup (as vLLM counts), a load once per admitted block.
  EXPECT_GT(host.summary.offload_tiers[0].loaded_blocks, 0);
  EXPECT_LE(host.summary.offload_tiers[0].loaded_blocks * kBs,
            host.summary.offload_tiers[0].hit_tokens);
  // Page churn: with a tier, every block the pool evicts is offloaded; without one, none is.
  EXPECT_GT(none.summary.churn.evicted, 0);
  EXPECT_EQ(none.summary.churn.offloaded, 0);
  EXPECT_GT(host.summary.churn.offloaded, 0);
  EXPECT_EQ(host.summary.churn.offloaded, host.summary.churn.evicted);
  EXPECT_EQ(both.summary.churn.offloaded, both.summary.churn.evicted);
}

TEST(PinnedPrefixSim, PinnedSystemPromptsAreHitsFromTheFirstRequest) {
  const RunOutput plain = simulate("");
  const RunOutput pinned = simulate(
      "prefix_cache:\n  pinned:\n    - {shared_prefix: 0, length: 64}\n"
      "    - {shared_prefix: 1, length: 64}\n");
  EXPECT_EQ(plain.summary.pinned_blocks, -1);
  EXPECT_EQ(pinned.summary.pinned_blocks, 8);  // 2 prompts x 64 tokens / 16
  EXPECT_GT(pinned.summary.pinned_prefill_s, 0);
  EXPECT_GE(pinned.summary.prefix_hit_tokens, plain.summary.prefix_hit_tokens);
}

// A pinned shared prefix the workload never generates is an error naming the pinned entry and
// the workload key it is checked against: it would hold blocks that no request hits.
TEST(MemoryTiersConfig, PinnedSharedPrefixesMustBeTheWorkloads) {
  auto error_of = [](const std::string& text) {
    try {
      load_experiment_text(text, "p.yaml", ".", "p", {});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // The multiturn workload has system prompts 0 and 1 of 64 tokens.
  const std::string range =
      error_of(kExperiment + "prefix_cache: {pinned: [{shared_prefix: 2, length: 64}]}\n");
  EXPECT_NE(range.find("p.yaml:16:"), std::string::npos) << range;
  EXPECT_NE(range.find("prefix_cache.pinned[0]"), std::string::npos) << range;
  EXPECT_NE(range.find("expected 0 .. 1"), std::string::npos) << range;
  EXPECT_NE(range.find("workload.system_prompt.num_prefixes is 2"), std::string::npos) << range;
  const std::string longer =
      error_of(kExperiment + "prefix_cache: {pinned: [{shared_prefix: 1, length: 65}]}\n");
  EXPECT_NE(longer.find("length 65 is longer than the prefix"), std::string::npos) << longer;
  EXPECT_NE(longer.find("workload.system_prompt.length is 64"), std::string::npos) << longer;
  EXPECT_EQ(error_of(kExperiment + "prefix_cache: {pinned: [{shared_prefix: 1, length: 64}]}\n"),
            "no error");
  // A synthetic workload: its shared_prefix section, or none at all.
  const std::string synthetic =
      "name: p\nmodel: tiny\nhardware: H100-SXM\n"
      "workload: {type: synthetic, num_requests: 4, arrival: {process: poisson, rate: 1},\n"
      "  prompt_len: {dist: fixed, value: 100}, output_len: {dist: fixed, value: 4}";
  const std::string pin = "prefix_cache: {pinned: [{shared_prefix: 0, length: 16}]}\n";
  EXPECT_EQ(error_of(synthetic +
                     ",\n  shared_prefix: {num_prefixes: 1, length: 32, fraction: 1}}\n" + pin),
            "no error");
  const std::string none = error_of(synthetic + "}\n" + pin);
  EXPECT_NE(none.find("generates no shared prefixes"), std::string::npos) << none;
  EXPECT_NE(none.find("type synthetic"), std::string::npos) << none;
  // Literal tokens need no generator (a whole block of them: a shorter prefix pins nothing).
  std::string block = "1";
  for (int t = 2; t <= 16; ++t) block += ", " + std::to_string(t);
  EXPECT_EQ(error_of(synthetic + "}\nprefix_cache: {pinned: [{tokens: [" + block + "]}]}\n"),
            "no error");
}

TEST(MemoryTiersConfig, BadSectionsNameTheKey) {
  auto error_of = [](const std::string& extra) {
    try {
      simulate(extra);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("kv_offload: {host: {blocks: 4, gib: 1}}\n").find("kv_offload.host"),
            std::string::npos);
  EXPECT_NE(error_of("kv_offload: {hots: {blocks: 4}}\n").find("tiers.yaml:"), std::string::npos);
  EXPECT_NE(error_of("kv_offload: {host: {blocks: 4}, disk: {blocks: 8, read_gbps: -1}}\n")
                .find("read_gbps"),
            std::string::npos);
  EXPECT_NE(error_of("prefix_cache: {pinned: [{shared_prefix: 0}]}\n").find("length"),
            std::string::npos);
  EXPECT_NE(error_of("prefix_cache: {pinned: [{tokens: []}]}\n").find("tokens"), std::string::npos);
  // Bigger than the pool (39 usable blocks): an error naming the pinned entry.
  const std::string big = error_of("prefix_cache: {pinned: [" + literal_tokens(2000) + "]}\n");
  EXPECT_NE(big.find("prefix_cache.pinned"), std::string::npos) << big;
  EXPECT_NE(big.find("KV blocks"), std::string::npos) << big;
  EXPECT_NE(error_of("policies: {prefix_cache: none}\nkv_offload: {host: {blocks: 4}}\n")
                .find("needs prefix caching"),
            std::string::npos);
  EXPECT_NE(error_of("policies: {prefix_cache: radix}\nkv_offload: {host: {blocks: 4}}\n")
                .find("hash prefix cache"),
            std::string::npos);
  // A tier smaller than one block was made a tier of one block (more than the user gave).
  EXPECT_NE(error_of("kv_offload: {host: {gib: 0.000001}}\n").find("GiB holds no KV block of"),
            std::string::npos);
  // Contiguous KV turns caching off: said so, not "needs prefix caching" beside a hash cache.
  EXPECT_NE(error_of("policies: {prefix_cache: hash, allocation: contiguous}\n"
                     "kv_offload: {host: {blocks: 4}}\n")
                .find("policies.allocation: contiguous turns off"),
            std::string::npos);
  // A pinned prefix shorter than a block pins nothing (it was accepted and its prefill charged).
  EXPECT_NE(error_of("prefix_cache: {pinned: [{tokens: [1, 2, 3]}]}\n")
                .find("3 tokens, shorter than one KV block"),
            std::string::npos);
}

// The commands: a bad section exits 2 with FILE:LINE:COL and the key; the engine refuses the
// disk tier (simulated only).
TEST(MemoryTiersConfig, CommandsExitTwoNamingTheLine) {
  const fs::path dir = temp_dir("tiers_cli");
  write_file(dir / "e.yaml", kExperiment +
                                 "prefix_cache:\n  pinned:\n"
                                 "    - " +
                                 literal_tokens(5000) + "\n");
  const Cli big =
      run_sim("run " + (dir / "e.yaml").string() + " -q --out " + (dir / "out").string(), dir);
  EXPECT_EQ(big.code, 2) << big.err;
  EXPECT_NE(big.err.find("e.yaml:18:7"), std::string::npos) << big.err;
  EXPECT_NE(big.err.find("prefix_cache.pinned"), std::string::npos) << big.err;
  // The engine runs a host tier (tests/engine_tiers_test.cc), not a disk tier.
  write_file(dir / "o.yaml",
             kExperiment + "kv_offload:\n  host: {blocks: 8}\n  disk: {blocks: 8}\n");
  const std::string engine = servelab_program("engine") + " run " + (dir / "o.yaml").string() +
                             " -q --out " + (dir / "eout").string() + " > " +
                             (dir / "eo.txt").string() + " 2> " + (dir / "ee.txt").string();
  const int status = std::system(engine.c_str());
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 2);
  EXPECT_NE(read_file(dir / "ee.txt").find("o.yaml:18:"), std::string::npos)
      << read_file(dir / "ee.txt");
}

}  // namespace
}  // namespace servelab
