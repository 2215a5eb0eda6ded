// KvCacheManager: per-request block tables over a BlockPool, with prefix caching
// (vLLM v1 kv_cache_manager.py and single_type_kv_cache_manager.py, full attention only).
//
// A request's table lives in Request::block_table; this class is the only writer of it,
// of Request::block_hashes and of Request::num_cached_blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "core/block_pool.h"
#include "core/request_state.h"

namespace servelab {

struct PrefixCacheStats {
  std::int64_t lookups = 0;          // get_computed_blocks calls with caching on
  std::int64_t queried_tokens = 0;   // sum of num_tokens over lookups
  std::int64_t hit_tokens = 0;       // sum of hit tokens over lookups
  std::int64_t preempted_lookups = 0;  // lookups by resumed (previously preempted) requests
  std::int64_t preempted_queried_tokens = 0;
  std::int64_t preempted_hit_tokens = 0;
};

struct PrefixHit {
  std::vector<BlockId> blocks;  // cached blocks covering the hit, in position order
  std::int32_t num_tokens = 0;  // blocks.size() * block_size
};

class KvCacheManager {
 public:
  // REQUIRES: block_size >= 1, max_model_len >= 1. `pool` must outlive this manager.
  KvCacheManager(BlockPool& pool, std::int32_t block_size, std::int32_t max_model_len,
                 bool enable_prefix_caching);
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  std::int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return caching_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

  // The longest run of cached full blocks matching the start of req's sequence, capped so that
  // at least one token is left to compute: at most floor((num_tokens - 1) / block_size) blocks.
  // Records lookup statistics (in the preempted fields when req.num_preemptions > 0).
  // Returns an empty hit when caching is off. Does not change any reference count.
  PrefixHit get_computed_blocks(Request& req);

  // Makes room for `num_new_tokens` more tokens after req.num_computed_tokens (+ hit tokens for a
  // new admission). All or nothing: on success the hit blocks are touched and appended, new blocks
  // are allocated, blocks that will be full after this step are registered in the cache (eagerly,
  // before the forward pass, as vLLM v1 does), and true is returned; on failure nothing changes
  // and false is returned. A hit block at reference count 0 counts against the free blocks.
  // REQUIRES: hit is null or req.block_table is empty.
  bool allocate_slots(Request& req, std::int32_t num_new_tokens, const PrefixHit* hit = nullptr);

  // Blocks that allocate_slots(req, n, hit) would take from the free queue.
  std::int32_t num_blocks_to_allocate(const Request& req, std::int32_t num_new_tokens,
                                      const PrefixHit* hit = nullptr) const;

  // Releases req's blocks, last block first; full blocks keep their hashes (they stay in the
  // cache until evicted). Clears the table and num_cached_blocks.
  void free(Request& req);

  const PrefixCacheStats& stats() const { return stats_; }

 private:
  // Extends req.block_hashes to every full block among its first num_tokens tokens.
  void update_block_hashes(Request& req, std::int32_t num_tokens);
  void cache_full_blocks(Request& req, std::int32_t num_tokens);

  BlockPool& pool_;
  std::int32_t block_size_;
  std::int32_t max_model_len_;
  bool caching_;
  PrefixCacheStats stats_;
  std::vector<BlockId> scratch_;
};

}  // namespace servelab
