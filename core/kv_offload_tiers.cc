#include "core/kv_offload_tiers.h"

#include <climits>
#include <stdexcept>
#include <string>
#include <vector>

namespace servelab {

KvOffloadTiers::KvOffloadTiers(std::vector<std::int64_t> capacities, bool host_slots)
    : host_slots_(host_slots) {
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
  if (host_slots && capacities[0] > INT32_MAX) {
    throw std::invalid_argument("KvOffloadTiers: a host store of " + std::to_string(capacities[0]) +
                                " slots is too large");
  }
}

int KvOffloadTiers::find(const BlockHash& hash) const {
  for (int t = 0; t < num_tiers(); ++t) {
    if (tiers_[t].index.contains(hash)) return t;
  }
  return -1;
}

std::int32_t KvOffloadTiers::host_slot(const BlockHash& hash) const {
  const auto it = tiers_[0].index.find(hash);
  return it == tiers_[0].index.end() ? -1 : it->second->slot;
}

std::int32_t KvOffloadTiers::offload(const BlockHash& hash) {
  Tier& top = tiers_[0];
  if (const auto it = top.index.find(hash); it != top.index.end()) {
    // Offloaded before and still there (a load back copies, it does not move): refresh.
    top.lru.splice(top.lru.end(), top.lru, it->second);
    return -1;
  }
  // Stored in tier 0 even if a lower tier has it: the lower copy is let go (the tier's
  // evicted_blocks; nothing is lost, the fresh copy is above), so that stored - evicted is what
  // each tier holds.
  for (int t = 1; t < num_tiers(); ++t) {
    Tier& lower = tiers_[t];
    if (const auto it = lower.index.find(hash); it != lower.index.end()) {
      release_slot(t, *it->second);
      lower.lru.erase(it->second);
      lower.index.erase(it);
      ++lower.stats.evicted_blocks;
    }
  }
  return insert(0, hash);
}

void KvOffloadTiers::release_slot(int t, const Entry& e) {
  if (t == 0 && e.slot >= 0) free_slots_.push_back(e.slot);
}

std::int32_t KvOffloadTiers::insert(int t, const BlockHash& hash) {
  Tier& tier = tiers_[t];
  Entry e{hash, -1};
  if (t == 0 && host_slots_) {
    // The LRU entry leaves below when the tier overflows, but its slot is taken only after
    // every older free slot (FIFO), so this entry needs a slot of its own first.
    if (!free_slots_.empty()) {
      e.slot = free_slots_.front();
      free_slots_.pop_front();
    } else if (next_slot_ < tier.capacity) {
      e.slot = next_slot_++;
    }
  }
  tier.lru.push_back(e);
  tier.index.emplace(hash, std::prev(tier.lru.end()));
  ++tier.stats.stored_blocks;
  if (static_cast<std::int64_t>(tier.lru.size()) > tier.capacity) {
    const Entry victim = tier.lru.front();
    tier.index.erase(victim.hash);
    tier.lru.pop_front();
    ++tier.stats.evicted_blocks;
    release_slot(t, victim);
    if (t + 1 < num_tiers()) {
      insert(t + 1, victim.hash);
    } else {
      ++dropped_;
    }
  }
  Entry& mine = tier.lru.back();
  if (t == 0 && host_slots_ && mine.slot < 0) {
    // Every slot was in use: the victim's, just freed, is the only one.
    mine.slot = free_slots_.front();
    free_slots_.pop_front();
  }
  return mine.slot;
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
      const auto found = tier.index.find(it->hash);
      if (found == tier.index.end() || found->second != it)
        throw std::logic_error(name + "'s index does not point at its LRU entry");
      for (int u = t + 1; u < num_tiers(); ++u) {
        if (tiers_[u].index.contains(it->hash))
          throw std::logic_error(name + " and tier " + std::to_string(u) + " hold one hash");
      }
      if ((t == 0 && host_slots_) != (it->slot >= 0))
        throw std::logic_error(name + " has an entry whose host slot does not fit the mode");
    }
  }
  if (!host_slots_) return;
  // Slots: the entries' and the free ones together are exactly [0, next_slot_), each once.
  std::vector<char> seen(static_cast<std::size_t>(next_slot_), 0);
  auto mark = [&](std::int32_t s) {
    if (s < 0 || s >= next_slot_ || seen[static_cast<std::size_t>(s)] != 0)
      throw std::logic_error("KvOffloadTiers: host slot " + std::to_string(s) +
                             " is out of range or owned twice");
    seen[static_cast<std::size_t>(s)] = 1;
  };
  for (const Entry& e : tiers_[0].lru) mark(e.slot);
  for (const std::int32_t s : free_slots_) mark(s);
  for (const char c : seen) {
    if (c == 0) throw std::logic_error("KvOffloadTiers: a host slot is lost");
  }
}

}  // namespace servelab
