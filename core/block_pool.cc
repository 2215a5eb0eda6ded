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
  return static_cast<std::size_t>(num_blocks);
}

}  // namespace

BlockPool::BlockPool(std::int32_t num_blocks)
    : ref_(checked_size(num_blocks), 0),
      prev_(num_blocks, -1),
      next_(num_blocks, -1),
      in_queue_(num_blocks, 0),
      has_hash_(num_blocks, 0),
      hash_(num_blocks),
      next_dup_(num_blocks, -1),
      dup_member_(num_blocks, 0),
      index_(static_cast<std::size_t>(num_blocks)) {
  for (BlockId b = 1; b < num_blocks; ++b) push_back(b);
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(num_usable_blocks());
}

void BlockPool::unlink(BlockId b) {
  const BlockId p = prev_[b], n = next_[b];
  if (p >= 0) {
    next_[p] = n;
  } else {
    head_ = n;
  }
  if (n >= 0) {
    prev_[n] = p;
  } else {
    tail_ = p;
  }
  prev_[b] = next_[b] = -1;
  in_queue_[b] = 0;
  --num_free_;
  if (has_hash_[b]) --num_free_hashed_;
}

void BlockPool::push_back(BlockId b) {
  prev_[b] = tail_;
  next_[b] = -1;
  if (tail_ >= 0) {
    next_[tail_] = b;
  } else {
    head_ = b;
  }
  tail_ = b;
  in_queue_[b] = 1;
  ++num_free_;
  if (has_hash_[b]) ++num_free_hashed_;
}

void BlockPool::drop_hash(BlockId b) {
  if (next_dup_[b] >= 0 || dup_member_[b]) {
    // Unchain b from its hash's duplicate list. Chains are almost always of length 1 (a
    // duplicate appears only when a block is recomputed while an equal one is still cached), so
    // this path and its walk are rare.
    BlockId* first = index_.find(hash_[b]);
    if (*first == b) {
      *first = next_dup_[b];
      dup_member_[next_dup_[b]] = 0;
    } else {
      BlockId p = *first;
      while (next_dup_[p] != b) p = next_dup_[p];
      next_dup_[p] = next_dup_[b];
    }
  }
  // Otherwise b was alone under its hash: its index entry goes stale (see the header).
  next_dup_[b] = -1;
  dup_member_[b] = 0;
  has_hash_[b] = 0;
  --num_hashed_;
  if (in_queue_[b]) --num_free_hashed_;
}

void BlockPool::get_new_blocks(std::int32_t n, std::vector<BlockId>& out) {
  if (n < 0 || n > num_free_) {
    fail("get_new_blocks(" + std::to_string(n) + ") with " + std::to_string(num_free_) +
         " free blocks");
  }
  for (std::int32_t i = 0; i < n; ++i) {
    const BlockId b = head_;
    unlink(b);
    if (has_hash_[b]) {  // lazy eviction: the cached content is lost only now
      drop_hash(b);
      ++num_evictions_;
    }
    ref_[b] = 1;
    out.push_back(b);
  }
}

void BlockPool::touch(std::span<const BlockId> blocks) {
  for (const BlockId b : blocks) {
    // The null block pads skipped positions (sliding window in vLLM); it is never counted.
    if (b == kNullBlock) continue;
    if (ref_[b] == 0) unlink(b);
    ++ref_[b];
  }
}

void BlockPool::free_blocks(std::span<const BlockId> ordered) {
  for (const BlockId b : ordered) {
    if (b == kNullBlock) continue;
    if (ref_[b] <= 0) fail("free_blocks on " + block_str(b) + " which has no reference");
    if (--ref_[b] == 0) push_back(b);
  }
}

void BlockPool::cache_block(BlockId block, const BlockHash& hash) {
  if (block <= kNullBlock || block >= num_blocks())
    fail("cache_block on invalid " + block_str(block));
  if (ref_[block] <= 0) fail("cache_block on " + block_str(block) + " which has no reference");
  if (has_hash_[block]) {
    if (hash_[block] == hash) return;
    fail("cache_block on " + block_str(block) + " which already carries a different hash");
  }
  hash_[block] = hash;
  has_hash_[block] = 1;
  next_dup_[block] = -1;
  ++num_hashed_;
  dup_member_[block] = 0;
  auto [it, inserted] = index_.try_emplace(hash, block);
  if (inserted) {
    if (index_.size() * 4 > index_.capacity() * 3) rebuild_index();
  } else if (*it == block || !is_live_head(*it, hash)) {
    // A stale entry for this hash (possibly left by this very block): take it over.
    *it = block;
  } else {
    // Duplicates go to the end of the chain so lookups keep returning the earliest registered.
    BlockId p = *it;
    while (next_dup_[p] >= 0) p = next_dup_[p];
    next_dup_[p] = block;
    dup_member_[block] = 1;
  }
}

void BlockPool::rebuild_index() {
  index_.clear();
  for (BlockId b = 1; b < num_blocks(); ++b) {
    if (has_hash_[b] && !dup_member_[b]) index_.try_emplace(hash_[b], b);
  }
}

std::optional<BlockId> BlockPool::lookup(const BlockHash& hash) const {
  const BlockId* b = index_.find(hash);
  if (b == nullptr || !is_live_head(*b, hash)) return std::nullopt;
  return *b;
}

