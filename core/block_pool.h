// BlockPool: the physical KV blocks of one device, as a page cache (vLLM v1 block_pool.py).
//
// Invariants (check_invariants() verifies them all):
// - block 0 is the null block: never allocated, never free, never counted; num_blocks - 1 blocks
//   are usable;
// - a block is in the free queue iff its reference count is 0;
// - the free queue's head is the next block to allocate or evict; it starts as 1, 2, ...,
//   num_blocks - 1; freed blocks go to the tail in the order given (so the queue order is the
//   LRU order: least recently freed first); a touched free block leaves it from wherever it is;
// - a block carries a hash iff it is registered in the hash index under that hash; several
//   blocks may carry the same hash (duplicates are kept, as in vLLM v1); a lookup returns the
//   earliest registered one still present;
// - eviction is lazy: a freed block keeps its hash and stays findable until it is popped from
//   the head of the free queue for reuse.
// Implementation (chosen by cache misses: the pool's accesses land on blocks in no particular
// order, so what counts is how many distinct cache lines each operation touches):
// - The free queue is a ring of block ids with lazy deletion, not a linked list through the
//   blocks: a push appends the id at the ring's tail and records that ring slot in the block's
//   state; a touch of a free block only marks it unqueued, leaving a stale ring entry behind; a
//   pop skips entries whose block no longer records their slot. Pops read the ring in order (and
//   prefetch the blocks a few entries ahead), and no operation writes a neighbour's links. When
//   the ring is full, a push first compacts it in place (stale entries out, order kept); the
//   ring has room for twice the usable blocks, so a compaction comes at most every
//   num_usable_blocks pushes.
// - Per-block state is split by use: 8 bytes touched by every allocation, touch and free
//   (reference count, ring slot, hash flags), and, apart, the block hashes and duplicate links,
//   touched only when hashing, looking up or evicting.
// - The hash index (BlockTagIndex) holds 8-byte slots (a tag and the first block registered under
//   the hash) and checks candidates against the block hashes here; it holds exactly the hashes
//   some block carries: an eviction erases the entry when the block was the last under its hash.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/block_hash.h"
#include "core/block_tag_index.h"
#include "core/request_state.h"

namespace servelab {

inline constexpr BlockId kNullBlock = 0;

class BlockPool {
 public:
  // The most blocks a pool can have (a ring slot is a 29-bit field of the block state).
  static constexpr std::int32_t kMaxBlocks = 1 << 27;

  // REQUIRES: 2 <= num_blocks <= kMaxBlocks.
  explicit BlockPool(std::int32_t num_blocks);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  std::int32_t num_blocks() const { return static_cast<std::int32_t>(state_.size()); }
  std::int32_t num_usable_blocks() const { return num_blocks() - 1; }
  std::int32_t num_free_blocks() const { return num_free_; }
  // Blocks that carry a hash (in use or free).
  std::int32_t num_cached_blocks() const { return num_hashed_; }
  // Free blocks that still carry a hash (evictable cache).
  std::int32_t num_free_cached_blocks() const { return num_free_hashed_; }
  // Fraction of usable blocks with a reference: 1 - free / usable.
  double usage() const;

  // Pops n blocks from the head of the free queue, drops any hash they carry (an eviction), sets
  // their reference count to 1 and appends them to `out`. REQUIRES: n <= num_free_blocks().
  void get_new_blocks(std::int32_t n, std::vector<BlockId>& out);
  // Adds a reference to each block; a block at count 0 leaves the free queue first.
  void touch(std::span<const BlockId> blocks);
  // Drops one reference from each block, in order; those reaching 0 are appended to the tail of
  // the free queue in the order given. REQUIRES: every block has a reference.
  void free_blocks(std::span<const BlockId> ordered);
  // Registers `block` under `hash`. REQUIRES: the block has a reference and carries no hash, or
  // already carries exactly this hash (then nothing changes).
  void cache_block(BlockId block, const BlockHash& hash);
  // Unregisters `block`: it carries no hash afterwards (no effect if it carries none). For a
  // block registered before its KV was computed, when that computation is called off.
  // REQUIRES: the block has a reference.
  void uncache_block(BlockId block);
  // Drops the hash of a free cached block whose content was moved elsewhere (an idle session's
  // KV stored down to an offload tier): the block carries no hash afterwards and moves to the
  // head of the free queue, to be reused first. Not an eviction (num_evictions and the sink are
  // untouched). REQUIRES: the block is free and carries a hash (fails otherwise).
  void uncache_free_block(BlockId block);
  // Prefetches the index slot of `hash` (a hint; no effect on state). See BlockTagIndex.
  void prefetch(const BlockHash& hash) const { index_.prefetch(hash); }
  // A block registered under `hash`, if any.
  std::optional<BlockId> lookup(const BlockHash& hash) const;
  // Clears every hash. Succeeds (returns true) only if every usable block is free.
  bool reset_prefix_cache();

