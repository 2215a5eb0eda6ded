// Adding a prefix cache in one file (docs/policies.md, "Adding a policy"): this file defines a
// PrefixCache the project does not ship, registers it with a PolicyRegistrar exactly as
// policies/prefix_cache.cc registers `hash` and `radix`, and uses it by name from an experiment.
//
// `shallow` caches only the first `depth` blocks of every sequence (a cache meant for system
// prompts, which leaves conversation tails out), over the pool's hash index like `hash`.
// Behaviour the tests pin: a request sharing a longer prefix hits only `depth` blocks, where
// `hash` hits them all; an experiment with shared system prompts gets a lower hit rate.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/prefix_cache.h"
#include "core/scheduler_config.h"
#include "policies/registry.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

class ShallowPrefixCache final : public PrefixCache {
 public:
  ShallowPrefixCache(BlockPool& pool, std::int32_t depth) : pool_(pool), depth_(depth) {}
  std::string_view name() const override { return "shallow"; }
  std::optional<BlockId> lookup(const BlockHash& hash) const override { return pool_.lookup(hash); }
  void insert(std::span<const BlockId> table, std::span<const BlockHash> hashes, std::int32_t from,
              std::int32_t to) override {
    for (std::int32_t i = from; i < std::min(to, depth_); ++i) {
      pool_.cache_block(table[i], hashes[i]);
    }
  }
  void forget(BlockId block) override { pool_.uncache_block(block); }
  std::int32_t num_evictable() const override { return pool_.num_free_cached_blocks(); }
  std::int64_t num_evictions() const override { return pool_.num_evictions(); }
  void check_invariants() const override {
    if (pool_.num_cached_blocks() > 0 && depth_ == 0) {
      throw std::logic_error("shallow: a block is cached at depth 0");
    }
  }

 private:
  BlockPool& pool_;
  std::int32_t depth_;
};

const PolicyRegistrar kShallow(
    {PolicyKind::kPrefixCache,
     "shallow",
     "only the first `depth` blocks of every sequence are cached",
     "tests/prefix_cache_plugin_test.cc (an example plugin)",
     {{"depth", ParamType::kInt, std::int64_t{1}, 0, 1 << 20, {}, "blocks cached per sequence"}},
     [](const PolicySpec& spec, PolicyTarget& t) {
       t.scheduler->enable_prefix_caching = true;
       if (t.kv_cache == nullptr) return;
       const auto depth = static_cast<std::int32_t>(spec.get_int("depth"));
       t.kv_cache->prefix_cache = [depth](BlockPool& pool) {
         return std::make_unique<ShallowPrefixCache>(pool, depth);
       };
     },
     /*rank=*/50});

RequestSpec Spec(RequestId id, std::uint64_t content, std::int32_t prompt) {
  std::vector<PromptSegment> segs;
  segs.push_back({content, 0, static_cast<std::uint32_t>(prompt)});
  return make_request(id, 0, std::move(segs), 4);
}

// Hit tokens of a second request with the same 80-token prompt (4 full blocks of 16 hittable)
// after the first has been allocated, under the cache `name` builds.
std::int32_t SecondHit(const std::string& name, std::int64_t depth = 1) {
  SchedulerConfig sc;
  KvCacheOptions kv_options;
  PolicyTarget target{&sc, &kv_options, 0};
  PolicySpec spec = default_policy_spec(PolicyKind::kPrefixCache, name);
  if (name == "shallow") spec.params["depth"] = depth;
  build_policy(PolicyKind::kPrefixCache, spec, target);
  BlockPool pool(32);
  KvCacheManager kv(pool, 16, 1024, sc.enable_prefix_caching, kv_options);
  Request first(Spec(0, 11, 80));
  Request second(Spec(1, 11, 80));
  const PrefixHit none = kv.get_computed_blocks(first);
  EXPECT_EQ(none.num_tokens, 0);
  EXPECT_TRUE(kv.allocate_slots(first, 80));
  first.num_computed_tokens = 80;
  const PrefixHit hit = kv.get_computed_blocks(second);
  kv.check_invariants();
  if (kv.prefix_cache() != nullptr) {
    EXPECT_EQ(kv.prefix_cache()->name(), name);
  }
  return hit.num_tokens;
}

TEST(PrefixCachePluginTest, RegisteredBesideTheBuiltIns) {
  EXPECT_EQ(PolicyRegistry::instance().names(PolicyKind::kPrefixCache),
            "hash, radix, none, shallow");
  EXPECT_NE(format_catalogue().find("blocks cached per sequence"), std::string::npos);
}

TEST(PrefixCachePluginTest, TheManagerUsesThePluginsCache) {
  EXPECT_EQ(SecondHit("hash"), 64);  // 4 of the 5 blocks: at least one token is computed
  EXPECT_EQ(SecondHit("radix"), 64);
  EXPECT_EQ(SecondHit("none"), 0);
  EXPECT_EQ(SecondHit("shallow", 1), 16);
  EXPECT_EQ(SecondHit("shallow", 3), 48);
  EXPECT_EQ(SecondHit("shallow", 0), 0);
}

TEST(PrefixCachePluginTest, AnExperimentUsesThePluginByName) {
  std::ifstream in(servelab_home() / "experiments/burst-tiny.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "  prefix_cache: hash\n";
  ASSERT_NE(text.find(from), std::string::npos);
  const std::filesystem::path dir = servelab::test_util::temp_dir("cache_plugin");
  const auto load = [&](const std::string& name, const std::string& cache) {
    std::string t = text;
    t.replace(t.find(from), from.size(), "  prefix_cache: " + cache + "\n");
    std::ofstream(dir / name) << t;
    return load_experiment((dir / name).string(), {});
  };
  RunOptions o;
  o.write_files = false;
  // burst-tiny's shared system prompts are 40 tokens: 2 full blocks of 16.
  const RunSummary hash = run_simulation(load("hash.yaml", "hash"), o).summary;
  const RunSummary one = run_simulation(load("one.yaml", "{name: shallow, depth: 1}"), o).summary;
  const RunSummary deep =
      run_simulation(load("deep.yaml", "{name: shallow, depth: 64}"), o).summary;
  std::filesystem::remove_all(dir);
  EXPECT_GT(hash.prefix_hit_rate, 0.0);
  EXPECT_GT(one.prefix_hit_rate, 0.0);
  EXPECT_LT(one.prefix_hit_rate, hash.prefix_hit_rate);
  // Deep enough for every sequence, `shallow` caches what `hash` caches: the same run.
  EXPECT_EQ(deep.prefix_hit_rate, hash.prefix_hit_rate);
  EXPECT_EQ(deep.ttft_ms.mean, hash.ttft_ms.mean);
}

}  // namespace
}  // namespace servelab
