// Log probabilities of sampled tokens (core/step_plan.h TokenLogprobs; engine/logprobs.h): the
// numbers from a row of logits, and CpuExecutor reporting them for the entries (and forked
// samples) whose requests ask, under the raw logits (before temperature and the min_tokens
// mask), and for nobody else. Prompt log probabilities (RequestSpec::prompt_logprobs): each
// position's under the logits of its prefix, whatever the chunking; such a request reads no
// prefix-cache block, and its prompt rows count as LM-head rows (StepFeatures).
#include "engine/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/sampling_params.h"
#include "core/scheduler.h"
#include "core/step_features.h"
#include "core/stop_conditions.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "serving/home.h"

namespace servelab {
namespace {

// The tiny model's Scheduler (block size 8, contexts up to 256) and CpuExecutor over `blocks`
// blocks, with prefix caching.
SchedulerConfig TinyConfig(std::int32_t budget = 8192) {
  SchedulerConfig sc;
  sc.block_size = 8;
  sc.max_model_len = 256;
  sc.max_num_batched_tokens = budget;
  return sc;
}
CpuExecutorOptions TinyOptions(std::int32_t blocks) {
  CpuExecutorOptions eo;
  eo.block_size = 8;
  eo.num_blocks = blocks;
  return eo;
}
struct TinyEngine {
  TinyEngine(const LlamaWeights& w, const SchedulerConfig& config, std::int32_t blocks = 64)
      : sc(config),
        pool(blocks),
        kv(pool, sc.block_size, sc.max_model_len, true),
        s(sc, kv, nullptr),
        ex(w, TinyOptions(blocks)) {}
  SchedulerConfig sc;
  BlockPool pool;
  KvCacheManager kv;
  Scheduler s;
  CpuExecutor ex;
};
LlamaWeights TinyWeights() {
  return LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 4);
}

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
  // Rank: 1 + the logits strictly larger (a tie shares the better rank).
  EXPECT_EQ(lp.rank, 4);
  EXPECT_EQ(token_logprobs(logits, 1, 0).rank, 1);
  EXPECT_EQ(token_logprobs(logits, 3, 0).rank, 1);
  EXPECT_EQ(token_logprobs(logits, 2, 0).rank, 5);
  // Large logits: max-subtracted, no overflow.
  const std::vector<float> big = {1000.0f, 1000.0f};
  EXPECT_NEAR(token_logprobs(big, 0, 0).logprob, -std::log(2.0), 1e-6);
}

TEST(Logprobs, CpuExecutorReportsThemForTheRequestsThatAsk) {
  const LlamaWeights w = TinyWeights();
  TinyEngine engine(w, TinyConfig());
  Scheduler& s = engine.s;
  CpuExecutor& ex = engine.ex;
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
  TinyEngine other(w, TinyConfig());
  other.s.add_request(make_request(3, 0, {{8, 0, 4}}, 2), 0);
  EXPECT_TRUE(ex.execute(other.s.schedule(0)).logprobs.empty());
}

// Runs `specs` to the end through a Scheduler and a CpuExecutor; returns each request's prompt
// log probabilities by position (a position given twice fails the test).
std::map<RequestId, std::map<std::int32_t, TokenLogprobs>> RunForPromptLogprobs(
    const LlamaWeights& w, const SchedulerConfig& sc, const std::vector<RequestSpec>& specs) {
  TinyEngine engine(w, sc, 128);
  Scheduler& s = engine.s;
  for (const RequestSpec& spec : specs) s.add_request(spec, 0);
  std::map<RequestId, std::map<std::int32_t, TokenLogprobs>> got;
  TimeNs t = 0;
  while (s.has_unfinished()) {
    const StepPlan& plan = s.schedule(t);
    const StepResult r = engine.ex.execute(plan);
    std::int64_t rows = 0;
    for (const ScheduledRequest& e : plan.requests) rows += prompt_logprob_rows(e);
    EXPECT_EQ(StepFeatures::from_plan(plan).prompt_logprob_rows, rows);
    for (const PromptLogprobs& p : r.prompt_logprobs) {
      const ScheduledRequest& e = plan.requests[p.entry];
      EXPECT_EQ(p.first_position, e.first_token + 1);
      EXPECT_EQ(static_cast<std::int32_t>(p.values.size()), prompt_logprob_rows(e));
      for (std::size_t j = 0; j < p.values.size(); ++j) {
        const auto pos = p.first_position + static_cast<std::int32_t>(j);
        EXPECT_TRUE(got[e.id].emplace(pos, p.values[j]).second) << "position " << pos << " twice";
      }
    }
    t += 1000;
    s.complete(r, t);
  }
  return got;
}

