// KvCacheManager: per-request block tables over a BlockPool, with prefix caching
// (vLLM v1 kv_cache_manager.py and single_type_kv_cache_manager.py, full attention only).
//
// Which blocks hold which content is the business of a PrefixCache (core/prefix_cache.h: the
// `hash` and `radix` plugins, or one a user registers), built by KvCacheOptions::prefix_cache
// when caching is on; the manager hashes a request's full blocks, asks the cache for hits and
// registers blocks with it, and keeps every reference count itself.
//
// A request's table lives in Request::block_table; this class is the only writer of it,
// of Request::host_block_table, Request::block_hashes, Request::num_cached_blocks and
// Request::kv_accounted_tokens.
//
// Two allocation modes (KvAllocation):
// - paged (default, PagedAttention): tables grow block by block as tokens are scheduled;
// - contiguous (systems before PagedAttention): the first allocate_slots of an admission reserves
//   blocks for the request's whole maximum length (KvReserve), all or nothing, and later calls
//   take nothing more. The reservation counts as used. Prefix caching is off in this mode
//   (those systems shared no blocks): prefix_caching() is false, get_computed_blocks() returns no
//   hit and no hashes are registered.
//
// Swap (vLLM v0's preemption by swapping): with a HostBlockPool, swap_out() moves a request's KV
// to host blocks and swap_in() brings it back; the moves are recorded for the backend (StepPlan
// swap_out / swap_in). Contract: a request is never swapped in and out in the same step (the
// scheduler ensures it, as vLLM v0 asserts).
//
// Slot accounting (for kv_cache.reserved_unused_blocks_mean and internal_fragmentation_mean):
// O(1) counters maintained by allocate_slots / free / swap_out / swap_in, summed over the device
// tables of live requests (a block shared by two tables counts once per table). A request's "KV
// tokens" are the tokens computed or being computed as of its last allocate_slots
// (min(computed + new, max_model_len)), kept in Request::kv_accounted_tokens so the counters stay
// exact even when the scheduler rolls num_computed_tokens back before a free().
#pragma once

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/block_pool.h"
#include "core/hash_prefix_cache.h"
#include "core/host_block_pool.h"
#include "core/kv_offload_tiers.h"
#include "core/prefix_cache.h"
#include "core/request_state.h"
#include "core/step_plan.h"

