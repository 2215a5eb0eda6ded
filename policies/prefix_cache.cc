// The `prefix_cache` plugins: which PrefixCache (core/prefix_cache.h) the KvCacheManager builds.
// The two shipped caches are classes in core, beside the block pool and radix tree they use
// (the default must exist without the registry); here they get names, documentation and
// factories:
//   hash   HashPrefixCache (core/hash_prefix_cache.h): vLLM v1 automatic prefix caching,
//          hash-chained full blocks, LRU eviction from the pool's free queue
//   radix  RadixPrefixCache (core/radix_prefix_cache.h): SGLang RadixAttention at block
//          granularity, locked root paths, leaf-only LRU eviction
//   none   no prefix caching (vLLM --no-enable-prefix-caching)
// A new cache is a PrefixCache subclass and a registrar in one file (docs/policies.md, "Adding a
// policy"; tests/policy_plugin_test.cc adds one).
#include "core/hash_prefix_cache.h"
#include "core/kv_cache_manager.h"
#include "core/radix_prefix_cache.h"
#include "core/scheduler_config.h"
#include "policies/registry.h"

namespace servelab {
namespace {

PolicyFactory cache_factory(PrefixCacheFactory make) {
  return [make](const PolicySpec&, PolicyTarget& t) {
    t.scheduler->enable_prefix_caching = static_cast<bool>(make);
    if (t.kv_cache != nullptr && make) t.kv_cache->prefix_cache = make;
  };
}

const PolicyRegistrar kHash({PolicyKind::kPrefixCache,
                             "hash",
                             "hash-chained full blocks are shared across requests and kept until "
                             "evicted (LRU)",
                             "vLLM v1 automatic prefix caching (kv_cache_utils.hash_block_tokens)",
                             {},
                             cache_factory(make_hash_prefix_cache),
                             /*rank=*/0});

const PolicyRegistrar kRadix(
    {PolicyKind::kPrefixCache,
     "radix",
     "a radix tree of full blocks owns the cache: nodes used by running requests (and their "
     "ancestors) are locked, unlocked leaves are evicted least recently used first",
     "SGLang (RadixAttention)",
     {},
     cache_factory(make_radix_prefix_cache),
     /*rank=*/1});

const PolicyRegistrar kNone({PolicyKind::kPrefixCache,
                             "none",
                             "no prefix caching: every request computes its whole prompt",
                             "vLLM --no-enable-prefix-caching",
                             {},
                             cache_factory(nullptr),
                             /*rank=*/2});

}  // namespace
}  // namespace servelab
