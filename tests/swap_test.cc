// Swap space: HostBlockPool, and KvCacheManager::swap_out / swap_in (vLLM v0's preemption by
// swapping, schedulers.md section 2.4) over a device BlockPool with prefix caching.
#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <vector>

#include "core/host_block_pool.h"
#include "core/kv_cache_manager.h"

namespace servelab {
namespace {

using Ids = std::vector<BlockId>;

constexpr std::int32_t kBs = 16;
constexpr std::int32_t kMaxLen = 1024;

Request make(RequestId id, std::uint64_t content, std::uint32_t prompt_len,
             std::int32_t max_output = 16) {
  return Request(make_request(id, 0, {{content, 0, prompt_len}}, max_output));
}

// What the scheduler does for an admission: look up, allocate the rest, advance.
void admit(KvCacheManager& kv, Request& req) {
  PrefixHit hit = kv.get_computed_blocks(req);
  const std::int32_t n = req.num_tokens() - hit.num_tokens;
  ASSERT_TRUE(kv.allocate_slots(req, n, &hit));
  req.num_computed_tokens = hit.num_tokens + n;
}

// One decode step: a sampled token, then a slot for it.
void decode(KvCacheManager& kv, Request& req) {
  req.output_tokens.push_back(7);
  ASSERT_TRUE(kv.allocate_slots(req, 1));
  req.num_computed_tokens += 1;
}

std::vector<std::optional<BlockHash>> table_hashes(const BlockPool& pool, const Request& req) {
  std::vector<std::optional<BlockHash>> out;
  for (const BlockId b : req.block_table) out.push_back(pool.block_hash(b));
  return out;
}

std::vector<std::int32_t> table_refs(const BlockPool& pool, const Request& req) {
  std::vector<std::int32_t> out;
  for (const BlockId b : req.block_table) out.push_back(pool.ref_count(b));
  return out;
}

void check(const KvCacheManager& kv) {
  kv.pool().check_invariants();
  if (kv.host_pool() != nullptr) kv.host_pool()->check_invariants();
}

TEST(HostBlockPool, FreshPoolHandsOutAscendingIdsAndTracksReferences) {
  HostBlockPool host(4);
  EXPECT_EQ(host.num_blocks(), 4);
  EXPECT_EQ(host.num_free_blocks(), 4);
  EXPECT_DOUBLE_EQ(host.usage(), 0.0);
  Ids got;
  host.allocate(3, got);
  EXPECT_EQ(got, (Ids{0, 1, 2}));
  EXPECT_EQ(host.num_free_blocks(), 1);
  EXPECT_EQ(host.ref_count(1), 1);
  EXPECT_EQ(host.ref_count(3), 0);
  EXPECT_DOUBLE_EQ(host.usage(), 0.75);
  host.check_invariants();
  host.free(Ids{1});
  EXPECT_EQ(host.ref_count(1), 0);
  EXPECT_EQ(host.num_free_blocks(), 2);
  host.check_invariants();
  Ids again;
  host.allocate(1, again);
  EXPECT_EQ(again, (Ids{1}));  // most recently freed first
  host.free(Ids{0, 1, 2});
  EXPECT_EQ(host.num_free_blocks(), 4);
  host.check_invariants();
}

TEST(HostBlockPool, RejectsMisuse) {
  EXPECT_THROW(HostBlockPool(-1), std::logic_error);
  HostBlockPool empty(0);
  EXPECT_EQ(empty.num_free_blocks(), 0);
  EXPECT_DOUBLE_EQ(empty.usage(), 0.0);
  empty.check_invariants();
  Ids out;
  EXPECT_THROW(empty.allocate(1, out), std::logic_error);

  HostBlockPool host(2);
  EXPECT_THROW(host.allocate(3, out), std::logic_error);
  EXPECT_TRUE(out.empty());
  EXPECT_THROW(host.free(Ids{0}), std::logic_error);  // no reference
  EXPECT_THROW(host.free(Ids{2}), std::logic_error);  // out of range
  host.check_invariants();
}

class SwapTest : public ::testing::Test {
 protected:
  SwapTest() : pool_(11), host_(8), kv_(pool_, kBs, kMaxLen, true, {.host_pool = &host_}) {}