namespace servelab {

struct PrefixCacheStats {
  std::int64_t lookups = 0;            // get_computed_blocks calls with caching on
  std::int64_t queried_tokens = 0;     // sum of num_tokens over lookups
  std::int64_t hit_tokens = 0;         // sum of hit tokens over lookups
  std::int64_t preempted_lookups = 0;  // lookups by resumed (previously preempted) requests
  std::int64_t preempted_queried_tokens = 0;
  std::int64_t preempted_hit_tokens = 0;
  // Parallel sampling (fork / copy-on-write; docs/metrics.md): block copies made when a sample
  // appended to a still-shared partial block, and sum over forks of (n - 1) * the blocks the
  // request held at the fork, minus those copies.
  std::int64_t cow_copies = 0;
  std::int64_t blocks_saved_by_sharing = 0;
  // KV offload (KvCacheOptions::offload): of hit_tokens + preempted_hit_tokens, those found in
  // each offload tier (the rest were on the device), and the blocks loaded back from each.
  std::int64_t tier_hit_tokens[kMaxOffloadTiers] = {};
  // Of hit_tokens (resumed requests' lookups left out, as there), those found in an offload tier
  // (vLLM counts a KV connector's hits apart from its prefix cache's, as "external": its
  // prefix-cache hit rate is the device pool's alone). The resumed requests' are the rest of
  // tier_hit_tokens.
  std::int64_t external_hit_tokens = 0;
  // Pinned prefixes (pin_prefix): blocks held by the cache for the whole run.
  std::int64_t pinned_blocks = 0;
  // Idle sessions (offload_idle_blocks): cached blocks stored down to the host tier and dropped
  // from the device cache before anything evicted them.
  std::int64_t idle_offloaded_blocks = 0;
  std::int64_t resets = 0;  // successful reset_prefix_cache() calls
};

struct PrefixHit {
  std::vector<BlockId> blocks;  // cached blocks covering the hit, in position order
  std::int32_t num_tokens = 0;  // blocks.size() * block_size
  // KV offload only: empty unless some block of the hit lies in an offload tier; then the tier of
  // each block (-1: on the device), and blocks[i] is kNullBlock where tiers[i] >= 0 (the block
  // is loaded into a fresh device block by allocate_slots).
  std::vector<std::int8_t> tiers;
};

// Page churn of the device pool since the manager's construction (docs/metrics.md): each a
// monotone count of blocks, so a step's churn is the difference of two readings.
struct KvChurn {
  std::int64_t allocated = 0;  // blocks taken from the free queue for new KV (BlockPool)
  std::int64_t freed = 0;      // blocks whose last reference was dropped (back to the free queue)
  std::int64_t evicted = 0;    // cached blocks whose content was dropped (PrefixCache)
  std::int64_t offloaded = 0;  // evicted blocks stored in a KV offload tier (0 without one)
};

enum class KvAllocation : std::uint8_t { kPaged, kContiguous };

// What a contiguous reservation covers.
enum class KvReserve : std::uint8_t {
  kMaxModelLen,  // cdiv(max_model_len, block_size) blocks for every request
  kMaxTokens,    // cdiv(min(prompt_len + max_output_tokens, max_model_len), block_size) blocks
};

struct KvCacheOptions {
  KvAllocation allocation = KvAllocation::kPaged;
  KvReserve reserve = KvReserve::kMaxModelLen;  // contiguous mode only
  HostBlockPool* host_pool = nullptr;  // swap space; null: no swapping (can_swap_out is false)
  // Builds the prefix cache when caching is on (the `prefix_cache` plugin); default vLLM v1's.
  PrefixCacheFactory prefix_cache = make_hash_prefix_cache;
  // KV offload tiers behind the pool (core/kv_offload_tiers.h); null: evicted content is lost.
  // Requires prefix caching with the `hash` cache (the constructor throws std::invalid_argument
  // otherwise). Must outlive the manager.
  KvOffloadTiers* offload = nullptr;
  // Speculative decoding with EAGLE (vLLM v1's `use_eagle`): every prefix hit drops its last
  // matched block, whose tokens' hidden states the drafter needs and the cache does not keep.
  bool eagle = false;
};

class KvCacheManager {
 public:
  // REQUIRES: block_size >= 1, max_model_len >= 1. `pool` (and options.host_pool) must outlive
  // this manager. In contiguous mode enable_prefix_caching is ignored (caching is off).
  KvCacheManager(BlockPool& pool, std::int32_t block_size, std::int32_t max_model_len,
                 bool enable_prefix_caching, const KvCacheOptions& options = {});
  ~KvCacheManager();
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  std::int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return caching_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  KvAllocation allocation() const { return allocation_; }
  bool contiguous() const { return allocation_ == KvAllocation::kContiguous; }
  HostBlockPool* host_pool() { return host_; }
  const HostBlockPool* host_pool() const { return host_; }
  // The prefix cache with caching on, else null.
  const PrefixCache* prefix_cache() const { return cache_.get(); }

  // Blocks an allocation can take: the pool's free blocks, plus those the prefix cache can
  // reclaim (radix: cached blocks nobody references, evicted on demand). Use this, not
  // pool().num_free_blocks(), for capacity checks.
  std::int32_t num_free_blocks() const {
    return pool_.num_free_blocks() + (cache_ ? cache_->num_reclaimable() : 0);
  }
  // Cached blocks nobody references (the evictable cache); 0 without caching.
  std::int32_t num_free_cached_blocks() const { return cache_ ? cache_->num_evictable() : 0; }

  // Where copy-on-write copies go (the scheduler's StepPlan::copies). Without one, an
  // allocation that needs a copy throws std::logic_error.
  void set_copy_sink(std::vector<BlockMove>* copies) { copies_ = copies; }
  // Where loads from offload tiers go (the scheduler's StepPlan::tier_loads). Without one, loads
  // are made but not reported.
  void set_load_sink(std::vector<TierLoad>* loads) { loads_ = loads; }
  // Where stores into offload tiers with host slots go (the scheduler's StepPlan::tier_stores);
  // also what TierLoad::stores_before counts. Without one, stores are made but not reported.
  void set_store_sink(std::vector<TierStore>* stores) { stores_ = stores; }
  // The offload tiers, or null.
  const KvOffloadTiers* offload_tiers() const { return offload_; }

