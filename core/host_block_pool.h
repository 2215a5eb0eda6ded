// HostBlockPool: the host-memory (CPU) blocks that swapped-out KV lives in (vLLM v0's CPU
// allocator, sized by swap_space_gib; see sim/kv_capacity.h).
//
// Host blocks only hold KV while its request is swapped out: they carry no hash and are never
// looked up, so the pool is a plain free list with reference counts. Unlike the device pool
// there is no null block: ids 0 .. num_blocks - 1 are all usable, and num_blocks may be 0
// (no swap space).
//
// Invariants (check_invariants() verifies them):
// - a block is on the free list iff its reference count is 0, and appears there at most once;
// - num_free_blocks() equals the length of the free list.
// Allocation order is deterministic: a fresh pool hands out 0, 1, 2, ...; freed blocks are
// reused most recently freed first (a stack: which host block holds what is irrelevant to
// timing, so the cheapest order is used).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/request_state.h"

namespace servelab {

class HostBlockPool {
 public:
  // REQUIRES: num_blocks >= 0.
  explicit HostBlockPool(std::int32_t num_blocks);
  HostBlockPool(const HostBlockPool&) = delete;
  HostBlockPool& operator=(const HostBlockPool&) = delete;

  std::int32_t num_blocks() const { return static_cast<std::int32_t>(ref_.size()); }
  std::int32_t num_free_blocks() const { return static_cast<std::int32_t>(free_.size()); }
  // Fraction of blocks with a reference (0 when the pool is empty).
  double usage() const;

  // Takes n free blocks, sets their reference count to 1 and appends them to `out`.
  // Throws std::logic_error when n < 0 or n > num_free_blocks() (callers check first).
  void allocate(std::int32_t n, std::vector<BlockId>& out);
  // Drops one reference from each block; those reaching 0 return to the free list.
  // Throws std::logic_error for an out-of-range block or one without a reference.
  void free(std::span<const BlockId> blocks);

  std::int32_t ref_count(BlockId b) const { return ref_[static_cast<std::size_t>(b)]; }

  // Verifies the invariants above; throws std::logic_error naming the first violation.
  void check_invariants() const;

 private:
  std::vector<std::int32_t> ref_;
  std::vector<BlockId> free_;  // a stack: back() is allocated next
};

}  // namespace servelab