  BlockPool pool_;  // 10 usable blocks
  HostBlockPool host_;
  KvCacheManager kv_;
};

TEST_F(SwapTest, SwapOutThenInRestoresTablesAndCounts) {
  Request r = make(1, 100, 40);  // 40 tokens: 2 full blocks + 8 tokens
  admit(kv_, r);
  decode(kv_, r);  // 41 tokens, still 3 blocks
  check(kv_);

  const Ids dev_before = r.block_table;
  const auto hashes_before = table_hashes(pool_, r);
  const auto refs_before = table_refs(pool_, r);
  const std::int32_t computed_before = r.num_computed_tokens;
  const std::int32_t cached_before = r.num_cached_blocks();
  const std::int32_t free_before = pool_.num_free_blocks();
  const std::int64_t held_before = kv_.num_held_slots(), kv_before = kv_.num_kv_slots();
  ASSERT_EQ(dev_before.size(), 3u);
  ASSERT_EQ(cached_before, 2);
  EXPECT_EQ(kv_.num_blocks(r), 3);

  ASSERT_TRUE(kv_.can_swap_out(r));
  std::vector<BlockMove> out;
  kv_.swap_out(r, out);
  check(kv_);
  ASSERT_EQ(out.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].src, dev_before[i]) << i;  // position order
    EXPECT_EQ(out[i].dst, r.host_block_table()[i]) << i;
  }
  EXPECT_TRUE(r.block_table.empty());
  EXPECT_EQ(r.host_block_table(), (Ids{0, 1, 2}));
  EXPECT_EQ(kv_.num_blocks(r), 3);
  EXPECT_EQ(r.num_computed_tokens, computed_before);  // the KV is preserved, not lost
  EXPECT_EQ(pool_.num_free_blocks(), free_before + 3);
  EXPECT_EQ(host_.num_free_blocks(), 5);
  EXPECT_EQ(kv_.num_held_slots(), 0);
  EXPECT_EQ(kv_.num_kv_slots(), 0);
  EXPECT_FALSE(kv_.can_swap_out(r));  // already swapped

  ASSERT_TRUE(kv_.can_swap_in(r, 1));
  std::vector<BlockMove> in;
  ASSERT_TRUE(kv_.swap_in(r, in));
  check(kv_);
  ASSERT_EQ(in.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(in[i].src, out[i].dst) << i;  // the moves pair up
    EXPECT_EQ(in[i].dst, r.block_table[i]) << i;
  }
  EXPECT_TRUE(r.host_block_table().empty());
  EXPECT_EQ(host_.num_free_blocks(), 8);
  EXPECT_EQ(r.num_computed_tokens, computed_before);
  EXPECT_EQ(r.block_table.size(), dev_before.size());
  EXPECT_EQ(r.num_cached_blocks(), cached_before);
  EXPECT_EQ(table_hashes(pool_, r), hashes_before);
  EXPECT_EQ(table_refs(pool_, r), refs_before);
  EXPECT_EQ(pool_.num_free_blocks(), free_before);
  EXPECT_EQ(kv_.num_held_slots(), held_before);
  EXPECT_EQ(kv_.num_kv_slots(), kv_before);

  // It keeps running as before: the next decode fits in its last block.
  decode(kv_, r);
  EXPECT_EQ(r.block_table.size(), 3u);
  kv_.free(r);
  check(kv_);
  EXPECT_EQ(pool_.num_free_blocks(), 10);
  EXPECT_EQ(kv_.num_held_slots(), 0);
  EXPECT_EQ(kv_.num_kv_slots(), 0);
}