  // Idle sessions (core/idle_session_offload.h): for each of `hashes` cached on the device in a
  // block no request holds, stores the content into the offload tiers (tier 0) and drops it from
  // the device cache (BlockPool::uncache_free_block: the block becomes a plain free block, reused
  // first), so a later hit loads it back instead of losing it to an eviction. Blocks held (by a
  // request or a pinned prefix) and hashes not cached on the device are left alone. Counted as
  // offloaded in churn() and in stats().idle_offloaded_blocks; a store with a host slot goes to
  // the store sink. Stored last block first (`hashes` is a chain, first block first), so the
  // chain's head is the tier's most recently used. Returns the blocks stored. REQUIRES: offload
  // tiers (throws std::logic_error).
  std::int32_t offload_idle_blocks(std::span<const BlockHash> hashes);

  // Pinned prefixes (`prefix_cache.pinned`): registers the full blocks of spec's prompt as
  // computed KV held by the cache for the manager's whole life (one reference each, never
  // released, so never evicted). A block whose content is cached already is pinned in place;
  // the others take fresh blocks. Returns the blocks newly taken from the free capacity.
  // REQUIRES: prefix caching on; those blocks are free (throws std::logic_error otherwise, with
  // nothing changed).
  std::int32_t pin_prefix(const RequestSpec& spec);
  // Full blocks pin_prefix(spec) would newly take (0 without caching).
  std::int32_t num_blocks_to_pin(const RequestSpec& spec) const;
  std::int32_t num_pinned_blocks() const { return static_cast<std::int32_t>(pinned_.size()); }

  // Parallel sampling: gives `child` (a new sample of `parent`, holding no blocks) the
  // parent's block table, taking a reference on every block, with the parent's hashes and
  // slot accounting. When the next token would go into the table's last, partly filled block,
  // both are marked cow_tail: a sample that appends to that block while it is still shared
  // first copies it (a fresh block, a copy in the copy sink, one reference less on the shared
  // one); the last holder writes in place. REQUIRES: parent holds a device table, child none.
  void fork(Request& parent, Request& child);

  // Pool invariants, plus the prefix cache's (throws std::logic_error).
  void check_invariants() const;

  // The longest run of cached full blocks matching the start of req's sequence, capped so that
  // at least one token is left to compute: at most floor((num_tokens - 1) / block_size) blocks.
  // Records lookup statistics (in the preempted fields when req.num_preemptions > 0).
  // Returns an empty hit, recording nothing, when caching is off or req asks for its prompt's log
  // probabilities (RequestSpec::prompt_logprobs, as vLLM v1 skips the cache for them). Does not
  // change any reference count.
  PrefixHit get_computed_blocks(Request& req);
  // For cache-aware queue orders (core/waiting_queue.h PrefixProbe): the hashes of req's full
  // blocks a hit could cover (get_computed_blocks' cap), hashed on demand, and how many of them,
  // from the first, the device cache holds (none for a request get_computed_blocks skips). No
  // statistics or reference change; with `refresh`, each matched block's recency is refreshed
  // as the cache defines it (PrefixCache::refresh: the radix cache's, as SGLang's match_prefix).
  // REQUIRES: prefix_caching().
  std::span<const BlockHash> hit_candidate_hashes(Request& req);
  std::int32_t num_cached_prefix_blocks(Request& req, bool refresh = false);

