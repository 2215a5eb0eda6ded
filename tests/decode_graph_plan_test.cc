// The host side of CUDA-graph decode steps (kernels/decode_graph_plan.h): bucket sizes, bucket
// choice, the block-table width buckets, the split plan a graph bakes in, and the padding rows.
#include "kernels/decode_graph_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace servelab::kernels {
namespace {

TEST(DecodeGraphPlan, BucketsFollowVllmCaptureSizesUpToMaxNumSeqs) {
  EXPECT_EQ(decode_graph_buckets(1), (std::vector<std::int32_t>{1}));
  EXPECT_EQ(decode_graph_buckets(3), (std::vector<std::int32_t>{1, 2, 4}));
  EXPECT_EQ(decode_graph_buckets(8), (std::vector<std::int32_t>{1, 2, 4, 8}));
  EXPECT_EQ(decode_graph_buckets(20), (std::vector<std::int32_t>{1, 2, 4, 8, 16, 24}));
  EXPECT_EQ(decode_graph_buckets(32), (std::vector<std::int32_t>{1, 2, 4, 8, 16, 24, 32}));
  const std::vector<std::int32_t> b256 = decode_graph_buckets(256);
  EXPECT_EQ(b256.size(), 3U + 32U);
  EXPECT_EQ(b256.back(), 256);
  EXPECT_THROW(decode_graph_buckets(0), std::invalid_argument);
}

TEST(DecodeGraphPlan, EveryBatchGetsTheSmallestBucketThatHoldsIt) {
  for (std::int32_t max_seqs : {1, 5, 16, 37, 256}) {
    const std::vector<std::int32_t> b = decode_graph_buckets(max_seqs);
    for (std::int32_t batch = 1; batch <= max_seqs; ++batch) {
      const std::int32_t got = decode_graph_bucket(b, batch);
      ASSERT_GE(got, batch) << max_seqs << " " << batch;
      // No smaller bucket holds it: padding is never more than the bucket grid forces.
      for (std::int32_t x : b) {
        if (x >= batch) {
          EXPECT_EQ(got, x);
          break;
        }
      }
    }
    EXPECT_EQ(decode_graph_bucket(b, b.back() + 1), 0) << "too large: eager";
  }
  EXPECT_EQ(decode_graph_bucket(decode_graph_buckets(32), 17), 24);
  EXPECT_EQ(decode_graph_bucket(decode_graph_buckets(32), 3), 4);
}

TEST(DecodeGraphPlan, TableWidthIsAPowerOfTwoCappedAtTheMaximum) {
  EXPECT_EQ(decode_graph_table_width(1, 512), 1);
  EXPECT_EQ(decode_graph_table_width(3, 512), 4);
  EXPECT_EQ(decode_graph_table_width(64, 512), 64);
  EXPECT_EQ(decode_graph_table_width(65, 512), 128);
  EXPECT_EQ(decode_graph_table_width(300, 300), 300);
  EXPECT_EQ(decode_graph_table_width(257, 300), 300);
  EXPECT_THROW(decode_graph_table_width(0, 10), std::invalid_argument);
  EXPECT_THROW(decode_graph_table_width(11, 10), std::invalid_argument);
}

TEST(DecodeGraphPlan, MinTableWidthIsWhatTheTableBudgetHolds) {
  // 32 KiB of int32 ids: 8,192 a row for one sequence, 256 for 32, 32 for 256.
  EXPECT_EQ(decode_graph_min_table_width(1, 512, kDecodeGraphTableBytes), 512);  // all of it
  EXPECT_EQ(decode_graph_min_table_width(1, 1 << 20, kDecodeGraphTableBytes), 8192);
  EXPECT_EQ(decode_graph_min_table_width(32, 512, kDecodeGraphTableBytes), 256);
  EXPECT_EQ(decode_graph_min_table_width(24, 512, kDecodeGraphTableBytes), 256);  // 341 fit
  EXPECT_EQ(decode_graph_min_table_width(256, 512, kDecodeGraphTableBytes), 32);
  EXPECT_EQ(decode_graph_min_table_width(16, 300, kDecodeGraphTableBytes), 300);  // not a 2^k
  EXPECT_EQ(decode_graph_min_table_width(8, 13, 8 * 4 * 12), 8);  // 12 fit: the 2^k below
  // Less than one id a row, or no budget: 1 (widths follow the contexts).
  EXPECT_EQ(decode_graph_min_table_width(64, 512, 100), 1);
  EXPECT_EQ(decode_graph_min_table_width(1, 512, 0), 1);
  EXPECT_THROW(decode_graph_min_table_width(0, 512, 1024), std::invalid_argument);
  EXPECT_THROW(decode_graph_min_table_width(1, 0, 1024), std::invalid_argument);
  EXPECT_THROW(decode_graph_min_table_width(1, 512, -1), std::invalid_argument);
}

TEST(DecodeGraphPlan, UnsplitBatchesKeepOneGraphWhileContextsGrowWithinTheMinimumWidth) {
  // A full batch of 32 (8 CTAs each: no split) from context 16 to 4,096 at block size 16: the
  // width stays at the bucket's minimum, 256 blocks, so one key serves them all (the warm-up's,
  // which decodes at context 16); past it the width follows the contexts again.
  const std::int32_t min_width = decode_graph_min_table_width(32, 512, kDecodeGraphTableBytes);
  std::set<std::pair<std::int32_t, std::int32_t>> keys;
  for (std::int32_t longest = 16; longest <= 4096; longest += 45) {
    std::vector<std::int32_t> ctx(32, 16);
    ctx[5] = longest;
    const std::int32_t needed = (longest + 15) / 16;
    const DecodeGraphShape sh = decode_graph_shape(ctx, needed, 512, min_width, 8, 132, 16);
    ASSERT_FALSE(sh.plan.split()) << longest;
    EXPECT_EQ(sh.table_width, 256) << longest;
    EXPECT_TRUE(decode_plan_error(sh.plan, std::int64_t{sh.table_width} * 16).empty());
    keys.emplace(sh.table_width, sh.plan.partition_tokens);
  }
  EXPECT_EQ(keys.size(), 1U);
  std::vector<std::int32_t> ctx(32, 16);
  ctx[0] = 4097;
  EXPECT_EQ(decode_graph_shape(ctx, 257, 512, min_width, 8, 132, 16).table_width, 512);
  // Without a minimum the width is the power of two the contexts need.
  ctx[0] = 300;
  EXPECT_EQ(decode_graph_shape(ctx, 19, 512, 0, 8, 132, 16).table_width, 32);
  EXPECT_EQ(decode_graph_shape(ctx, 19, 512, 1, 8, 132, 16).table_width, 32);
  // A split batch (two long sequences) keeps the power of two: its splits cover the table.
  const std::vector<std::int32_t> long_ctx = {2000, 1500, 1, 1};
  const DecodeGraphShape split = decode_graph_shape(long_ctx, 125, 512, 512, 4, 132, 16);
  ASSERT_TRUE(split.plan.split());
  EXPECT_EQ(split.table_width, 128);
  EXPECT_EQ(split.plan.max_splits, decode_graph_split_plan(long_ctx, 4, 132, 128, 16).max_splits);
  // A minimum above max_width is cut to it.
  EXPECT_EQ(decode_graph_shape({30}, 2, 13, 64, 4, 1, 16).table_width, 13);
  EXPECT_THROW(decode_graph_shape({30}, 2, 13, -1, 4, 1, 16), std::invalid_argument);
}

TEST(DecodeGraphPlan, GraphSplitPlanCoversTheWholeTableAndChangesOnlyWithIt) {
  // A full batch (no split): the partition covers table_width * block_size, so contexts that
  // grow within the same table width keep one plan (one graph).
  std::vector<std::int32_t> ctx(64, 1);
  DecodeSplitPlan first;
  for (std::int32_t longest = 65; longest <= 512; longest += 37) {
    ctx[0] = longest;
    const DecodeSplitPlan p = decode_graph_split_plan(ctx, 4, 132, 32, 16);
    EXPECT_FALSE(p.split());
    EXPECT_EQ(p.partition_tokens, 512);
    EXPECT_TRUE(decode_plan_error(p, 32 * 16).empty());
    if (longest == 65) first = p;
    EXPECT_EQ(p.partition_tokens, first.partition_tokens);
  }
  // A block size that does not divide the tile: rounded up to whole tiles.
  EXPECT_EQ(decode_graph_split_plan({10}, 4, 1, 3, 7).partition_tokens, 64);
  // A small batch of long contexts splits: plan_decode_splits' partition coarsened, the splits
  // covering the whole table.
  const std::vector<std::int32_t> long_ctx = {4000, 3000, 1, 1};
  const DecodeSplitPlan split = decode_graph_split_plan(long_ctx, 4, 132, 256, 16);
  const DecodeSplitPlan eager = plan_decode_splits(long_ctx, 4, 132);
  ASSERT_TRUE(split.split());
  EXPECT_GE(split.partition_tokens, eager.partition_tokens);
  EXPECT_LT(2 * split.partition_tokens, 3 * eager.partition_tokens);
  EXPECT_EQ(split.max_splits, (256 * 16 + split.partition_tokens - 1) / split.partition_tokens);
}

TEST(DecodeGraphPlan, SplitGraphPlansChangeRarelyWhileContextsGrow) {
  // Two long sequences and two padding rows decoding token by token through one table width
  // (2049..4096 keys at block size 16): the eager plan moves with the contexts, the graph plan
  // (one graph per distinct plan) only a few times, and each covers the whole table.
  std::set<std::pair<std::int32_t, std::int32_t>> graph_plans, eager_plans;
  for (std::int32_t longest = 2049; longest <= 4096; ++longest) {
    const std::vector<std::int32_t> ctx = {longest, longest * 3 / 4, 1, 1};
    const DecodeSplitPlan eager = plan_decode_splits(ctx, 4, 132);
    const DecodeSplitPlan g = decode_graph_split_plan(ctx, 4, 132, 256, 16);
    ASSERT_TRUE(g.split()) << longest;
    EXPECT_TRUE(decode_plan_error(g, 256 * 16).empty()) << longest;
    EXPECT_GE(g.partition_tokens, eager.partition_tokens) << longest;
    EXPECT_LT(2 * g.partition_tokens, 3 * eager.partition_tokens) << longest;
    graph_plans.emplace(g.partition_tokens, g.max_splits);
    eager_plans.emplace(eager.partition_tokens, eager.max_splits);
  }
  EXPECT_LE(graph_plans.size(), 3U);
  EXPECT_GE(eager_plans.size(), 4 * graph_plans.size());
  // More splits than the grid allows are never planned.
  const DecodeSplitPlan huge = decode_graph_split_plan({1 << 30, 1}, 1, 1 << 30, 1 << 26, 16);
  EXPECT_LE(huge.max_splits, kMaxDecodeSplits);
  EXPECT_TRUE(decode_plan_error(huge, std::int64_t{1} << 30).empty());
}

TEST(DecodeGraphPlan, MaxSplitsBoundsEveryGraphPlanOfAWidth) {
  // 256 blocks of 16: 4,096 keys in partitions of at least 128, so at most 32 splits.
  EXPECT_EQ(decode_graph_max_splits(256, 16), 32);
  EXPECT_EQ(decode_graph_max_splits(1, 16), 1);
  EXPECT_EQ(decode_graph_max_splits(3, 7), 1);  // 21 keys: one tile
  EXPECT_EQ(decode_graph_max_splits(1 << 26, 16), kMaxDecodeSplits);
  EXPECT_THROW(decode_graph_max_splits(0, 16), std::invalid_argument);
  for (const std::int32_t width : {8, 64, 256, 512}) {
    std::int32_t most = 0;
    for (std::int32_t longest = 1; longest <= width * 16; longest += 61) {
      for (const std::int32_t seqs : {1, 2, 5}) {
        std::vector<std::int32_t> ctx(static_cast<std::size_t>(seqs), longest);
        ctx.push_back(1);
        const DecodeSplitPlan p = decode_graph_split_plan(ctx, 8, 528, width, 16);
        EXPECT_LE(p.max_splits, decode_graph_max_splits(width, 16)) << width << " " << longest;
        most = std::max(most, p.max_splits);
      }
    }
    EXPECT_EQ(most, decode_graph_max_splits(width, 16)) << width;  // and it is reached
  }
}

TEST(DecodeGraphPlan, PaddingRowsWriteNothingAndAttendToOneDummyKey) {
  const std::vector<std::int32_t> tokens = {5, 6, 7}, positions = {10, 3, 20};
  const std::vector<std::int64_t> slots = {42, 7, 99};
  const std::vector<std::int32_t> ctx = {11, 4, 21};
  const std::vector<std::int32_t> tables = {1, 2, 9, 4, 0, 0, 5, 6, 8};  // 3 rows of stride 3
  const PaddedDecodeInputs p = pad_decode_inputs(tokens, positions, slots, ctx, tables, 3, 8, 4, 0);
  ASSERT_EQ(p.tokens.size(), 8U);
  ASSERT_EQ(p.block_tables.size(), 32U);
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(p.q_rows[i], static_cast<std::int32_t>(i));
    if (i < 3) {
      EXPECT_EQ(p.tokens[i], tokens[i]);
      EXPECT_EQ(p.positions[i], positions[i]);
      EXPECT_EQ(p.slots[i], slots[i]);
      EXPECT_EQ(p.context_lens[i], ctx[i]);
      for (std::size_t c = 0; c < 4; ++c) {
        EXPECT_EQ(p.block_tables[i * 4 + c], c < 3 ? tables[i * 3 + c] : 0) << i << " " << c;
      }
    } else {
      EXPECT_EQ(p.tokens[i], 0);
      EXPECT_EQ(p.positions[i], 0);
      EXPECT_EQ(p.slots[i], -1) << "a padding row must not write the KV cache";
      EXPECT_EQ(p.context_lens[i], 1);
      for (std::size_t c = 0; c < 4; ++c) EXPECT_EQ(p.block_tables[i * 4 + c], 0);
    }
  }
  // A narrower graph table cuts rows (the caller guarantees the contexts fit).
  const PaddedDecodeInputs narrow = pad_decode_inputs({1}, {0}, {3}, {1}, {7, 8, 9}, 3, 1, 1, 2);
  EXPECT_EQ(narrow.block_tables, (std::vector<std::int32_t>{7}));
  EXPECT_THROW(pad_decode_inputs(tokens, positions, slots, ctx, tables, 3, 2, 4, 0),
               std::invalid_argument);
  EXPECT_THROW(pad_decode_inputs(tokens, {1}, slots, ctx, tables, 3, 8, 4, 0),
               std::invalid_argument);
  EXPECT_THROW(pad_decode_inputs(tokens, positions, slots, ctx, {1, 2}, 3, 8, 4, 0),
               std::invalid_argument);
}

TEST(DecodeGraphPlan, KeysDifferInEveryBakedInField) {
  const DecodeGraphKey a{8, 16, 256, 1, 0};
  EXPECT_EQ(a, (DecodeGraphKey{8, 16, 256, 1, 0}));
  EXPECT_NE(a, (DecodeGraphKey{16, 16, 256, 1, 0}));
  EXPECT_NE(a, (DecodeGraphKey{8, 32, 256, 1, 0}));
  EXPECT_NE(a, (DecodeGraphKey{8, 16, 128, 1, 0}));
  EXPECT_NE(a, (DecodeGraphKey{8, 16, 256, 2, 0}));
  EXPECT_NE(a, (DecodeGraphKey{8, 16, 256, 1, 1}));
  EXPECT_NE(a, (DecodeGraphKey{8, 16, 256, 1, 0, true}));
  EXPECT_LT(a, (DecodeGraphKey{16, 1, 1, 1, 0}));
}

}  // namespace
}  // namespace servelab::kernels
