#include "policies/router_prefix_index.h"

#include <algorithm>
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

std::int32_t RouterPrefixIndex::matched_blocks(std::int32_t replica,
                                               const std::vector<BlockHash>& hashes) const {
  const auto& set = sets_[static_cast<std::size_t>(replica)];
  std::int32_t n = 0;
  for (const BlockHash& h : hashes) {
    if (!set.contains(h)) break;  // the chain: a miss makes every later block a miss
    ++n;
  }
  return n;
}

void RouterPrefixIndex::insert(std::int32_t replica, const std::vector<BlockHash>& hashes,
                               std::int64_t capacity) {
  auto& set = sets_[static_cast<std::size_t>(replica)];
  auto& queue = queues_[static_cast<std::size_t>(replica)];
  for (const BlockHash& h : hashes) {
    const std::uint64_t t = ++tick_;
    set[h] = t;
    queue.push_back({h, t});
  }
  while (static_cast<std::int64_t>(set.size()) > std::max<std::int64_t>(capacity, 1)) {
    const Queued q = queue.front();
    queue.pop_front();
    const auto it = set.find(q.hash);
    if (it != set.end() && it->second == q.tick) set.erase(it);
  }
  // Stale entries can pile up when the same blocks are sent again and again: compact.
  if (queue.size() > 4 * set.size() + 64) {
    std::deque<Queued> live;
    for (const Queued& q : queue) {
      const auto it = set.find(q.hash);
      if (it != set.end() && it->second == q.tick) live.push_back(q);
    }
    queue.swap(live);
  }
}

}  // namespace servelab