// A victim scheduled in the step, then unscheduled (a lowest-priority victim): its block for the
// step's token holds nothing yet, so the swap moves the 3 blocks of its 48 computed tokens, not
// 4, and frees all 4; it gets the 4th again when it next runs.
TEST_F(SwapTest, SwapOutMovesOnlyTheBlocksOfComputedTokens) {
  Request r = make(1, 100, 48);  // 3 full blocks
  admit(kv_, r);
  r.output_tokens.push_back(7);
  ASSERT_TRUE(kv_.allocate_slots(r, 1));  // position 48: a 4th block, never computed
  ASSERT_EQ(r.block_table.size(), 4u);
  ASSERT_EQ(r.num_computed_tokens, 48);
  const std::int32_t free_before = pool_.num_free_blocks();
  EXPECT_EQ(kv_.blocks_to_swap(r), 3);
  std::vector<BlockMove> out;
  ASSERT_TRUE(kv_.can_swap_out(r));
  kv_.swap_out(r, out);
  check(kv_);
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(r.host_block_table().size(), 3u);
  EXPECT_EQ(pool_.num_free_blocks(), free_before + 4);
  EXPECT_EQ(host_.num_free_blocks(), 5);
  std::vector<BlockMove> in;
  ASSERT_TRUE(kv_.swap_in(r, in));
  EXPECT_EQ(in.size(), 3u);
  ASSERT_TRUE(kv_.allocate_slots(r, 1));
  r.num_computed_tokens += 1;
  EXPECT_EQ(r.block_table.size(), 4u);
  kv_.free(r);
  check(kv_);
  EXPECT_EQ(kv_.num_held_slots(), 0);
  // Nothing computed (admitted in the step, then unscheduled): nothing to swap; recomputed.
  Request fresh = make(2, 200, 20);
  ASSERT_TRUE(kv_.allocate_slots(fresh, 20));
  EXPECT_EQ(kv_.blocks_to_swap(fresh), 0);
  EXPECT_FALSE(kv_.can_swap_out(fresh));
  kv_.free(fresh);
  check(kv_);
}

TEST_F(SwapTest, CannotSwapOutWhenHostSpaceIsShortAndNothingChanges) {
  BlockPool pool(11);
  HostBlockPool host(2);
  KvCacheManager kv(pool, kBs, kMaxLen, true, {.host_pool = &host});
  Request r = make(1, 100, 40);  // 3 blocks
  admit(kv, r);
  const Ids table = r.block_table;
  EXPECT_FALSE(kv.can_swap_out(r));
  std::vector<BlockMove> moves{{9, 9}};
  EXPECT_THROW(kv.swap_out(r, moves), std::logic_error);
  EXPECT_EQ(moves.size(), 1u);
  EXPECT_EQ(r.block_table, table);
  EXPECT_TRUE(r.host_block_table().empty());
  EXPECT_EQ(pool.num_free_blocks(), 7);
  EXPECT_EQ(host.num_free_blocks(), 2);
  pool.check_invariants();
  host.check_invariants();

  // Without a host pool nothing can be swapped out.
  BlockPool pool2(11);
  KvCacheManager no_swap(pool2, kBs, kMaxLen, true);
  Request r2 = make(2, 100, 40);
  admit(no_swap, r2);
  EXPECT_FALSE(no_swap.can_swap_out(r2));
  // A request holding no blocks has nothing to swap.
  Request idle = make(3, 5, 10);
  EXPECT_FALSE(kv.can_swap_out(idle));
}

TEST_F(SwapTest, MovesAreAppendedInOrderAcrossRequests) {
  Request a = make(1, 100, 20);  // 2 blocks
  Request b = make(2, 200, 33);  // 3 blocks
  admit(kv_, a);
  admit(kv_, b);
  const Ids ta = a.block_table, tb = b.block_table;
  std::vector<BlockMove> moves;
  kv_.swap_out(b, moves);
  kv_.swap_out(a, moves);
  check(kv_);
  ASSERT_EQ(moves.size(), 5u);
  EXPECT_EQ(moves[0], (BlockMove{tb[0], 0}));
  EXPECT_EQ(moves[1], (BlockMove{tb[1], 1}));
  EXPECT_EQ(moves[2], (BlockMove{tb[2], 2}));
  EXPECT_EQ(moves[3], (BlockMove{ta[0], 3}));
  EXPECT_EQ(moves[4], (BlockMove{ta[1], 4}));
  // Device blocks go back to the free queue last block first, b's before a's.
  const Ids q = pool_.free_queue();
  const Ids tail(q.end() - 5, q.end());
  EXPECT_EQ(tail, (Ids{tb[2], tb[1], tb[0], ta[1], ta[0]}));
}

