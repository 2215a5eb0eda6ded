// KvCacheManager: prefix hits, all-or-nothing allocation, eager caching and free order, ported
// from vLLM v1's test_prefix_caching.py (schedulers.md section 6 part A).
//
// vLLM's "[i]*16" (16 copies of token i) becomes a 16-token segment of content stream i: equal
// groups are equal content and different groups differ, which is all the scenarios rely on.
#include "core/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/host_block_pool.h"
#include "core/radix_prefix_cache.h"
#include "core/radix_tree.h"

namespace servelab {
namespace {

// A prefix cache plugin's maker (comparable, unlike PrefixCacheFactory).
using CacheMaker = decltype(&make_hash_prefix_cache);

using Ids = std::vector<BlockId>;
using Groups = std::vector<std::pair<std::uint64_t, std::uint32_t>>;  // (content id, length)

constexpr std::int32_t kBs = 16;
constexpr std::int32_t kMaxLen = 8192;

// A request whose prompt is the given groups, each a segment starting at offset 0 of its stream.
Request make(RequestId id, const Groups& groups, std::int32_t max_output = 16) {
  std::vector<PromptSegment> segs;
  for (const auto& [cid, len] : groups) segs.push_back({cid, 0, len});
  return Request(make_request(id, 0, std::move(segs), max_output));
}

// common = [0]*16 + [1]*16 + [2]*16
Groups common_plus(std::uint64_t tail_cid, std::uint32_t tail_len) {
  return Groups{{0, 16}, {1, 16}, {2, 16}, {tail_cid, tail_len}};
}

// What the scheduler does around the manager for an admission: look up, allocate the rest of
// the prompt, and advance num_computed_tokens. Returns the hit.
PrefixHit admit(KvCacheManager& kv, Request& req) {
  PrefixHit hit = kv.get_computed_blocks(req);
  const std::int32_t n = req.num_tokens() - hit.num_tokens;
  EXPECT_TRUE(kv.allocate_slots(req, n, &hit));
  kv.pool().check_invariants();
  req.num_computed_tokens = hit.num_tokens + n;
  return hit;
}

void free_req(KvCacheManager& kv, Request& req) {
  kv.free(req);
  kv.pool().check_invariants();
}

void add_outputs(Request& req, int n) {
  for (int i = 0; i < n; ++i) req.output_tokens.push_back(100 + i);
}

// Scenarios A1-A4 share one history; each stage is its own test so a failure names the stage.
class PrefixCachingScenario : public ::testing::Test {
 protected:
  PrefixCachingScenario() : pool_(11), kv_(pool_, kBs, kMaxLen, true) {}

  // A1: cold prefill, then a hit while the owner still runs.
  void stage1() {
    const PrefixHit h0 = admit(kv_, req0_);
    EXPECT_TRUE(h0.blocks.empty());
    EXPECT_EQ(h0.num_tokens, 0);
    const PrefixHit h1 = admit(kv_, req1_);
    EXPECT_EQ(h1.blocks, (Ids{1, 2, 3}));
    EXPECT_EQ(h1.num_tokens, 48);
  }
  // A2: free req0, then req1.
  void stage2() {
    stage1();
    free_req(kv_, req0_);
    free_req(kv_, req1_);
  }
  // A3: a hit on blocks that are all free.
  void stage3() {
    stage2();
    hit2_ = admit(kv_, req2_);
  }

