// The radix prefix cache (RadixPrefixCache, core/radix_prefix_cache.h): hand-worked scenarios
// for hits, locks and leaf-only LRU eviction at block size 4, and hash vs radix agreement on a
// workload with block-aligned shared prefixes.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "core/kv_cache_manager.h"
#include "core/radix_prefix_cache.h"
#include "core/radix_tree.h"
#include "core/scheduler.h"

namespace servelab {
namespace {

// A prefix cache plugin's maker (comparable, unlike PrefixCacheFactory).
using CacheMaker = decltype(&make_hash_prefix_cache);

using Ids = std::vector<BlockId>;
using Groups = std::vector<std::pair<std::uint64_t, std::uint32_t>>;  // (content id, length)

constexpr std::int32_t kBs = 4;

Request make(RequestId id, const Groups& groups) {
  std::vector<PromptSegment> segs;
  for (const auto& [cid, len] : groups) segs.push_back({cid, 0, len});
  return Request(make_request(id, 0, std::move(segs), 4));
}

KvCacheOptions radix_options() {
  KvCacheOptions o;
  o.prefix_cache = make_radix_prefix_cache;
  return o;
}

// Lookup, allocate the rest of the prompt, advance progress (what the scheduler does).
PrefixHit admit(KvCacheManager& kv, Request& req) {
  PrefixHit hit = kv.get_computed_blocks(req);
  const std::int32_t n = req.num_tokens() - hit.num_tokens;
  EXPECT_TRUE(kv.allocate_slots(req, n, &hit));
  kv.check_invariants();
  req.num_computed_tokens = hit.num_tokens + n;
  return hit;
}

void release(KvCacheManager& kv, Request& req) {
  kv.free(req);
  kv.check_invariants();
}

// 10 usable blocks, block size 4. A = stream 1 (12 tokens) + stream 2 (2 tokens); B shares A's
// first 12 tokens, then 5 of stream 3.
class RadixScenario : public ::testing::Test {
 protected:
  RadixScenario() : pool_(11), kv_(pool_, kBs, 1024, true, radix_options()) {}
  BlockPool pool_;
  KvCacheManager kv_;
};

TEST_F(RadixScenario, HitsLocksAndLeafFirstEviction) {
  const RadixTree& tree = *radix_tree_of(kv_.prefix_cache());
  // A: 14 tokens in blocks 1-4; its 3 full blocks become the path 1 -> 2 -> 3, each referenced
  // by A and the tree (locked).
  Request a = make(0, {{1, 12}, {2, 2}});
  EXPECT_EQ(admit(kv_, a).num_tokens, 0);
  EXPECT_EQ(a.block_table, (Ids{1, 2, 3, 4}));
  EXPECT_EQ(tree.num_nodes(), 3);
  EXPECT_EQ(tree.num_unlocked(), 0);
  EXPECT_EQ(tree.parent(3), 2);
  EXPECT_EQ(tree.parent(2), 1);
  EXPECT_EQ(tree.parent(1), kNullBlock);
  EXPECT_EQ(pool_.ref_count(1), 2);
  EXPECT_EQ(pool_.ref_count(4), 1);  // partial: never a node
  EXPECT_FALSE(tree.contains(4));
  EXPECT_EQ(kv_.num_free_blocks(), 6);

  // B hits the 12 shared tokens (3 blocks) and takes blocks 5 (full: node under 3) and 6.
  Request b = make(1, {{1, 12}, {3, 5}});
  const PrefixHit hb = admit(kv_, b);
  EXPECT_EQ(hb.num_tokens, 12);
  EXPECT_EQ(b.block_table, (Ids{1, 2, 3, 5, 6}));
  EXPECT_EQ(tree.parent(5), 3);
  EXPECT_EQ(pool_.ref_count(3), 3);  // A, B, tree
  EXPECT_EQ(kv_.stats().queried_tokens, 14 + 17);
  EXPECT_EQ(kv_.stats().hit_tokens, 12);

  // A ends: its nodes stay locked by B.
  release(kv_, a);
  EXPECT_EQ(tree.num_unlocked(), 0);
  EXPECT_TRUE(tree.eviction_order().empty());
  // B ends: released tail first, so 5 (the leaf) gets the oldest tick; 3, 2, 1 are unlocked
  // but interior, so only 5 can be evicted.
  release(kv_, b);
  EXPECT_EQ(tree.num_unlocked(), 4);
  EXPECT_EQ(tree.eviction_order(), (Ids{5}));
  EXPECT_EQ(pool_.num_free_blocks(), 6);  // 7, 8, 9, 10, 4, 6
  EXPECT_EQ(kv_.num_free_blocks(), 10);

  // C needs 7 blocks: the 6 free ones first, then one eviction, the leaf 5; its parent 3 becomes
  // the next leaf.
  Request c = make(2, {{9, 28}});
  EXPECT_EQ(admit(kv_, c).num_tokens, 0);
  EXPECT_EQ(c.block_table, (Ids{7, 8, 9, 10, 4, 6, 5}));
  EXPECT_EQ(tree.num_evictions(), 1);
  EXPECT_EQ(tree.eviction_order(), (Ids{3}));
  // C's 7 full blocks are a new branch of 7 locked nodes.
  EXPECT_EQ(tree.num_nodes(), 3 + 7);

  // D needs 2: the leaf 3 goes, then 2 (a leaf only once 3 is gone); 1 stays.
  Request d = make(3, {{8, 5}});
  admit(kv_, d);
  EXPECT_EQ(d.block_table, (Ids{3, 2}));
  EXPECT_EQ(tree.num_evictions(), 3);
  EXPECT_TRUE(tree.contains(1));
  EXPECT_FALSE(tree.contains(2));
  EXPECT_EQ(tree.eviction_order(), (Ids{1}));

  // E shares stream 1: it hits node 1 only (4 tokens); locking it empties the eviction order.
  Request e = make(4, {{1, 12}, {5, 1}});
  PrefixHit he = kv_.get_computed_blocks(e);
  EXPECT_EQ(he.blocks, (Ids{1}));
  // 13 tokens need 4 blocks: node 1 (unlocked: it counts against the free capacity) plus 3
  // fresh; only node 1 is free capacity, C and D hold the rest.
  EXPECT_EQ(kv_.num_blocks_to_allocate(e, 9, &he), 4);
  EXPECT_EQ(kv_.num_free_blocks(), 1);
  EXPECT_FALSE(kv_.allocate_slots(e, 9, &he));  // all or nothing
  kv_.check_invariants();

  // Locks prevent eviction: with C and D running, nothing but node 1 can go.
  // D's full block 3 became a node (stream 8's first 4 tokens); its partial block 2 is freed.
  release(kv_, d);
  EXPECT_TRUE(tree.contains(3));
  EXPECT_EQ(kv_.num_free_blocks(), 3);  // block 2 (partial) + nodes 3 and 1
  kv_.check_invariants();
  release(kv_, c);
  EXPECT_EQ(kv_.num_free_blocks(), 10);
  EXPECT_EQ(tree.num_unlocked(), tree.num_nodes());
}

// Among leaves, the least recently released goes first, whatever the insertion order.
TEST_F(RadixScenario, LeastRecentlyReleasedLeafFirst) {
  const RadixTree& tree = *radix_tree_of(kv_.prefix_cache());
  Request x = make(0, {{1, 4}, {2, 4}, {3, 1}});  // nodes: 1 -> 2
  Request y = make(1, {{1, 4}, {4, 4}, {5, 1}});  // hit 1; node 4 under 1
  admit(kv_, x);
  admit(kv_, y);
  EXPECT_EQ(x.block_table, (Ids{1, 2, 3}));
  EXPECT_EQ(y.block_table, (Ids{1, 4, 5}));
  release(kv_, y);  // 4 released first: the older leaf
  release(kv_, x);
  EXPECT_EQ(tree.eviction_order(), (Ids{4, 2}));
  // Touching 4 again (a hit) and releasing it makes it the newer one.
  Request y2 = make(2, {{1, 4}, {4, 4}, {6, 1}});
  EXPECT_EQ(admit(kv_, y2).num_tokens, 8);
  release(kv_, y2);
  EXPECT_EQ(tree.eviction_order(), (Ids{2, 4}));
  // 7 blocks are free in the pool; taking 9 evicts 2, then 4; 1 (interior until both are gone,
  // then the only leaf) stays.
  Request big = make(3, {{7, 36}});
  admit(kv_, big);
  EXPECT_EQ(tree.num_evictions(), 2);
  EXPECT_TRUE(tree.contains(1));
  release(kv_, big);
}

// A waiting request's match (the cache-aware orders' probe: num_cached_prefix_blocks with
// refresh, SGLang's match_prefix) refreshes the matched nodes, so the prefix it waits for is no
// longer the next eviction; a plain count (refresh off) changes nothing; the hash cache ignores it.
TEST_F(RadixScenario, AWaitingRequestsMatchRefreshesItsPrefix) {
  const RadixTree& tree = *radix_tree_of(kv_.prefix_cache());
  Request x = make(0, {{1, 4}, {2, 4}, {3, 1}});  // nodes: 1 -> 2
  Request y = make(1, {{4, 4}, {5, 1}});          // node 4
  admit(kv_, x);
  admit(kv_, y);
  release(kv_, x);  // 2 released first: the older leaf
  release(kv_, y);
  EXPECT_EQ(tree.eviction_order(), (Ids{2, 4}));
  Request waiting = make(2, {{1, 4}, {2, 4}, {6, 3}});
  EXPECT_EQ(kv_.num_cached_prefix_blocks(waiting), 2);
  EXPECT_EQ(tree.eviction_order(), (Ids{2, 4}));
  EXPECT_EQ(kv_.num_cached_prefix_blocks(waiting, /*refresh=*/true), 2);
  EXPECT_EQ(tree.eviction_order(), (Ids{4, 2}));
  kv_.check_invariants();
  EXPECT_EQ(kv_.stats().hit_tokens, 0);  // a probe is no hit

  BlockPool pool(11);
  KvCacheManager hash(pool, kBs, 1024, true);
  Request h = make(3, {{1, 4}, {2, 4}, {3, 1}});
  admit(hash, h);
  release(hash, h);
  Request w = make(4, {{1, 4}, {2, 4}, {6, 3}});
  EXPECT_EQ(hash.num_cached_prefix_blocks(w, /*refresh=*/true), 2);
  hash.check_invariants();
}

// The same workload through the scheduler with the hash cache and with the radix cache: on
// block-aligned shared prefixes, with a cache large enough that nothing is evicted, every
// request hits the same tokens.
TEST(RadixCacheTest, SameHitsAsHashOnBlockAlignedPrefixes) {
  auto run = [](CacheMaker mode) {
    BlockPool pool(4096);
    KvCacheOptions o;
    o.prefix_cache = mode;
    KvCacheManager kv(pool, 16, 4096, true, o);
    SchedulerConfig c;
    c.max_num_batched_tokens = 512;
    Scheduler s(c, kv, nullptr);
    // 60 requests: one of three system prompts of 32, 64 or 128 tokens (2, 4 or 8 blocks),
    // then a unique tail; several arrive at once, so some hit blocks registered in the same step.
    std::vector<std::int32_t> cached;
    TimeNs now = 0;
    RequestId id = 0;
    while (id < 60 || s.has_unfinished()) {
      for (int k = 0; k < 3 && id < 60; ++k, ++id) {
        const std::uint32_t sys = 32u << (id % 3);
        s.add_request(make_request(id, now,
                                   {{500 + id % 3, 0, sys},
                                    {9000 + id, 0, static_cast<std::uint32_t>(5 + id % 40)}},
                                   8),
                      now);
      }
      const StepPlan& plan = s.schedule(now);
      for (const ScheduledRequest& e : plan.requests) {
        if (e.num_cached_prefix > 0 || e.first_token == 0) cached.push_back(e.num_cached_prefix);
      }
      StepResult r;
      r.duration_ns = kNsPerMs;
      r.sampled_tokens.assign(plan.requests.size(), 0);
      now += kNsPerMs;
      s.complete(r, now);
      kv.check_invariants();
    }
    return std::make_pair(cached, kv.stats());
  };
  const auto [hash_cached, hash_stats] = run(make_hash_prefix_cache);
  const auto [radix_cached, radix_stats] = run(make_radix_prefix_cache);
  EXPECT_EQ(hash_cached, radix_cached);
  EXPECT_EQ(hash_stats.queried_tokens, radix_stats.queried_tokens);
  EXPECT_EQ(hash_stats.hit_tokens, radix_stats.hit_tokens);
  EXPECT_GT(radix_stats.hit_tokens, 0);
  // 57 of 60 requests hit their whole system prompt (the first of each kind misses).
  std::int64_t want = 0;
  for (RequestId id = 3; id < 60; ++id) want += 32 << (id % 3);
  EXPECT_EQ(radix_stats.hit_tokens, want);
}

}  // namespace
}  // namespace servelab
