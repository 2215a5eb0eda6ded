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
    : meta_(checked_size(num_blocks)), index_(static_cast<std::size_t>(num_blocks)) {
  for (BlockId b = 1; b < num_blocks; ++b) push_back(b);
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(num_usable_blocks());
}

void BlockPool::unlink(BlockId b) {
  const BlockId p = meta_[b].prev, n = meta_[b].next;
  if (p >= 0) {
    meta_[p].next = n;
  } else {
    head_ = n;
  }
  if (n >= 0) {
    meta_[n].prev = p;
  } else {
    tail_ = p;
  }
  meta_[b].prev = meta_[b].next = -1;
  meta_[b].in_queue = 0;
  --num_free_;
  if (meta_[b].has_hash) --num_free_hashed_;
}

void BlockPool::push_back(BlockId b) {
  meta_[b].prev = tail_;
  meta_[b].next = -1;
  if (tail_ >= 0) {
    meta_[tail_].next = b;
  } else {
    head_ = b;
  }
  tail_ = b;
  meta_[b].in_queue = 1;
  ++num_free_;
  if (meta_[b].has_hash) ++num_free_hashed_;
}

void BlockPool::drop_hash(BlockId b) {
  if (meta_[b].next_dup >= 0 || meta_[b].dup_member) {
    // Unchain b from its hash's duplicate list. Chains are almost always of length 1 (a
    // duplicate appears only when a block is recomputed while an equal one is still cached), so
    // this path and its walk are rare.
    BlockId* first = index_.find(meta_[b].hash);
    if (*first == b) {
      *first = meta_[b].next_dup;
      meta_[meta_[b].next_dup].dup_member = 0;
    } else {
      BlockId p = *first;
      while (meta_[p].next_dup != b) p = meta_[p].next_dup;
      meta_[p].next_dup = meta_[b].next_dup;
    }
  }
  // Otherwise b was alone under its hash: its index entry goes stale (see the header).
  meta_[b].next_dup = -1;
  meta_[b].dup_member = 0;
  meta_[b].has_hash = 0;
  --num_hashed_;
  if (meta_[b].in_queue) --num_free_hashed_;
}

void BlockPool::get_new_blocks(std::int32_t n, std::vector<BlockId>& out) {
  if (n < 0 || n > num_free_) {
    fail("get_new_blocks(" + std::to_string(n) + ") with " + std::to_string(num_free_) +
         " free blocks");
  }
  for (std::int32_t i = 0; i < n; ++i) {
    const BlockId b = head_;
    unlink(b);
    if (meta_[b].has_hash) {  // lazy eviction: the cached content is lost only now
      drop_hash(b);
      ++num_evictions_;
    }
    meta_[b].ref = 1;
    out.push_back(b);
  }
}

void BlockPool::touch(std::span<const BlockId> blocks) {
  for (const BlockId b : blocks) {
    // The null block pads skipped positions (sliding window in vLLM); it is never counted.
    if (b == kNullBlock) continue;
    if (meta_[b].ref == 0) unlink(b);
    ++meta_[b].ref;
  }
}

void BlockPool::free_blocks(std::span<const BlockId> ordered) {
  for (const BlockId b : ordered) {
    if (b == kNullBlock) continue;
    if (meta_[b].ref <= 0) fail("free_blocks on " + block_str(b) + " which has no reference");
    if (--meta_[b].ref == 0) push_back(b);
  }
}

void BlockPool::cache_block(BlockId block, const BlockHash& hash) {
  if (block <= kNullBlock || block >= num_blocks())
    fail("cache_block on invalid " + block_str(block));
  if (meta_[block].ref <= 0) fail("cache_block on " + block_str(block) + " which has no reference");
  if (meta_[block].has_hash) {
    if (meta_[block].hash == hash) return;
    fail("cache_block on " + block_str(block) + " which already carries a different hash");
  }
  meta_[block].hash = hash;
  meta_[block].has_hash = 1;
  meta_[block].next_dup = -1;
  ++num_hashed_;
  meta_[block].dup_member = 0;
  auto [it, inserted] = index_.try_emplace(hash, block);
  if (inserted) {
    if (index_.size() * 4 > index_.capacity() * 3) rebuild_index();
  } else if (*it == block || !is_live_head(*it, hash)) {
    // A stale entry for this hash (possibly left by this very block): take it over.
    *it = block;
  } else {
    // Duplicates go to the end of the chain so lookups keep returning the earliest registered.
    BlockId p = *it;
    while (meta_[p].next_dup >= 0) p = meta_[p].next_dup;
    meta_[p].next_dup = block;
    meta_[block].dup_member = 1;
  }
}

