#include "core/kv_cache_manager.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <stdexcept>
#include <string>

namespace servelab {

namespace {

std::int32_t cdiv(std::int32_t a, std::int32_t b) { return (a + b - 1) / b; }

}  // namespace

KvCacheManager::KvCacheManager(BlockPool& pool, std::int32_t block_size, std::int32_t max_model_len,
                               bool enable_prefix_caching, const KvCacheOptions& options)
    : pool_(pool),
      host_(options.host_pool),
      block_size_(block_size),
      max_model_len_(max_model_len),
      // Systems with contiguous KV (before PagedAttention) shared no blocks between requests.
      caching_(enable_prefix_caching && options.allocation == KvAllocation::kPaged),
      allocation_(options.allocation),
      reserve_(options.reserve),
      block_shift_(std::has_single_bit(static_cast<std::uint32_t>(std::max(block_size, 1)))
                       ? std::countr_zero(static_cast<std::uint32_t>(block_size))
                       : -1) {
  if (block_size < 1) throw std::invalid_argument("KvCacheManager: block_size must be >= 1");
  if (max_model_len < 1) throw std::invalid_argument("KvCacheManager: max_model_len must be >= 1");
  // A table never holds more than max_model_len tokens, so this is the largest free() ever needs.
  scratch_.reserve(static_cast<std::size_t>(cdiv(max_model_len, block_size)));
  if (caching_) {
    if (!options.prefix_cache) throw std::invalid_argument("KvCacheManager: no prefix cache");
    cache_ = options.prefix_cache(pool);
    idle_ref_ = cache_->idle_ref_count();
  }
  eagle_ = options.eagle;
  if (options.offload != nullptr) {
    // Offload hooks the pool's lazy eviction, which only the hash cache uses.
    if (!cache_ || cache_->name() != "hash") {
      throw std::invalid_argument(
          "KvCacheManager: KV offload needs prefix caching with the hash cache");
    }
    offload_ = options.offload;
    pool_.set_eviction_sink(&evicted_, &evicted_blocks_);
  }
}

KvCacheManager::~KvCacheManager() {
  if (offload_ != nullptr) pool_.set_eviction_sink(nullptr);
}

void KvCacheManager::update_block_hashes(Request& req, std::int32_t num_tokens) {
  // Outputs identified by value (a literal prompt's request): only blocks whose values are known
  // (async scheduling's placeholders, the block being filled: later).
  if (req.spec.outputs_by_value) [[unlikely]]
    num_tokens = std::min(num_tokens, req.num_tokens());
  const auto want = static_cast<std::size_t>(full_blocks(num_tokens));
  std::vector<BlockHash>& hashes = req.block_hashes_;
  if (hashes.size() >= want) return;
  if (hashes.capacity() == 0) {
    // One allocation for the request's whole life: it never has more than total_tokens tokens.
    hashes.reserve(
        static_cast<std::size_t>(std::max(req.spec.total_tokens(), num_tokens) / block_size_));
  }
  while (hashes.size() < want) {
    const BlockHash& parent = hashes.empty() ? kNoneHash : hashes.back();
    hashes.push_back(hash_block(parent, req.spec, static_cast<std::int32_t>(hashes.size()),
                                block_size_, req.output_tokens));
    // Every hash is looked up or registered soon (the block is full, or will be): start loading
    // its index slot now, while the next hash is computed.
    if (cache_) cache_->prefetch(hashes.back());
  }
}

PrefixHit KvCacheManager::get_computed_blocks(Request& req) {
  PrefixHit hit;
  // vLLM v1: a request that wants its prompt's log probabilities reads no cached block (nor any
  // lookup statistic), so every prompt position is computed and gives its logits.
  if (!caching_ || req.spec.prompt_logprobs >= 0) return hit;
  const std::int32_t num_tokens = req.num_tokens();
  // At least one token must be computed so the step produces logits for it; hits are whole
  // blocks, so the cap is floor((num_tokens - 1) / block_size) blocks (vLLM v1).
  const std::int32_t max_blocks = full_blocks(std::max(num_tokens - 1, 0));
  for (std::int32_t i = 0; i < max_blocks; ++i) {
    // Hash lazily: a miss on block i makes every later block a miss (the chain includes the
    // parent), so the rest need not be hashed yet.
    if (static_cast<std::int32_t>(req.block_hashes_.size()) <= i) {
      update_block_hashes(req, (i + 1) * block_size_);
    }
    const std::optional<BlockId> b = cache_->lookup(req.block_hashes_[i]);
    if (!b) {
      // KV offload: the content may still be in a lower tier (then it is loaded back).
      const int tier = offload_ != nullptr ? offload_->find(req.block_hashes_[i]) : -1;
      if (tier < 0) break;
      if (hit.tiers.empty()) hit.tiers.assign(hit.blocks.size(), -1);
      hit.tiers.push_back(static_cast<std::int8_t>(tier));
      hit.blocks.push_back(kNullBlock);
      continue;
    }
    if (hit.blocks.empty()) hit.blocks.reserve(static_cast<std::size_t>(max_blocks - i));
    hit.blocks.push_back(*b);
    if (!hit.tiers.empty()) hit.tiers.push_back(-1);
  }
  if (eagle_ && !hit.blocks.empty()) {
    // vLLM v1 (FullAttentionManager.find_longest_cache_hit with use_eagle): the last matched
    // block is recomputed, so the drafter gets its hidden states.
    hit.blocks.pop_back();
    if (!hit.tiers.empty()) hit.tiers.pop_back();
  }
  std::int64_t external = 0;
  for (const std::int8_t tier : hit.tiers) {
    if (tier < 0) continue;
    stats_.tier_hit_tokens[tier] += block_size_;
    external += block_size_;
  }
  hit.num_tokens = static_cast<std::int32_t>(hit.blocks.size()) * block_size_;
  // Recorded on every lookup, even if the allocation then fails and the lookup repeats next step
  // (as the vLLM version of shared/reference/schedulers.md does; vLLM records at admission since
  // its PR #48860, docs/metrics.md); a resumed request goes to the separate preempted counters.
  if (req.num_preemptions > 0) {
    ++stats_.preempted_lookups;
    stats_.preempted_queried_tokens += num_tokens;
    stats_.preempted_hit_tokens += hit.num_tokens;
  } else {
    ++stats_.lookups;
    stats_.queried_tokens += num_tokens;
    stats_.hit_tokens += hit.num_tokens;
    stats_.external_hit_tokens += external;
  }
  return hit;
}

std::span<const BlockHash> KvCacheManager::hit_candidate_hashes(Request& req) {
  if (req.spec.prompt_logprobs >= 0) return {};  // no hit can cover any (get_computed_blocks)
  const std::int32_t max_blocks = full_blocks(std::max(req.num_tokens() - 1, 0));
  update_block_hashes(req, max_blocks * block_size_);
  return std::span<const BlockHash>(req.block_hashes_).first(static_cast<std::size_t>(max_blocks));
}

std::int32_t KvCacheManager::num_cached_prefix_blocks(Request& req, bool refresh) {
  const std::span<const BlockHash> hashes = hit_candidate_hashes(req);
  std::int32_t n = 0;
  while (n < static_cast<std::int32_t>(hashes.size())) {
    const std::optional<BlockId> b = cache_->lookup(hashes[n]);
    if (!b) break;
    if (refresh) cache_->refresh(*b);
    ++n;
  }
  return n;
}

std::int32_t KvCacheManager::num_blocks_to_allocate(const Request& req, std::int32_t num_new_tokens,
                                                    const PrefixHit* hit) const {
  // Note: the manager reads req.num_computed_tokens but never writes it. For a new admission with
  // a hit, num_computed_tokens is still 0 here and the hit's tokens are added on top; the scheduler
  // advances num_computed_tokens (by hit + scheduled tokens) after allocate_slots succeeds.
  const std::int32_t hit_tokens = hit != nullptr ? hit->num_tokens : 0;
  const auto hit_blocks = static_cast<std::int32_t>(hit != nullptr ? hit->blocks.size() : 0);
  const std::int32_t computed = std::min(req.num_computed_tokens + hit_tokens, max_model_len_);
  const std::int32_t need_slots = std::min(computed + num_new_tokens, max_model_len_);
  const auto table = static_cast<std::int32_t>(req.block_table.size());
  std::int32_t need_blocks = blocks_for(need_slots);
  if (allocation_ == KvAllocation::kContiguous && table == 0) {
    need_blocks = std::max(need_blocks, reservation_blocks(req));
  }
  std::int32_t n = std::max(need_blocks - table - hit_blocks, 0);
  // Hit blocks nobody references count as free capacity (in the pool's free queue, or
  // reclaimable by the cache); touching them takes them out of it just like fresh blocks.
  if (hit != nullptr) {
    for (const BlockId b : hit->blocks) {
      // A block loaded from an offload tier (kNullBlock in the hit) takes a fresh block.
      if (b == kNullBlock || pool_.ref_count(b) == idle_ref_) ++n;
    }
  }
  return n;
}

bool KvCacheManager::allocate_slots_slow(Request& req, std::int32_t num_new_tokens,
                                         const PrefixHit* hit) {
  if (hit != nullptr && hit->blocks.empty()) hit = nullptr;
  if (hit != nullptr && !req.block_table.empty()) {
    throw std::logic_error("KvCacheManager: prefix hit passed for request " +
                           std::to_string(req.id()) + " which already holds blocks");
  }
  // Parallel sampling only (see fork()).
  if (req.cow_tail_ && !copy_on_write(req, num_new_tokens)) return false;
  const std::int32_t to_take = num_blocks_to_allocate(req, num_new_tokens, hit);
  if (to_take > num_free_blocks()) return false;

  const std::int32_t hit_tokens = hit != nullptr ? hit->num_tokens : 0;
  const std::int32_t computed = std::min(req.num_computed_tokens + hit_tokens, max_model_len_);
  const std::int32_t need_slots = std::min(computed + num_new_tokens, max_model_len_);
  const auto old_table = static_cast<std::int32_t>(req.block_table.size());
  const std::int32_t kv_blocks = blocks_for(need_slots);  // blocks the KV tokens occupy
  std::int32_t need_blocks = kv_blocks;
  if (allocation_ == KvAllocation::kContiguous && old_table == 0) {
    // The whole reservation at admission; later calls find the table long enough already.
    need_blocks = std::max(need_blocks, reservation_blocks(req));
  }
  if (req.block_table.capacity() < static_cast<std::size_t>(need_blocks)) {
    // Size for the request's whole life so decode steps never reallocate the table.
    req.block_table.reserve(static_cast<std::size_t>(
        std::max(need_blocks, blocks_for(std::min(req.spec.total_tokens(), max_model_len_)))));
  }
  if (hit != nullptr) {
    pool_.touch(hit->blocks);  // skips the kNullBlock of blocks in an offload tier
    cache_->on_acquired(hit->blocks);
    req.block_table.insert(req.block_table.end(), hit->blocks.begin(), hit->blocks.end());
    // The hit blocks were found by their hashes, so they are registered already.
    req.num_cached_blocks_ = static_cast<std::int32_t>(hit->blocks.size());
    if (!hit->tiers.empty()) load_tier_blocks(req, *hit);
  }
  const std::int32_t fresh = need_blocks - static_cast<std::int32_t>(req.block_table.size());
  if (fresh > 0) take_blocks(fresh, req.block_table);

  if (caching_) {
    // Register eagerly, before the forward pass, every block that is full once this step's tokens
    // are written, so a later request in the same step can already hit them. Capped at the known
    // tokens: slots reserved beyond them (lookahead) hold nothing hashable yet.
    cache_full_blocks(req, std::min(computed + num_new_tokens, req.num_tokens()));
  }
  // Slot accounting, incrementally: the table only grew, and the KV now reaches need_slots.
  // The table is now max(old_table, need_blocks) long (hit blocks are part of need_blocks).
  const std::int32_t old_kv = req.kv_accounted_tokens_;
  if (need_blocks > old_table) held_blocks_ += need_blocks - old_table;
  kv_tokens_ += need_slots - old_kv;
  kv_blocks_ += kv_blocks - blocks_for(old_kv);
  req.kv_accounted_tokens_ = need_slots;
  return true;
}

void KvCacheManager::load_tier_blocks(Request& req, const PrefixHit& hit) {
  const auto n = static_cast<std::int32_t>(hit.blocks.size());
  std::int32_t first = n;
  std::int32_t count = 0;
  // With host slots, each load's source slot is taken now: the fresh blocks taken below may
  // evict blocks whose stores push this very entry out of a small host tier and reuse its slot
  // (the executor reads the slots before those stores write: TierLoad::stores_before).
  const bool slots = offload_->host_slots() && loads_ != nullptr;
  const auto before = static_cast<std::int32_t>(stores_ != nullptr ? stores_->size() : 0);
  std::vector<std::int32_t> load_slots;  // engine only (a few per admission)
  for (std::int32_t i = 0; i < n; ++i) {
    if (hit.tiers[i] < 0) continue;
    first = std::min(first, i);
    ++count;
    if (slots) load_slots.push_back(offload_->host_slot(req.block_hashes_[i]));
  }
  // Refreshed before fresh blocks are taken, whose evictions may push tier entries down; last
  // block first, so that the chain's first blocks are the most recently used (vLLM's offloading
  // manager touches a request's blocks in reverse): a tier that overflows drops a chain's tail,
  // never the blocks every later hit needs first.
  for (std::int32_t i = n; i-- > 0;) {
    if (hit.tiers[i] >= 0) offload_->on_loaded(req.block_hashes_[i], hit.tiers[i]);
  }
  scratch_.clear();
  take_blocks(count, scratch_);
  std::int32_t k = 0;
  for (std::int32_t i = 0; i < n; ++i) {
    if (hit.tiers[i] < 0) continue;
    const BlockId b = scratch_[k];
    req.block_table[i] = b;
    if (loads_ != nullptr) {
      if (slots) {
        loads_->push_back({hit.tiers[i], b, load_slots[static_cast<std::size_t>(k)], before});
      } else {
        loads_->push_back({hit.tiers[i], b});
      }
    }
    ++k;
  }
  // Registered from the first loaded block on by cache_full_blocks (their KV is computed once
  // the loads ran; device hit blocks after it carry their hash already).
  req.num_cached_blocks_ = first;
}

void KvCacheManager::cache_full_blocks(Request& req, std::int32_t num_tokens) {
  const std::int32_t num_full =
      std::min(full_blocks(num_tokens), static_cast<std::int32_t>(req.block_table.size()));
  if (num_full > req.num_cached_blocks_) register_full_blocks(req, num_full);
}

void KvCacheManager::register_full_blocks(Request& req, std::int32_t num_full) {
  update_block_hashes(req, num_full * block_size_);
  // Outputs identified by value: a block whose last values are not known yet waits for a later
  // registration.
  num_full = std::min(num_full, static_cast<std::int32_t>(req.block_hashes_.size()));
  if (num_full <= req.num_cached_blocks_) return;
  cache_->insert(req.block_table, req.block_hashes_, req.num_cached_blocks_, num_full);
  req.num_cached_blocks_ = num_full;
  // Look one block ahead: the block being filled now will be registered in a later step (its
  // hash depends on token identities only, known already), so hash it now and start loading its
  // index slot; by the time it fills, the slot is in cache instead of a miss on the hot path.
  // Only for a block the request will fill (its full length is known).
  const auto next = static_cast<std::size_t>(num_full) + 1;
  if (req.block_hashes_.size() < next &&
      static_cast<std::int64_t>(next) * block_size_ <=
          std::min<std::int64_t>(req.spec.total_tokens(), max_model_len_)) {
    update_block_hashes(req, static_cast<std::int32_t>(next) * block_size_);
  }
}

void KvCacheManager::forget_uncomputed_blocks(Request& req) {
  const std::int32_t computed = full_blocks(std::min(req.num_computed_tokens, max_model_len_));
  if (req.num_cached_blocks_ <= computed) return;
  for (std::int32_t i = req.num_cached_blocks_ - 1; i >= computed; --i) {
    cache_->forget(req.block_table[i]);
  }
  req.num_cached_blocks_ = computed;
}

void KvCacheManager::free(Request& req) {
  if (!req.block_table.empty()) unaccount(req);
  forget_uncomputed_blocks(req);
  // Last block first: within a request, the deeper end of the hash chain is evicted before the
  // shared prefix, which other requests are more likely to hit.
  scratch_.assign(req.block_table.rbegin(), req.block_table.rend());
  pool_.free_blocks(scratch_);
  if (cache_) cache_->on_released(scratch_);
  req.block_table.clear();
  req.num_cached_blocks_ = 0;
  req.kv_accounted_tokens_ = 0;
  req.cow_tail_ = false;
  if (!req.host_block_table_.empty()) {  // aborted while swapped out
    host_->free(req.host_block_table_);
    req.host_block_table_.clear();
  }
  // block_hashes stay: they depend only on the request's content, not on where its KV lived.
}

void KvCacheManager::account(const Request& req) {
  held_blocks_ += static_cast<std::int64_t>(req.block_table.size());
  kv_tokens_ += req.kv_accounted_tokens_;
  kv_blocks_ += blocks_for(req.kv_accounted_tokens_);
}

void KvCacheManager::unaccount(const Request& req) {
  held_blocks_ -= static_cast<std::int64_t>(req.block_table.size());
  kv_tokens_ -= req.kv_accounted_tokens_;
  kv_blocks_ -= blocks_for(req.kv_accounted_tokens_);
}

std::int32_t KvCacheManager::reservation_blocks(const Request& req) const {
  if (allocation_ == KvAllocation::kContiguous && reserve_ == KvReserve::kMaxModelLen) {
    return blocks_for(max_model_len_);
  }
  return blocks_for(std::min(req.spec.total_tokens(), max_model_len_));
}

std::int32_t KvCacheManager::blocks_to_swap(const Request& req) const {
  // The blocks holding computed KV: a victim already scheduled in the step (then unscheduled)
  // may hold a block allocated for that step's tokens, which holds nothing yet. A contiguous
  // reservation moves whole (swap_in takes it back as it was).
  if (contiguous()) return static_cast<std::int32_t>(req.block_table.size());
  return std::min(static_cast<std::int32_t>(req.block_table.size()),
                  blocks_for(std::min(req.num_computed_tokens, max_model_len_)));
}

bool KvCacheManager::can_swap_out(const Request& req) const {
  if (host_ == nullptr || blocks_to_swap(req) == 0 || !req.host_block_table_.empty() ||
      host_->num_free_blocks() < blocks_to_swap(req)) {
    return false;
  }
  // A copy-on-write copy into one of its blocks is pending in this step's plan, and the
  // backend swaps out before it copies: such a request is recomputed instead.
  if (copies_ != nullptr) {
    for (const BlockMove& m : *copies_) {
      if (std::find(req.block_table.begin(), req.block_table.end(), m.dst) !=
          req.block_table.end()) {
        return false;
      }
    }
  }
  return true;
}

void KvCacheManager::swap_out(Request& req, std::vector<BlockMove>& moves) {
  if (!can_swap_out(req)) {
    throw std::logic_error("KvCacheManager: swap_out of request " + std::to_string(req.id()) +
                           " which cannot be swapped out (no host pool, no device blocks, "
                           "already swapped, or too few free host blocks)");
  }
  const auto n = static_cast<std::size_t>(blocks_to_swap(req));
  unaccount(req);
  forget_uncomputed_blocks(req);
  req.host_block_table_.reserve(n);
  host_->allocate(static_cast<std::int32_t>(n), req.host_block_table_);
  moves.reserve(moves.size() + n);
  for (std::size_t i = 0; i < n; ++i)
    moves.push_back({req.block_table[i], req.host_block_table_[i]});
  // Freed as free() does (last first, hashes kept): until evicted, a lookup still finds the
  // content on the device.
  scratch_.assign(req.block_table.rbegin(), req.block_table.rend());
  pool_.free_blocks(scratch_);
  if (cache_) cache_->on_released(scratch_);
  req.block_table.clear();
  req.num_cached_blocks_ = 0;
  req.cow_tail_ = false;  // the host copy is the sample's own
  // The preserved KV is what num_computed_tokens covers (the scheduler may have rolled back an
  // unexecuted allocation before preempting); swap_in accounts for exactly that.
  req.kv_accounted_tokens_ = std::min(req.num_computed_tokens, max_model_len_);
}

bool KvCacheManager::can_swap_in(const Request& req, std::int32_t num_new_tokens) const {
  if (req.host_block_table_.empty() || !req.block_table.empty()) return false;
  const auto table = static_cast<std::int32_t>(req.host_block_table_.size());
  const std::int32_t computed = std::min(req.num_computed_tokens, max_model_len_);
  const std::int32_t need_slots = std::min(computed + num_new_tokens, max_model_len_);
  return std::max(table, blocks_for(need_slots)) <= num_free_blocks();
}

bool KvCacheManager::swap_in(Request& req, std::vector<BlockMove>& moves) {
  if (req.host_block_table_.empty() || !req.block_table.empty()) {
    throw std::logic_error("KvCacheManager: swap_in of request " + std::to_string(req.id()) +
                           " which is not swapped out");
  }
  const auto n = static_cast<std::int32_t>(req.host_block_table_.size());
  if (n > num_free_blocks()) return false;
  // Fresh blocks, even where a freed device block still caches the same content: the KV is
  // copied in regardless (vLLM v0), which keeps swap_in a plain all-or-nothing allocation.
  take_blocks(n, req.block_table);
  moves.reserve(moves.size() + static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) {
    moves.push_back({req.host_block_table_[i], req.block_table[i]});
  }
  host_->free(req.host_block_table_);
  req.host_block_table_.clear();
  if (caching_) {
    // Same content as before the swap-out, so the same hashes; this restores num_cached_blocks.
    cache_full_blocks(req, std::min(req.num_computed_tokens, req.num_tokens()));
  }
  account(req);
  return true;
}

void KvCacheManager::take_blocks(std::int32_t n, std::vector<BlockId>& out) {
  if (cache_ && n > pool_.num_free_blocks()) cache_->make_room(n);
  pool_.get_new_blocks(n, out);
  if (!evicted_.empty()) [[unlikely]] {
    // KV offload: what the pool evicted moves to the tiers instead of being lost (stored as it
    // is evicted; the store overlaps the step, docs/cost-model.md).
    for (std::size_t i = 0; i < evicted_.size(); ++i)
      store_to_tiers(evicted_[i], evicted_blocks_[i]);
    note_offloaded(static_cast<std::int64_t>(evicted_.size()));
    evicted_.clear();
    evicted_blocks_.clear();
  }
}

void KvCacheManager::store_to_tiers(const BlockHash& hash, BlockId block) {
  const std::int32_t slot = offload_->offload(hash);
  if (slot >= 0 && stores_ != nullptr) stores_->push_back({block, slot});
}

std::int32_t KvCacheManager::offload_idle_blocks(std::span<const BlockHash> hashes) {
  if (offload_ == nullptr) {
    throw std::logic_error("KvCacheManager: offload_idle_blocks without offload tiers");
  }
  std::int32_t n = 0;
  // Last block first, as load_tier_blocks refreshes them: a tier that overflows while a session
  // is stored drops the chain's tail (the prefix stays useful), not its head (after which
  // nothing of the chain can hit).
  for (auto it = hashes.rbegin(); it != hashes.rend(); ++it) {
    const BlockHash& h = *it;
    const std::optional<BlockId> b = cache_->lookup(h);
    if (!b || pool_.ref_count(*b) != 0) continue;
    store_to_tiers(h, *b);
    pool_.uncache_free_block(*b);
    ++n;
  }
  note_offloaded(n);
  stats_.idle_offloaded_blocks += n;
  return n;
}

std::int32_t KvCacheManager::num_blocks_to_pin(const RequestSpec& spec) const {
  if (!caching_) return 0;
  const std::int32_t full = full_blocks(std::min(spec.prompt_len, max_model_len_));
  std::int32_t n = 0;
  BlockHash parent = kNoneHash;
  for (std::int32_t i = 0; i < full; ++i) {
    parent = hash_block(parent, spec, i, block_size_);
    const std::optional<BlockId> b = cache_->lookup(parent);
    if (!b || pool_.ref_count(*b) == idle_ref_) ++n;
  }
  return n;
}

std::int32_t KvCacheManager::pin_prefix(const RequestSpec& spec) {
  if (!caching_) throw std::logic_error("KvCacheManager: pin_prefix without prefix caching");
  const std::int32_t need = num_blocks_to_pin(spec);
  if (need > num_free_blocks()) {
    throw std::logic_error("KvCacheManager: pin_prefix needs " + std::to_string(need) +
                           " blocks, " + std::to_string(num_free_blocks()) + " are free");
  }
  const std::int32_t full = full_blocks(std::min(spec.prompt_len, max_model_len_));
  std::vector<BlockId> table;
  std::vector<BlockHash> hashes;
  BlockHash parent = kNoneHash;
  for (std::int32_t i = 0; i < full; ++i) {
    parent = hash_block(parent, spec, i, block_size_);
    hashes.push_back(parent);
    if (const std::optional<BlockId> b = cache_->lookup(parent)) {
      const BlockId one[1] = {*b};
      pool_.touch(one);
      cache_->on_acquired(one);
      table.push_back(*b);
    } else {
      take_blocks(1, table);
    }
  }
  // Every block carries its hash already or takes it now (cached ones are left as they are).
  if (full > 0) cache_->insert(table, hashes, 0, full);
  pinned_.insert(pinned_.end(), table.begin(), table.end());
  stats_.pinned_blocks = static_cast<std::int64_t>(pinned_.size());
  return need;
}

void KvCacheManager::fork(Request& parent, Request& child) {
  if (parent.block_table.empty() || !child.block_table.empty() ||
      !child.host_block_table_.empty()) {
    throw std::logic_error("KvCacheManager: fork of request " + std::to_string(parent.id()) +
                           " needs a parent with a device table and a child without blocks");
  }
  child.block_table = parent.block_table;
  pool_.touch(child.block_table);
  if (cache_) cache_->on_acquired(child.block_table);
  // The hashes of the full blocks only: the parent may have hashed the block being filled ahead
  // (see register_full_blocks), and that one covers outputs, which differ between samples.
  const auto shared_hashes =
      std::min(parent.block_hashes_.size(),
               static_cast<std::size_t>(full_blocks(parent.num_computed_tokens)));
  child.block_hashes_.assign(
      parent.block_hashes_.begin(),
      parent.block_hashes_.begin() + static_cast<std::ptrdiff_t>(shared_hashes));
  child.num_cached_blocks_ = parent.num_cached_blocks_;
  child.kv_accounted_tokens_ = parent.kv_accounted_tokens_;
  account(child);
  const std::int32_t next = parent.num_computed_tokens;  // the next position written
  if (next % block_size_ != 0 &&
      full_blocks(next) < static_cast<std::int32_t>(parent.block_table.size())) {
    parent.cow_tail_ = child.cow_tail_ = true;
  }
  stats_.blocks_saved_by_sharing += static_cast<std::int64_t>(parent.block_table.size());
}

bool KvCacheManager::copy_on_write(Request& req, std::int32_t num_new_tokens) {
  const std::int32_t next = req.num_computed_tokens;
  const std::int32_t i = full_blocks(next);
  if (next % block_size_ == 0 || i >= static_cast<std::int32_t>(req.block_table.size()) ||
      pool_.ref_count(req.block_table[i]) <= 1) {
    // The next token opens a fresh block, or req is the block's last holder: write in place.
    req.cow_tail_ = false;
    return true;
  }
  if (num_blocks_to_allocate(req, num_new_tokens) + 1 > num_free_blocks()) return false;
  if (copies_ == nullptr) {
    throw std::logic_error("KvCacheManager: copy-on-write for request " + std::to_string(req.id()) +
                           " without a copy sink");
  }
  const BlockId shared = req.block_table[i];
  scratch_.clear();
  take_blocks(1, scratch_);
  const BlockId fresh = scratch_[0];
  copies_->push_back({shared, fresh});
  req.block_table[i] = fresh;
  scratch_[0] = shared;
  pool_.free_blocks(scratch_);  // a partial block: never registered in the cache
  req.cow_tail_ = false;
  ++stats_.cow_copies;
  --stats_.blocks_saved_by_sharing;
  return true;
}

bool KvCacheManager::reset_prefix_cache() {
  if (held_blocks_ > 0) return false;
  if (cache_ != nullptr && !cache_->reset()) return false;
  ++stats_.resets;
  return true;
}

void KvCacheManager::check_invariants() const {
  pool_.check_invariants();
  if (cache_) cache_->check_invariants();
}

}  // namespace servelab
