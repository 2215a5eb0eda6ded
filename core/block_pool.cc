#include "core/block_pool.h"

#include <stdexcept>
#include <string>

namespace servelab {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::logic_error("BlockPool: " + what); }

std::string block_str(BlockId b) { return "block " + std::to_string(b); }

// Validates before the per-block arrays are sized from it.
std::size_t checked_size(std::int32_t num_blocks) {
  if (num_blocks < 2) fail("num_blocks must be at least 2, got " + std::to_string(num_blocks));
  if (num_blocks > BlockPool::kMaxBlocks) {
    fail("num_blocks must be at most " + std::to_string(BlockPool::kMaxBlocks) + ", got " +
         std::to_string(num_blocks));
  }
  return static_cast<std::size_t>(num_blocks);
}

// Room for twice the usable blocks, as a power of two (see the header).
std::size_t ring_capacity(std::int32_t num_blocks) {
  std::size_t cap = 1;
  while (cap < 2 * static_cast<std::size_t>(num_blocks - 1)) cap <<= 1;
  return cap;
}

// Index slots per block: the load factor of the hash index is at most 1/kIndexSlotsPerBlock.
// Measured on the Azure conversation replay (65,094 blocks): 8 (a 4 MB table) ran about 4 %
// faster than 4 (2 MB) and 12 % faster than 2 (1 MB): shorter probe runs on insert and erase
// outweigh the misses a table beyond the L2 cache adds.
constexpr std::size_t kIndexSlotsPerBlock = 8;

// get_new_blocks prefetches in two stages, ring entries ahead of the one it pops: the block
// state and hash kFarAhead entries ahead, and, from that hash, the index slot an eviction would
// erase kNearAhead entries ahead (a hint: the entry may be stale or its block carry no hash).
constexpr std::uint32_t kFarAhead = 8;
constexpr std::uint32_t kNearAhead = 4;

}  // namespace

BlockPool::BlockPool(std::int32_t num_blocks)
    : state_(checked_size(num_blocks)),
      hashes_(state_.size()),
      next_dup_(state_.size(), -1),
      index_(state_.size(), kIndexSlotsPerBlock, hashes_.data()),
      ring_(ring_capacity(num_blocks), kNullBlock),
      ring_mask_(static_cast<std::uint32_t>(ring_.size() - 1)) {
  for (BlockId b = 1; b < num_blocks; ++b) push_back(b);
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(num_usable_blocks());
}

void BlockPool::unlink(BlockId b) {
  state_[b].set_slot(kNoSlot);
  --num_free_;
  if (state_[b].has(kHasHash)) --num_free_hashed_;
}

void BlockPool::push_back(BlockId b) {
  if (ring_len_ == ring_.size()) compact_ring();
  const std::uint32_t slot = (head_ + ring_len_) & ring_mask_;
  ring_[slot] = b;
  state_[b].set_slot(slot);
  ++ring_len_;
  ++num_free_;
  if (state_[b].has(kHasHash)) ++num_free_hashed_;
}

void BlockPool::compact_ring() {
  // In place: the write position never passes the read position, so nothing unread is
  // overwritten, and a block's stale entries all lie behind its live one or were skipped.
  std::uint32_t kept = 0;
  for (std::uint32_t i = 0; i < ring_len_; ++i) {
    const std::uint32_t from = (head_ + i) & ring_mask_;
    const BlockId b = ring_[from];
    if (state_[b].slot() != from) continue;  // stale
    const std::uint32_t to = (head_ + kept) & ring_mask_;
    ring_[to] = b;
    state_[b].set_slot(to);
    ++kept;
  }
  ring_len_ = kept;
}

void BlockPool::drop_duplicate(BlockId b) {
  BlockState& st = state_[b];
  const BlockHash& h = hashes_[b];
  if (st.has(kDupMember)) {
    // Unchain b from its hash's duplicate list. Chains are almost always of length 1 (a
    // duplicate appears only when a block is recomputed while an equal one is still cached), so
    // this path and its walk are rare.
    BlockId p = index_.find(h);
    while (next_dup_[p] != b) p = next_dup_[p];
    next_dup_[p] = next_dup_[b];
    if (next_dup_[p] < 0) state_[p].bits &= ~kHasDups;
  } else {
    // b heads a chain: the next duplicate becomes the first registered.
    const BlockId next = next_dup_[b];
    index_.replace(BlockTagIndex::tag_of(h), b, next);
    state_[next].bits &= ~kDupMember;
  }
  if (st.has(kHasDups)) next_dup_[b] = -1;
}