TEST_F(SwapTest, HashesSurviveSoALookupHitsTheDeviceBlocksUntilEvicted) {
  Request r = make(1, 100, 40);
  admit(kv_, r);
  const Ids dev = r.block_table;
  std::vector<BlockMove> moves;
  kv_.swap_out(r, moves);

  // Same content, so the two full blocks are found on the device (freed, not yet evicted).
  Request twin = make(2, 100, 40);
  PrefixHit hit = kv_.get_computed_blocks(twin);
  EXPECT_EQ(hit.blocks, (Ids{dev[0], dev[1]}));
  EXPECT_EQ(hit.num_tokens, 32);

  // Taking every free block evicts them: the lookup misses now.
  Request hog = make(3, 999, 10 * kBs);
  ASSERT_TRUE(kv_.allocate_slots(hog, 10 * kBs));
  hog.num_computed_tokens = 10 * kBs;
  EXPECT_TRUE(kv_.get_computed_blocks(twin).blocks.empty());
  check(kv_);

  // And swap-in must wait for device space, changing nothing meanwhile.
  EXPECT_FALSE(kv_.can_swap_in(r, 0));
  std::vector<BlockMove> in;
  EXPECT_FALSE(kv_.swap_in(r, in));
  EXPECT_TRUE(in.empty());
  EXPECT_EQ(r.host_block_table().size(), 3u);
  EXPECT_TRUE(r.block_table.empty());
  check(kv_);

  kv_.free(hog);
  ASSERT_TRUE(kv_.swap_in(r, in));
  check(kv_);
  // The re-registered hashes make the content findable again.
  Request twin2 = make(4, 100, 40);
  EXPECT_EQ(kv_.get_computed_blocks(twin2).blocks, (Ids{r.block_table[0], r.block_table[1]}));
}

TEST_F(SwapTest, SwapInWithTheOldCopyStillCachedKeepsInvariants) {
  // The old device blocks still carry the hashes when the request comes back: the fresh copies
  // become duplicates, which the pool allows.
  Request r = make(1, 100, 48);  // 3 full blocks
  admit(kv_, r);
  std::vector<BlockMove> moves;
  kv_.swap_out(r, moves);
  ASSERT_TRUE(kv_.swap_in(r, moves));
  check(kv_);
  EXPECT_EQ(r.num_cached_blocks(), 3);
  EXPECT_EQ(pool_.num_cached_blocks(), 6);  // 3 old (free, evictable) + 3 in use
  kv_.free(r);
  check(kv_);
}

TEST_F(SwapTest, CanSwapInCountsTheNewTokensBlocks) {
  Request r = make(1, 100, 32);  // exactly 2 full blocks
  admit(kv_, r);
  std::vector<BlockMove> moves;
  kv_.swap_out(r, moves);
  Request hog = make(2, 999, 8 * kBs);  // leaves 2 free blocks
  ASSERT_TRUE(kv_.allocate_slots(hog, 8 * kBs));
  EXPECT_TRUE(kv_.can_swap_in(r, 0));
  EXPECT_FALSE(kv_.can_swap_in(r, 1));  // the 33rd token needs a third block
  kv_.free(hog);
}

TEST_F(SwapTest, FreeWhileSwappedReleasesTheHostBlocks) {
  Request r = make(1, 100, 40);
  admit(kv_, r);
  std::vector<BlockMove> moves;
  kv_.swap_out(r, moves);
  EXPECT_EQ(host_.num_free_blocks(), 5);
  kv_.free(r);  // e.g. aborted while swapped
  check(kv_);
  EXPECT_EQ(host_.num_free_blocks(), 8);
  EXPECT_TRUE(r.host_block_table().empty());
  EXPECT_EQ(kv_.num_held_slots(), 0);
  EXPECT_EQ(kv_.num_kv_slots(), 0);
  EXPECT_EQ(kv_.num_blocks(r), 0);
}

TEST_F(SwapTest, MisuseThrows) {
  Request r = make(1, 100, 40);
  std::vector<BlockMove> moves;
  EXPECT_THROW(kv_.swap_in(r, moves), std::logic_error);  // not swapped out
  admit(kv_, r);
  kv_.swap_out(r, moves);
  EXPECT_THROW(kv_.swap_out(r, moves), std::logic_error);  // already swapped
  check(kv_);
}

}  // namespace
}  // namespace servelab
