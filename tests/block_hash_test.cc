// Block hashes: a function of token identities and the parent chain only.
#include "core/block_hash.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <utility>
#include <vector>

namespace servelab {
namespace {

constexpr std::int32_t kBs = 16;

// A spec with exactly these segments, not canonicalized (to test that hashing does not depend on
// how a prompt happens to be split).
RequestSpec raw_spec(RequestId id, std::vector<PromptSegment> segs, std::int32_t max_output = 16) {
  RequestSpec s;
  s.id = id;
  s.prompt = std::move(segs);
  for (const PromptSegment& p : s.prompt) s.prompt_len += static_cast<std::int32_t>(p.length);
  s.max_output_tokens = max_output;
  return s;
}

std::vector<BlockHash> chain(const RequestSpec& s, std::int32_t num_blocks, std::int32_t bs = kBs) {
  std::vector<BlockHash> out;
  BlockHash parent = kNoneHash;
  for (std::int32_t i = 0; i < num_blocks; ++i) {
    parent = hash_block(parent, s, i, bs);
    out.push_back(parent);
  }
  return out;
}

TEST(BlockHash, EqualContentFromDifferentSegmentSplitsHashesEqual) {
  const RequestSpec whole = raw_spec(0, {{7, 0, 48}});
  const RequestSpec split = raw_spec(1, {{7, 0, 5}, {7, 5, 20}, {7, 25, 0}, {7, 25, 23}});
  const RequestSpec canon = make_request(2, 0, {{7, 0, 30}, {7, 30, 18}}, 1);
  const auto h = chain(whole, 3);
  EXPECT_EQ(chain(split, 3), h);
  EXPECT_EQ(chain(canon, 3), h);
  // Deterministic: the same call twice gives the same value.
  EXPECT_EQ(hash_block(kNoneHash, whole, 0, kBs), h[0]);
}

// Pinned values: block hashes are part of what makes runs reproducible across versions (the
// prefix hits of a saved experiment), so a change of hash function or of the canonical block
// description must be deliberate. Blocks 0 and 2 lie in one prompt segment, 1 spans two, 3 mixes
// prompt and outputs, 4 and 5 are outputs (the one-run fast paths and the general path).
TEST(BlockHash, ValuesArePinned) {
  RequestSpec s = raw_spec(9, {{7, 3, 20}, {8, 0, 30}}, 64);
  const std::vector<BlockHash> want = {{0xae1cf6f1a0e20b30ULL, 0xf8ae2c4b48507b90ULL},
                                       {0x9eac4dd9df90d862ULL, 0x8db9b99af8bae225ULL},
                                       {0x9d1f103badc753a3ULL, 0xa594dea405c51d42ULL},
                                       {0x1b5a0474ebbae191ULL, 0x11b7b53c7ae80c25ULL},
                                       {0xfee3f0ce4b83f03dULL, 0x286910234a604553ULL},
                                       {0xb74bdc192913898dULL, 0x67e969fca5db813fULL}};
  const std::vector<BlockHash> got = chain(s, 6);
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].lo, want[i].lo) << "block " << i;
    EXPECT_EQ(got[i].hi, want[i].hi) << "block " << i;
  }
}

TEST(BlockHash, DifferentContentHashesDiffer) {
  const auto base = chain(raw_spec(0, {{7, 0, 32}}), 2);
  // Another stream, a shifted offset, or one token changed in the middle of the block.
  EXPECT_NE(chain(raw_spec(0, {{8, 0, 32}}), 2)[0], base[0]);
  EXPECT_NE(chain(raw_spec(0, {{7, 1, 32}}), 2)[0], base[0]);
  EXPECT_NE(chain(raw_spec(0, {{7, 0, 8}, {9, 8, 1}, {7, 9, 23}}), 2)[0], base[0]);
  // A different block size covers different tokens.
  EXPECT_NE(hash_block(kNoneHash, raw_spec(0, {{7, 0, 32}}), 0, 8), base[0]);
  // All distinct within one chain, even though the content stream is the same.
  EXPECT_NE(base[0], base[1]);
}