  // Makes room for `num_new_tokens` more tokens after req.num_computed_tokens (+ hit tokens for a
  // new admission). All or nothing: on success the hit blocks are touched and appended, new blocks
  // are allocated, blocks that will be full after this step are registered in the cache (eagerly,
  // before the forward pass, as vLLM v1 does), and true is returned; on failure nothing changes
  // and false is returned. A hit block at reference count 0 counts against the free blocks.
  // In contiguous mode the first call for an empty table takes the whole reservation
  // (reservation_blocks(req), or more if the tokens need more) and later calls take nothing.
  // Updates the slot accounting (KV tokens := min(computed + hit + new, max_model_len)).
  // REQUIRES: hit is null or req.block_table is empty; req is not swapped out (asserted).
  // The common case (no hit, no copy-on-write, the new tokens fit the blocks req holds: 15 of 16
  // decode steps at block size 16) is inline; everything else goes to allocate_slots_slow().
  [[gnu::always_inline]] bool allocate_slots(Request& req, std::int32_t num_new_tokens,
                                             const PrefixHit* hit = nullptr) {
    // Contract: a swapped-out request is swapped in before it gets slots (checked in debug
    // builds only: this runs for every scheduled request in every step).
    assert(req.host_block_table_.empty() && "allocate_slots for a swapped-out request");
    const std::int32_t need_slots =
        std::min(req.num_computed_tokens + num_new_tokens, max_model_len_);
    const auto table = static_cast<std::int32_t>(req.block_table.size());
    if (hit != nullptr || req.cow_tail_ || blocks_for(need_slots) > table) [[unlikely]] {
      return allocate_slots_slow(req, num_new_tokens, hit);
    }
    if (caching_) {
      // Blocks full once this step's tokens are written (capped at the known tokens) and not yet
      // registered: usually none, one when a decode token fills the last block.
      const std::int32_t full = std::min(
          full_blocks(std::min(req.num_computed_tokens + num_new_tokens, req.num_tokens())), table);
      if (full > req.num_cached_blocks_) register_full_blocks(req, full);
    }
    const std::int32_t old_kv = req.kv_accounted_tokens_;
    kv_tokens_ += need_slots - old_kv;
    kv_blocks_ += blocks_for(need_slots) - blocks_for(old_kv);
    req.kv_accounted_tokens_ = need_slots;
    return true;
  }

  // Registers in the prefix cache the blocks req's computed tokens fill, up to
  // min(num_computed_tokens, num_tokens()): what allocate_slots could not register when the slots
  // were reserved ahead of their tokens (a multi-step round's lookahead). No-op without caching.
  void register_computed_blocks(Request& req) {
    if (caching_) cache_full_blocks(req, std::min(req.num_computed_tokens, req.num_tokens()));
  }

  // Speculative decoding: after the scheduler rolled req.num_computed_tokens back over rejected
  // draft tokens, shrinks req's slot accounting to the KV that remains (KV tokens :=
  // min(num_computed_tokens, max_model_len) when that is less). The blocks stay in the table, as
  // in vLLM v1: the next steps' tokens reuse their slots (num_reserved_unused_blocks() counts a
  // block that holds only rolled-back slots). Nothing registered changes: allocate_slots never
  // registers a block holding draft positions (it registers known tokens only).
  void rollback_slots(Request& req) {
    const std::int32_t kv = std::min(req.num_computed_tokens, max_model_len_);
    if (kv >= req.kv_accounted_tokens_) return;
    kv_tokens_ -= req.kv_accounted_tokens_ - kv;
    kv_blocks_ -= blocks_for(req.kv_accounted_tokens_) - blocks_for(kv);
    req.kv_accounted_tokens_ = kv;
  }

  // Blocks that allocate_slots(req, n, hit) would take from the free capacity (not counting a
  // copy-on-write copy).
  std::int32_t num_blocks_to_allocate(const Request& req, std::int32_t num_new_tokens,
                                      const PrefixHit* hit = nullptr) const;

  // Releases req's blocks, last block first; full blocks keep their hashes (they stay in the
  // cache until evicted), except those past req.num_computed_tokens (see
  // forget_uncomputed_blocks). Clears the table and num_cached_blocks. A swapped-out request's
  // host blocks are released too (an abort while swapped).
  void free(Request& req);

  // Blocks req holds: its device table, or its host table while swapped out.
  std::int32_t num_blocks(const Request& req) const {
    return static_cast<std::int32_t>(req.block_table.size() + req.host_block_table_.size());
  }
  // Blocks a contiguous admission of req reserves (in paged mode: what its full length needs,
  // cdiv(min(prompt_len + max_output_tokens, max_model_len), block_size)). The scheduler's
  // "can never fit" check compares this with the usable blocks.
  std::int32_t reservation_blocks(const Request& req) const;

