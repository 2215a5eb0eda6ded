#include "core/host_block_pool.h"

#include <stdexcept>
#include <string>

namespace servelab {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::logic_error("HostBlockPool: " + what);
}

std::size_t checked_size(std::int32_t num_blocks) {
  if (num_blocks < 0) fail("num_blocks must be >= 0, got " + std::to_string(num_blocks));
  return static_cast<std::size_t>(num_blocks);
}

}  // namespace

HostBlockPool::HostBlockPool(std::int32_t num_blocks) : ref_(checked_size(num_blocks), 0) {
  // Highest id at the bottom of the stack, so a fresh pool hands out 0, 1, 2, ...
  free_.reserve(ref_.size());
  for (BlockId b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

double HostBlockPool::usage() const {
  if (ref_.empty()) return 0.0;
  return 1.0 - static_cast<double>(free_.size()) / static_cast<double>(ref_.size());
}

void HostBlockPool::allocate(std::int32_t n, std::vector<BlockId>& out) {
  if (n < 0 || n > num_free_blocks()) {
    fail("allocate(" + std::to_string(n) + ") with " + std::to_string(num_free_blocks()) +
         " free blocks");
  }
  for (std::int32_t i = 0; i < n; ++i) {
    const BlockId b = free_.back();
    free_.pop_back();
    ref_[static_cast<std::size_t>(b)] = 1;
    out.push_back(b);
  }
}

void HostBlockPool::free(std::span<const BlockId> blocks) {
  for (const BlockId b : blocks) {
    if (b < 0 || b >= num_blocks()) fail("free on out-of-range block " + std::to_string(b));
    std::int32_t& r = ref_[static_cast<std::size_t>(b)];
    if (r <= 0) fail("free on block " + std::to_string(b) + " which has no reference");
    if (--r == 0) free_.push_back(b);
  }
}

void HostBlockPool::check_invariants() const {
  std::vector<std::uint8_t> seen(ref_.size(), 0);
  for (const BlockId b : free_) {
    if (b < 0 || b >= num_blocks()) fail("free list holds out-of-range block " + std::to_string(b));
    const auto i = static_cast<std::size_t>(b);
    if (seen[i]) fail("block " + std::to_string(b) + " is on the free list twice");
    seen[i] = 1;
    if (ref_[i] != 0) {
      fail("block " + std::to_string(b) + " is on the free list with reference count " +
           std::to_string(ref_[i]));
    }
  }
  for (std::size_t i = 0; i < ref_.size(); ++i) {
    if (ref_[i] < 0) fail("block " + std::to_string(i) + " has a negative reference count");
    if (ref_[i] == 0 && !seen[i]) {
      fail("block " + std::to_string(i) + " has no reference but is not on the free list");
    }
  }
}

}  // namespace servelab