void BlockPool::get_new_blocks(std::int32_t n, std::vector<BlockId>& out) {
  if (n < 0 || n > num_free_) {
    fail("get_new_blocks(" + std::to_string(n) + ") with " + std::to_string(num_free_) +
         " free blocks");
  }
  // The ring cursor in locals: the compiler cannot keep members in registers across the stores
  // into `out`.
  std::uint32_t head = head_;
  std::uint32_t len = ring_len_;
  for (std::int32_t i = 0; i < n; ++i) {
    // Skip stale entries up to the live head; there is one, since num_free_ > 0.
    BlockId b;
    std::uint32_t slot;
    do {
      slot = head;
      b = ring_[slot];
      head = (head + 1) & ring_mask_;
      --len;
      // Written out here, not in a helper: GCC 12 dropped the call to an out-of-line void
      // function whose only effects were prefetches. Ring slots past the tail hold old block
      // ids (or 0), so every address here is in bounds.
      const BlockId far = ring_[(slot + kFarAhead) & ring_mask_];
      __builtin_prefetch(&state_[far]);
      __builtin_prefetch(&hashes_[far]);
      index_.prefetch(hashes_[ring_[(slot + kNearAhead) & ring_mask_]]);
    } while (state_[b].slot() != slot);
    BlockState& st = state_[b];
    --num_free_;
    if (st.has(kHasHash)) {
      // Lazy eviction: the cached content is lost only now. The block is out of the queue
      // already, so it leaves the free cached blocks as well as the cached ones.
      --num_free_hashed_;
      if (eviction_sink_ != nullptr) [[unlikely]] {
        eviction_sink_->push_back(hashes_[b]);
        if (eviction_block_sink_ != nullptr) eviction_block_sink_->push_back(b);
      }
      if (st.bits & (kDupMember | kHasDups)) [[unlikely]] {
        drop_duplicate(b);
      } else {
        index_.erase(BlockTagIndex::tag_of(hashes_[b]), b);  // b was alone under its hash
      }
      --num_hashed_;
      ++num_evictions_;
    }
    st.ref = 1;
    st.bits = kNoSlot << kSlotShift;  // no flags, not queued
    out.push_back(b);
  }
  head_ = head;
  ring_len_ = len;
  num_allocated_ += n;
}

void BlockPool::touch(std::span<const BlockId> blocks) {
  for (const BlockId b : blocks) {
    // The null block pads skipped positions (sliding window in vLLM); it is never counted.
    if (b == kNullBlock) continue;
    if (state_[b].ref == 0) unlink(b);
    ++state_[b].ref;
  }
}

void BlockPool::free_blocks(std::span<const BlockId> ordered) {
  for (const BlockId b : ordered) {
    if (b == kNullBlock) continue;
    if (state_[b].ref <= 0) fail("free_blocks on " + block_str(b) + " which has no reference");
    if (--state_[b].ref == 0) {
      push_back(b);
      ++num_freed_;
    }
  }
}

void BlockPool::cache_block(BlockId block, const BlockHash& hash) {
  if (block <= kNullBlock || block >= num_blocks())
    fail("cache_block on invalid " + block_str(block));
  BlockState& st = state_[block];
  if (st.ref <= 0) fail("cache_block on " + block_str(block) + " which has no reference");
  if (st.has(kHasHash)) {
    if (hashes_[block] == hash) return;
    fail("cache_block on " + block_str(block) + " which already carries a different hash");
  }
  hashes_[block] = hash;
  st.bits |= kHasHash;
  ++num_hashed_;
  const auto [first, inserted] = index_.try_emplace(hash, block);
  if (!inserted) {
    // Duplicates go to the end of the chain so lookups keep returning the earliest registered.
    BlockId p = first;
    while (state_[p].has(kHasDups)) p = next_dup_[p];
    next_dup_[p] = block;
    state_[p].bits |= kHasDups;
    st.bits |= kDupMember;
  }
}

