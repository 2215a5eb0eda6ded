#include "serving/memory_tiers_config.h"

#include <cmath>

#include "serving/recorder.h"
#include "traces/synthetic_workload.h"

namespace servelab {

PrefixCacheSection parse_prefix_cache_section(const ConfigNode& node) {
  node.allow_keys({"pinned"});
  PrefixCacheSection s;
  const auto pinned = node.find("pinned");
  if (!pinned) return s;
  s.location = pinned->location() + ": key '" + pinned->path() + "'";
  for (const ConfigNode& e : pinned->elements()) {
    e.allow_keys({"shared_prefix", "length", "tokens"});
    PinnedPrefixConfig p;
    p.location = e.location() + ": key '" + e.path() + "'";
    const bool shared = e.has("shared_prefix");
    if (shared == e.has("tokens")) {
      e.fail_message("expected exactly one of shared_prefix (with length) or tokens");
    }
    if (shared) {
      p.shared_prefix = static_cast<std::uint64_t>(e.get_int("shared_prefix", 0, 1'000'000));
      p.length = static_cast<std::int32_t>(e.get_int("length", 1, 1 << 24));
    } else {
      if (e.has("length")) e.at("length").fail_message("length goes with shared_prefix only");
      for (const ConfigNode& t : e.at("tokens").elements()) {
        p.tokens.push_back(static_cast<std::int32_t>(t.as_int(0, INT32_MAX)));
      }
      if (p.tokens.empty()) e.at("tokens").fail("a non-empty list of token ids");
      p.length = static_cast<std::int32_t>(p.tokens.size());
    }
    s.pinned.push_back(std::move(p));
  }
  return s;
}

namespace {

OffloadTierConfig parse_tier(const ConfigNode& n, bool disk) {
  if (disk) {
    n.allow_keys({"gib", "blocks", "read_gbps"});
  } else {
    n.allow_keys({"gib", "blocks"});
  }
  OffloadTierConfig t;
  t.location = n.location() + ": key '" + n.path() + "'";
  if (n.has("gib") == n.has("blocks")) n.fail_message("expected exactly one of gib or blocks");
  if (n.has("gib")) t.gib = n.get_double("gib", 1e-6, 1e6);
  if (n.has("blocks")) t.blocks = n.get_int("blocks", 1, 1LL << 40);
  if (disk) t.read_gbps = n.get_double("read_gbps", 0.0, 1e-3, 1e5);
  return t;
}

}  // namespace

KvOffloadConfig parse_kv_offload(const ConfigNode& node) {
  node.allow_keys({"host", "disk", "idle_offload_s"});
  KvOffloadConfig c;
  c.set = true;
  c.location = node.location() + ": key '" + node.path() + "'";
  c.host = parse_tier(node.at("host"), false);
  if (const auto d = node.find("disk")) c.disk = parse_tier(*d, true);
  if (const auto idle = node.find("idle_offload_s")) {
    c.idle_location = idle->location() + ": key '" + idle->path() + "'";
    c.idle_offload_s = node.get_double("idle_offload_s", 1e-6, 1e7);
  }
  return c;
}

RequestSpec pinned_prefix_spec(const PinnedPrefixConfig& p, std::uint64_t seed) {
  if (p.shared_prefix) {
    return make_request(0, 0,
                        {{shared_prefix_content_id(seed, *p.shared_prefix), 0,
                          static_cast<std::uint32_t>(p.length)}},
                        1);
  }
  return make_literal_request(0, 0, p.tokens, 1);
}

std::int64_t offload_tier_blocks(const OffloadTierConfig& tier, std::int64_t block_bytes) {
  if (tier.blocks) return *tier.blocks;
  const double bytes = *tier.gib * 1073741824.0;
  const auto blocks =
      static_cast<std::int64_t>(std::floor(bytes / static_cast<double>(block_bytes)));
  if (blocks < 1) {
    throw ConfigError(tier.location + ": " + std::to_string(*tier.gib) +
                      " GiB holds no KV block of " + std::to_string(block_bytes) +
                      " bytes; give at least one block's size");
  }
  return blocks;
}

std::unique_ptr<KvOffloadTiers> make_offload_tiers(const KvOffloadConfig& config,
                                                   std::int64_t block_bytes, bool host_slots) {
  std::vector<std::int64_t> capacities = {offload_tier_blocks(config.host, block_bytes)};
  if (config.disk) capacities.push_back(offload_tier_blocks(*config.disk, block_bytes));
  return std::make_unique<KvOffloadTiers>(std::move(capacities), host_slots);
}

std::array<double, kMaxOffloadTiers> offload_load_seconds(const KvOffloadConfig& config,
                                                          const HardwareConfig& hardware,
                                                          std::int64_t gpu_block_bytes) {
  const auto bytes = static_cast<double>(gpu_block_bytes);
  std::array<double, kMaxOffloadTiers> s = {};
  s[kHostTier] = bytes / (hardware.host_link_bandwidth * hardware.host_link_efficiency);
  if (config.disk) {
    double read = config.disk->read_gbps * 1e9;
    if (read <= 0) read = hardware.nvme_read_bandwidth;
    if (read <= 0) {
      throw ConfigError(config.disk->location + ": the disk tier needs a read bandwidth: set " +
                        "read_gbps here, or nvme_read_gbps in the hardware entry '" +
                        hardware.name + "'");
    }
    s[kDiskTier] = bytes / read + s[kHostTier];
  }
  return s;
}

double offload_store_seconds(const HardwareConfig& hardware, std::int64_t gpu_block_bytes) {
  return static_cast<double>(gpu_block_bytes) /
         (hardware.host_link_bandwidth * hardware.host_link_efficiency);
}

void fill_offload_summary(const KvOffloadTiers& tiers, const PrefixCacheStats& stats, double load_s,
                          RunSummary& summary) {
  const char* names[kMaxOffloadTiers] = {"host", "disk"};
  summary.offload_tiers.clear();
  for (int t = 0; t < tiers.num_tiers(); ++t) {
    RunSummary::OffloadTier tier;
    tier.name = names[t];
    tier.capacity_blocks = tiers.capacity(t);
    tier.stored_blocks = tiers.stats(t).stored_blocks;
    tier.loaded_blocks = tiers.stats(t).loaded_blocks;
    tier.evicted_blocks = tiers.stats(t).evicted_blocks;
    tier.hit_tokens = stats.tier_hit_tokens[t];
    summary.offload_tiers.push_back(tier);
  }
  summary.offload_dropped_blocks = tiers.dropped_blocks();
  summary.offload_load_s = load_s;
}

std::vector<RequestSpec> pin_prefixes(const PrefixCacheSection& section, std::uint64_t seed,
                                      KvCacheManager& kv) {
  std::vector<RequestSpec> specs;
  for (const PinnedPrefixConfig& p : section.pinned) {
    RequestSpec spec = pinned_prefix_spec(p, seed);
    const std::int32_t need = kv.num_blocks_to_pin(spec);
    if (need >= kv.num_free_blocks()) {
      throw ConfigError(p.location + ": the pinned prefixes need " +
                        std::to_string(kv.num_pinned_blocks() + need) +
                        " KV blocks, but the pool has " +
                        std::to_string(kv.pool().num_usable_blocks()) +
                        " and requests need at least one; pin fewer or shorter prefixes");
    }
    kv.pin_prefix(spec);
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace servelab
