// BlockPool: null block, free-queue order (LRU by free time), the free-queue ring (stale entries,
// wrap-around, compaction), lazy eviction, duplicate hashes, hashes with equal index tags, and a
// randomized comparison against a straightforward reference model.
#include "core/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <stdexcept>
#include <vector>

#include "core/rng.h"

namespace servelab {
namespace {

using Ids = std::vector<BlockId>;

BlockHash H(std::uint64_t v) { return BlockHash{v, ~v}; }

Ids take(BlockPool& pool, std::int32_t n) {
  Ids out;
  pool.get_new_blocks(n, out);
  pool.check_invariants();
  return out;
}

void release(BlockPool& pool, const Ids& blocks) {
  pool.free_blocks(blocks);
  pool.check_invariants();
}

TEST(BlockPool, StartsWithNullBlockReservedAndQueueInIdOrder) {
  BlockPool pool(11);
  pool.check_invariants();
  EXPECT_EQ(pool.num_blocks(), 11);
  EXPECT_EQ(pool.num_usable_blocks(), 10);
  EXPECT_EQ(pool.num_free_blocks(), 10);
  EXPECT_EQ(pool.free_queue(), (Ids{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(pool.ref_count(kNullBlock), 0);
  EXPECT_EQ(pool.num_cached_blocks(), 0);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
  // Allocating everything never hands out the null block.
  const Ids all = take(pool, 10);
  EXPECT_EQ(std::count(all.begin(), all.end(), kNullBlock), 0);
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
}

TEST(BlockPool, RejectsFewerThanTwoBlocks) {
  EXPECT_THROW(BlockPool(1), std::logic_error);
  EXPECT_THROW(BlockPool(0), std::logic_error);
  BlockPool smallest(2);
  smallest.check_invariants();
  EXPECT_EQ(smallest.num_free_blocks(), 1);
}

TEST(BlockPool, UsageCountsOnlyReferencedBlocks) {
  BlockPool pool(5);
  const Ids a = take(pool, 3);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.75);
  pool.cache_block(a[0], H(1));
  release(pool, a);
  // A freed block that still carries a hash is evictable cache, not usage.
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
  EXPECT_EQ(pool.num_free_cached_blocks(), 1);
  EXPECT_EQ(pool.num_cached_blocks(), 1);
}

// Scenario A16 (test_kv_cache_utils.py free-queue primitives), through the pool's API.
TEST(BlockPool, FreeQueuePrimitives) {
  BlockPool pool(5);  // usable 1..4
  // popleft returns the head.
  EXPECT_EQ(take(pool, 1), Ids{1});
  EXPECT_EQ(pool.free_queue(), (Ids{2, 3, 4}));
  release(pool, {1});
  EXPECT_EQ(pool.free_queue(), (Ids{2, 3, 4, 1}));
  // remove from the middle (touch of a free block) links its neighbours.
  const Ids three{3};
  pool.touch(three);
  pool.check_invariants();
  EXPECT_EQ(pool.free_queue(), (Ids{2, 4, 1}));
  EXPECT_EQ(pool.ref_count(3), 1);
  // append puts it at the tail.
  release(pool, three);
  EXPECT_EQ(pool.free_queue(), (Ids{2, 4, 1, 3}));
  // popleft_n returns the head k in order.
  EXPECT_EQ(take(pool, 3), (Ids{2, 4, 1}));
  EXPECT_EQ(pool.free_queue(), Ids{3});
  // Popping from an empty queue is an error.
  EXPECT_EQ(take(pool, 1), Ids{3});
  Ids out;
  EXPECT_THROW(pool.get_new_blocks(1, out), std::logic_error);
  EXPECT_TRUE(out.empty());
  pool.check_invariants();
}

TEST(BlockPool, AppendNKeepsGivenOrderAcrossCalls) {
  BlockPool pool(7);  // usable 1..6
  EXPECT_EQ(take(pool, 6), (Ids{1, 2, 3, 4, 5, 6}));
  release(pool, {1});
  release(pool, {5, 6});
  release(pool, {2, 3, 4});
  EXPECT_EQ(pool.free_queue(), (Ids{1, 5, 6, 2, 3, 4}));
  EXPECT_EQ(take(pool, 6), (Ids{1, 5, 6, 2, 3, 4}));
}

TEST(BlockPool, OverAllocationThrowsAndChangesNothing) {
  BlockPool pool(6);
  const Ids a = take(pool, 2);
  const Ids before = pool.free_queue();
  Ids out{42};
  EXPECT_THROW(pool.get_new_blocks(4, out), std::logic_error);
  pool.check_invariants();
  EXPECT_EQ(out, Ids{42});
  EXPECT_EQ(pool.free_queue(), before);
  EXPECT_EQ(pool.num_free_blocks(), 3);
  EXPECT_EQ(pool.ref_count(a[0]), 1);
  // Zero is a valid request even when nothing is free.
  take(pool, 3);
  EXPECT_TRUE(take(pool, 0).empty());
}

TEST(BlockPool, TouchAndFreeCountReferences) {
  BlockPool pool(5);
  const Ids a = take(pool, 2);  // {1, 2}
  pool.touch(a);                // shared by a second owner
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(1), 2);
  EXPECT_EQ(pool.free_queue(), (Ids{3, 4}));  // touching a used block leaves the queue alone
  release(pool, {2, 1});
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.free_queue(), (Ids{3, 4}));  // still referenced: not free yet
  release(pool, {2, 1});
  EXPECT_EQ(pool.free_queue(), (Ids{3, 4, 2, 1}));
  // Freeing a block with no reference is a bug, caught loudly.
  EXPECT_THROW(pool.free_blocks(Ids{3}), std::logic_error);
}

TEST(BlockPool, LazyEvictionKeepsFreedBlocksFindableUntilReused) {
  BlockPool pool(4);  // usable 1..3
  const Ids a = take(pool, 3);
  pool.cache_block(1, H(10));
  pool.cache_block(2, H(20));
  pool.check_invariants();
  release(pool, {2, 1});
  release(pool, {3});
  EXPECT_EQ(pool.free_queue(), (Ids{2, 1, 3}));
  EXPECT_EQ(pool.lookup(H(10)), std::optional<BlockId>(1));
  EXPECT_EQ(pool.lookup(H(20)), std::optional<BlockId>(2));
  EXPECT_EQ(pool.num_free_cached_blocks(), 2);
  EXPECT_EQ(pool.num_evictions(), 0);

  // Reuse pops the head (block 2): its hash is dropped, block 1 stays cached.
  EXPECT_EQ(take(pool, 1), Ids{2});
  EXPECT_EQ(pool.lookup(H(20)), std::nullopt);
  EXPECT_EQ(pool.block_hash(2), std::nullopt);
  EXPECT_EQ(pool.lookup(H(10)), std::optional<BlockId>(1));
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_EQ(pool.num_cached_blocks(), 1);
  EXPECT_EQ(pool.num_free_cached_blocks(), 1);

  // A hit on a free cached block (touch) takes it out of the eviction order.
  const Ids one{1};
  pool.touch(one);
  pool.check_invariants();
  EXPECT_EQ(pool.free_queue(), Ids{3});
  EXPECT_EQ(pool.num_free_cached_blocks(), 0);
  EXPECT_EQ(pool.num_cached_blocks(), 1);
  // Popping an unhashed block is not an eviction.
  take(pool, 1);
  EXPECT_EQ(pool.num_evictions(), 1);
}

TEST(BlockPool, CacheBlockIsIdempotentForTheSameHashOnly) {
  BlockPool pool(4);
  take(pool, 2);
  pool.cache_block(1, H(7));
  pool.cache_block(1, H(7));  // same hash again: nothing changes
  pool.check_invariants();
  EXPECT_EQ(pool.num_cached_blocks(), 1);
  EXPECT_EQ(pool.block_hash(1), std::optional<BlockHash>(H(7)));
  EXPECT_THROW(pool.cache_block(1, H(8)), std::logic_error);
  EXPECT_THROW(pool.cache_block(3, H(9)), std::logic_error);  // block 3 has no reference
  EXPECT_THROW(pool.cache_block(kNullBlock, H(9)), std::logic_error);
  pool.check_invariants();
  EXPECT_EQ(pool.lookup(H(8)), std::nullopt);
  EXPECT_EQ(pool.lookup(H(9)), std::nullopt);
}

TEST(BlockPool, DuplicateHashesLookUpEarliestRegisteredPresent) {
  BlockPool pool(6);
  take(pool, 5);
  // Register in the order 3, 1, 5 so that registration order differs from id order.
  pool.cache_block(3, H(1));
  pool.cache_block(1, H(1));
  pool.cache_block(5, H(1));
  pool.cache_block(2, H(2));
  pool.check_invariants();
  EXPECT_EQ(pool.num_cached_blocks(), 4);
  EXPECT_EQ(pool.lookup(H(1)), std::optional<BlockId>(3));

  // Evict the middle duplicate (1): free it alone and reuse it.
  release(pool, {1});
  EXPECT_EQ(take(pool, 1), Ids{1});
  EXPECT_EQ(pool.lookup(H(1)), std::optional<BlockId>(3));
  // Evict the earliest (3): the next earliest still present (5) takes over.
  release(pool, {3});
  EXPECT_EQ(pool.lookup(H(1)), std::optional<BlockId>(3));  // lazy: still findable
  EXPECT_EQ(take(pool, 1), Ids{3});
  EXPECT_EQ(pool.lookup(H(1)), std::optional<BlockId>(5));
  EXPECT_EQ(pool.num_evictions(), 2);
  // Evict the last one: the hash is gone, the other hash is untouched.
  release(pool, {5});
  take(pool, 1);
  EXPECT_EQ(pool.lookup(H(1)), std::nullopt);
  EXPECT_EQ(pool.lookup(H(2)), std::optional<BlockId>(2));
  EXPECT_EQ(pool.num_cached_blocks(), 1);
}

TEST(BlockPool, ResetPrefixCacheNeedsEveryBlockFree) {
  BlockPool pool(4);
  const Ids a = take(pool, 2);
  pool.cache_block(a[0], H(1));
  pool.cache_block(a[1], H(2));
  EXPECT_FALSE(pool.reset_prefix_cache());
  EXPECT_EQ(pool.lookup(H(1)), std::optional<BlockId>(a[0]));  // failed reset changes nothing
  release(pool, a);
  const Ids order = pool.free_queue();
  EXPECT_TRUE(pool.reset_prefix_cache());
  pool.check_invariants();
  EXPECT_EQ(pool.lookup(H(1)), std::nullopt);
  EXPECT_EQ(pool.lookup(H(2)), std::nullopt);
  EXPECT_EQ(pool.num_cached_blocks(), 0);
  EXPECT_EQ(pool.num_free_cached_blocks(), 0);
  EXPECT_EQ(pool.free_queue(), order);  // the LRU order survives a reset
  // Reusing a block after a reset is not an eviction: its hash is already gone.
  take(pool, 3);
  EXPECT_EQ(pool.num_evictions(), 0);
}

TEST(BlockPool, NullBlockIsIgnoredByTouchAndFree) {
  BlockPool pool(3);
  const Ids with_null{kNullBlock, 1};
  take(pool, 1);
  pool.touch(with_null);
  pool.check_invariants();
  EXPECT_EQ(pool.ref_count(kNullBlock), 0);
  EXPECT_EQ(pool.ref_count(1), 2);
  pool.free_blocks(with_null);
  pool.free_blocks(with_null);
  pool.check_invariants();
  EXPECT_EQ(pool.free_queue(), (Ids{2, 1}));
}

TEST(BlockPool, RejectsMoreThanMaxBlocks) {
  EXPECT_THROW(BlockPool(BlockPool::kMaxBlocks + 1), std::logic_error);
}

// The ring holds 2 * usable entries; touching and freeing a queued block leaves a stale entry
// behind each time, so a few rounds fill the ring and force compactions. The order must be the
// linked list's: the touched block moves to the tail, the others keep their places.
TEST(BlockPool, StaleRingEntriesAreSkippedAndCompactedAway) {
  BlockPool pool(5);  // usable 1..4, ring of 8
  std::deque<BlockId> model{1, 2, 3, 4};
  Rng rng(5);
  for (int round = 0; round < 200; ++round) {
    const auto b = static_cast<BlockId>(rng.uniform_int(1, 4));
    const Ids one{b};
    pool.touch(one);
    pool.check_invariants();
    model.erase(std::find(model.begin(), model.end(), b));
    ASSERT_EQ(pool.free_queue(), Ids(model.begin(), model.end())) << "round " << round;
    release(pool, one);
    model.push_back(b);
    ASSERT_EQ(pool.free_queue(), Ids(model.begin(), model.end())) << "round " << round;
  }
  // Pops skip every stale entry and come out in queue order.
  EXPECT_EQ(take(pool, 4), Ids(model.begin(), model.end()));
}

// Allocating and freeing in rounds walks the ring's head and tail around its end many times.
TEST(BlockPool, RingWrapsAroundKeepingFifoOrder) {
  BlockPool pool(4);  // usable 1..3, ring of 4
  std::deque<BlockId> model{1, 2, 3};
  for (int round = 0; round < 50; ++round) {
    const auto n = static_cast<std::int32_t>(1 + round % 3);
    const Ids got = take(pool, n);
    const Ids want(model.begin(), model.begin() + n);
    ASSERT_EQ(got, want) << "round " << round;
    model.erase(model.begin(), model.begin() + n);
    // Free in reverse so the order in the queue changes from round to round.
    const Ids back(got.rbegin(), got.rend());
    release(pool, back);
    model.insert(model.end(), back.begin(), back.end());
    ASSERT_EQ(pool.free_queue(), Ids(model.begin(), model.end()));
  }
}

// The smallest pool: one usable block, a ring of two.
TEST(BlockPool, SingleUsableBlockCyclesThroughTheRing) {
  BlockPool pool(2);
  for (int round = 0; round < 10; ++round) {
    const Ids one = take(pool, 1);
    ASSERT_EQ(one, Ids{1});
    pool.cache_block(1, H(static_cast<std::uint64_t>(round)));
    pool.touch(one);
    release(pool, one);
    release(pool, one);
    EXPECT_EQ(pool.free_queue(), Ids{1});
    EXPECT_EQ(pool.lookup(H(static_cast<std::uint64_t>(round))), std::optional<BlockId>(1));
  }
  EXPECT_EQ(pool.num_evictions(), 9);
}

// Hashes whose low 32 bits agree share their index tag (and home slot): the index tells them
// apart only by the hashes the pool stores. Registering, looking up and evicting must treat them
// as the distinct hashes they are, duplicates included.
TEST(BlockPool, HashesWithEqualIndexTagsStayDistinct) {
  auto same_tag = [](std::uint64_t v) { return BlockHash{(v << 32) | 0x5eedu, v}; };
  BlockPool pool(9);  // usable 1..8
  take(pool, 8);
  for (BlockId b = 1; b <= 4; ++b) pool.cache_block(b, same_tag(static_cast<std::uint64_t>(b)));
  pool.cache_block(5, same_tag(2));            // a duplicate of block 2's hash
  pool.cache_block(6, same_tag(2));            // and another
  pool.cache_block(7, BlockHash{0x5eedu, 0});  // lo equal to the tag alone
  pool.check_invariants();
  for (BlockId b = 1; b <= 4; ++b) {
    EXPECT_EQ(pool.lookup(same_tag(static_cast<std::uint64_t>(b))), std::optional<BlockId>(b));
  }
  EXPECT_EQ(pool.lookup(same_tag(9)), std::nullopt);
  EXPECT_EQ(pool.lookup(BlockHash{0x5eedu, 0}), std::optional<BlockId>(7));
  EXPECT_EQ(pool.lookup(BlockHash{0x5eedu, 1}), std::nullopt);  // lo matches, hi does not

  // Evict the chain head (2), a lone hash in the middle of the probe run (3), a chain's last
  // member (6): the rest stay findable under their own hashes.
  release(pool, {2, 3, 6});
  EXPECT_EQ(take(pool, 3), (Ids{2, 3, 6}));
  EXPECT_EQ(pool.num_evictions(), 3);
  EXPECT_EQ(pool.lookup(same_tag(2)), std::optional<BlockId>(5));
  EXPECT_EQ(pool.lookup(same_tag(3)), std::nullopt);
  EXPECT_EQ(pool.lookup(same_tag(1)), std::optional<BlockId>(1));
  EXPECT_EQ(pool.lookup(same_tag(4)), std::optional<BlockId>(4));
  EXPECT_EQ(pool.lookup(BlockHash{0x5eedu, 0}), std::optional<BlockId>(7));
  // The reused blocks take new hashes with the same tag again.
  pool.cache_block(2, same_tag(3));
  pool.cache_block(3, same_tag(2));  // after 5 in registration order
  pool.check_invariants();
  EXPECT_EQ(pool.lookup(same_tag(3)), std::optional<BlockId>(2));
  EXPECT_EQ(pool.lookup(same_tag(2)), std::optional<BlockId>(5));
  release(pool, {5});
  take(pool, 1);
  EXPECT_EQ(pool.lookup(same_tag(2)), std::optional<BlockId>(3));
  EXPECT_EQ(pool.num_cached_blocks(), 5);  // 1, 2, 3, 4, 7
}

// A chain of three: evicting its middle, then its head, hands the index entry down in
// registration order.
TEST(BlockPool, DuplicateChainOfThreeUnchainsInAnyOrder) {
  BlockPool pool(6);
  take(pool, 5);
  for (BlockId b : {4, 2, 5}) pool.cache_block(b, H(3));
  pool.check_invariants();
  EXPECT_EQ(pool.lookup(H(3)), std::optional<BlockId>(4));
  release(pool, {2});
  EXPECT_EQ(take(pool, 1), Ids{2});  // the middle
  EXPECT_EQ(pool.lookup(H(3)), std::optional<BlockId>(4));
  pool.cache_block(2, H(3));  // rejoins at the end: 4, 5, 2
  release(pool, {4});
  EXPECT_EQ(take(pool, 1), Ids{4});  // the head
  EXPECT_EQ(pool.lookup(H(3)), std::optional<BlockId>(5));
  release(pool, {5});
  EXPECT_EQ(take(pool, 1), Ids{5});
  EXPECT_EQ(pool.lookup(H(3)), std::optional<BlockId>(2));
  release(pool, {2});
  EXPECT_EQ(take(pool, 1), Ids{2});
  EXPECT_EQ(pool.lookup(H(3)), std::nullopt);
  EXPECT_EQ(pool.num_cached_blocks(), 0);
  EXPECT_EQ(pool.num_evictions(), 4);
}

// Random operations against a plainly written model of the documented semantics; the pool must
// agree on every observable after every operation, with its invariants intact. `hash` maps the
// model's small keys to block hashes.
void CheckAgainstReferenceModel(BlockHash (*hash)(std::uint64_t)) {
  constexpr std::int32_t kBlocks = 48;
  BlockPool pool(kBlocks);
  std::deque<BlockId> queue;
  std::vector<std::int32_t> ref(kBlocks, 0);
  std::map<std::uint64_t, std::vector<BlockId>> index;  // hash key -> blocks, registration order
  std::vector<std::int64_t> hash_of(kBlocks, -1);
  std::int64_t evictions = 0;
  for (BlockId b = 1; b < kBlocks; ++b) queue.push_back(b);
  std::vector<Ids> owners;  // block lists held by simulated requests

  auto model_drop = [&](BlockId b) {
    auto& v = index[static_cast<std::uint64_t>(hash_of[b])];
    v.erase(std::find(v.begin(), v.end(), b));
    if (v.empty()) index.erase(static_cast<std::uint64_t>(hash_of[b]));
    hash_of[b] = -1;
  };

  Rng rng(1234);
  for (int step = 0; step < 4000; ++step) {
    const auto op = rng.uniform_int(0, 3);
    if (op == 0) {  // allocate
      const auto n = static_cast<std::int32_t>(rng.uniform_int(0, 6));
      Ids got;
      if (n > static_cast<std::int32_t>(queue.size())) {
        EXPECT_THROW(pool.get_new_blocks(n, got), std::logic_error);
      } else {
        pool.get_new_blocks(n, got);
        Ids want;
        for (int i = 0; i < n; ++i) {
          const BlockId b = queue.front();
          queue.pop_front();
          if (hash_of[b] >= 0) {
            model_drop(b);
            ++evictions;
          }
          ref[b] = 1;
          want.push_back(b);
        }
        ASSERT_EQ(got, want);
        if (!got.empty()) owners.push_back(got);
      }
    } else if (op == 1 && !owners.empty()) {  // free one owner's blocks, last first
      const auto i = static_cast<std::size_t>(rng.uniform_int(0, owners.size() - 1));
      Ids blocks(owners[i].rbegin(), owners[i].rend());
      owners.erase(owners.begin() + static_cast<std::ptrdiff_t>(i));
      pool.free_blocks(blocks);
      for (BlockId b : blocks) {
        if (--ref[b] == 0) queue.push_back(b);
      }
    } else if (op == 2 && !owners.empty()) {  // register a block under a (small-range) hash
      const auto& o = owners[static_cast<std::size_t>(rng.uniform_int(0, owners.size() - 1))];
      const BlockId b = o[static_cast<std::size_t>(rng.uniform_int(0, o.size() - 1))];
      const auto key = static_cast<std::uint64_t>(rng.uniform_int(0, 15));
      if (hash_of[b] < 0) {
        pool.cache_block(b, hash(key));
        hash_of[b] = static_cast<std::int64_t>(key);
        index[key].push_back(b);
      } else if (static_cast<std::uint64_t>(hash_of[b]) == key) {
        pool.cache_block(b, hash(key));
      } else {
        EXPECT_THROW(pool.cache_block(b, hash(key)), std::logic_error);
      }
    } else if (op == 3) {  // a prefix hit: look a hash up and share the block
      const auto key = static_cast<std::uint64_t>(rng.uniform_int(0, 15));
      const std::optional<BlockId> got = pool.lookup(hash(key));
      auto it = index.find(key);
      if (it == index.end()) {
        ASSERT_EQ(got, std::nullopt);
      } else {
        ASSERT_EQ(got, std::optional<BlockId>(it->second.front()));
        const Ids hit{*got};
        pool.touch(hit);
        if (ref[*got]++ == 0) queue.erase(std::find(queue.begin(), queue.end(), *got));
        owners.push_back(hit);
      }
    }
    pool.check_invariants();
    ASSERT_EQ(pool.free_queue(), Ids(queue.begin(), queue.end())) << "step " << step;
    for (BlockId b = 1; b < kBlocks; ++b) ASSERT_EQ(pool.ref_count(b), ref[b]);
    std::int32_t hashed = 0;
    for (BlockId b = 1; b < kBlocks; ++b) hashed += hash_of[b] >= 0;
    ASSERT_EQ(pool.num_cached_blocks(), hashed);
    ASSERT_EQ(pool.num_evictions(), evictions);
  }
  EXPECT_GT(evictions, 0);  // the run exercised eviction at all
}

TEST(BlockPool, MatchesReferenceModelUnderRandomOperations) { CheckAgainstReferenceModel(H); }

// The same with every key's hash sharing one index tag: every lookup and insert walks one probe
// run and must tell the hashes apart by the stored hashes alone.
TEST(BlockPool, MatchesReferenceModelWithAllIndexTagsEqual) {
  CheckAgainstReferenceModel([](std::uint64_t v) { return BlockHash{(v << 32) | 0x77u, ~v}; });
}

}  // namespace
}  // namespace servelab