TEST(PromptLogprobs, EachPositionIsTheLogSoftmaxOfItsPrefixWhateverTheChunks) {
  const LlamaWeights w = TinyWeights();
  const std::int32_t vocab = w.config.model.vocab_size;
  const SchedulerConfig sc = TinyConfig(7);  // chunks of at most 7 tokens, shared with a neighbour
  RequestSpec asks = make_request(1, 0, {{9, 0, 20}}, 2);
  asks.prompt_logprobs = 2;
  const RequestSpec neighbour = make_request(2, 0, {{11, 0, 9}}, 4);
  const auto got = RunForPromptLogprobs(w, sc, {neighbour, asks});
  ASSERT_EQ(got.size(), 1u);  // the neighbour asked for none
  const std::map<std::int32_t, TokenLogprobs>& mine = got.at(1);
  ASSERT_EQ(mine.size(), 19u);  // positions 1 .. 19; the first token has none
  EXPECT_EQ(mine.begin()->first, 1);
  // The reference: each prefix [0, t) run alone in one step; its last row's raw logits.
  const SchedulerConfig whole = TinyConfig();
  for (std::int32_t t = 1; t < 20; ++t) {
    TinyEngine alone(w, whole);
    alone.s.add_request(make_request(7, 0, {{9, 0, static_cast<std::uint32_t>(t)}}, 1), 0);
    alone.ex.execute(alone.s.schedule(0));
    const Eigen::VectorXf& row = alone.ex.last_logits()[0];
    const TokenLogprobs want =
        token_logprobs(std::vector<float>(row.data(), row.data() + row.size()),
                       prompt_token_value(asks, t, vocab), 2);
    const TokenLogprobs& have = mine.at(t);
    EXPECT_NEAR(have.logprob, want.logprob, 1e-4) << t;
    EXPECT_EQ(have.rank, want.rank) << t;
    ASSERT_EQ(have.top.size(), 2u) << t;
    for (std::size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(have.top[k].first, want.top[k].first) << t;
      EXPECT_NEAR(have.top[k].second, want.top[k].second, 1e-4) << t;
    }
  }
  // One chunk or seven: the same numbers.
  const auto at_once = RunForPromptLogprobs(w, whole, {asks}).at(1);
  ASSERT_EQ(at_once.size(), 19u);
  for (const auto& [pos, lp] : at_once) EXPECT_NEAR(lp.logprob, mine.at(pos).logprob, 1e-4) << pos;
}

// vLLM v1: a request that wants its prompt's logprobs reads no cached block (nor counts a lookup);
// the blocks it computes are cached for the others. A one-token prompt has no prompt rows.
TEST(PromptLogprobs, TheRequestReadsNoPrefixCacheAndItsRowsReachTheLmHead) {
  const LlamaWeights w = TinyWeights();
  TinyEngine engine(w, TinyConfig());
  Scheduler& s = engine.s;
  KvCacheManager& kv = engine.kv;
  CpuExecutor& ex = engine.ex;
  TimeNs t = 0;
  const auto run = [&](const RequestSpec& spec) {
    s.add_request(spec, t);
    ScheduledRequest first{};
    bool seen = false;
    std::int64_t rows = 0;
    while (s.has_unfinished()) {
      const StepPlan& plan = s.schedule(t);
      if (!seen && !plan.requests.empty()) {
        first = plan.requests[0];
        seen = true;
      }
      rows += StepFeatures::from_plan(plan).prompt_logprob_rows;
      const StepResult r = ex.execute(plan);
      t += 1000;
      s.complete(r, t);
    }
    return std::pair(first, rows);
  };
  run(make_request(1, 0, {{5, 0, 33}}, 2));  // caches four full blocks
  const std::int64_t lookups = kv.stats().lookups;
  RequestSpec asks = make_request(2, 0, {{5, 0, 33}}, 2);
  asks.prompt_logprobs = 0;
  const auto [e, rows] = run(asks);
  EXPECT_EQ(e.first_token, 0);  // computed from the start, not from the cached 32 tokens
  EXPECT_EQ(e.num_cached_prefix, 0);
  EXPECT_EQ(rows, 32);  // positions 1 .. 32
  EXPECT_EQ(kv.stats().lookups, lookups);
  const auto [e3, rows3] = run(make_request(3, 0, {{5, 0, 33}}, 2));  // an ordinary one hits
  EXPECT_EQ(e3.first_token, 32);
  EXPECT_EQ(rows3, 0);
  RequestSpec one = make_request(4, 0, {{6, 0, 1}}, 2);
  one.prompt_logprobs = 3;
  EXPECT_EQ(run(one).second, 0);
}

}  // namespace
}  // namespace servelab