  // ---- Swap (REQUIRES for all but the can_* queries: a host pool) ----

  // True when the host pool has a free block for every block of req's device table that holds
  // computed KV (blocks_to_swap; and there is some). False without a host pool.
  bool can_swap_out(const Request& req) const;
  // The first blocks of req's device table that hold its num_computed_tokens: what a swap-out
  // moves (a block allocated for tokens not yet computed moves nothing). Contiguous allocation:
  // the whole reservation.
  std::int32_t blocks_to_swap(const Request& req) const;
  // Moves req's KV to the host: for each of its blocks_to_swap blocks, in position order, takes a
  // host block and appends {device block, host block} to `moves`; then frees every device block
  // as free() does (last first, hashes kept: they stay findable until evicted) and stores the
  // host blocks in req.host_block_table_. num_computed_tokens and block_hashes are untouched (the
  // KV is preserved, not lost); num_cached_blocks becomes 0 (no device table). Throws
  // std::logic_error when !can_swap_out(req) or req is already swapped out (checked before any
  // change).
  void swap_out(Request& req, std::vector<BlockMove>& moves);
  // True when req is swapped out and the device pool can take its host table back plus the
  // blocks num_new_tokens more tokens would need (what swap_in then allocate_slots take).
  bool can_swap_in(const Request& req, std::int32_t num_new_tokens) const;
  // Brings req's KV back, all or nothing: takes fresh device blocks from the free queue (it does
  // not look for device blocks still caching the same content: the KV is copied in regardless,
  // as vLLM v0 does), appends {host block, device block} to `moves` in position order, frees the
  // host blocks, and re-registers the hashes of the full blocks whose KV is computed (the
  // content is the same), so num_cached_blocks is as before the swap-out. A hash still cached on
  // an old device block becomes a duplicate (allowed; see BlockPool). Returns false and changes
  // nothing when the free device blocks are too few. REQUIRES: req is swapped out (throws
  // std::logic_error otherwise).
  bool swap_in(Request& req, std::vector<BlockMove>& moves);

  // ---- Slot accounting: O(1), over the device tables of live requests ----

  // Blocks held in device tables.
  std::int64_t num_held_blocks() const { return held_blocks_; }
  // Token slots in those blocks: num_held_blocks() * block_size.
  std::int64_t num_held_slots() const { return held_blocks_ * block_size_; }
  // Of those slots, the ones holding computed (or being computed) KV.
  std::int64_t num_kv_slots() const { return kv_tokens_; }
  // Slots allocated but not holding KV (internal fragmentation, in slots).
  std::int64_t num_unused_slots() const { return num_held_slots() - kv_tokens_; }
  // Held blocks beyond cdiv(KV tokens, block_size) per table: reserved but holding no KV at all.
  // 0 in paged mode; most of a reservation in contiguous mode.
  std::int64_t num_reserved_unused_blocks() const { return held_blocks_ - kv_blocks_; }

  const PrefixCacheStats& stats() const { return stats_; }

  // ---- Page churn: O(1) ----
  KvChurn churn() const {
    return {pool_.num_allocated(), pool_.num_freed(), cache_ ? cache_->num_evictions() : 0,
            offloaded_blocks_};
  }
  // Counts `blocks` moved from the device to a lower memory tier (a KV offload path calls it;
  // swap preemption is not an offload: it has its own counters). REQUIRES: blocks >= 0.
  void note_offloaded(std::int64_t blocks) { offloaded_blocks_ += blocks; }
  // vLLM's reset_prefix_cache (v1 BlockPool.reset_prefix_cache): when no request holds a device
  // block, every cached block is dropped (later lookups miss until blocks are cached again),
  // stats().resets counts it and true is returned; while any block is held nothing changes and
  // false is returned. Without prefix caching there is nothing to drop: true when no block is
  // held. Host (swap) blocks are not part of the prefix cache.
  bool reset_prefix_cache();