TEST(BlockHash, ChainDependsOnTheParent) {
  // Block 1 has identical tokens in both specs; only block 0 differs.
  const RequestSpec a = raw_spec(0, {{1, 0, 16}, {3, 0, 16}});
  const RequestSpec b = raw_spec(0, {{2, 0, 16}, {3, 0, 16}});
  const auto ha = chain(a, 2), hb = chain(b, 2);
  EXPECT_NE(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);
  // Same tokens and same parent give the same hash whatever the rest of the spec holds.
  EXPECT_EQ(hash_block(ha[0], b, 1, kBs), ha[1]);
  EXPECT_NE(hash_block(kNoneHash, a, 1, kBs), ha[1]);
}

TEST(BlockHash, PromptBlocksDoNotDependOnRequestIdOrOutputLength) {
  const auto a = chain(raw_spec(1, {{5, 0, 40}}, 10), 2);
  const auto b = chain(raw_spec(2, {{5, 0, 40}}, 500), 2);
  EXPECT_EQ(a, b);
}

TEST(BlockHash, OutputTokenBlocksAreIdentifiedPerRequest) {
  // 40 prompt tokens: block 2 covers prompt tokens 32..39 and outputs 0..7; block 3 is all output.
  const RequestSpec r1 = raw_spec(1, {{5, 0, 40}}, 64);
  const RequestSpec r1_again = raw_spec(1, {{5, 0, 40}}, 8);
  const RequestSpec r2 = raw_spec(2, {{5, 0, 40}}, 64);
  const auto h1 = chain(r1, 4), h1b = chain(r1_again, 4), h2 = chain(r2, 4);
  EXPECT_EQ(h1, h1b);  // output identity depends on the request id, not on what was sampled
  EXPECT_EQ(h1[1], h2[1]);
  EXPECT_NE(h1[2], h2[2]);
  EXPECT_NE(h1[3], h2[3]);
  // Output tokens are not the continuation of the prompt stream: a prompt that goes on with the
  // same stream differs from the same prompt followed by outputs.
  const RequestSpec longer = raw_spec(1, {{5, 0, 48}}, 64);
  EXPECT_NE(chain(longer, 3)[2], h1[2]);
}

TEST(BlockHash, FragmentedBlocksBeyondTheRunBufferHashConsistently) {
  // 100 single-token runs in one 128-token block exceed the 64-run buffer, forcing a flush.
  std::vector<PromptSegment> segs;
  for (std::uint64_t i = 0; i < 100; ++i) segs.push_back({1000 + i, 0, 1});
  segs.push_back({1, 0, 28});
  const RequestSpec a = raw_spec(0, segs);
  const RequestSpec b = raw_spec(3, segs);
  segs[80].content_id = 5;  // one token after the flush point changed
  const RequestSpec c = raw_spec(0, segs);
  segs[80].content_id = 1080;
  segs[10].offset = 1;  // one token before the flush point changed
  const RequestSpec d = raw_spec(0, segs);
  const BlockHash ha = hash_block(kNoneHash, a, 0, 128);
  EXPECT_EQ(hash_block(kNoneHash, b, 0, 128), ha);
  EXPECT_NE(hash_block(kNoneHash, c, 0, 128), ha);
  EXPECT_NE(hash_block(kNoneHash, d, 0, 128), ha);
}

TEST(BlockHash, ManyBlocksHaveDistinctHashes) {
  const RequestSpec s = raw_spec(0, {{11, 0, 16 * 2000}});
  const auto h = chain(s, 2000);
  std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
  for (const BlockHash& x : h) seen.insert({x.lo, x.hi});
  EXPECT_EQ(seen.size(), 2000u);
  // The hasher functor spreads them too (no degenerate bucket function).
  std::set<std::size_t> buckets;
  for (const BlockHash& x : h) buckets.insert(BlockHashHasher{}(x));
  EXPECT_EQ(buckets.size(), 2000u);
}

// Multimodal extra keys (vLLM v1's _gen_mm_extra_hash_keys): a block that overlaps an image's
// placeholder range hashes the image's content id with its tokens.
constexpr std::uint64_t kPlaceholder = 0x5050;  // every image's placeholder tokens
constexpr std::uint64_t kText = 77;

// A prompt: 8 text tokens, a 20-token image placeholder [8, 28), 20 text tokens; with the image
// `image` (0: no multimodal inputs at all).
RequestSpec image_spec(RequestId id, std::uint64_t image, std::uint32_t offset = 8,
                       std::uint32_t length = 20) {
  RequestSpec s = raw_spec(id, {{kText, 0, offset}, {kPlaceholder, 0, length}, {kText, 100, 20}});
  if (image != 0) {
    s.mm_inputs = std::make_shared<const std::vector<MultimodalInput>>(
        std::vector<MultimodalInput>{{offset, length, image}});
  }
  return s;
}

