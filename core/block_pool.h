// BlockPool: the physical KV blocks of one device, as a page cache (vLLM v1 block_pool.py).
//
// Invariants (check_invariants() verifies them all):
// - block 0 is the null block: never allocated, never free, never counted; num_blocks - 1 blocks
//   are usable;
// - a block is in the free queue iff its reference count is 0;
// - the free queue is a doubly linked list whose head is the next block to allocate or evict;
//   it starts as 1, 2, ..., num_blocks - 1; freed blocks go to the tail in the order given
//   (so the queue order is the LRU order: least recently freed first);
// - a block carries a hash iff it is registered in the hash index under that hash; several
//   blocks may carry the same hash (duplicates are kept, as in vLLM v1); a lookup returns the
//   earliest registered one still present;
// - eviction is lazy: a freed block keeps its hash and stays findable until it is popped from
//   the head of the free queue for reuse.
// Implementation note: the index itself is also cleaned lazily. When the only block under a hash
// is evicted, its index entry is left behind, stale (the block no longer carries that hash);
// lookups and inserts recognise stale entries by checking the block, inserts reuse them, and the
// index is rebuilt from the blocks when occupied slots pass 3/4 of its capacity. An eviction
// then costs no index access, which matters because every allocation of a cached block evicts.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/block_hash.h"
#include "core/block_hash_index.h"
#include "core/request_state.h"

namespace servelab {

inline constexpr BlockId kNullBlock = 0;

class BlockPool {
 public:
  // REQUIRES: num_blocks >= 2.
  explicit BlockPool(std::int32_t num_blocks);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  std::int32_t num_blocks() const { return static_cast<std::int32_t>(meta_.size()); }
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
  // Prefetches the index slot of `hash` (a hint; no effect on state). See BlockHashIndex.
  void prefetch(const BlockHash& hash) const { index_.prefetch(hash); }
  // A block registered under `hash`, if any.
  std::optional<BlockId> lookup(const BlockHash& hash) const;
  // Clears every hash. Succeeds (returns true) only if every usable block is free.
  bool reset_prefix_cache();

  std::int32_t ref_count(BlockId b) const { return meta_[b].ref; }
  std::optional<BlockHash> block_hash(BlockId b) const;
  // The free queue from head to tail (for tests and the block map).
  std::vector<BlockId> free_queue() const;
  // Number of cached blocks evicted (hash dropped on reuse) since construction.
  std::int64_t num_evictions() const { return num_evictions_; }

  // Verifies every invariant above; throws std::logic_error naming the first violation.
  void check_invariants() const;

 private:
  void unlink(BlockId b);
  void push_back(BlockId b);
  void drop_hash(BlockId b);
  // b carries `h` and heads its duplicate chain (the block the index entry should name).
  bool is_live_head(BlockId b, const BlockHash& h) const {
    return meta_[b].has_hash && !meta_[b].dup_member && meta_[b].hash == h;
  }
  void rebuild_index();

  // Everything the pool knows about one block, together: the blocks an allocation or eviction
  // touches come from the free queue in no particular order, so one cache line per block beats
  // one array per field.
  struct BlockMeta {
    BlockHash hash;  // valid iff has_hash
    std::int32_t ref = 0;
    BlockId prev = -1, next = -1;  // free-queue links; -1 = none
    BlockId next_dup = -1;         // next block registered under the same hash; -1 = none
    std::uint8_t in_queue = 0;
    std::uint8_t has_hash = 0;
    std::uint8_t dup_member = 0;  // in a duplicate chain, but not its head
  };
  std::vector<BlockMeta> meta_;
  // hash -> first registered block; further duplicates chain through BlockMeta::next_dup.
  BlockHashIndex index_;
  BlockId head_ = -1, tail_ = -1;
  std::int32_t num_free_ = 0;
  std::int32_t num_hashed_ = 0;
  std::int32_t num_free_hashed_ = 0;
  std::int64_t num_evictions_ = 0;
};

}  // namespace servelab
