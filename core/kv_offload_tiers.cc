#include "core/kv_offload_tiers.h"

#include <stdexcept>
#include <string>

namespace servelab {

KvOffloadTiers::KvOffloadTiers(std::vector<std::int64_t> capacities) {
  if (capacities.empty() || capacities.size() > kMaxOffloadTiers) {
    throw std::invalid_argument("KvOffloadTiers: 1 to " + std::to_string(kMaxOffloadTiers) +
                                " tiers expected, got " + std::to_string(capacities.size()));
  }
  tiers_.resize(capacities.size());
  for (std::size_t t = 0; t < capacities.size(); ++t) {
    if (capacities[t] < 1) {
      throw std::invalid_argument("KvOffloadTiers: tier " + std::to_string(t) +
                                  " needs at least one block");
    }
    tiers_[t].capacity = capacities[t];
  }
}

int KvOffloadTiers::find(const BlockHash& hash) const {
  for (int t = 0; t < num_tiers(); ++t) {
    if (tiers_[t].index.contains(hash)) return t;
  }
  return -1;
}

void KvOffloadTiers::offload(const BlockHash& hash) {
  Tier& top = tiers_[0];
  if (const auto it = top.index.find(hash); it != top.index.end()) {
    // Offloaded before and still there (a load back copies, it does not move): refresh.
    top.lru.splice(top.lru.end(), top.lru, it->second);
    return;
  }
  // Stored in tier 0 even if a lower tier has it: the lower copy ages out there on its own.
  for (int t = 1; t < num_tiers(); ++t) {
    Tier& lower = tiers_[t];
    if (const auto it = lower.index.find(hash); it != lower.index.end()) {
      lower.lru.erase(it->second);
      lower.index.erase(it);
    }
  }
  insert(0, hash);
}

void KvOffloadTiers::insert(int t, const BlockHash& hash) {
  Tier& tier = tiers_[t];
  tier.lru.push_back(hash);
  tier.index.emplace(hash, std::prev(tier.lru.end()));
  ++tier.stats.stored_blocks;
  if (static_cast<std::int64_t>(tier.lru.size()) <= tier.capacity) return;
  const BlockHash victim = tier.lru.front();
  tier.index.erase(victim);
  tier.lru.pop_front();
  ++tier.stats.evicted_blocks;
  if (t + 1 < num_tiers()) {
    insert(t + 1, victim);
  } else {
    ++dropped_;
  }
}

void KvOffloadTiers::on_loaded(const BlockHash& hash, int tier) {
  Tier& tr = tiers_[tier];
  const auto it = tr.index.find(hash);
  if (it == tr.index.end()) {
    throw std::logic_error("KvOffloadTiers: on_loaded of a hash tier " + std::to_string(tier) +
                           " does not hold");
  }
  tr.lru.splice(tr.lru.end(), tr.lru, it->second);
  ++tr.stats.loaded_blocks;
}

void KvOffloadTiers::check_invariants() const {
  for (int t = 0; t < num_tiers(); ++t) {
    const Tier& tier = tiers_[t];
    const std::string name = "KvOffloadTiers: tier " + std::to_string(t);
    if (static_cast<std::int64_t>(tier.lru.size()) > tier.capacity)
      throw std::logic_error(name + " holds more than its capacity");
    if (tier.index.size() != tier.lru.size())
      throw std::logic_error(name + "'s index and LRU list differ in size");
    for (auto it = tier.lru.begin(); it != tier.lru.end(); ++it) {
      const auto found = tier.index.find(*it);
      if (found == tier.index.end() || found->second != it)
        throw std::logic_error(name + "'s index does not point at its LRU entry");
      for (int u = t + 1; u < num_tiers(); ++u) {
        if (tiers_[u].index.contains(*it))
          throw std::logic_error(name + " and tier " + std::to_string(u) + " hold one hash");
      }
    }
  }
}

}  // namespace servelab
