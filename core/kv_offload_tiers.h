// KvOffloadTiers: the KV offload tiers behind a device's block pool (host memory, then disk), as
// LMCache and Mooncake's store keep KV that the GPU cache had to let go.
//
// Each tier is a content-addressed LRU store of full blocks, keyed by their block hash
// (core/block_hash.h), with a capacity in blocks. When the device pool evicts a cached block
// (BlockPool::get_new_blocks reuses it), KvCacheManager hands its hash to offload(): the content
// enters tier 0 (or, when it is there already, becomes its most recently used entry); a tier
// that overflows moves its least recently used entry down to the next tier; the last tier drops
// it (the content is then lost, as without offload). find() tells which tier holds a hash; a
// prefix hit there is loaded back into a fresh device block (KvCacheManager, StepPlan::
// tier_loads) and the entry stays where it is, refreshed (tiers are caches, not a move).
//
// Host slots (the engine, whose host tier is real memory): built with host_slots, every entry of
// tier 0 owns a slot in [0, capacity(0)) of a host store, from the moment it enters the tier
// until it leaves it (moved down or dropped); offload() returns the slot the evicted block's KV
// must be copied into, host_slot() where an entry's KV lies. A freed slot is reused last (the
// free slots are a FIFO), so a slot read by a load early in a step is not rewritten in the same
// step unless the tier turns over a whole capacity of entries in between.
//
// Invariants (check_invariants()): every tier holds at most its capacity; a hash is in at most
// one tier; each tier's index and LRU list hold the same hashes; with host slots, tier 0's
// entries own distinct slots, none of them free.
// Determinism: the LRU order depends only on the order of calls; the hash maps are only probed,
// never iterated.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <list>
#include <unordered_map>
#include <vector>

#include "core/block_hash.h"

namespace servelab {

// Tier indices (a tier list is host first, then disk).
inline constexpr int kHostTier = 0;
inline constexpr int kDiskTier = 1;
inline constexpr int kMaxOffloadTiers = 2;

struct OffloadTierStats {
  std::int64_t stored_blocks = 0;  // blocks that entered the tier (from above)
  std::int64_t loaded_blocks = 0;  // blocks loaded back into the device pool from the tier
  // Blocks that left the tier: moved down, dropped from the last, or (a lower tier) let go when
  // the block was stored again above it. stored_blocks - evicted_blocks is what the tier holds.
  std::int64_t evicted_blocks = 0;
};

class KvOffloadTiers {
 public:
  // capacities[t] blocks for tier t (host first, then disk); host_slots: see above. REQUIRES:
  // 1 <= size <= kMaxOffloadTiers, every capacity >= 1, and with host_slots capacities[0] <=
  // INT32_MAX (throws std::invalid_argument otherwise).
  explicit KvOffloadTiers(std::vector<std::int64_t> capacities, bool host_slots = false);
  KvOffloadTiers(const KvOffloadTiers&) = delete;
  KvOffloadTiers& operator=(const KvOffloadTiers&) = delete;

  int num_tiers() const { return static_cast<int>(tiers_.size()); }
  std::int64_t capacity(int tier) const { return tiers_[tier].capacity; }
  std::int64_t size(int tier) const { return static_cast<std::int64_t>(tiers_[tier].lru.size()); }

  // The tier holding `hash`, or -1.
  int find(const BlockHash& hash) const;
  // The device pool evicted the block holding `hash` (or an idle session's block was stored
  // down): store it in tier 0 (see above). Returns the host slot to copy the KV into, or -1 when
  // there is nothing to copy (no host slots, or tier 0 held the hash already: refreshed).
  std::int32_t offload(const BlockHash& hash);
  bool host_slots() const { return host_slots_; }
  // With host slots, the slot of `hash`'s entry in tier 0; -1 when tier 0 does not hold it or
  // there are no host slots.
  std::int32_t host_slot(const BlockHash& hash) const;
  // `hash` (held by `tier`) was loaded back into the device pool: counted, and refreshed.
  void on_loaded(const BlockHash& hash, int tier);

  const OffloadTierStats& stats(int tier) const { return tiers_[tier].stats; }
  // Blocks dropped by the last tier (content lost).
  std::int64_t dropped_blocks() const { return dropped_; }

  // Throws std::logic_error naming the first violated invariant.
  void check_invariants() const;

 private:
  struct Entry {
    BlockHash hash;
    std::int32_t slot = -1;  // host slot (tier 0 with host slots), else -1
  };
  struct Tier {
    std::int64_t capacity = 0;
    std::list<Entry> lru;  // front: least recently used
    std::unordered_map<BlockHash, std::list<Entry>::iterator, BlockHashHasher> index;
    OffloadTierStats stats;
  };
  // Inserts `hash` (in no tier) as tier t's most recent entry, demoting its LRU entry on overflow.
  // Returns the new entry's host slot (-1 without).
  std::int32_t insert(int t, const BlockHash& hash);
  // The entry left tier t: its host slot (if any) becomes free.
  void release_slot(int t, const Entry& e);

  std::vector<Tier> tiers_;
  std::int64_t dropped_ = 0;
  bool host_slots_ = false;
  std::int32_t next_slot_ = 0;           // slots [next_slot_, capacity(0)) were never used
  std::deque<std::int32_t> free_slots_;  // freed slots, reused oldest first
};

}  // namespace servelab
