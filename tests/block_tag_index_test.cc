// BlockTagIndex: lookups verified against the caller's keys, tag (fingerprint) collisions,
// backward-shift erase across the end of the table, and a randomized comparison with std::map.
#include "core/block_tag_index.h"

#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

#include "core/rng.h"

namespace servelab {
namespace {

// A key whose tag (low 32 bits of lo) is `tag` and whose other bits are `rest`: keys with equal
// tags share their home slot and their fingerprint, and differ only where the table never looks.
BlockHash Key(std::uint32_t tag, std::uint64_t rest) {
  return BlockHash{(rest << 32) | tag, rest * 0x9e3779b97f4a7c15ULL + 1};
}

TEST(BlockTagIndex, CapacityIsAPowerOfTwoWithTheRequestedSlotsPerEntry) {
  std::vector<BlockHash> keys(100);
  EXPECT_EQ(BlockTagIndex(100, 4, keys.data()).capacity(), 512u);
  EXPECT_EQ(BlockTagIndex(128, 2, keys.data()).capacity(), 256u);
  EXPECT_EQ(BlockTagIndex(1, 2, keys.data()).capacity(), 16u);  // a floor of 16 slots
}

TEST(BlockTagIndex, FindInsertReplaceErase) {
  std::vector<BlockHash> keys(8);
  BlockTagIndex index(8, 2, keys.data());
  keys[3] = Key(7, 1);
  EXPECT_EQ(index.find(keys[3]), BlockTagIndex::kEmpty);
  EXPECT_EQ(index.try_emplace(keys[3], 3), (std::pair<std::int32_t, bool>{3, true}));
  EXPECT_EQ(index.find(Key(7, 1)), 3);
  EXPECT_EQ(index.size(), 1u);
  // Present already: the existing value is returned, nothing changes.
  keys[5] = keys[3];
  EXPECT_EQ(index.try_emplace(keys[5], 5), (std::pair<std::int32_t, bool>{3, false}));
  EXPECT_EQ(index.size(), 1u);
  // A new first value under the key.
  index.replace(BlockTagIndex::tag_of(keys[3]), 3, 5);
  EXPECT_EQ(index.find(Key(7, 1)), 5);
  index.erase(BlockTagIndex::tag_of(keys[5]), 5);
  EXPECT_EQ(index.find(Key(7, 1)), BlockTagIndex::kEmpty);
  EXPECT_EQ(index.size(), 0u);
}

TEST(BlockTagIndex, EqualTagsAreToldApartByTheStoredKeys) {
  // Four keys with one tag: one probe run, every candidate's tag matches, only keys[v] decides.
  std::vector<BlockHash> keys(8);
  BlockTagIndex index(8, 2, keys.data());
  for (std::int32_t v = 1; v <= 4; ++v) {
    keys[v] = Key(0xabcdu, static_cast<std::uint64_t>(v));
    EXPECT_TRUE(index.try_emplace(keys[v], v).second);
  }
  for (std::int32_t v = 1; v <= 4; ++v) EXPECT_EQ(index.find(Key(0xabcdu, v)), v);
  EXPECT_EQ(index.find(Key(0xabcdu, 9)), BlockTagIndex::kEmpty);  // same tag, absent key
  // Erasing from the middle of the run shifts the later members back; all stay findable.
  index.erase(0xabcdu, 2);
  EXPECT_EQ(index.find(Key(0xabcdu, 2)), BlockTagIndex::kEmpty);
  for (std::int32_t v : {1, 3, 4}) EXPECT_EQ(index.find(Key(0xabcdu, v)), v);
  index.erase(0xabcdu, 1);
  for (std::int32_t v : {3, 4}) EXPECT_EQ(index.find(Key(0xabcdu, v)), v);
  EXPECT_EQ(index.size(), 2u);
}

TEST(BlockTagIndex, ProbeRunsWrapAroundTheEndOfTheTable) {
  // 16 slots; tags homed at slot 15 wrap to slots 0, 1, ...; a key homed at 0 sits behind them.
  std::vector<BlockHash> keys(8);
  BlockTagIndex index(4, 2, keys.data());
  ASSERT_EQ(index.capacity(), 16u);
  keys[1] = Key(15, 1);
  keys[2] = Key(15 + 16, 2);  // home 15 too, another tag
  keys[3] = Key(15, 3);       // home 15, the same tag as keys[1]
  keys[4] = Key(0, 4);        // home 0, displaced to slot 2
  for (std::int32_t v = 1; v <= 4; ++v) ASSERT_TRUE(index.try_emplace(keys[v], v).second);
  index.erase(15, 1);  // the hole at slot 15 pulls slot 0's entry back across the end
  for (std::int32_t v = 2; v <= 4; ++v) EXPECT_EQ(index.find(keys[v]), v);
  index.erase(31, 2);
  EXPECT_EQ(index.find(keys[3]), 3);
  EXPECT_EQ(index.find(keys[4]), 4);
  index.erase(15, 3);
  EXPECT_EQ(index.find(keys[4]), 4);
  std::size_t seen = 0;
  index.for_each([&](std::uint32_t tag, std::int32_t v) {
    EXPECT_EQ(v, 4);
    EXPECT_EQ(tag, 0u);
    ++seen;
  });
  EXPECT_EQ(seen, 1u);
}

// Random inserts, replacements and erasures over few tags (many collisions), checked against a
// std::map after every operation.
TEST(BlockTagIndex, MatchesAMapUnderRandomOperations) {
  constexpr std::int32_t kValues = 64;
  std::vector<BlockHash> keys(kValues);
  BlockTagIndex index(kValues, 2, keys.data());
  ASSERT_EQ(index.capacity(), 128u);
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::int32_t> model;  // (tag, rest) -> value
  std::vector<bool> used(kValues, false);
  Rng rng(77);
  for (int step = 0; step < 20000; ++step) {
    // Homes 120, 122, ..., 126, 0, 2 of 128 slots: overlapping runs that wrap around the end.
    const auto tag = 120 + 2 * static_cast<std::uint32_t>(rng.uniform_int(0, 5));
    const auto rest = static_cast<std::uint64_t>(rng.uniform_int(0, 7));
    const BlockHash key = Key(tag, rest);
    const auto it = model.find({tag, rest});
    const auto op = rng.uniform_int(0, 2);
    if (op == 0 && it == model.end() && model.size() < kValues / 2) {
      std::int32_t v = static_cast<std::int32_t>(rng.uniform_int(0, kValues - 1));
      while (used[static_cast<std::size_t>(v)]) v = (v + 1) % kValues;
      keys[static_cast<std::size_t>(v)] = key;
      used[static_cast<std::size_t>(v)] = true;
      ASSERT_EQ(index.try_emplace(key, v), (std::pair<std::int32_t, bool>{v, true}));
      model[{tag, rest}] = v;
    } else if (op == 1 && it != model.end()) {
      index.erase(tag, it->second);
      used[static_cast<std::size_t>(it->second)] = false;
      model.erase(it);
    } else if (op == 2 && it != model.end()) {
      std::int32_t to = 0;
      while (used[static_cast<std::size_t>(to)]) ++to;
      keys[static_cast<std::size_t>(to)] = key;
      used[static_cast<std::size_t>(to)] = true;
      used[static_cast<std::size_t>(it->second)] = false;
      index.replace(tag, it->second, to);
      it->second = to;
    }
    ASSERT_EQ(index.size(), model.size());
    for (std::uint32_t t = 120; t <= 130; t += 2) {
      for (std::uint64_t r = 0; r < 8; ++r) {
        const auto m = model.find({t, r});
        ASSERT_EQ(index.find(Key(t, r)), m == model.end() ? BlockTagIndex::kEmpty : m->second)
            << "step " << step;
      }
    }
  }
}

}  // namespace
}  // namespace servelab