bool BlockPool::reset_prefix_cache() {
  if (num_free_ != num_usable_blocks()) return false;
  index_.clear();
  for (BlockId b = 0; b < num_blocks(); ++b) {
    has_hash_[b] = 0;
    next_dup_[b] = -1;
    dup_member_[b] = 0;
  }
  num_hashed_ = 0;
  num_free_hashed_ = 0;
  return true;
}

std::optional<BlockHash> BlockPool::block_hash(BlockId b) const {
  if (!has_hash_[b]) return std::nullopt;
  return hash_[b];
}

std::vector<BlockId> BlockPool::free_queue() const {
  std::vector<BlockId> out;
  out.reserve(static_cast<std::size_t>(num_free_));
  for (BlockId b = head_; b >= 0; b = next_[b]) out.push_back(b);
  return out;
}

void BlockPool::check_invariants() const {
  const std::int32_t n = num_blocks();
  if (n < 2) fail("num_blocks is " + std::to_string(n));
  const auto size = static_cast<std::size_t>(n);
  if (prev_.size() != size || next_.size() != size || in_queue_.size() != size ||
      has_hash_.size() != size || hash_.size() != size || next_dup_.size() != size) {
    fail("per-block arrays have inconsistent sizes");
  }
  if (ref_[kNullBlock] != 0) fail("null block has reference count " + std::to_string(ref_[0]));
  if (in_queue_[kNullBlock]) fail("null block is in the free queue");
  if (has_hash_[kNullBlock]) fail("null block carries a hash");

  // Free queue: walk head to tail, checking back links and bounding the walk to catch cycles.
  std::int32_t queued = 0;
  std::int32_t free_hashed = 0;
  BlockId prev = -1;
  for (BlockId b = head_; b >= 0; b = next_[b]) {
    if (b >= n) fail("free queue links to out-of-range " + block_str(b));
    if (b == kNullBlock) fail("null block is linked into the free queue");
    if (++queued > n) fail("free queue has a cycle");
    if (prev_[b] != prev) {
      fail(block_str(b) + " has prev " + std::to_string(prev_[b]) + " but follows " +
           std::to_string(prev) + " in the free queue");
    }
    if (!in_queue_[b]) fail(block_str(b) + " is linked into the free queue but not marked queued");
    if (ref_[b] != 0) {
      fail(block_str(b) + " is in the free queue with reference count " + std::to_string(ref_[b]));
    }
    if (has_hash_[b]) ++free_hashed;
    prev = b;
  }
  if (tail_ != prev) {
    fail("tail is " + std::to_string(tail_) + " but the free queue ends at " +
         std::to_string(prev));
  }
  if (queued != num_free_) {
    fail("free queue holds " + std::to_string(queued) + " blocks but num_free is " +
         std::to_string(num_free_));
  }
  if (free_hashed != num_free_hashed_) {
    fail(std::to_string(free_hashed) + " free blocks carry a hash but num_free_hashed is " +
         std::to_string(num_free_hashed_));
  }

  std::int32_t hashed = 0;
  for (BlockId b = 1; b < n; ++b) {
    if (ref_[b] < 0)
      fail(block_str(b) + " has negative reference count " + std::to_string(ref_[b]));
    if ((ref_[b] == 0) != static_cast<bool>(in_queue_[b])) {
      fail(block_str(b) + " has reference count " + std::to_string(ref_[b]) +
           (in_queue_[b] ? " but is in the free queue" : " but is not in the free queue"));
    }
    if (has_hash_[b]) {
      ++hashed;
    } else if (next_dup_[b] >= 0) {
      fail(block_str(b) + " carries no hash but is chained as a duplicate");
    }
  }
  if (hashed != num_hashed_) {
    fail(std::to_string(hashed) + " blocks carry a hash but num_hashed is " +
         std::to_string(num_hashed_));
  }

  // Hash index: every chain member carries its key; keys are distinct and a block carries one
  // hash, so a block can sit in at most one chain, and a bounded walk rules out repeats within one.
  std::int32_t indexed = 0;
  index_.for_each([&](const BlockHash& h, BlockId first) {
    if (first == kNullBlock || first >= n) fail("hash index refers to invalid " + block_str(first));
    if (!is_live_head(first, h)) return;  // a stale entry (see the header)
    std::int32_t len = 0;
    for (BlockId b = first; b >= 0; b = next_dup_[b]) {
      if (b == kNullBlock || b >= n) fail("hash index refers to invalid " + block_str(b));
      if (++len > n) fail("duplicate chain starting at " + block_str(first) + " has a cycle");
      if (!has_hash_[b]) fail(block_str(b) + " is in the hash index but carries no hash");
      if (!(hash_[b] == h)) fail(block_str(b) + " is indexed under a hash it does not carry");
      if (b != first && !dup_member_[b]) fail(block_str(b) + " is chained but not marked");
    }
    indexed += len;
  });
  if (indexed != num_hashed_) {
    fail("hash index holds " + std::to_string(indexed) + " blocks but " +
         std::to_string(num_hashed_) + " carry a hash");
  }
}

}  // namespace servelab