void BlockPool::uncache_block(BlockId block) {
  if (block <= kNullBlock || block >= num_blocks())
    fail("uncache_block on invalid " + block_str(block));
  BlockState& st = state_[block];
  if (st.ref <= 0) fail("uncache_block on " + block_str(block) + " which has no reference");
  if (!st.has(kHasHash)) return;
  if (st.bits & (kDupMember | kHasDups)) {
    drop_duplicate(block);
  } else {
    index_.erase(BlockTagIndex::tag_of(hashes_[block]), block);  // alone under its hash
  }
  st.bits &= ~kFlagMask;
  --num_hashed_;
}

void BlockPool::uncache_free_block(BlockId block) {
  if (block <= kNullBlock || block >= num_blocks())
    fail("uncache_free_block on invalid " + block_str(block));
  BlockState& st = state_[block];
  if (st.ref != 0 || !queued(block) || !st.has(kHasHash)) {
    fail("uncache_free_block on " + block_str(block) + " which is not a free cached block");
  }
  unlink(block);  // its ring entry goes stale; it re-enters at the head below
  if (st.bits & (kDupMember | kHasDups)) {
    drop_duplicate(block);
  } else {
    index_.erase(BlockTagIndex::tag_of(hashes_[block]), block);
  }
  st.bits &= ~kFlagMask;
  --num_hashed_;
  if (ring_len_ == ring_.size()) compact_ring();
  head_ = (head_ - 1) & ring_mask_;
  ring_[head_] = block;
  st.set_slot(head_);
  ++ring_len_;
  ++num_free_;
}

std::optional<BlockId> BlockPool::lookup(const BlockHash& hash) const {
  const BlockId b = index_.find(hash);
  if (b == BlockTagIndex::kEmpty) return std::nullopt;
  return b;
}

bool BlockPool::reset_prefix_cache() {
  if (num_free_ != num_usable_blocks()) return false;
  index_.clear();
  for (BlockId b = 0; b < num_blocks(); ++b) {
    state_[b].bits &= ~kFlagMask;
    next_dup_[b] = -1;
  }
  num_hashed_ = 0;
  num_free_hashed_ = 0;
  return true;
}

std::optional<BlockHash> BlockPool::block_hash(BlockId b) const {
  if (!state_[b].has(kHasHash)) return std::nullopt;
  return hashes_[b];
}

std::vector<BlockId> BlockPool::free_queue() const {
  std::vector<BlockId> out;
  out.reserve(static_cast<std::size_t>(num_free_));
  for (std::uint32_t i = 0; i < ring_len_; ++i) {
    const std::uint32_t slot = (head_ + i) & ring_mask_;
    if (state_[ring_[slot]].slot() == slot) out.push_back(ring_[slot]);
  }
  return out;
}

