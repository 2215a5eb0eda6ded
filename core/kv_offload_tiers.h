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
// Invariants (check_invariants()): every tier holds at most its capacity; a hash is in at most
// one tier; each tier's index and LRU list hold the same hashes.
// Determinism: the LRU order depends only on the order of calls; the hash maps are only probed,
// never iterated.
#pragma once

#include <array>
#include <cstdint>
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
  std::int64_t stored_blocks = 0;   // blocks that entered the tier (from above)
  std::int64_t loaded_blocks = 0;   // blocks loaded back into the device pool from the tier
  std::int64_t evicted_blocks = 0;  // blocks that left the tier (moved down, or dropped)
};

class KvOffloadTiers {
 public:
  // capacities[t] blocks for tier t (host first, then disk). REQUIRES: 1 <= size <=
  // kMaxOffloadTiers, every capacity >= 1 (throws std::invalid_argument otherwise).
  explicit KvOffloadTiers(std::vector<std::int64_t> capacities);
  KvOffloadTiers(const KvOffloadTiers&) = delete;
  KvOffloadTiers& operator=(const KvOffloadTiers&) = delete;

  int num_tiers() const { return static_cast<int>(tiers_.size()); }
  std::int64_t capacity(int tier) const { return tiers_[tier].capacity; }
  std::int64_t size(int tier) const { return static_cast<std::int64_t>(tiers_[tier].lru.size()); }

  // The tier holding `hash`, or -1.
  int find(const BlockHash& hash) const;
  // The device pool evicted the block holding `hash`: store it in tier 0 (see above).
  void offload(const BlockHash& hash);
  // `hash` (held by `tier`) was loaded back into the device pool: counted, and refreshed.
  void on_loaded(const BlockHash& hash, int tier);

  const OffloadTierStats& stats(int tier) const { return tiers_[tier].stats; }
  // Blocks dropped by the last tier (content lost).
  std::int64_t dropped_blocks() const { return dropped_; }

  // Throws std::logic_error naming the first violated invariant.
  void check_invariants() const;

 private:
  struct Tier {
    std::int64_t capacity = 0;
    std::list<BlockHash> lru;  // front: least recently used
    std::unordered_map<BlockHash, std::list<BlockHash>::iterator, BlockHashHasher> index;
    OffloadTierStats stats;
  };
  // Inserts `hash` (in no tier) as tier t's most recent entry, demoting its LRU entry on overflow.
  void insert(int t, const BlockHash& hash);

  std::vector<Tier> tiers_;
  std::int64_t dropped_ = 0;
};

}  // namespace servelab