void BlockPool::rebuild_index() {
  index_.clear();
  for (BlockId b = 1; b < num_blocks(); ++b) {
    if (meta_[b].has_hash && !meta_[b].dup_member) index_.try_emplace(meta_[b].hash, b);
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
    meta_[b].has_hash = 0;
    meta_[b].next_dup = -1;
    meta_[b].dup_member = 0;
  }
  num_hashed_ = 0;
  num_free_hashed_ = 0;
  return true;
}

std::optional<BlockHash> BlockPool::block_hash(BlockId b) const {
  if (!meta_[b].has_hash) return std::nullopt;
  return meta_[b].hash;
}

std::vector<BlockId> BlockPool::free_queue() const {
  std::vector<BlockId> out;
  out.reserve(static_cast<std::size_t>(num_free_));
  for (BlockId b = head_; b >= 0; b = meta_[b].next) out.push_back(b);
  return out;
}

void BlockPool::check_invariants() const {
  const std::int32_t n = num_blocks();
  if (n < 2) fail("num_blocks is " + std::to_string(n));
  const auto size = static_cast<std::size_t>(n);
  if (meta_.size() != size) {
    fail("per-block arrays have inconsistent sizes");
  }
  if (meta_[kNullBlock].ref != 0)
    fail("null block has reference count " + std::to_string(meta_[0].ref));
  if (meta_[kNullBlock].in_queue) fail("null block is in the free queue");
  if (meta_[kNullBlock].has_hash) fail("null block carries a hash");

  // Free queue: walk head to tail, checking back links and bounding the walk to catch cycles.
  std::int32_t queued = 0;
  std::int32_t free_hashed = 0;
  BlockId prev = -1;
  for (BlockId b = head_; b >= 0; b = meta_[b].next) {
    if (b >= n) fail("free queue links to out-of-range " + block_str(b));
    if (b == kNullBlock) fail("null block is linked into the free queue");
    if (++queued > n) fail("free queue has a cycle");
    if (meta_[b].prev != prev) {
      fail(block_str(b) + " has prev " + std::to_string(meta_[b].prev) + " but follows " +
           std::to_string(prev) + " in the free queue");
    }
    if (!meta_[b].in_queue)
      fail(block_str(b) + " is linked into the free queue but not marked queued");
    if (meta_[b].ref != 0) {
      fail(block_str(b) + " is in the free queue with reference count " +
           std::to_string(meta_[b].ref));
    }
    if (meta_[b].has_hash) ++free_hashed;
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
    if (meta_[b].ref < 0)
      fail(block_str(b) + " has negative reference count " + std::to_string(meta_[b].ref));
    if ((meta_[b].ref == 0) != static_cast<bool>(meta_[b].in_queue)) {
      fail(block_str(b) + " has reference count " + std::to_string(meta_[b].ref) +
           (meta_[b].in_queue ? " but is in the free queue" : " but is not in the free queue"));
    }
    if (meta_[b].has_hash) {
      ++hashed;
    } else if (meta_[b].next_dup >= 0) {
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
    for (BlockId b = first; b >= 0; b = meta_[b].next_dup) {
      if (b == kNullBlock || b >= n) fail("hash index refers to invalid " + block_str(b));
      if (++len > n) fail("duplicate chain starting at " + block_str(first) + " has a cycle");
      if (!meta_[b].has_hash) fail(block_str(b) + " is in the hash index but carries no hash");
      if (!(meta_[b].hash == h)) fail(block_str(b) + " is indexed under a hash it does not carry");
      if (b != first && !meta_[b].dup_member) fail(block_str(b) + " is chained but not marked");
    }
    indexed += len;
  });
  if (indexed != num_hashed_) {
    fail("hash index holds " + std::to_string(indexed) + " blocks but " +
         std::to_string(num_hashed_) + " carry a hash");
  }
}

}  // namespace servelab
