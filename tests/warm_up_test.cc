// The warm-up plans a CUDA engine runs before its first request (engine/warm_up.h): which steps,
// over which blocks, and that they stay inside the KV cache and the scheduler's limits.
#include "engine/warm_up.h"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <vector>

#include "kernels/decode_graph_plan.h"

namespace servelab {
namespace {

TEST(WarmUp, PrefillsThenOneDecodeStepPerGraphBucketInBlocksTheLargestPrefillWrote) {
  const WarmUpPlans w({.max_num_batched_tokens = 8192,
                       .max_model_len = 4096,
                       .max_num_seqs = 40,
                       .num_blocks = 10000,
                       .block_size = 16});
  const std::vector<StepPlan>& plans = w.plans();
  // Prefills of 4096 (max_model_len caps the step), 1024, 256, 64 and 16 tokens, then buckets
  // 1, 2, 4, 8, 16, 24, 32, 40.
  const std::vector<std::int32_t> prefills = {4096, 1024, 256, 64, 16};
  const std::vector<std::int32_t> buckets = kernels::decode_graph_buckets(40);
  ASSERT_EQ(plans.size(), prefills.size() + buckets.size());
  std::set<RequestId> ids;
  for (std::size_t p = 0; p < prefills.size(); ++p) {
    const StepPlan& plan = plans[p];
    ASSERT_EQ(plan.requests.size(), 1U);
    const ScheduledRequest& e = plan.requests[0];
    EXPECT_TRUE(e.is_prefill);
    EXPECT_TRUE(e.samples);
    EXPECT_EQ(e.first_token, 0);
    EXPECT_EQ(e.num_tokens, prefills[p]);
    EXPECT_EQ(plan.num_prefill_tokens, prefills[p]);
    EXPECT_EQ(e.spec->prompt_len, prefills[p]);
    ASSERT_EQ(e.block_table.size(), static_cast<std::size_t>((prefills[p] + 15) / 16));
    for (std::size_t b = 0; b < e.block_table.size(); ++b) {
      EXPECT_EQ(e.block_table[b], static_cast<BlockId>(1 + b));
    }
    EXPECT_TRUE(ids.insert(e.id).second);
  }
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const StepPlan& plan = plans[prefills.size() + k];
    ASSERT_EQ(plan.requests.size(), static_cast<std::size_t>(buckets[k]));
    EXPECT_EQ(plan.num_decode_tokens, buckets[k]);
    std::set<BlockId> blocks;
    for (const ScheduledRequest& e : plan.requests) {
      EXPECT_FALSE(e.is_prefill);
      EXPECT_EQ(e.num_tokens, 1);
      EXPECT_EQ(e.context_len(), 16);
      ASSERT_EQ(e.block_table.size(), 1U);
      EXPECT_GE(e.block_table[0], 1);
      EXPECT_LE(e.block_table[0], 4096 / 16);  // written by the 4096-token prefill
      EXPECT_TRUE(blocks.insert(e.block_table[0]).second) << "two rows write one block";
      EXPECT_LT(e.id, RequestId{1} << kSampleIdShift);
      EXPECT_TRUE(ids.insert(e.id).second);
    }
  }
}

// With LoRA, each decode bucket's step is followed by the same step under the warm-up adapter
// (every row; the given rank), so that the adapted decode graphs are captured too.
TEST(WarmUp, LoraRunsEveryDecodeBucketAgainUnderTheWarmUpAdapter) {
  const WarmUpShape shape{.max_num_batched_tokens = 1024,
                          .max_model_len = 1024,
                          .max_num_seqs = 8,
                          .num_blocks = 200,
                          .block_size = 16,
                          .lora_rank = 16};
  const WarmUpPlans plain({.max_num_batched_tokens = 1024,
                           .max_model_len = 1024,
                           .max_num_seqs = 8,
                           .num_blocks = 200,
                           .block_size = 16});
  const WarmUpPlans lora(shape);
  std::vector<std::int32_t> plain_decodes, lora_decodes;
  for (const StepPlan& plan : plain.plans()) {
    for (const ScheduledRequest& e : plan.requests) EXPECT_EQ(e.spec->lora_id, 0U);
    if (plan.num_decode_tokens > 0) plain_decodes.push_back(plan.num_decode_tokens);
  }
  std::set<RequestId> ids;
  for (const StepPlan& plan : lora.plans()) {
    if (plan.num_decode_tokens == 0) continue;
    lora_decodes.push_back(plan.num_decode_tokens);
    const bool adapted = plan.requests[0].spec->lora_id != 0;
    EXPECT_EQ(adapted, lora_decodes.size() % 2 == 0) << "plain, then adapted, per bucket";
    for (const ScheduledRequest& e : plan.requests) {
      EXPECT_EQ(e.spec->lora_id, adapted ? kWarmUpLoraId : 0U);
      EXPECT_EQ(e.spec->lora_rank, adapted ? 16 : 0);
      EXPECT_TRUE(ids.insert(e.id).second);
    }
  }
  ASSERT_EQ(plain_decodes, (std::vector<std::int32_t>{1, 2, 4, 8}));
  EXPECT_EQ(lora_decodes, (std::vector<std::int32_t>{1, 1, 2, 2, 4, 4, 8, 8}));
  EXPECT_THROW(WarmUpPlans({.max_num_batched_tokens = 1024,
                            .max_model_len = 1024,
                            .max_num_seqs = 8,
                            .num_blocks = 200,
                            .block_size = 16,
                            .lora_rank = -1}),
               std::invalid_argument);
}

TEST(WarmUp, FitsTheCacheAndSkipsWhatDoesNotFit) {
  // 20 blocks: the largest prefill is 19 blocks of 16 (block 0 is never used), rounded down.
  const WarmUpPlans small({.max_num_batched_tokens = 8192,
                           .max_model_len = 8192,
                           .max_num_seqs = 256,
                           .num_blocks = 20,
                           .block_size = 16});
  ASSERT_FALSE(small.plans().empty());
  EXPECT_EQ(small.plans()[0].num_prefill_tokens, 19 * 16);
  std::int32_t largest_decode = 0;
  for (const StepPlan& plan : small.plans()) {
    for (const ScheduledRequest& e : plan.requests) {
      for (const BlockId b : e.block_table) {
        EXPECT_GE(b, 1);
        EXPECT_LT(b, 20);
      }
    }
    largest_decode = std::max(largest_decode, plan.num_decode_tokens);
  }
  EXPECT_EQ(largest_decode, 16);  // buckets up to 19 rows: 1, 2, 4, 8, 16
  // Block size 32 and a step budget that is not a multiple of it: whole blocks, and the smaller
  // prefills stop before a step of less than one block.
  const WarmUpPlans odd({.max_num_batched_tokens = 1000,
                         .max_model_len = 2048,
                         .max_num_seqs = 4,
                         .num_blocks = 100,
                         .block_size = 32});
  std::vector<std::int32_t> prefill_sizes;
  for (const StepPlan& plan : odd.plans()) {
    if (plan.num_prefill_tokens > 0) prefill_sizes.push_back(plan.num_prefill_tokens);
  }
  EXPECT_EQ(prefill_sizes, (std::vector<std::int32_t>{992, 248, 62}));
  // Nothing to warm up with: less than one block.
  EXPECT_TRUE(WarmUpPlans({.max_num_batched_tokens = 8,
                           .max_model_len = 8,
                           .max_num_seqs = 4,
                           .num_blocks = 100,
                           .block_size = 16})
                  .plans()
                  .empty());
  EXPECT_THROW(WarmUpPlans({.max_num_batched_tokens = 0,
                            .max_model_len = 8,
                            .max_num_seqs = 4,
                            .num_blocks = 100,
                            .block_size = 16}),
               std::invalid_argument);
}

}  // namespace
}  // namespace servelab
