// PrefixCache: the interface of a prefix cache, the `prefix_cache` policy kind
// (docs/policies.md). KvCacheManager owns one when prefix caching is on and asks it, never a
// concrete cache, which blocks hold which content.
//
// Vocabulary. A *full block* is a KV block all of whose block_size token slots belong to one
// request's token sequence; its *hash* (core/block_hash.h) chains over the hashes of the blocks
// before it, so a hash names the whole token path from the sequence start. A cached block is one
// the cache can return for its hash; whether a block nobody references stays cached, and until
// when, is the cache's eviction policy.
//
// Contract between the manager and a cache (the manager keeps every BlockPool reference count it
// takes; a cache may take references of its own and then reports them in idle_ref_count()):
// - lookup(hash) never changes a reference count. The manager takes a reference on each hit
//   block (BlockPool::touch) and then calls on_acquired(); it calls on_released() after dropping
//   references (BlockPool::free_blocks), in release order: last block of a table first.
// - insert(table, hashes, from, to) registers blocks table[from, to) of one request, in position
//   order, each holding a reference of that request and about to hold (or holding) the KV of its
//   hash; table[0, from) are registered already or shared with the cache. A cache may decline a
//   block (e.g. its content is cached under another block): the block then stays private.
// - forget(block) unregisters a block insert() was given whose KV computation was called off
//   (the step that would have written it was unscheduled); the block still holds the request's
//   reference. Blocks are forgotten deepest first. A block the cache declined is ignored.
// - Capacity: num_free_blocks() of the manager is the pool's free queue plus num_reclaimable();
//   before taking n blocks from the pool the manager calls make_room(n), after which the pool
//   has min(n, pool free + reclaimable) free blocks. A cache whose idle blocks sit in the pool's
//   free queue (evicted lazily by BlockPool::get_new_blocks) has nothing to reclaim.
// - idle_ref_count(): the reference count of a cached block nobody but the cache uses (0 when the
//   cache holds no references). A hit block at that count leaves the free capacity when touched.
// - Determinism: no decision may depend on addresses or unordered iteration order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "core/block_hash.h"
#include "core/block_pool.h"

namespace servelab {

class PrefixCache {
 public:
  virtual ~PrefixCache() = default;

  // The plugin name (`hash`, `radix`, ...), for messages and tests.
  virtual std::string_view name() const = 0;

  // The cached block holding the content `hash` names, if any.
  virtual std::optional<BlockId> lookup(const BlockHash& hash) const = 0;
  // A hint that `hash` will be looked up or inserted soon (start loading its index slot).
  virtual void prefetch(const BlockHash& /*hash*/) const {}

  // Registers table[from, to) under hashes[from, to) (see the contract above).
  // REQUIRES: 0 <= from < to <= table.size(), to <= hashes.size().
  virtual void insert(std::span<const BlockId> table, std::span<const BlockHash> hashes,
                      std::int32_t from, std::int32_t to) = 0;
  // Unregisters `block` (see the contract above).
  virtual void forget(BlockId block) = 0;

  // A cache-aware queue order matched cached `block` (a lookup() result) for a waiting request.
  // A cache whose recency follows SGLang's match_prefix (which stamps every node it walks)
  // refreshes the block's; the default changes nothing (vLLM's lookups leave recency alone).
  virtual void refresh(BlockId /*block*/) {}

  // Reference-count changes the manager made on `blocks` (see the contract above).
  virtual void on_acquired(std::span<const BlockId> /*blocks*/) {}
  virtual void on_released(std::span<const BlockId> /*blocks*/) {}

  // Blocks outside the pool's free queue that make_room() can give back to it.
  virtual std::int32_t num_reclaimable() const { return 0; }
  // Evicts until the pool has at least n free blocks or nothing reclaimable is left.
  virtual void make_room(std::int32_t /*n*/) {}
  // Cached blocks nobody but the cache references (the evictable cache).
  virtual std::int32_t num_evictable() const = 0;
  // Reference count of a cached block nobody but the cache uses.
  virtual std::int32_t idle_ref_count() const { return 0; }
  // Cached blocks evicted since construction.
  virtual std::int64_t num_evictions() const = 0;
  // Drops every cached block (vLLM's reset_prefix_cache); called only when no request holds a
  // block. Returns false when the cache cannot (the default, for caches without a reset).
  virtual bool reset() { return false; }

  // Verifies the cache's own invariants against the pool; throws std::logic_error.
  virtual void check_invariants() const = 0;
};

// Builds a cache over `pool` (which outlives it). The `prefix_cache` plugins set one in
// KvCacheOptions; parameters of a plugin are captured in the factory.
using PrefixCacheFactory = std::function<std::unique_ptr<PrefixCache>(BlockPool& pool)>;

}  // namespace servelab
