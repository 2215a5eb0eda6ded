// kernels/skinny_plan.h: how the skinny decode GEMM splits a layer's `in` over CTAs.
#include "kernels/skinny_plan.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace servelab::kernels {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

SkinnyMachine H200(std::int32_t ctas_per_sm = 3) {
  SkinnyMachine m;
  m.sms = 132;
  m.ctas_per_sm = ctas_per_sm;
  return m;
}

// The shapes' arithmetic: 128-row blocks, 32-column chunks, partials of splits x blocks x tokens
// x 128 fp32.
TEST(SkinnyPlan, RowBlocksChunksAndPartialBytes) {
  const SkinnyPlan p = plan_skinny(5, 4096, 4100, H200(), 32 * kMiB, 4096, 4);
  EXPECT_EQ(p.row_blocks, 33);  // 4,100 rows: 32 full blocks and one of 4 rows
  EXPECT_EQ(p.chunks, 128);
  EXPECT_EQ(p.splits, 4);
  EXPECT_EQ(p.partial_bytes, std::size_t{4} * 33 * 5 * 128 * 4);
  EXPECT_GT(p.predicted_us, 0.0);
}

// Llama-3-8B's decode layers on an H200: a layer of few rows is split so that every SM streams
// (o_proj: 32 row blocks; down_proj: 32 over 14,336 columns), one of many rows is not (gate_up:
// 224 row blocks; the LM head: 1,002), and the prediction never beats the bandwidth.
TEST(SkinnyPlan, SplitsTheLayersWithFewRowsOnly) {
  struct Layer {
    const char* name;
    std::int32_t in, out;
  };
  for (const std::int32_t tokens : {1, 8, 32}) {
    for (const Layer& l :
         {Layer{"qkv", 4096, 6144}, Layer{"o", 4096, 4096}, Layer{"gate_up", 4096, 28672},
          Layer{"down", 14336, 4096}, Layer{"lm_head", 4096, 128256}}) {
      SCOPED_TRACE(std::string(l.name) + " at " + std::to_string(tokens) + " tokens");
      const SkinnyPlan p = plan_skinny(tokens, l.in, l.out, H200(), 32 * kMiB, 4096);
      const double floor_us = 2.0 * l.in * l.out / (H200().bandwidth_gbps * 1e3);
      EXPECT_GE(p.predicted_us, floor_us);
      if (l.out <= 6144) {
        EXPECT_GE(std::int64_t{p.row_blocks} * p.splits, 132) << "every SM has a CTA";
        EXPECT_LE(p.predicted_us, 1.35 * floor_us);
      } else {
        EXPECT_EQ(p.splits, 1);
      }
      EXPECT_LE(p.partial_bytes, 32 * kMiB);
    }
  }
}

// The partial tiles' tail grows with the tokens: a 32-token o_proj splits no more than a 1-token
// one, and no split count is taken whose prediction another beats.
TEST(SkinnyPlan, TakesTheCheapestSplitAndFewerAsTokensGrow) {
  const SkinnyPlan one = plan_skinny(1, 4096, 4096, H200(), 32 * kMiB, 4096);
  const SkinnyPlan many = plan_skinny(32, 4096, 4096, H200(), 32 * kMiB, 4096);
  EXPECT_LE(many.splits, one.splits);
  EXPECT_GT(one.splits, 1);
  for (std::int32_t s = 1; s <= kSkinnyMaxSplits; ++s) {
    const SkinnyPlan forced = plan_skinny(32, 4096, 4096, H200(), 32 * kMiB, 4096, s);
    EXPECT_EQ(forced.splits, s);
    EXPECT_GE(forced.predicted_us, many.predicted_us) << s << " splits";
  }
}

// Without a workspace, with too small a one, or with fewer counters than row blocks: one split
// (forced or not); forced counts are clamped to the chunks and kSkinnyMaxSplits.
TEST(SkinnyPlan, OneSplitWithoutRoomForPartialsAndClampsForcedCounts) {
  EXPECT_EQ(plan_skinny(1, 4096, 4096, H200(), 0, 4096).splits, 1);
  EXPECT_EQ(plan_skinny(1, 4096, 4096, H200(), 32 * kMiB, 0).splits, 1);
  EXPECT_EQ(plan_skinny(1, 4096, 4096, H200(), 32 * kMiB, 31, 4).splits, 1);  // 32 blocks
  EXPECT_EQ(plan_skinny(32, 4096, 4096, H200(), 1000, 4096, 2).splits, 1);
  EXPECT_EQ(plan_skinny(32, 4096, 4096, H200(), 0, 4096).partial_bytes, 0U);
  EXPECT_EQ(plan_skinny(1, 96, 64, H200(), 32 * kMiB, 4096, 8).splits, 3);  // 3 chunks
  EXPECT_EQ(plan_skinny(1, 8192, 64, H200(), 32 * kMiB, 4096, 100).splits, kSkinnyMaxSplits);
  // A one-chunk layer never splits.
  EXPECT_EQ(plan_skinny(4, 32, 64, H200(), 32 * kMiB, 4096).splits, 1);
}

// Fewer SMs (an H100 PCIe's 114, a small part's 16) ask for fewer splits of the same layer.
TEST(SkinnyPlan, FewerSmsFewerSplits) {
  SkinnyMachine small = H200();
  small.sms = 16;
  EXPECT_LE(plan_skinny(1, 4096, 4096, small, 32 * kMiB, 4096).splits,
            plan_skinny(1, 4096, 4096, H200(), 32 * kMiB, 4096).splits);
}

TEST(SkinnyPlan, RejectsShapesTheKernelCannotRun) {
  const SkinnyMachine m = H200();
  EXPECT_THROW(plan_skinny(0, 64, 64, m, 0, 0), std::invalid_argument);
  EXPECT_THROW(plan_skinny(33, 64, 64, m, 0, 0), std::invalid_argument);
  EXPECT_THROW(plan_skinny(1, 48, 64, m, 0, 0), std::invalid_argument);
  EXPECT_THROW(plan_skinny(1, 64, 0, m, 0, 0), std::invalid_argument);
  SkinnyMachine none = m;
  none.sms = 0;
  EXPECT_THROW(plan_skinny(1, 64, 64, none, 0, 0), std::invalid_argument);
  none = m;
  none.ctas_per_sm = 0;
  try {
    plan_skinny(1, 64, 64, none, 0, 0);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ctas_per_sm 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace servelab::kernels
