// HashPrefixCache: vLLM v1's automatic prefix caching (kv_cache_utils.hash_block_tokens,
// block_pool.py), the `hash` prefix cache.
//
// The cache is the BlockPool's hash index: a registered block carries its hash in the pool
// (BlockPool::cache_block), a block nobody references goes back to the pool's free queue still
// carrying it, and it stays findable until get_new_blocks pops it for reuse (lazy LRU eviction:
// least recently freed first). Several blocks may carry one hash (content computed twice); a
// lookup returns the earliest registered one still present. The cache holds no references, so
// nothing is reclaimable beyond the free queue and idle_ref_count() is 0.
#pragma once

#include "core/prefix_cache.h"

namespace servelab {

class HashPrefixCache final : public PrefixCache {
 public:
  // `pool` must outlive the cache.
  explicit HashPrefixCache(BlockPool& pool) : pool_(pool) {}

  std::string_view name() const override { return "hash"; }
  std::optional<BlockId> lookup(const BlockHash& hash) const override { return pool_.lookup(hash); }
  void prefetch(const BlockHash& hash) const override { pool_.prefetch(hash); }
  // Every block is registered (a block carrying this hash already is left as is).
  void insert(std::span<const BlockId> table, std::span<const BlockHash> hashes, std::int32_t from,
              std::int32_t to) override;
  void forget(BlockId block) override { pool_.uncache_block(block); }
  std::int32_t num_evictable() const override { return pool_.num_free_cached_blocks(); }
  std::int64_t num_evictions() const override { return pool_.num_evictions(); }
  // Clears every hash in the pool (BlockPool::reset_prefix_cache).
  bool reset() override { return pool_.reset_prefix_cache(); }
  // The pool's invariants cover the hashes; nothing else to check.
  void check_invariants() const override {}

 private:
  BlockPool& pool_;
};

std::unique_ptr<PrefixCache> make_hash_prefix_cache(BlockPool& pool);

}  // namespace servelab
