#include "policies/router_prefix_index.h"

#include <algorithm>
#include <bit>
#include <stdexcept>

namespace servelab {

RouterPrefixIndex::RouterPrefixIndex(std::int32_t num_replicas, std::int32_t block_size)
    : block_size_(block_size),
      sets_(static_cast<std::size_t>(num_replicas)),
      queues_(static_cast<std::size_t>(num_replicas)) {
  if (num_replicas < 1 || block_size < 1) {
    throw std::invalid_argument("RouterPrefixIndex: replicas and block size must be >= 1");
  }
}

std::vector<BlockHash> RouterPrefixIndex::prompt_hashes(const RequestSpec& spec) const {
  const std::int32_t n = spec.prompt_len / block_size_;
  std::vector<BlockHash> out;
  out.reserve(static_cast<std::size_t>(n));
  BlockHash parent = kNoneHash;
  for (std::int32_t b = 0; b < n; ++b) {
    parent = hash_block(parent, spec, b, block_size_);
    out.push_back(parent);
  }
  return out;
}

std::uint64_t RouterPrefixIndex::KeySet::find(std::uint64_t key) const {
  if (slots_.empty()) return 0;
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = home(key);; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.tick == 0) return 0;
    if (s.key == key) return s.tick;
  }
}

void RouterPrefixIndex::KeySet::grow() {
  std::vector<Slot> old;
  old.swap(slots_);
  const std::size_t n = old.empty() ? 1024 : 2 * old.size();
  slots_.assign(n, Slot{});
  shift_ = 64 - std::countr_zero(n);
  size_ = 0;
  for (const Slot& s : old) {
    if (s.tick != 0) put(s.key, s.tick);
  }
}

void RouterPrefixIndex::KeySet::put(std::uint64_t key, std::uint64_t tick) {
  if (2 * (size_ + 1) > slots_.size()) grow();
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = home(key);; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.tick == 0) {
      s = Slot{key, tick};
      ++size_;
      return;
    }
    if (s.key == key) {
      s.tick = tick;
      return;
    }
  }
}

void RouterPrefixIndex::KeySet::erase(std::uint64_t key) {
  if (slots_.empty()) return;
  const std::size_t mask = slots_.size() - 1;
  std::size_t i = home(key);
  while (slots_[i].tick != 0 && slots_[i].key != key) i = (i + 1) & mask;
  if (slots_[i].tick == 0) return;
  // Backward shift: move later entries of the probe run into the hole when their home allows.
  for (std::size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
    if (slots_[j].tick == 0) break;
    const std::size_t h = home(slots_[j].key);
    // Movable when the hole i lies cyclically in [h, j).
    if (((j - h) & mask) >= ((j - i) & mask)) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = Slot{};
  --size_;
}

std::int32_t RouterPrefixIndex::matched_blocks(std::int32_t replica,
                                               const std::vector<BlockHash>& hashes) const {
  const KeySet& set = sets_[static_cast<std::size_t>(replica)];
  std::int32_t n = 0;
  for (const BlockHash& h : hashes) {
    if (set.find(h.lo) == 0) break;  // the chain: a miss makes every later block a miss
    ++n;
  }
  return n;
}

void RouterPrefixIndex::insert(std::int32_t replica, const std::vector<BlockHash>& hashes,
                               std::int64_t capacity) {
  KeySet& set = sets_[static_cast<std::size_t>(replica)];
  auto& queue = queues_[static_cast<std::size_t>(replica)];
  for (const BlockHash& h : hashes) {
    const std::uint64_t t = ++tick_;
    set.put(h.lo, t);
    queue.push_back({h.lo, t});
  }
  const auto cap = static_cast<std::size_t>(std::max<std::int64_t>(capacity, 1));
  while (set.size() > cap) {
    const Queued q = queue.front();
    queue.pop_front();
    if (set.find(q.key) == q.tick) set.erase(q.key);
  }
  // Stale entries can pile up when the same blocks are sent again and again: compact.
  if (queue.size() > 4 * set.size() + 64) {
    std::deque<Queued> live;
    for (const Queued& q : queue) {
      if (set.find(q.key) == q.tick) live.push_back(q);
    }
    queue.swap(live);
  }
}

}  // namespace servelab