  std::int32_t ref_count(BlockId b) const { return state_[b].ref; }
  std::optional<BlockHash> block_hash(BlockId b) const;
  // The free queue from head to tail (for tests and the block map).
  std::vector<BlockId> free_queue() const;
  // Number of cached blocks evicted (hash dropped on reuse) since construction.
  std::int64_t num_evictions() const { return num_evictions_; }
  // With a sink, get_new_blocks appends the hash of every cached block it evicts, in eviction
  // order (KV offload: core/kv_offload_tiers.h), and with `blocks` also the evicted block's id
  // (whose KV is still intact until the step that reuses it runs); null (the default) records
  // nothing. The sinks must outlive the pool or be reset first.
  void set_eviction_sink(std::vector<BlockHash>* sink, std::vector<BlockId>* blocks = nullptr) {
    eviction_sink_ = sink;
    eviction_block_sink_ = sink != nullptr ? blocks : nullptr;
  }
  // Page churn since construction: blocks popped by get_new_blocks, and blocks whose reference
  // count fell to 0 in free_blocks (back in the free queue). A touch of a free block (a prefix
  // hit on a cached block nobody held) is neither.
  std::int64_t num_allocated() const { return num_allocated_; }
  std::int64_t num_freed() const { return num_freed_; }

  // Verifies every invariant above; throws std::logic_error naming the first violation.
  void check_invariants() const;

 private:
  // The hot per-block state: 8 bytes, so that the whole array (e.g. 0.5 MB for 65,000 blocks)
  // stays in the L2 cache.
  struct BlockState {
    std::int32_t ref = 0;
    // kHasHash | kDupMember | kHasDups | ring slot << kSlotShift (kNoSlot: not in the free queue).
    std::uint32_t bits = kNoSlot << kSlotShift;

    std::uint32_t slot() const { return bits >> kSlotShift; }
    void set_slot(std::uint32_t s) { bits = (bits & kFlagMask) | (s << kSlotShift); }
    bool has(std::uint32_t flag) const { return (bits & flag) != 0; }
  };
  static constexpr std::uint32_t kHasHash = 1;    // carries hashes_[b]
  static constexpr std::uint32_t kDupMember = 2;  // in a duplicate chain, but not its head
  static constexpr std::uint32_t kHasDups = 4;    // next_dup_[b] >= 0
  static constexpr std::uint32_t kFlagMask = 7;
  static constexpr int kSlotShift = 3;
  static constexpr std::uint32_t kNoSlot = (1u << (32 - kSlotShift)) - 1;

  bool queued(BlockId b) const { return state_[b].slot() != kNoSlot; }
  // Takes a queued block out of the free queue (its ring entry goes stale).
  void unlink(BlockId b);
  void push_back(BlockId b);
  // Rewrites the ring with its live entries only, in order, starting at the head's slot.
  void compact_ring();
  // The index and chain part of evicting a block in a duplicate chain (member or head); the
  // caller clears its flags and counts.
  void drop_duplicate(BlockId b);

  std::vector<BlockState> state_;
  // Cold per-block data: the hash a block carries (valid iff kHasHash; the index's keys) and the
  // next block registered under the same hash (valid iff kHasDups; -1 otherwise).
  std::vector<BlockHash> hashes_;
  std::vector<BlockId> next_dup_;
  // hash -> first registered block still carrying it; duplicates chain through next_dup_.
  BlockTagIndex index_;
  // The free queue: ring_[(head_ + i) & ring_mask_] for i < ring_len_, live entries and stale.
  std::vector<BlockId> ring_;
  std::uint32_t ring_mask_ = 0;
  std::uint32_t head_ = 0;
  std::uint32_t ring_len_ = 0;
  std::int32_t num_free_ = 0;
  std::int32_t num_hashed_ = 0;
  std::int32_t num_free_hashed_ = 0;
  std::int64_t num_evictions_ = 0;
  std::vector<BlockHash>* eviction_sink_ = nullptr;
  std::vector<BlockId>* eviction_block_sink_ = nullptr;
  std::int64_t num_allocated_ = 0;
  std::int64_t num_freed_ = 0;
};

}  // namespace servelab
