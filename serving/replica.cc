#include "serving/replica.h"

#include "policies/registry.h"
#include "serving/kv_capacity.h"

namespace servelab {

namespace {

KvCacheOptions with_host_pool(KvCacheOptions options, HostBlockPool& host) {
  if (host.num_blocks() > 0) options.host_pool = &host;
  return options;
}

}  // namespace

Replica::Replica(const SchedulerConfig& config, std::int32_t num_gpu_blocks, Backend& backend,
                 SchedulerObserver* observer, const KvCacheOptions& kv_options,
                 std::int32_t num_cpu_blocks)
    : pool_(num_gpu_blocks),
      host_pool_(num_cpu_blocks),
      kv_(pool_, config.block_size, config.max_model_len, config.enable_prefix_caching,
          with_host_pool(kv_options, host_pool_)),
      scheduler_(config, kv_, observer),
      backend_(backend) {}

StepSnapshot Replica::snapshot() const {
  StepSnapshot s;
  s.num_usable_blocks = pool_.num_usable_blocks();
  // Radix mode: cached blocks nobody uses are held by the tree but count as free.
  s.kv_blocks_free = kv_.num_free_blocks();
  s.kv_blocks_used = s.num_usable_blocks - s.kv_blocks_free;
  s.kv_blocks_cached = kv_.num_free_cached_blocks();
  s.waiting = static_cast<std::int32_t>(scheduler_.num_waiting());
  s.running = static_cast<std::int32_t>(scheduler_.num_running());
  fill_kv_slot_stats(kv_, s);
  return s;
}

SchedulerConfig scheduler_config_with_policies(const ExperimentConfig& config) {
  SchedulerConfig sc = config.scheduler;
  // The queue again: its maker is bound to the seed, which --seed may have changed, and to the
  // classes' TTFT objectives (edf), parsed after the policies.
  PolicyTarget target{&sc, nullptr, config.seed};
  target.ttft_targets_ns = ttft_targets_ns(config);
  build_policy(PolicyKind::kQueue, config.policies.queue, target);
  return sc;
}

KvCacheOptions kv_cache_options_for(const ExperimentConfig& config) {
  KvCacheOptions kv_cache_options;
  SchedulerConfig scratch;  // the scheduler side was built when the experiment was loaded
  PolicyTarget target{&scratch, &kv_cache_options, config.seed};
  build_policy(PolicyKind::kPrefixCache, config.policies.prefix_cache, target);
  build_policy(PolicyKind::kAllocation, config.policies.allocation, target);
  kv_cache_options.eagle = config.scheduler.speculative.enabled() &&
                           config.scheduler.speculative.method == SpecMethod::kEagle;
  return kv_cache_options;
}

}  // namespace servelab
