// The `prefix_cache` plugins: which prefix cache the KvCacheManager keeps
// (core/kv_cache_manager.h). Both caches are implemented in core beside the block pool they share,
// in the allocation hot path (core/block_pool.h hashes, core/radix_tree.h), so these plugins are
// factories that configure the manager rather than classes behind a virtual interface:
//   hash   vLLM v1 automatic prefix caching: hash-chained full blocks, LRU eviction from the
//          pool's free queue (kv_cache_utils.hash_block_tokens)
//   radix  SGLang RadixAttention at block granularity: a RadixTree owns the cached blocks,
//          locked root paths, leaf-only LRU eviction
//   none   no prefix caching (vLLM --no-enable-prefix-caching)
#include "core/kv_cache_manager.h"
#include "core/scheduler_config.h"
#include "policies/registry.h"

namespace servelab {
namespace {

PolicyFactory cache_factory(bool enabled, PrefixCacheMode mode) {
  return [enabled, mode](const PolicySpec&, PolicyTarget& t) {
    t.scheduler->enable_prefix_caching = enabled;
    if (t.kv_cache != nullptr) t.kv_cache->prefix_cache = mode;
  };
}

const PolicyRegistrar kHash({PolicyKind::kPrefixCache,
                             "hash",
                             "hash-chained full blocks are shared across requests and kept until "
                             "evicted (LRU)",
                             "vLLM v1 automatic prefix caching (kv_cache_utils.hash_block_tokens)",
                             {},
                             cache_factory(true, PrefixCacheMode::kHash),
                             /*rank=*/0});

const PolicyRegistrar kRadix(
    {PolicyKind::kPrefixCache,
     "radix",
     "a radix tree of full blocks owns the cache: nodes used by running requests (and their "
     "ancestors) are locked, unlocked leaves are evicted least recently used first",
     "SGLang (RadixAttention)",
     {},
     cache_factory(true, PrefixCacheMode::kRadix),
     /*rank=*/1});

const PolicyRegistrar kNone({PolicyKind::kPrefixCache,
                             "none",
                             "no prefix caching: every request computes its whole prompt",
                             "vLLM --no-enable-prefix-caching",
                             {},
                             cache_factory(false, PrefixCacheMode::kHash),
                             /*rank=*/2});

}  // namespace
}  // namespace servelab
