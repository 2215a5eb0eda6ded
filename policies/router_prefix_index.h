// RouterPrefixIndex: a router's approximation of which prompt blocks each replica has cached.
//
// Routers that score prefix affinity (prefix_affinity, weighted) cannot read a replica's KV
// cache; like SGLang's cache-aware router and llm-d's prefix scorer they remember what they sent
// where. For every replica the index holds the block hashes (core/block_hash.h, the same chain
// the KV cache manager computes, so a remembered block is one the replica would hit) of the
// prompts routed there, at most a capacity of blocks per replica (by default the replica's
// usable KV blocks), the least recently routed forgotten first. It only approximates the replica's
// cache (the replica may have evicted a block the index still holds, or cached output blocks it
// never saw), which is the point: a real router works from the same approximation.
//
// Determinism: the per-replica sets are hash maps, but they are only probed, never iterated;
// eviction follows an insertion-ordered queue.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "core/block_hash.h"
#include "core/request.h"

namespace servelab {

class RouterPrefixIndex {
 public:
  // REQUIRES: num_replicas >= 1, block_size >= 1 (else std::invalid_argument).
  RouterPrefixIndex(std::int32_t num_replicas, std::int32_t block_size);

  // The hashes of spec's full prompt blocks, in order (computed once per decision).
  std::vector<BlockHash> prompt_hashes(const RequestSpec& spec) const;
  // How many leading blocks of `hashes` replica `replica` is believed to hold.
  std::int32_t matched_blocks(std::int32_t replica, const std::vector<BlockHash>& hashes) const;
  // Blocks remembered for `replica` (a measure of how much it caches).
  std::int64_t size(std::int32_t replica) const {
    return static_cast<std::int64_t>(sets_[static_cast<std::size_t>(replica)].size());
  }
  // Remembers that `hashes` were sent to `replica` (refreshing their recency), forgetting the
  // least recently sent blocks beyond `capacity` (>= 1) blocks.
  void insert(std::int32_t replica, const std::vector<BlockHash>& hashes, std::int64_t capacity);

 private:
  struct Queued {
    BlockHash hash;
    std::uint64_t tick;
  };
  std::int32_t block_size_;
  std::uint64_t tick_ = 0;
  // Per replica: hash -> tick of its last insertion; the queue in insertion order, with stale
  // entries (re-inserted since) skipped when they reach the front.
  std::vector<std::unordered_map<BlockHash, std::uint64_t, BlockHashHasher>> sets_;
  std::vector<std::deque<Queued>> queues_;
};

}  // namespace servelab
