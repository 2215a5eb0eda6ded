// BlockTagIndex: a flat open-addressing map from BlockHash to a BlockId whose keys are stored by
// the caller, for the prefix caches (the block pool's hash index and the radix tree's).
//
// Why not std::unordered_map: every eviction of a cached block erases an entry and every newly
// full block inserts one, so the index sits on the simulator's hot path; a node-based map costs
// two or three cache misses per operation, this table one. Keys are XXH3 outputs, uniformly
// distributed, so the low bits index the table directly.
//
// Slots are 8 bytes: the value and a 32-bit tag, the low 32 bits of the key's `lo` word (whose
// low bits are also the home slot). The full keys live outside the table, with the caller: the
// key of value v is keys[v] (the pool's per-block hash array). A lookup compares tags and reads
// keys[v] only for slots whose tag matches, so a miss costs one table access and a hit one table
// access plus one key; the table stays a third of the size it would be with the keys inside,
// which is what keeps it near the caches. Keys present are distinct, and so are values (the pool
// stores a block under at most one key), which lets erase and replace find an entry by its value.
//
// Linear probing with backward-shift deletion (no tombstones; a slot's home slot is its tag &
// mask, no key access); the capacity is fixed at construction to a power of two of at least
// slots_per_entry times the most entries ever present, so the load factor stays at most
// 1/slots_per_entry and probe runs stay short.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/block_hash.h"

namespace servelab {

class BlockTagIndex {
 public:
  static constexpr std::int32_t kEmpty = -1;

  // Sized for up to `max_entries` keys present at once, with at least `slots_per_entry` slots
  // each. `keys` is read as keys[v] for every value v stored, for as long as the index is used;
  // the caller keeps keys[v] equal to the key v is stored under (until it is erased).
  // REQUIRES: slots_per_entry >= 2 and max_entries * slots_per_entry <= 2^31.
  BlockTagIndex(std::size_t max_entries, std::size_t slots_per_entry, const BlockHash* keys)
      : keys_(keys) {
    std::size_t cap = 16;
    while (cap < slots_per_entry * max_entries) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }

  static std::uint32_t tag_of(const BlockHash& h) { return static_cast<std::uint32_t>(h.lo); }

  // The value under `h`, or kEmpty.
  std::int32_t find(const BlockHash& h) const {
    const std::uint32_t tag = tag_of(h);
    for (std::size_t i = tag & mask_;; i = (i + 1) & mask_) {
      const Slot s = slots_[i];
      if (s.value == kEmpty) return kEmpty;
      if (s.tag == tag && keys_[s.value] == h) return s.value;
    }
  }

  // Hints the CPU to load the home slot of `h`: callers about to touch many keys prefetch them
  // all first, so the cache misses overlap instead of queueing.
  void prefetch(const BlockHash& h) const { __builtin_prefetch(&slots_[tag_of(h) & mask_]); }

  // Inserts (h, v) unless h is present; returns the value under h afterwards (v when inserted)
  // and whether it was inserted. REQUIRES: v >= 0 is not present, keys[v] == h, and fewer than
  // max_entries keys are present.
  std::pair<std::int32_t, bool> try_emplace(const BlockHash& h, std::int32_t v) {
    const std::uint32_t tag = tag_of(h);
    for (std::size_t i = tag & mask_;; i = (i + 1) & mask_) {
      const Slot s = slots_[i];
      if (s.value == kEmpty) {
        slots_[i] = Slot{tag, v};
        ++size_;
        return {v, true};
      }
      if (s.tag == tag && keys_[s.value] == h) return {s.value, false};
    }
  }

  // Stores `to` instead of `from` in the entry whose key has tag `tag` (a new first block under
  // the key). REQUIRES: `from` is present under a key with that tag; `to` is not present;
  // keys[to] == keys[from]. Touches only the table, never keys.
  void replace(std::uint32_t tag, std::int32_t from, std::int32_t to) {
    slots_[locate(tag, from)].value = to;
  }

  // Removes the entry of value v, whose key has tag `tag`. REQUIRES: v is present under a key with
  // that tag. Touches only the table, never keys.
  void erase(std::uint32_t tag, std::int32_t v) {
    // Backward shift: move a later member of the probe run into the hole when its home slot
    // does not lie cyclically in (hole, j], i.e. when it is at least as far from its home as
    // the hole is from it.
    std::size_t hole = locate(tag, v);
    for (std::size_t j = (hole + 1) & mask_; slots_[j].value != kEmpty; j = (j + 1) & mask_) {
      if (((j - slots_[j].tag) & mask_) >= ((j - hole) & mask_)) {
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
  // Occupied slots (= keys present).
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return slots_.size(); }

  // Calls fn(tag, value) for every entry (in slot order: use for checks, never for decisions).
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const Slot& s : slots_) {
      if (s.value != kEmpty) fn(s.tag, s.value);
    }
  }

 private:
  struct Slot {
    std::uint32_t tag = 0;
    std::int32_t value = kEmpty;
  };

  // The slot holding value v in the probe run from the home of `tag`; values are unique, so no
  // key is compared.
  std::size_t locate(std::uint32_t tag, std::int32_t v) const {
    std::size_t i = tag & mask_;
    while (slots_[i].value != v) i = (i + 1) & mask_;
    return i;
  }

  std::vector<Slot> slots_;
  const BlockHash* keys_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace servelab
