// Log probabilities of sampled tokens (core/step_plan.h TokenLogprobs; engine/logprobs.h): the
// numbers from a row of logits, and CpuExecutor reporting them for the entries (and forked
// samples) whose requests ask, under the raw logits (before temperature and the min_tokens
// mask), and for nobody else.
#include "engine/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/sampling_params.h"
#include "core/scheduler.h"
#include "core/stop_conditions.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "serving/home.h"

namespace servelab {
namespace {

TEST(Logprobs, LogSoftmaxAndTheTopTokens) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  const TokenLogprobs lp = token_logprobs(logits, 4, 3);
  double total = 0;
  for (const float l : logits) total += std::exp(static_cast<double>(l));
  EXPECT_NEAR(lp.logprob, 0.5 - std::log(total), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  // Most likely first; the tie between ids 1 and 3 goes to the lower id.
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 0);
  EXPECT_FLOAT_EQ(lp.top[0].second, lp.top[1].second);
  EXPECT_NEAR(lp.top[2].second, 1.0 - std::log(total), 1e-6);
  EXPECT_TRUE(token_logprobs(logits, 2, 0).top.empty());
  EXPECT_EQ(token_logprobs(logits, 2, 20).top.size(), 5u);  // at most the vocabulary
  // Large logits: max-subtracted, no overflow.
  const std::vector<float> big = {1000.0f, 1000.0f};
  EXPECT_NEAR(token_logprobs(big, 0, 0).logprob, -std::log(2.0), 1e-6);
}

TEST(Logprobs, CpuExecutorReportsThemForTheRequestsThatAsk) {
  const LlamaWeights w = LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 4);
  SchedulerConfig sc;
  sc.block_size = 8;
  sc.max_model_len = 256;
  BlockPool pool(64);
  KvCacheManager kv(pool, sc.block_size, sc.max_model_len, true);
  Scheduler s(sc, kv, nullptr);
  CpuExecutorOptions eo;
  eo.block_size = 8;
  eo.num_blocks = 64;
  CpuExecutor ex(w, eo);
  // 0: no logprobs; 1: 3 alternatives, sampled at temperature 1.5 with token 0 masked by
  // min_tokens; 2: n = 2, 1 alternative.
  RequestSpec plain = make_request(0, 0, {{5, 0, 10}}, 3);
  RequestSpec asks = make_request(1, 0, {{6, 0, 10}}, 3);
  asks.logprobs = 3;
  asks.sampling = std::make_shared<const RequestSampling>(RequestSampling{1.5, 1.0, 3});
  auto stop = std::make_shared<StopConditions>();
  stop->eos_token_id = 0;  // masked before min_tokens: the logprobs are the raw logits' still
  stop->min_tokens = 3;
  asks.stop = stop;
  RequestSpec forks = make_request(2, 0, {{7, 0, 10}}, 3);
  forks.logprobs = 1;
  forks.n = 2;
  for (const RequestSpec& r : {plain, asks, forks}) s.add_request(r, 0);
  const StepPlan& plan = s.schedule(0);
  ASSERT_EQ(plan.requests.size(), 3u);
  const StepResult r = ex.execute(plan);
  ASSERT_EQ(r.logprobs.size(), 3u);
  EXPECT_TRUE(r.logprobs[0].top.empty());
  for (std::size_t i = 1; i < 3; ++i) {
    const std::vector<float> raw(ex.last_logits()[i].data(),
                                 ex.last_logits()[i].data() + ex.last_logits()[i].size());
    const TokenLogprobs want =
        token_logprobs(raw, r.sampled_tokens[i], plan.requests[i].spec->logprobs);
    EXPECT_EQ(r.logprobs[i].logprob, want.logprob) << i;
    EXPECT_EQ(r.logprobs[i].top, want.top) << i;
    EXPECT_LE(r.logprobs[i].logprob, 0.0f);
  }
  EXPECT_EQ(r.logprobs[1].top.size(), 3u);
  // The fork's token, from the same row.
  ASSERT_EQ(r.fork_tokens.size(), 1u);
  ASSERT_EQ(r.fork_logprobs.size(), 1u);
  const std::vector<float> raw2(ex.last_logits()[2].data(),
                                ex.last_logits()[2].data() + ex.last_logits()[2].size());
  EXPECT_EQ(r.fork_logprobs[0].logprob, token_logprobs(raw2, r.fork_tokens[0], 1).logprob);
  EXPECT_EQ(r.fork_logprobs[0].top, r.logprobs[2].top);
  // A plan where nobody asks has none.
  BlockPool pool2(64);
  KvCacheManager kv2(pool2, sc.block_size, sc.max_model_len, true);
  Scheduler s2(sc, kv2, nullptr);
  s2.add_request(make_request(3, 0, {{8, 0, 4}}, 2), 0);
  EXPECT_TRUE(ex.execute(s2.schedule(0)).logprobs.empty());
}

}  // namespace
}  // namespace servelab