TEST(BlockHashMultimodal, SameImageHashesEqualDifferentImageDiffers) {
  // Blocks 0 and 1 ([0, 16), [16, 32)) overlap the image [8, 28); block 2 does not, but chains.
  const auto a = chain(image_spec(1, 0xA), 3);
  EXPECT_EQ(chain(image_spec(2, 0xA), 3), a);  // the same image: every block equal
  const auto b = chain(image_spec(3, 0xB), 3);
  const auto none = chain(image_spec(4, 0), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(b[i], a[i]) << "block " << i;  // identical placeholder tokens, other image
    EXPECT_NE(none[i], a[i]) << "block " << i;
  }
}

TEST(BlockHashMultimodal, OnlyOverlappingBlocksTakeTheKey) {
  // Image [16, 32) fills block 1 exactly: block 0 ends where it begins, block 2 begins where it
  // ends; both hash (for a given parent) as without the image.
  const RequestSpec with = image_spec(1, 0xA, 16, 16);
  const RequestSpec without = image_spec(2, 0, 16, 16);
  EXPECT_EQ(hash_block(kNoneHash, with, 0, kBs), hash_block(kNoneHash, without, 0, kBs));
  EXPECT_NE(hash_block(kNoneHash, with, 1, kBs), hash_block(kNoneHash, without, 1, kBs));
  EXPECT_EQ(hash_block(kNoneHash, with, 2, kBs), hash_block(kNoneHash, without, 2, kBs));
  // One token over either boundary ([15, 33)): all three blocks take the key.
  const RequestSpec wide = image_spec(3, 0xA, 15, 18);
  const RequestSpec wide_none = image_spec(4, 0, 15, 18);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(hash_block(kNoneHash, wide, i, kBs), hash_block(kNoneHash, wide_none, i, kBs))
        << "block " << i;
  }
  // A text-only prefix before an image is shared with text-only prompts (as in vLLM).
  EXPECT_EQ(chain(image_spec(5, 0xA, 40, 4), 2), chain(image_spec(6, 0, 40, 4), 2));
}

TEST(BlockHashMultimodal, TwoImagesInOneBlockHashBothInOrder) {
  RequestSpec ab = raw_spec(1, {{kPlaceholder, 0, 4}, {kPlaceholder, 0, 4}, {kText, 0, 8}});
  ab.mm_inputs = std::make_shared<const std::vector<MultimodalInput>>(
      std::vector<MultimodalInput>{{0, 4, 0xA}, {4, 4, 0xB}});
  RequestSpec ba = ab;
  ba.mm_inputs = std::make_shared<const std::vector<MultimodalInput>>(
      std::vector<MultimodalInput>{{0, 4, 0xB}, {4, 4, 0xA}});
  RequestSpec aa = ab;
  aa.mm_inputs = std::make_shared<const std::vector<MultimodalInput>>(
      std::vector<MultimodalInput>{{0, 4, 0xA}, {4, 4, 0xA}});
  const BlockHash h = hash_block(kNoneHash, ab, 0, kBs);
  EXPECT_EQ(hash_block(kNoneHash, RequestSpec(ab), 0, kBs), h);
  EXPECT_NE(hash_block(kNoneHash, ba, 0, kBs), h);
  EXPECT_NE(hash_block(kNoneHash, aa, 0, kBs), h);
  // More images in a block than the inline key buffer holds.
  RequestSpec many = raw_spec(2, {{kText, 0, 16}});
  std::vector<MultimodalInput> ins;
  for (std::uint32_t i = 0; i < 12; ++i) ins.push_back({i, 1, 1000 + i});
  many.mm_inputs = std::make_shared<const std::vector<MultimodalInput>>(ins);
  RequestSpec many2 = many;
  ins.back().content_id = 1;
  many2.mm_inputs = std::make_shared<const std::vector<MultimodalInput>>(ins);
  EXPECT_EQ(hash_block(kNoneHash, many, 0, kBs), hash_block(kNoneHash, RequestSpec(many), 0, kBs));
  EXPECT_NE(hash_block(kNoneHash, many, 0, kBs), hash_block(kNoneHash, many2, 0, kBs));
}

}  // namespace
}  // namespace servelab
