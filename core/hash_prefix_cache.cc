#include "core/hash_prefix_cache.h"

namespace servelab {

void HashPrefixCache::insert(std::span<const BlockId> table, std::span<const BlockHash> hashes,
                             std::int32_t from, std::int32_t to) {
  // Each block's index slot was prefetched when its hash was computed (KvCacheManager hashes
  // blocks one by one and prefetches in between), so these loads overlap the hashing.
  for (std::int32_t i = from; i < to; ++i) pool_.cache_block(table[i], hashes[i]);
}

std::unique_ptr<PrefixCache> make_hash_prefix_cache(BlockPool& pool) {
  return std::make_unique<HashPrefixCache>(pool);
}

}  // namespace servelab
