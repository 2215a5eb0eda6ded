// The `allocation` plugins: how the KvCacheManager hands out blocks (core/kv_cache_manager.h,
// KvAllocation). Like the prefix caches they configure core's manager, whose allocation path is
// the simulator's hot loop, rather than being classes behind a virtual interface:
//   paged       PagedAttention (Kwon et al., SOSP'23): blocks on demand from one pool
//   contiguous  systems before PagedAttention (FasterTransformer, Orca): each request reserves
//               its maximum length at admission; nothing is shared, so prefix caching is off
//               whatever `prefix_cache` says (this plugin is built after it)
#include "core/kv_cache_manager.h"
#include "core/scheduler_config.h"
#include "policies/registry.h"

namespace servelab {
namespace {

const PolicyRegistrar kPaged({PolicyKind::kAllocation,
                              "paged",
                              "fixed-size KV blocks allocated on demand from one pool",
                              "PagedAttention (Kwon et al., SOSP'23)",
                              {},
                              [](const PolicySpec&, PolicyTarget& t) {
                                if (t.kv_cache != nullptr) {
                                  t.kv_cache->allocation = KvAllocation::kPaged;
                                }
                              },
                              /*rank=*/0});

const PolicyRegistrar kContiguous(
    {PolicyKind::kAllocation,
     "contiguous",
     "each request reserves KV for its maximum length at admission (no sharing, no prefix "
     "cache)",
     "serving systems before PagedAttention (FasterTransformer, Orca), as in Kwon et al.",
     {{"reserve",
       ParamType::kString,
       std::string("max_model_len"),
       -1e300,
       1e300,
       {"max_model_len", "max_tokens"},
       "max_model_len: every request reserves max_model_len tokens; max_tokens: prompt + "
       "its max_output_tokens"}},
     [](const PolicySpec& spec, PolicyTarget& t) {
       // Contiguous reservations share nothing, so there is no prefix cache to use.
       t.scheduler->enable_prefix_caching = false;
       if (t.kv_cache == nullptr) return;
       t.kv_cache->allocation = KvAllocation::kContiguous;
       // The parameter's choices (checked by the registry) map onto the reservation sizes.
       t.kv_cache->reserve = spec.get_string("reserve") == "max_tokens" ? KvReserve::kMaxTokens
                                                                        : KvReserve::kMaxModelLen;
     },
     /*rank=*/1});

}  // namespace
}  // namespace servelab