void BlockPool::check_invariants() const {
  const std::int32_t n = num_blocks();
  if (n < 2 || n > kMaxBlocks) fail("num_blocks is " + std::to_string(n));
  const auto size = static_cast<std::size_t>(n);
  if (hashes_.size() != size || next_dup_.size() != size) {
    fail("per-block arrays have inconsistent sizes");
  }
  if (state_[kNullBlock].ref != 0)
    fail("null block has reference count " + std::to_string(state_[kNullBlock].ref));
  if (queued(kNullBlock)) fail("null block is in the free queue");
  if (state_[kNullBlock].bits & kFlagMask) fail("null block carries a hash");

  // The ring: a power of two with room for twice the usable blocks; its entries name usable
  // blocks; an entry is live iff its block records its slot, so each block has at most one.
  const std::size_t cap = ring_.size();
  if (cap == 0 || (cap & (cap - 1)) != 0 || cap < 2 * static_cast<std::size_t>(n - 1) ||
      ring_mask_ != cap - 1) {
    fail("free-queue ring has capacity " + std::to_string(cap) + " and mask " +
         std::to_string(ring_mask_));
  }
  if (head_ >= cap || ring_len_ > cap) {
    fail("free-queue ring has head " + std::to_string(head_) + " and length " +
         std::to_string(ring_len_) + " for capacity " + std::to_string(cap));
  }
  std::int32_t queued_blocks = 0;
  std::int32_t free_hashed = 0;
  for (std::uint32_t i = 0; i < ring_len_; ++i) {
    const std::uint32_t slot = (head_ + i) & ring_mask_;
    const BlockId b = ring_[slot];
    if (b <= kNullBlock || b >= n)
      fail("free-queue ring slot " + std::to_string(slot) + " holds invalid " + block_str(b));
    if (state_[b].slot() != slot) continue;  // stale: the block left the queue or was re-queued
    if (state_[b].ref != 0) {
      fail(block_str(b) + " is in the free queue with reference count " +
           std::to_string(state_[b].ref));
    }
    ++queued_blocks;
    if (state_[b].has(kHasHash)) ++free_hashed;
  }
  if (queued_blocks != num_free_) {
    fail("free queue holds " + std::to_string(queued_blocks) + " blocks but num_free is " +
         std::to_string(num_free_));
  }
  if (free_hashed != num_free_hashed_) {
    fail(std::to_string(free_hashed) + " free blocks carry a hash but num_free_hashed is " +
         std::to_string(num_free_hashed_));
  }

  std::int32_t hashed = 0;
  std::int32_t heads = 0;
  for (BlockId b = 1; b < n; ++b) {
    const BlockState& st = state_[b];
    if (st.ref < 0) fail(block_str(b) + " has negative reference count " + std::to_string(st.ref));
    if ((st.ref == 0) != queued(b)) {
      fail(block_str(b) + " has reference count " + std::to_string(st.ref) +
           (queued(b) ? " but is in the free queue" : " but is not in the free queue"));
    }
    if (queued(b)) {
      // A queued block's slot lies in the ring's occupied range and holds it: it is live there.
      const std::uint32_t slot = st.slot();
      if (slot >= cap || ((slot - head_) & ring_mask_) >= ring_len_ || ring_[slot] != b) {
        fail(block_str(b) + " records free-queue slot " + std::to_string(slot) +
             " which does not hold it");
      }
    }
    if (st.has(kHasHash)) {
      ++hashed;
      if (!st.has(kDupMember)) ++heads;
    } else if (st.bits & kFlagMask) {
      fail(block_str(b) + " carries no hash but is marked as a duplicate");
    }
    if (st.has(kHasDups) != (next_dup_[b] >= 0)) {
      fail(block_str(b) + " has next duplicate " + std::to_string(next_dup_[b]) +
           (st.has(kHasDups) ? " but is marked as having one" : " but is not marked"));
    }
  }
  if (hashed != num_hashed_) {
    fail(std::to_string(hashed) + " blocks carry a hash but num_hashed is " +
         std::to_string(num_hashed_));
  }

  // Hash index: exactly one entry per chain head, findable under the head's hash; every chain
  // member carries the head's hash. Keys are distinct and a block carries one hash, so a block
  // can sit in at most one chain, and a bounded walk rules out repeats within one.
  if (index_.size() != static_cast<std::size_t>(heads)) {
    fail("hash index holds " + std::to_string(index_.size()) + " entries but " +
         std::to_string(heads) + " blocks head a duplicate chain");
  }
  std::int32_t indexed = 0;
  index_.for_each([&](std::uint32_t tag, BlockId first) {
    if (first <= kNullBlock || first >= n) fail("hash index refers to invalid " + block_str(first));
    if (!state_[first].has(kHasHash) || state_[first].has(kDupMember))
      fail("hash index refers to " + block_str(first) + " which heads no duplicate chain");
    const BlockHash& h = hashes_[first];
    if (tag != BlockTagIndex::tag_of(h)) fail(block_str(first) + " is indexed under a wrong tag");
    if (index_.find(h) != first) fail(block_str(first) + " is not found under its hash");
    std::int32_t len = 0;
    for (BlockId b = first; b >= 0; b = next_dup_[b]) {
      if (b == kNullBlock || b >= n) fail("hash index refers to invalid " + block_str(b));
      if (++len > n) fail("duplicate chain starting at " + block_str(first) + " has a cycle");
      if (!state_[b].has(kHasHash))
        fail(block_str(b) + " is in the hash index but carries no hash");
      if (!(hashes_[b] == h)) fail(block_str(b) + " is indexed under a hash it does not carry");
      if (b != first && !state_[b].has(kDupMember))
        fail(block_str(b) + " is chained but not marked");
    }
    indexed += len;
  });
  if (indexed != num_hashed_) {
    fail("hash index holds " + std::to_string(indexed) + " blocks but " +
         std::to_string(num_hashed_) + " carry a hash");
  }
}

}  // namespace servelab
