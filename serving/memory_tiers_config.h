// The experiment's `prefix_cache:` (pinned prefixes) and `kv_offload:` (KV offload tiers)
// sections, parsed and validated (docs/experiments.md). Both are absent by default, and then a
// run is exactly what it was without them.
//
//   prefix_cache:
//     pinned:                           # prompts whose KV is computed at start and never evicted
//       - {shared_prefix: 0, length: 1024}   # shared prefix / system prompt 0 of the workload
//                                            # generator (its first `length` tokens)
//       - {tokens: [1, 2, 3, ...]}            # literal token ids (as a client sends them)
//   kv_offload:                         # tiers behind the GPU pool (LMCache / Mooncake style)
//     host: {gib: 64}                   # or {blocks: N}: host-memory tier
//     disk: {gib: 1000, read_gbps: 7}   # optional; read_gbps defaults to the hardware entry's
//                                       # nvme_read_gbps
//     idle_offload_s: 10                # optional (> 0; default off): a multi-turn session idle
//                                       # this long has its cached blocks stored down to the host
//                                       # tier and dropped from the GPU cache
//                                       # (core/idle_session_offload.h; simulator only)
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/kv_cache_manager.h"
#include "core/kv_offload_tiers.h"
#include "core/request.h"
#include "serving/config_node.h"
#include "serving/hardware_config.h"

namespace servelab {

struct RunSummary;  // serving/recorder.h

struct PinnedPrefixConfig {
  std::optional<std::uint64_t> shared_prefix;  // index p of shared_prefix_content_id(seed, p)
  std::int32_t length = 0;                     // tokens of the shared prefix
  std::vector<std::int32_t> tokens;            // literal token ids (when no shared_prefix)
  std::string location;                        // "FILE:LINE:COL: key '...'" for later errors
};

struct PrefixCacheSection {
  std::vector<PinnedPrefixConfig> pinned;
  std::string location;  // of `prefix_cache.pinned` ("" when absent)
};

// One offload tier: a size in GiB or in blocks (exactly one), and for the disk tier a read
// bandwidth in GB/s (0: the hardware entry's nvme_read_gbps).
struct OffloadTierConfig {
  std::optional<double> gib;
  std::optional<std::int64_t> blocks;
  double read_gbps = 0;
  std::string location;  // "FILE:LINE:COL: key 'kv_offload.host'"
};

struct KvOffloadConfig {
  bool set = false;
  OffloadTierConfig host;
  std::optional<OffloadTierConfig> disk;
  double idle_offload_s = 0;  // 0: idle sessions are not offloaded
  std::string idle_location;  // "FILE:LINE:COL: key 'kv_offload.idle_offload_s'" when set
  std::string location;       // of `kv_offload`
};

// Strict parsers: unknown keys, wrong types and out-of-range values are ConfigErrors naming
// FILE:LINE:COL and the key.
PrefixCacheSection parse_prefix_cache_section(const ConfigNode& node);
KvOffloadConfig parse_kv_offload(const ConfigNode& node);

// The prompt a pinned prefix stands for, as a request spec (id and arrival 0, one output token)
// whose prompt blocks the KV cache manager hashes like any request's. `seed` is the experiment
// seed (the workload generators' shared prefixes derive from it).
RequestSpec pinned_prefix_spec(const PinnedPrefixConfig& p, std::uint64_t seed);

// Blocks of `block_bytes` bytes a tier holds (blocks wins over gib). Throws ConfigError naming
// the tier when its gib holds less than one block (it became a tier of one block: more memory
// than the user gave).
std::int64_t offload_tier_blocks(const OffloadTierConfig& tier, std::int64_t block_bytes);

// The tiers `config` describes (host, then disk), sized with `block_bytes` (a block's K and V
// across the model); host_slots for a real host store (the engine). REQUIRES: config.set.
std::unique_ptr<KvOffloadTiers> make_offload_tiers(const KvOffloadConfig& config,
                                                   std::int64_t block_bytes,
                                                   bool host_slots = false);

// Seconds to bring one block back from each tier to the device, for a GPU holding
// `gpu_block_bytes` of each block (docs/cost-model.md, "KV offload tiers"): host tier, the host
// link (host_link_bandwidth * host_link_efficiency, as a swap-in); disk tier, the read from NVMe
// (kv_offload.disk.read_gbps, else the hardware entry's nvme_read_gbps) and then the host link,
// one after the other. Throws ConfigError naming kv_offload.disk when the disk tier has no
// bandwidth from either place.
std::array<double, kMaxOffloadTiers> offload_load_seconds(const KvOffloadConfig& config,
                                                          const HardwareConfig& hardware,
                                                          std::int64_t gpu_block_bytes);

// Seconds to store one block from the device into the host tier (the host link, as a swap-out):
// what the idle offload of a block costs the link. Stores overlap the steps (not charged to the
// step time; docs/cost-model.md).
double offload_store_seconds(const HardwareConfig& hardware, std::int64_t gpu_block_bytes);

// The per-tier summary of a run with offload tiers (RunSummary::offload_tiers, dropped blocks,
// load time), from the tiers and the manager's statistics; both drivers fill it the same way.
void fill_offload_summary(const KvOffloadTiers& tiers, const PrefixCacheStats& stats, double load_s,
                          RunSummary& summary);

// Pins every prefix of `section` in `kv` (KvCacheManager::pin_prefix), in order, and returns the
// prompts pinned. Throws ConfigError naming the pinned entry when the pinned blocks would leave
// no block of the pool for requests.
std::vector<RequestSpec> pin_prefixes(const PrefixCacheSection& section, std::uint64_t seed,
                                      KvCacheManager& kv);

}  // namespace servelab