 private:
  // Extends req.block_hashes_ to (at least) every full block among its first num_tokens tokens,
  // prefetching each new hash in the cache, which a lookup or registration reads soon.
  void update_block_hashes(Request& req, std::int32_t num_tokens);
  // The general allocate_slots (see its contract).
  bool allocate_slots_slow(Request& req, std::int32_t num_new_tokens, const PrefixHit* hit);
  // Registers every block that is full once the first num_tokens tokens are written.
  void cache_full_blocks(Request& req, std::int32_t num_tokens);
  // Registers blocks [req.num_cached_blocks_, num_full) of req's table in the prefix cache, then
  // hashes block num_full ahead (the one being filled) when the request will fill it.
  // REQUIRES: num_cached_blocks < num_full <= the table's size.
  void register_full_blocks(Request& req, std::int32_t num_full);
  // Unregisters req's registered blocks that num_computed_tokens does not cover, deepest first.
  // Blocks are registered when allocated, before the forward pass computes their KV; when the
  // scheduler calls that step off (Scheduler::unschedule, for a victim already in the plan, rolls
  // num_computed_tokens back), they hold no KV of req's tokens, and a later prefix hit on them
  // would read whatever they held before. free() and swap_out() call it before releasing.
  void forget_uncomputed_blocks(Request& req);
  // The offload part of allocate_slots for a hit with blocks in offload tiers: fresh device
  // blocks replace the hit's kNullBlock entries in req's table (already appended), each load is
  // reported to the load sink, and num_cached_blocks stops before the first loaded block.
  void load_tier_blocks(Request& req, const PrefixHit& hit);
  // Takes n blocks from the pool, letting the prefix cache reclaim blocks first when the pool is
  // short.
  void take_blocks(std::int32_t n, std::vector<BlockId>& out);
  // The copy-on-write step of allocate_slots for a request marked cow_tail (see fork());
  // false (nothing changed) when the copy and the new tokens' blocks do not fit.
  bool copy_on_write(Request& req, std::int32_t num_new_tokens);

  // cdiv(tokens, block_size) and floor(tokens / block_size) for tokens >= 0: a shift for the
  // usual power-of-two block sizes (this runs several times per scheduled request per step).
  std::int32_t blocks_for(std::int32_t tokens) const {
    return block_shift_ >= 0 ? (tokens + block_size_ - 1) >> block_shift_
                             : (tokens + block_size_ - 1) / block_size_;
  }
  std::int32_t full_blocks(std::int32_t tokens) const {
    return block_shift_ >= 0 ? tokens >> block_shift_ : tokens / block_size_;
  }
  // Slot accounting: removes / adds req's device table and req.kv_accounted_tokens_.
  void unaccount(const Request& req);
  void account(const Request& req);

  BlockPool& pool_;
  HostBlockPool* host_;
  std::int32_t block_size_;
  std::int32_t max_model_len_;
  bool caching_;
  KvAllocation allocation_;
  KvReserve reserve_;
  std::int32_t block_shift_;           // log2(block_size) when it is a power of two, else -1
  std::int64_t held_blocks_ = 0;       // sum of device table sizes
  std::int64_t kv_tokens_ = 0;         // sum of kv_accounted_tokens over device tables
  std::int64_t offloaded_blocks_ = 0;  // note_offloaded's sum
  std::int64_t kv_blocks_ = 0;         // sum of cdiv(kv_accounted_tokens, block_size)
  PrefixCacheStats stats_;
  std::vector<BlockId> scratch_;
  std::unique_ptr<PrefixCache> cache_;  // with caching on only
  std::int32_t idle_ref_ = 0;           // cache_->idle_ref_count(), read per hit block
  std::vector<BlockMove>* copies_ = nullptr;
  KvOffloadTiers* offload_ = nullptr;
  bool eagle_ = false;  // KvCacheOptions::eagle
  // Stores `hash`, whose KV device block `block` holds, into the tiers (a store with a host slot
  // goes to the store sink).
  void store_to_tiers(const BlockHash& hash, BlockId block);

  std::vector<BlockHash> evicted_;            // the pool's eviction sink while offloading
  std::vector<BlockId> evicted_blocks_;       // and the blocks they were evicted from
  std::vector<TierLoad>* loads_ = nullptr;    // StepPlan::tier_loads
  std::vector<TierStore>* stores_ = nullptr;  // StepPlan::tier_stores
  std::vector<BlockId> pinned_;               // blocks pin_prefix holds
};

}  // namespace servelab
