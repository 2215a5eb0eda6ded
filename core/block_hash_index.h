// BlockHashIndex: a flat open-addressing map from BlockHash to a BlockId that stores its keys,
// for the radix tree (the block pool uses BlockTagIndex, whose 8-byte slots leave the keys with
// the pool).
//
// Why not std::unordered_map: the index sits on the simulator's hot path (an insert per newly
// full block, an erase per eviction); a node-based map costs two or three cache misses per
// operation, this table one. Keys are XXH3 outputs, uniformly distributed, so the low bits index
// the table directly. Linear probing with backward-shift deletion (no tombstones); the capacity
// is fixed at construction to a power of two of at least four times `max_entries`, so the load
// factor stays at most 1/4 and probe runs stay short.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/block_hash.h"

namespace servelab {

class BlockHashIndex {
 public:
  static constexpr std::int32_t kEmpty = -1;

  // Sized for up to `max_entries` live keys (see above).
  explicit BlockHashIndex(std::size_t max_entries) {
    std::size_t cap = 16;
    while (cap < 4 * max_entries) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }

  // The value under `h`, or nullptr.
  std::int32_t* find(const BlockHash& h) {
    for (std::size_t i = h.lo & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].value == kEmpty) return nullptr;
      if (slots_[i].key == h) return &slots_[i].value;
    }
  }
  const std::int32_t* find(const BlockHash& h) const {
    return const_cast<BlockHashIndex*>(this)->find(h);
  }

  // Hints the CPU to load the home slot of `h`: callers about to touch many keys prefetch them
  // all first, so the cache misses overlap instead of queueing.
  void prefetch(const BlockHash& h) const { __builtin_prefetch(&slots_[h.lo & mask_]); }

  // Inserts (h, v) unless h is present; returns the value slot and whether it was inserted.
  // REQUIRES: v != kEmpty and fewer than max_entries keys are present.
  std::pair<std::int32_t*, bool> try_emplace(const BlockHash& h, std::int32_t v) {
    for (std::size_t i = h.lo & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].value == kEmpty) {
        slots_[i] = Slot{h, v};
        ++size_;
        return {&slots_[i].value, true};
      }
      if (slots_[i].key == h) return {&slots_[i].value, false};
    }
  }

  // Removes `h` if present.
  void erase(const BlockHash& h) {
    std::size_t i = h.lo & mask_;
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].value == kEmpty) return;
      if (slots_[i].key == h) break;
    }
    // Backward shift: move later members of the probe run into the hole when their home slot
    // does not lie cyclically in (hole, j].
    std::size_t hole = i;
    for (std::size_t j = (hole + 1) & mask_; slots_[j].value != kEmpty; j = (j + 1) & mask_) {
      const std::size_t home = slots_[j].key.lo & mask_;
      const bool home_in_range =
          hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
      if (!home_in_range) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --size_;
  }

  void clear() {
    slots_.assign(slots_.size(), Slot{});
    size_ = 0;
  }
  // Occupied slots.
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return slots_.size(); }

  // Calls fn(key, value) for every entry (in slot order: use for checks, never for decisions).
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const Slot& s : slots_) {
      if (s.value != kEmpty) fn(s.key, s.value);
    }
  }

 private:
  struct Slot {
    BlockHash key;
    std::int32_t value = kEmpty;
  };
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace servelab
