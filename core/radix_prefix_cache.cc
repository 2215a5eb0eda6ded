#include "core/radix_prefix_cache.h"

#include <stdexcept>

namespace servelab {

void RadixPrefixCache::insert(std::span<const BlockId> table, std::span<const BlockHash> hashes,
                              std::int32_t from, std::int32_t to) {
  for (std::int32_t i = from; i < to; ++i) {
    const BlockId b = table[i];
    if (tree_.contains(b)) continue;  // a hit block, or shared with a sibling sample
    tree_.insert(i == 0 ? kNullBlock : table[i - 1], b, hashes[i]);
  }
}

void RadixPrefixCache::forget(BlockId block) {
  if (tree_.contains(block)) tree_.remove(block);  // not when its content was in the tree already
}

void RadixPrefixCache::make_room(std::int32_t n) {
  if (n > pool_.num_free_blocks()) tree_.evict(n - pool_.num_free_blocks());
}

bool RadixPrefixCache::reset() {
  if (tree_.num_unlocked() != tree_.num_nodes()) return false;
  tree_.evict(tree_.num_nodes());
  return tree_.num_nodes() == 0;
}

void RadixPrefixCache::check_invariants() const {
  if (pool_.num_cached_blocks() != 0) {
    throw std::logic_error("RadixPrefixCache: the pool carries hashes");
  }
  tree_.check_invariants();
}

std::unique_ptr<PrefixCache> make_radix_prefix_cache(BlockPool& pool) {
  return std::make_unique<RadixPrefixCache>(pool);
}

}  // namespace servelab
