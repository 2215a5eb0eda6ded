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
// Determinism: the per-replica sets are hash tables, only probed, never iterated; eviction
// follows an insertion-ordered queue.
#pragma once

#include <cstdint>
#include <deque>
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
  // A set of 64-bit keys (the low word of a block hash: a collision costs only a wrong guess)
  // with the tick of each key's last insertion: open addressing, linear probing, deletion by
  // backward shift, doubled when half full. A node-based map costs a cache miss per probe and
  // per erase, which dominated routing time with tens of thousands of blocks per replica.
  class KeySet {
   public:
    std::size_t size() const { return size_; }
    // The tick of `key`, or 0 when absent (ticks start at 1).
    std::uint64_t find(std::uint64_t key) const;
    void put(std::uint64_t key, std::uint64_t tick);
    void erase(std::uint64_t key);

   private:
    struct Slot {
      std::uint64_t key = 0;
      std::uint64_t tick = 0;  // 0: empty
    };
    std::size_t home(std::uint64_t key) const {
      return static_cast<std::size_t>((key * 0x9e3779b97f4a7c15ULL) >> shift_);
    }
    void grow();
    std::vector<Slot> slots_;
    std::size_t size_ = 0;
    int shift_ = 64;
  };
  struct Queued {
    std::uint64_t key;
    std::uint64_t tick;
  };
  std::int32_t block_size_;
  std::uint64_t tick_ = 0;
  // Per replica: the remembered keys; the queue in insertion order, with stale entries
  // (re-inserted since) skipped when they reach the front.
  std::vector<KeySet> sets_;
  std::vector<std::deque<Queued>> queues_;
};

}  // namespace servelab
