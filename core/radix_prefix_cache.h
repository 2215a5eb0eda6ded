// RadixPrefixCache: SGLang's RadixAttention at KV-block granularity, the `radix` prefix cache.
//
// A RadixTree (core/radix_tree.h) owns the cached blocks: it holds a reference on each, so they
// never reach the pool's free queue; a node used by a running request (and so all its ancestors)
// is locked; unlocked leaves are evicted least recently used first, on demand (make_room), and
// count as reclaimable capacity meanwhile. The pool carries no hashes in this mode.
//
// insert() keeps the tree a set of root paths: a block joins only as the child of the block
// before it in the same table; a block whose content is cached already (computed twice) stays
// private to its request, and so do the blocks after it (their parent is not a node).
#pragma once

#include "core/prefix_cache.h"
#include "core/radix_tree.h"

namespace servelab {

class RadixPrefixCache final : public PrefixCache {
 public:
  // `pool` must outlive the cache.
  explicit RadixPrefixCache(BlockPool& pool) : pool_(pool), tree_(pool) {}

  std::string_view name() const override { return "radix"; }
  std::optional<BlockId> lookup(const BlockHash& hash) const override { return tree_.lookup(hash); }
  void insert(std::span<const BlockId> table, std::span<const BlockHash> hashes, std::int32_t from,
              std::int32_t to) override;
  void forget(BlockId block) override;
  void refresh(BlockId block) override { tree_.refresh(block); }
  void on_acquired(std::span<const BlockId> blocks) override { tree_.on_acquired(blocks); }
  void on_released(std::span<const BlockId> blocks) override { tree_.on_released(blocks); }
  std::int32_t num_reclaimable() const override { return tree_.num_unlocked(); }
  void make_room(std::int32_t n) override;
  std::int32_t num_evictable() const override { return tree_.num_unlocked(); }
  std::int32_t idle_ref_count() const override { return 1; }  // the tree's own reference
  std::int64_t num_evictions() const override { return tree_.num_evictions(); }
  // Evicts every node (counted as evictions); false while a node is locked.
  bool reset() override;
  // The tree's invariants, and no hash on any pool block.
  void check_invariants() const override;

  const RadixTree& tree() const { return tree_; }

 private:
  BlockPool& pool_;
  RadixTree tree_;
};

std::unique_ptr<PrefixCache> make_radix_prefix_cache(BlockPool& pool);

// The tree of `cache` when it is a RadixPrefixCache, else null (for tests and inspection).
inline const RadixTree* radix_tree_of(const PrefixCache* cache) {
  const auto* radix = dynamic_cast<const RadixPrefixCache*>(cache);
  return radix != nullptr ? &radix->tree() : nullptr;
}

}  // namespace servelab