  BlockPool pool_;
  KvCacheManager kv_;
  Request req0_ = make(0, common_plus(3, 7));  // 55 tokens
  Request req1_ = make(1, common_plus(3, 5));  // 53 tokens
  Request req2_ = make(2, common_plus(3, 6));  // 54 tokens
  Request req3_ = make(3, Groups{{99, 160}});  // 10 full blocks
  PrefixHit hit2_;
};

TEST_F(PrefixCachingScenario, A1ColdPrefillThenHitWhileOwnerRuns) {
  stage1();
  EXPECT_EQ(req0_.block_table, (Ids{1, 2, 3, 4}));
  EXPECT_EQ(req1_.block_table, (Ids{1, 2, 3, 5}));
  for (BlockId b : {1, 2, 3}) {
    EXPECT_EQ(pool_.ref_count(b), 2) << b;
    EXPECT_EQ(pool_.block_hash(b), std::optional<BlockHash>(req0_.block_hashes()[b - 1])) << b;
  }
  // Partial last blocks carry no hash.
  EXPECT_EQ(pool_.block_hash(4), std::nullopt);
  EXPECT_EQ(pool_.block_hash(5), std::nullopt);
  EXPECT_EQ(pool_.num_free_blocks(), 5);
  EXPECT_EQ(req0_.num_cached_blocks(), 3);
  EXPECT_EQ(req1_.num_cached_blocks(), 3);
  // The shared prefix hashes the same in both requests.
  ASSERT_GE(req1_.block_hashes().size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(req0_.block_hashes()[i], req1_.block_hashes()[i]);
}

TEST_F(PrefixCachingScenario, A2FreeOrderIsNeverUsedThenTailsThenChainReversed) {
  stage2();
  EXPECT_EQ(pool_.num_free_blocks(), 10);
  EXPECT_EQ(pool_.free_queue(), (Ids{6, 7, 8, 9, 10, 4, 5, 3, 2, 1}));
  EXPECT_TRUE(req0_.block_table.empty());
  EXPECT_EQ(req0_.num_cached_blocks(), 0);
  // Hashes depend on content only: kept, with the 4th block's, hashed one block ahead.
  EXPECT_EQ(req0_.block_hashes().size(), 4u);
  // Freed full blocks stay findable (lazy eviction).
  EXPECT_EQ(pool_.num_free_cached_blocks(), 3);
}

TEST_F(PrefixCachingScenario, A3HitOnFreeBlocksTouchesThemOutOfTheQueue) {
  stage3();
  EXPECT_EQ(hit2_.blocks, (Ids{1, 2, 3}));
  EXPECT_EQ(req2_.block_table, (Ids{1, 2, 3, 6}));
  EXPECT_EQ(pool_.num_free_blocks(), 6);
  EXPECT_EQ(pool_.free_queue(), (Ids{7, 8, 9, 10, 4, 5}));
  free_req(kv_, req2_);
  EXPECT_EQ(pool_.free_queue(), (Ids{7, 8, 9, 10, 4, 5, 6, 3, 2, 1}));
}

TEST_F(PrefixCachingScenario, A4EvictionFollowsTheFreeQueue) {
  stage3();
  free_req(kv_, req2_);
  const PrefixHit h3 = admit(kv_, req3_);
  EXPECT_TRUE(h3.blocks.empty());
  EXPECT_EQ(req3_.block_table, (Ids{7, 8, 9, 10, 4, 5, 6, 3, 2, 1}));
  EXPECT_EQ(pool_.num_free_blocks(), 0);
  EXPECT_TRUE(pool_.free_queue().empty());
  // Only 1, 2 and 3 carried hashes; all three were evicted, and the common prefix is gone.
  EXPECT_EQ(pool_.num_evictions(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pool_.lookup(req0_.block_hashes()[i]), std::nullopt);
  // req3's own 10 full blocks are now the cache.
  EXPECT_EQ(req3_.num_cached_blocks(), 10);
  EXPECT_EQ(pool_.num_cached_blocks(), 10);
  EXPECT_EQ(pool_.lookup(req3_.block_hashes()[0]), std::optional<BlockId>(7));
}

// A6 (test_decode): decode allocates only when a block fills, and caches a block once full.
TEST(KvCacheManager, A6DecodeAllocatesOnlyWhenABlockFills) {
  BlockPool pool(11);
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request req = make(0, common_plus(3, 7), 64);  // 55 tokens
  admit(kv, req);
  EXPECT_EQ(req.block_table, (Ids{1, 2, 3, 4}));

  add_outputs(req, 4);  // 59 tokens: still inside block 4
  EXPECT_EQ(kv.num_blocks_to_allocate(req, 4), 0);
  ASSERT_TRUE(kv.allocate_slots(req, 4));
  pool.check_invariants();
  req.num_computed_tokens = 59;
  EXPECT_EQ(req.block_table, (Ids{1, 2, 3, 4}));
  EXPECT_EQ(pool.block_hash(4), std::nullopt);
  EXPECT_EQ(req.num_cached_blocks(), 3);

  add_outputs(req, 19);  // 78 tokens: block 4 fills and a 5th starts
  EXPECT_EQ(kv.num_blocks_to_allocate(req, 19), 1);
  ASSERT_TRUE(kv.allocate_slots(req, 19));
  pool.check_invariants();
  req.num_computed_tokens = 78;
  EXPECT_EQ(req.block_table, (Ids{1, 2, 3, 4, 5}));
  // Block 5 is hashed one block ahead (the request will fill it) but not registered yet.
  ASSERT_EQ(req.block_hashes().size(), 5u);
  EXPECT_EQ(req.block_hashes()[4], hash_block(req.block_hashes()[3], req.spec, 4, kBs));
  EXPECT_EQ(pool.block_hash(4), std::optional<BlockHash>(req.block_hashes()[3]));
  EXPECT_EQ(pool.block_hash(5), std::nullopt);
  EXPECT_EQ(pool.lookup(req.block_hashes()[4]), std::nullopt);
  EXPECT_EQ(req.num_cached_blocks(), 4);
  // Block 4 mixes prompt and output tokens; its hash follows the chain from block 3.
  EXPECT_EQ(req.block_hashes()[3], hash_block(req.block_hashes()[2], req.spec, 3, kBs));
}

// A7 (test_hash_block_correct_reuse): only full blocks are cached; a reused block loses its hash.
TEST(KvCacheManager, A7ReusedBlockHasItsHashCleared) {
  BlockPool pool(2);  // one usable block
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request full = make(0, Groups{{5, 16}});
  admit(kv, full);
  EXPECT_EQ(full.block_table, Ids{1});
  EXPECT_TRUE(pool.block_hash(1).has_value());
  free_req(kv, full);
  EXPECT_TRUE(pool.block_hash(1).has_value());  // still cached while free

  Request partial = make(1, Groups{{5, 15}});  // the first 15 tokens of the same content
  const PrefixHit h = admit(kv, partial);
  EXPECT_TRUE(h.blocks.empty());
  EXPECT_EQ(partial.block_table, Ids{1});
  EXPECT_EQ(pool.block_hash(1), std::nullopt);
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_TRUE(partial.block_hashes().empty());  // a 15-token request has no full block
}

// A12: the last token is always recomputed, so hits stop one block short on aligned prompts.
TEST(KvCacheManager, A12LookupLeavesTheLastTokenToCompute) {
  BlockPool pool(32);
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request owner = make(0, Groups{{7, 48}});
  admit(kv, owner);
  EXPECT_EQ(owner.num_cached_blocks(), 3);  // all 3 full blocks are cached...

  Request same = make(1, Groups{{7, 48}});
  const PrefixHit h = kv.get_computed_blocks(same);
  EXPECT_EQ(h.blocks, (Ids{1, 2}));  // ...but a 48-token lookup hits only 2
  EXPECT_EQ(h.num_tokens, 32);

  Request longer = make(2, Groups{{7, 49}});
  EXPECT_EQ(kv.get_computed_blocks(longer).num_tokens, 48);
  Request shorter = make(3, Groups{{7, 17}});
  EXPECT_EQ(kv.get_computed_blocks(shorter).num_tokens, 16);
  Request one = make(4, Groups{{7, 16}});
  EXPECT_EQ(kv.get_computed_blocks(one).num_tokens, 0);
  // Lookups never take references.
  EXPECT_EQ(pool.ref_count(1), 1);
}

TEST(KvCacheManager, TwoIdentical32TokenPromptsShareExactlyOneBlock) {
  BlockPool pool(11);
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request a = make(0, Groups{{1, 16}, {2, 16}});
  Request b = make(1, Groups{{1, 16}, {2, 16}});
  admit(kv, a);
  const PrefixHit h = kv.get_computed_blocks(b);
  ASSERT_EQ(h.blocks, Ids{1});
  EXPECT_EQ(kv.num_blocks_to_allocate(b, 16, &h), 1);
  ASSERT_TRUE(kv.allocate_slots(b, 16, &h));
  pool.check_invariants();
  EXPECT_EQ(a.block_table, (Ids{1, 2}));
  EXPECT_EQ(b.block_table, (Ids{1, 3}));
  EXPECT_EQ(pool.ref_count(1), 2);
  EXPECT_EQ(pool.ref_count(2), 1);
  // Block 3 is a duplicate of block 2: same hash, both registered, lookup gives the older one.
  EXPECT_EQ(pool.block_hash(3), pool.block_hash(2));
  EXPECT_EQ(pool.num_cached_blocks(), 3);
  EXPECT_EQ(pool.lookup(a.block_hashes()[1]), std::optional<BlockId>(2));
  // After the original is freed and evicted, the duplicate still serves the hash.
  free_req(kv, a);
  Ids scratch;
  pool.get_new_blocks(pool.num_free_blocks(), scratch);  // pops everything: evicts 2 (and not 1)
  pool.check_invariants();
  EXPECT_EQ(pool.lookup(a.block_hashes()[1]), std::optional<BlockId>(3));
  EXPECT_EQ(pool.lookup(a.block_hashes()[0]), std::optional<BlockId>(1));
}

TEST(KvCacheManager, Identical33TokenPromptHitsTwoBlocksAndComputesOneToken) {
  BlockPool pool(11);
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request a = make(0, Groups{{4, 33}});
  Request b = make(1, Groups{{4, 33}});
  admit(kv, a);
  const PrefixHit h = kv.get_computed_blocks(b);
  EXPECT_EQ(h.blocks, (Ids{1, 2}));
  ASSERT_TRUE(kv.allocate_slots(b, b.num_tokens() - h.num_tokens, &h));
  EXPECT_EQ(b.num_tokens() - h.num_tokens, 1);
  EXPECT_EQ(b.block_table, (Ids{1, 2, 4}));
  pool.check_invariants();
}

// test_eagle_enabled_removes_last_block: with EAGLE a hit drops its last matched block (a 48-token
// prompt of three full blocks matches two, then one); the statistics count what was kept.
TEST(KvCacheManager, EagleDropsTheLastMatchedBlock) {
  BlockPool pool(11);
  KvCacheOptions o;
  o.eagle = true;
  KvCacheManager kv(pool, kBs, kMaxLen, true, o);
  Request a = make(0, Groups{{4, 48}});
  Request b = make(1, Groups{{4, 48}});
  admit(kv, a);
  const PrefixHit h = kv.get_computed_blocks(b);
  EXPECT_EQ(h.blocks, (Ids{1}));
  EXPECT_EQ(h.num_tokens, kBs);
  EXPECT_EQ(kv.stats().hit_tokens, kBs);
  // One matched block: nothing is left.
  Request c = make(2, Groups{{4, 20}});
  EXPECT_TRUE(kv.get_computed_blocks(c).blocks.empty());
}

// test_prefill_not_enough_free_blocks_with_computed_blocks: hit blocks at reference count 0 sit
// in the free queue, so they count against the free blocks; a failed allocation changes nothing.
TEST(KvCacheManager, HitBlocksAtRefZeroCountAgainstFreeAndFailureChangesNothing) {
  BlockPool pool(11);
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request first = make(0, common_plus(3, 7));
  admit(kv, first);
  free_req(kv, first);  // queue: 5..10, 4, 3, 2, 1 with 1..3 cached
  Request filler = make(1, Groups{{50, 96}});
  admit(kv, filler);
  EXPECT_EQ(filler.block_table, (Ids{5, 6, 7, 8, 9, 10}));
  ASSERT_EQ(pool.free_queue(), (Ids{4, 3, 2, 1}));

  // 68 tokens: 3 hit blocks + 2 new = 5 blocks to take, but only 4 are free.
  Request big = make(2, common_plus(4, 20));
  const PrefixHit h = kv.get_computed_blocks(big);
  ASSERT_EQ(h.blocks, (Ids{1, 2, 3}));
  EXPECT_EQ(kv.num_blocks_to_allocate(big, 20, &h), 5);
  EXPECT_FALSE(kv.allocate_slots(big, 20, &h));
  pool.check_invariants();
  EXPECT_TRUE(big.block_table.empty());
  EXPECT_EQ(big.num_cached_blocks(), 0);
  EXPECT_EQ(pool.free_queue(), (Ids{4, 3, 2, 1}));
  for (BlockId b : {1, 2, 3}) EXPECT_EQ(pool.ref_count(b), 0);
  EXPECT_EQ(pool.num_evictions(), 0);

  // 58 tokens: 3 hit blocks + 1 new = 4 fits exactly.
  Request fits = make(3, common_plus(4, 10));
  const PrefixHit h2 = kv.get_computed_blocks(fits);
  EXPECT_EQ(kv.num_blocks_to_allocate(fits, 10, &h2), 4);
  ASSERT_TRUE(kv.allocate_slots(fits, 10, &h2));
  pool.check_invariants();
  EXPECT_EQ(fits.block_table, (Ids{1, 2, 3, 4}));
  EXPECT_EQ(pool.num_free_blocks(), 0);
}

TEST(KvCacheManager, RunningRequestAllocationIsAllOrNothing) {
  BlockPool pool(5);  // 4 usable
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request a = make(0, Groups{{1, 40}}, 100);
  Request b = make(1, Groups{{2, 16}}, 100);
  admit(kv, a);  // 3 blocks
  admit(kv, b);  // 1 block
  ASSERT_EQ(pool.num_free_blocks(), 0);
  add_outputs(a, 9);  // 49 tokens: needs a 4th block
  const Ids before = a.block_table;
  EXPECT_EQ(kv.num_blocks_to_allocate(a, 9), 1);
  EXPECT_FALSE(kv.allocate_slots(a, 9));
  pool.check_invariants();
  EXPECT_EQ(a.block_table, before);
  EXPECT_EQ(a.num_cached_blocks(), 2);
  // Decode that stays inside the last block needs nothing and succeeds even with no free block.
  EXPECT_TRUE(kv.allocate_slots(a, 8));
  free_req(kv, b);
  EXPECT_TRUE(kv.allocate_slots(a, 9));
  pool.check_invariants();
  EXPECT_EQ(a.block_table, (Ids{1, 2, 3, 4}));
  EXPECT_EQ(a.num_cached_blocks(), 3);
}

TEST(KvCacheManager, ChunkedPrefillCachesOnlyBlocksFullAfterEachChunk) {
  BlockPool pool(11);
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request a = make(0, Groups{{1, 55}});
  ASSERT_TRUE(kv.allocate_slots(a, 20));
  a.num_computed_tokens = 20;
  EXPECT_EQ(a.block_table, (Ids{1, 2}));
  EXPECT_EQ(a.num_cached_blocks(), 1);
  EXPECT_EQ(pool.num_cached_blocks(), 1);
  // Eager caching: another request already hits the first chunk's full block in the same step.
  Request b = make(1, Groups{{1, 55}});
  EXPECT_EQ(kv.get_computed_blocks(b).blocks, Ids{1});
  ASSERT_TRUE(kv.allocate_slots(a, 35));
  a.num_computed_tokens = 55;
  pool.check_invariants();
  EXPECT_EQ(a.block_table, (Ids{1, 2, 3, 4}));
  EXPECT_EQ(a.num_cached_blocks(), 3);
  EXPECT_EQ(kv.get_computed_blocks(b).blocks, (Ids{1, 2, 3}));
}

TEST(KvCacheManager, LookaheadSlotsAreNeverCached) {
  BlockPool pool(11);
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request a = make(0, Groups{{1, 20}});
  // Slots for 40 tokens while only 20 are known: 3 blocks, but only the first is full of content.
  ASSERT_TRUE(kv.allocate_slots(a, 40));
  pool.check_invariants();
  EXPECT_EQ(a.block_table.size(), 3u);
  EXPECT_EQ(a.num_cached_blocks(), 1);
  EXPECT_EQ(pool.num_cached_blocks(), 1);
}

TEST(KvCacheManager, SlotsAreCappedAtMaxModelLen) {
  BlockPool pool(11);
  KvCacheManager kv(pool, kBs, /*max_model_len=*/40, true);
  Request a = make(0, Groups{{1, 32}});
  a.num_computed_tokens = 0;
  EXPECT_EQ(kv.num_blocks_to_allocate(a, 64), 3);  // cdiv(min(64, 40), 16)
  ASSERT_TRUE(kv.allocate_slots(a, 64));
  EXPECT_EQ(a.block_table.size(), 3u);
  pool.check_invariants();
}

TEST(KvCacheManager, FreeReleasesLastBlockFirstAndKeepsHashes) {
  BlockPool pool(9);
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request a = make(0, Groups{{1, 70}});  // blocks 1..5, first 4 full
  admit(kv, a);
  EXPECT_EQ(a.block_table, (Ids{1, 2, 3, 4, 5}));
  const std::vector<BlockHash> hashes = a.block_hashes();
  free_req(kv, a);
  EXPECT_EQ(pool.free_queue(), (Ids{6, 7, 8, 5, 4, 3, 2, 1}));
  EXPECT_EQ(a.block_hashes(), hashes);
  EXPECT_EQ(a.num_cached_blocks(), 0);
  // Eviction then takes the chain's deep end before its root: after 5 pops, block 4 (the 4th
  // block) is gone while blocks 1..3 still serve a 3-block hit.
  Ids scratch;
  pool.get_new_blocks(5, scratch);
  pool.check_invariants();
  EXPECT_EQ(pool.lookup(hashes[3]), std::nullopt);
  Request b = make(1, Groups{{1, 70}});
  EXPECT_EQ(kv.get_computed_blocks(b).blocks, (Ids{1, 2, 3}));
}

TEST(KvCacheManager, ResumedRequestHitsItsOwnOutputBlocksAndCountsAsPreempted) {
  BlockPool pool(11);
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request a = make(0, Groups{{1, 40}}, 32);
  admit(kv, a);
  add_outputs(a, 10);  // 50 tokens: block 2 (tokens 32..47) now mixes prompt and output
  ASSERT_TRUE(kv.allocate_slots(a, 10));
  a.num_computed_tokens = 50;
  EXPECT_EQ(a.num_cached_blocks(), 3);
  const Ids table = a.block_table;
  EXPECT_EQ(kv.stats().lookups, 1);

  // Preempted by recompute: blocks freed, progress reset; the outputs stay part of the sequence.
  free_req(kv, a);
  a.num_computed_tokens = 0;
  a.num_preemptions = 1;
  const PrefixHit h = kv.get_computed_blocks(a);
  EXPECT_EQ(h.blocks, (Ids(table.begin(), table.begin() + 3)));  // floor(49 / 16) = 3
  EXPECT_EQ(kv.stats().lookups, 1);
  EXPECT_EQ(kv.stats().preempted_lookups, 1);
  EXPECT_EQ(kv.stats().preempted_queried_tokens, 50);
  EXPECT_EQ(kv.stats().preempted_hit_tokens, 48);
  ASSERT_TRUE(kv.allocate_slots(a, 2, &h));
  pool.check_invariants();
  // The cached prefix comes back; the partial 4th block is fresh, from the queue's head.
  EXPECT_EQ(a.block_table, (Ids{1, 2, 3, 5}));
  EXPECT_EQ(a.num_cached_blocks(), 3);

  // Another request with the same prompt hits only the prompt-only blocks: output tokens are
  // identified per request.
  Request other = make(1, Groups{{1, 40}}, 32);
  other.output_tokens.assign(10, 100);
  EXPECT_EQ(kv.get_computed_blocks(other).blocks, (Ids(table.begin(), table.begin() + 2)));
}

TEST(KvCacheManager, LookupStatisticsAccumulate) {
  BlockPool pool(11);
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request a = make(0, common_plus(3, 7));  // 55
  Request b = make(1, common_plus(3, 5));  // 53
  admit(kv, a);
  admit(kv, b);
  kv.get_computed_blocks(b);  // a repeated lookup is recorded again
  const PrefixCacheStats& s = kv.stats();
  EXPECT_EQ(s.lookups, 3);
  EXPECT_EQ(s.queried_tokens, 55 + 53 + 53);
  EXPECT_EQ(s.hit_tokens, 0 + 48 + 48);
  EXPECT_EQ(s.preempted_lookups, 0);
  EXPECT_EQ(s.preempted_queried_tokens, 0);
  EXPECT_EQ(s.preempted_hit_tokens, 0);
}

TEST(KvCacheManager, CachingOffDoesNoLookupsHashingOrRegistration) {
  BlockPool pool(11);
  KvCacheManager kv(pool, kBs, kMaxLen, false);
  EXPECT_FALSE(kv.prefix_caching());
  Request a = make(0, common_plus(3, 7));
  Request b = make(1, common_plus(3, 7));
  admit(kv, a);
  const PrefixHit h = kv.get_computed_blocks(b);
  EXPECT_TRUE(h.blocks.empty());
  EXPECT_EQ(h.num_tokens, 0);
  admit(kv, b);
  EXPECT_EQ(a.block_table, (Ids{1, 2, 3, 4}));
  EXPECT_EQ(b.block_table, (Ids{5, 6, 7, 8}));
  EXPECT_TRUE(a.block_hashes().empty());
  EXPECT_TRUE(b.block_hashes().empty());
  EXPECT_EQ(a.num_cached_blocks(), 0);
  EXPECT_EQ(pool.num_cached_blocks(), 0);
  EXPECT_EQ(kv.stats().lookups, 0);
  EXPECT_EQ(kv.stats().queried_tokens, 0);
  free_req(kv, a);
  EXPECT_EQ(pool.free_queue(), (Ids{9, 10, 4, 3, 2, 1}));
}

TEST(KvCacheManager, HitWithExistingTableIsRejected) {
  BlockPool pool(11);
  KvCacheManager kv(pool, kBs, kMaxLen, true);
  Request a = make(0, Groups{{1, 40}});
  admit(kv, a);
  Request b = make(1, Groups{{1, 40}});
  const PrefixHit h = kv.get_computed_blocks(b);
  ASSERT_FALSE(h.blocks.empty());
  ASSERT_TRUE(kv.allocate_slots(b, 8, &h));
  EXPECT_THROW(kv.allocate_slots(b, 8, &h), std::logic_error);
  pool.check_invariants();
}

// A step's full blocks are registered when it allocates, before its KV is computed. When the
// scheduler calls the step off (Scheduler::unschedule: a preemption victim already in the plan;
// it rolls num_computed_tokens back) and then preempts the request, the blocks that step would
// have filled must not stay findable: a later hit on them would attend to whatever KV they held
// before (stale KV, wrong greedy tokens in engine_model_test). Freed (recompute) or swapped
// out, in hash and radix mode.
TEST(KvCacheManager, BlocksOfAStepCalledOffAreNotCached) {
  for (const CacheMaker mode : {make_hash_prefix_cache, make_radix_prefix_cache}) {
    for (const bool swap : {false, true}) {
      SCOPED_TRACE(std::string(mode == make_hash_prefix_cache ? "hash" : "radix") +
                   (swap ? " swap_out" : " free"));
      BlockPool pool(11);
      HostBlockPool host(10);
      KvCacheOptions opt;
      opt.prefix_cache = mode;
      opt.host_pool = &host;
      KvCacheManager kv(pool, kBs, kMaxLen, true, opt);
      Request a = make(0, Groups{{7, 40}});  // blocks 0, 1 full; block 2 holds 8 tokens
      // Step 1 computes tokens [0, 16): block 0 is full and cached.
      ASSERT_TRUE(kv.allocate_slots(a, 16));
      a.num_computed_tokens = 16;
      // Step 2 allocates tokens [16, 32), which registers block 1, and is called off.
      ASSERT_TRUE(kv.allocate_slots(a, 16));
      EXPECT_EQ(a.num_cached_blocks(), 2);
      const BlockId uncomputed = a.block_table[1];
      if (swap) {
        std::vector<BlockMove> moves;
        kv.swap_out(a, moves);
      } else {
        kv.free(a);
        a.num_computed_tokens = 0;
      }
      kv.check_invariants();
      EXPECT_EQ(pool.block_hash(uncomputed), std::nullopt);
      if (mode == make_radix_prefix_cache) {
        EXPECT_FALSE(radix_tree_of(kv.prefix_cache())->contains(uncomputed));
      }
      // The same prompt hits block 0 only, whose KV was computed.
      Request b = make(1, Groups{{7, 40}});
      const PrefixHit h = kv.get_computed_blocks(b);
      EXPECT_EQ(h.num_tokens, 16);
      if (!swap) {
        EXPECT_EQ(kv.get_computed_blocks(a).num_tokens, 16);  // a itself, resumed
      }
      // Computed for real later, the block is cached again.
      ASSERT_TRUE(kv.allocate_slots(b, 24, &h));
      b.num_computed_tokens = 40;
      kv.check_invariants();
      Request c = make(2, Groups{{7, 40}});
      EXPECT_EQ(kv.get_computed_blocks(c).num_tokens, 32);
      free_req(kv, b);
      kv.check_invariants();
    }
  }
}

}  // namespace
}  // namespace servelab
