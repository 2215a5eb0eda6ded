// A request's own sampling parameters (RequestSpec::sampling: an HTTP client's temperature, top_p
// and seed; core/sampling_params.h) on the CPU engine, through the real scheduler: a seeded
// request draws the same tokens whatever its id and whatever runs beside it; sample k of a seeded
// request is what the same request seeded with seed + k draws as sample 0 (vLLM's child seeds);
// an unseeded one draws from the engine's stream of its id; a request at temperature 0 is greedy
// on an engine that samples, and the others keep the engine's parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/output_constraint.h"
#include "core/sampling_params.h"
#include "core/scheduler.h"
#include "core/stop_conditions.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "engine/sample_stream.h"
#include "kernels/sampling_ref.h"
#include "serving/home.h"

namespace servelab {
namespace {

using Tokens = std::map<RequestId, std::vector<std::int32_t>>;

// Every finished sequence's outputs, samples under their own ids.
class Outputs : public SchedulerObserver {
 public:
  void on_finish(const Request& r, TimeNs) override {
    if (r.group == nullptr) {
      tokens[r.id()] = r.output_tokens;
      return;
    }
    for (const Request* s : r.group->samples) tokens[s->id()] = s->output_tokens;
  }
  Tokens tokens;
};

RequestSpec Prompt(RequestId id, std::uint64_t content, std::optional<RequestSampling> own,
                   std::int32_t n = 1) {
  RequestSpec spec = make_request(id, 0, {{content, 0, 12}}, 10);
  spec.n = n;
  if (own) spec.sampling = std::make_shared<const RequestSampling>(*own);
  return spec;
}

// Called after each executed step with its plan, result and the executor.
using StepCheck = std::function<void(const StepPlan&, const StepResult&, const CpuExecutor&)>;

Tokens Generate(const LlamaWeights& w, const SamplingParams& engine,
                const std::vector<RequestSpec>& specs, const StepCheck& check = {}) {
  SchedulerConfig sc;
  sc.block_size = 8;
  sc.max_model_len = 256;
  BlockPool pool(128);
  KvCacheManager kv(pool, sc.block_size, sc.max_model_len, true);
  Outputs out;
  Scheduler s(sc, kv, &out);
  CpuExecutorOptions eo;
  eo.block_size = sc.block_size;
  eo.num_blocks = 128;
  eo.sampling = engine;
  CpuExecutor ex(w, eo);
  for (const RequestSpec& spec : specs) s.add_request(spec, 0);
  TimeNs t = 0;
  while (s.has_unfinished()) {
    const StepPlan& plan = s.schedule(t);
    const StepResult r = ex.execute(plan);
    if (check) check(plan, r, ex);
    t += 1000;
    s.complete(r, t);
  }
  return out.tokens;
}

TEST(RequestSampling, ASeededRequestDrawsTheSameTokensWhateverItsIdAndNeighbours) {
  const LlamaWeights w = LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 4);
  const SamplingParams greedy;
  const RequestSampling seeded{1.0, 0.95, 77};
  const Tokens alone = Generate(w, greedy, {Prompt(0, 5, seeded)});
  const Tokens crowd =
      Generate(w, greedy,
               {Prompt(0, 9, std::nullopt), Prompt(1, 7, seeded), Prompt(41, 5, seeded),
                Prompt(2, 5, RequestSampling{1.0, 0.95, 78})});
  EXPECT_EQ(crowd.at(41), alone.at(0));
  // Another seed, or another prompt, draws otherwise; the unseeded request beside them is greedy.
  EXPECT_NE(crowd.at(2), alone.at(0));
  EXPECT_NE(crowd.at(1), alone.at(0));
  EXPECT_EQ(crowd.at(0), Generate(w, greedy, {Prompt(0, 9, std::nullopt)}).at(0));
}

TEST(RequestSampling, SampleKOfASeededRequestIsSampleZeroOfSeedPlusK) {
  const LlamaWeights w = LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 4);
  const Tokens forked =
      Generate(w, SamplingParams{}, {Prompt(3, 5, RequestSampling{0.8, 1.0, 10}, 3)});
  ASSERT_EQ(forked.size(), 3u);
  for (std::int32_t k = 0; k < 3; ++k) {
    const Tokens single =
        Generate(w, SamplingParams{}, {Prompt(8, 5, RequestSampling{0.8, 1.0, 10u + k})});
    EXPECT_EQ(forked.at(sample_request_id(3, k)), single.at(8)) << "sample " << k;
  }
  EXPECT_NE(forked.at(sample_request_id(3, 1)), forked.at(3));
}

TEST(RequestSampling, UnseededRequestsDrawFromTheEnginesStreamOfTheirId) {
  const LlamaWeights w = LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 4);
  const SamplingParams engine{1.0, 0.9, 5};
  // Own parameters equal to the engine's and no seed: the engine's draws exactly.
  const Tokens own = Generate(w, SamplingParams{}, {Prompt(6, 5, RequestSampling{1.0, 0.9, {}})});
  // (The engine's seed is 0 there: compare with an engine seeded 0.)
  EXPECT_EQ(own.at(6),
            Generate(w, SamplingParams{1.0, 0.9, 0}, {Prompt(6, 5, std::nullopt)}).at(6));
  // Two ids, the same prompt: different draws.
  const Tokens two = Generate(w, engine, {Prompt(6, 5, std::nullopt), Prompt(7, 5, std::nullopt)});
  EXPECT_NE(two.at(6), two.at(7));
  // Temperature 0 on a sampling engine is greedy.
  const Tokens greedy_own = Generate(
      w, engine, {Prompt(6, 5, RequestSampling{0.0, 1.0, {}}), Prompt(7, 5, std::nullopt)});
  EXPECT_EQ(greedy_own.at(6), Generate(w, SamplingParams{}, {Prompt(6, 5, std::nullopt)}).at(6));
  EXPECT_EQ(greedy_own.at(7), two.at(7));
}

// Each token a greedy request with `own` (logit_bias and penalties) generates is the argmax of
// its row's raw logits through logit_adjustments over its prompt and its outputs before it.
// Returns the request's tokens (the prompt of content 5, id 0), checking every step.
std::vector<std::int32_t> GreedyAdjusted(const LlamaWeights& w, const RequestSampling& own) {
  int checked = 0;
  const Tokens out = Generate(
      w, SamplingParams{}, {Prompt(0, 5, own), Prompt(1, 5, std::nullopt)},
      [&](const StepPlan& plan, const StepResult& r, const CpuExecutor& ex) {
        for (std::size_t i = 0; i < plan.requests.size(); ++i) {
          const ScheduledRequest& e = plan.requests[i];
          if (!e.samples || e.id != 0) continue;
          Eigen::VectorXf logits = ex.last_logits()[i];
          const std::vector<std::int32_t> prompt =
              distinct_prompt_tokens(*e.spec, static_cast<std::int32_t>(logits.size()));
          for (const LogitAdjustment& a : logit_adjustments(*e.spec, prompt, e.output_tokens, {})) {
            logits[a.token] = adjust_logit(logits[a.token], a);
          }
          Eigen::Index best = 0;
          logits.maxCoeff(&best);
          EXPECT_EQ(r.sampled_tokens[i], best) << "output " << e.output_tokens.size();
          ++checked;
        }
      });
  EXPECT_EQ(checked, 10);
  // The request beside it, the same prompt unadjusted, is untouched.
  EXPECT_EQ(out.at(1), Generate(w, SamplingParams{}, {Prompt(1, 5, std::nullopt)}).at(1));
  return out.at(0);
}

// Presence, frequency and repetition penalties and logit_bias change what a greedy request
// generates, each as logit_adjustments says; a bias of 100 on a token makes it every token.
TEST(RequestSampling, PenaltiesAndBiasAdjustTheLogitsOfTheTokensSeen) {
  const LlamaWeights w = LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 4);
  const std::vector<std::int32_t> plain =
      Generate(w, SamplingParams{}, {Prompt(0, 5, std::nullopt)}).at(0);
  RequestSampling penalized;
  penalized.presence_penalty = 1.5;
  penalized.frequency_penalty = 2.0;
  EXPECT_NE(GreedyAdjusted(w, penalized), plain);
  RequestSampling repeated;
  repeated.repetition_penalty = 3.0;
  EXPECT_NE(GreedyAdjusted(w, repeated), plain);
  RequestSampling discouraged;  // repetition below 1 favours the tokens seen
  discouraged.repetition_penalty = 0.2;
  GreedyAdjusted(w, discouraged);
  RequestSampling biased;
  biased.logit_bias = {{plain[0], -100.0f}, {201, 100.0f}};
  EXPECT_EQ(GreedyAdjusted(w, biased), std::vector<std::int32_t>(10, 201));
  RequestSampling all = penalized;
  all.repetition_penalty = 1.3;
  all.logit_bias = {{plain[1], -3.0f}};
  GreedyAdjusted(w, all);
}

TEST(RequestSampling, LogitAdjustmentsInVllmsOrder) {
  RequestSampling own;
  own.presence_penalty = 1.5;
  own.frequency_penalty = 2.0;
  const std::vector<std::int32_t> earlier = {7, 3, 7}, later = {7}, prompt = {2, 3, 9};
  // Frequency and presence: -(frequency x count + presence) per distinct output token, ids
  // ascending; the prompt does not count.
  auto d = logit_adjustments(Prompt(2, 5, own), prompt, earlier, later);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], (LogitAdjustment{3, 0.0f, 1.0f, -3.5f}));
  EXPECT_EQ(d[1], (LogitAdjustment{7, 0.0f, 1.0f, -7.5f}));
  EXPECT_TRUE(logit_adjustments(Prompt(2, 5, RequestSampling{1.0, 1.0, 1}), prompt, earlier, later)
                  .empty());
  // The repetition penalty: every token of the prompt and the outputs; the bias: its tokens.
  own.repetition_penalty = 1.25;
  own.logit_bias = {{0, 4.0f}, {9, -2.0f}};
  d = logit_adjustments(Prompt(2, 5, own), prompt, earlier, later);
  const std::vector<LogitAdjustment> want = {{0, 4.0f, 1.0f, 0.0f},
                                             {2, 0.0f, 1.25f, 0.0f},
                                             {3, 0.0f, 1.25f, -3.5f},
                                             {7, 0.0f, 1.25f, -7.5f},
                                             {9, -2.0f, 1.25f, 0.0f}};
  EXPECT_EQ(d, want);
  // adjust_logit: bias first, then the factor by the sign of the biased logit, then the delta.
  EXPECT_FLOAT_EQ(adjust_logit(2.0f, {9, -2.0f, 1.25f, 0.0f}), 0.0f);
  EXPECT_FLOAT_EQ(adjust_logit(1.0f, {9, 1.5f, 1.25f, -1.0f}), 1.0f);
  EXPECT_FLOAT_EQ(adjust_logit(-1.0f, {9, 0.0f, 1.25f, 0.5f}), -0.75f);
  // Without presence and frequency the outputs count for the repetition penalty alone.
  own.presence_penalty = own.frequency_penalty = 0;
  own.logit_bias.clear();
  d = logit_adjustments(Prompt(2, 5, own), prompt, earlier, later);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[3], (LogitAdjustment{9, 0.0f, 1.25f, 0.0f}));
  EXPECT_EQ(d[2], (LogitAdjustment{7, 0.0f, 1.25f, 0.0f}));
  // A row's: its outputs, then the previous step's token, then the drafts before its index.
  own.presence_penalty = 1.5;
  const RequestSpec spec = Prompt(3, 5, own);
  ScheduledRequest e;
  e.spec = &spec;
  e.output_tokens = earlier;
  const std::vector<std::int32_t> drafts = {3, 4, 5};
  EXPECT_EQ(row_adjustments(e, 6, 7, drafts, prompt),
            logit_adjustments(spec, prompt, earlier, std::vector<std::int32_t>{7, 3, 4}));
  EXPECT_EQ(row_adjustments(e, 5, std::nullopt, drafts, prompt),
            logit_adjustments(spec, prompt, earlier, std::vector<std::int32_t>{3, 4}));
  EXPECT_EQ(row_adjustments(e, 3, 7, drafts, prompt), logit_adjustments(spec, prompt, earlier, {}));
}

// The repetition penalty's prompt tokens: distinct and ascending, literal prompts' values or the
// streams' tokens; an executor's cache keeps a request's while it is scheduled.
TEST(RequestSampling, PromptTokenSets) {
  const RequestSpec literal = make_literal_request(4, 0, {9, 3, 9, 250, 3}, 4);
  EXPECT_EQ(distinct_prompt_tokens(literal, 256), (std::vector<std::int32_t>{3, 9, 250}));
  RequestSampling own;
  own.repetition_penalty = 1.1;
  RequestSpec spec = Prompt(5, 5, own);
  const std::vector<std::int32_t> set = distinct_prompt_tokens(spec, 256);
  ASSERT_FALSE(set.empty());
  EXPECT_TRUE(std::is_sorted(set.begin(), set.end()));
  EXPECT_EQ(std::adjacent_find(set.begin(), set.end()), set.end());
  for (std::int32_t p = 0; p < spec.prompt_len; ++p) {
    EXPECT_TRUE(std::binary_search(set.begin(), set.end(), prompt_token_value(spec, p, 256)));
  }
  PromptTokenSets sets;
  StepPlan plan;
  ScheduledRequest e;
  e.id = sample_request_id(5, 2);  // a sample shares its request's prompt
  e.spec = &spec;
  plan.requests.push_back(e);
  sets.retain(plan);
  const std::span<const std::int32_t> got = sets.of(e, 256);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), set.begin(), set.end()));
  sets.retain(plan);
  EXPECT_EQ(sets.of(e, 256).data(), got.data());  // kept: not read again
  const RequestSpec plain = Prompt(6, 5, std::nullopt);
  e.spec = &plain;
  EXPECT_TRUE(sets.of(e, 256).empty());  // no repetition penalty: none needed
}

// top_k and min_p through the CPU engine: top_k 1 and min_p 1 are greedy at any temperature;
// otherwise each token is sample_reference's with the request's truncations.
TEST(RequestSampling, TopKAndMinPTruncateTheDraw) {
  const LlamaWeights w = LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 4);
  const std::vector<std::int32_t> greedy =
      Generate(w, SamplingParams{}, {Prompt(0, 5, std::nullopt)}).at(0);
  RequestSampling k1{5.0, 1.0, 3};
  k1.top_k = 1;
  EXPECT_EQ(Generate(w, SamplingParams{}, {Prompt(0, 5, k1)}).at(0), greedy);
  RequestSampling p1{5.0, 1.0, 3};
  p1.min_p = 1.0;
  EXPECT_EQ(Generate(w, SamplingParams{}, {Prompt(0, 5, p1)}).at(0), greedy);
  RequestSampling hot{5.0, 1.0, 3};  // nearly uniform at temperature 5: far from greedy
  EXPECT_NE(Generate(w, SamplingParams{}, {Prompt(0, 5, hot)}).at(0), greedy);
  for (RequestSampling own :
       {RequestSampling{2.0, 0.9, 3, 0, 0, 4}, RequestSampling{2.0, 1.0, 3, 0, 0, 0, 0.3}}) {
    int checked = 0;
    Generate(w, SamplingParams{}, {Prompt(0, 5, own)},
             [&](const StepPlan& plan, const StepResult& r, const CpuExecutor& ex) {
               const ScheduledRequest& e = plan.requests[0];
               if (!e.samples) return;
               const Eigen::VectorXf& l = ex.last_logits()[0];
               const RowSampling row =
                   row_sampling(SamplingParams{}, *e.spec, e.id, e.output_tokens.size());
               EXPECT_EQ(row.top_k, own.top_k);
               EXPECT_EQ(row.min_p, own.min_p);
               EXPECT_EQ(r.sampled_tokens[0],
                         kernels::sample_reference({l.data(), static_cast<std::size_t>(l.size())},
                                                   2.0, {own.top_p, own.top_k, own.min_p}, row.u));
               // The token is among those the truncation keeps: top_k's 4, or min_p's.
               std::vector<float> sorted(l.data(), l.data() + l.size());
               std::sort(sorted.begin(), sorted.end(), std::greater<>());
               const float x = l[r.sampled_tokens[0]];
               if (own.top_k > 0) {
                 EXPECT_GE(x, sorted[3]);
               }
               if (own.min_p > 0) {
                 EXPECT_GE(std::exp((x - sorted[0]) / 2.0), 0.3 - 1e-9);
               }
               ++checked;
             });
    EXPECT_EQ(checked, 10);
  }
}

// allowed_token_ids: every token a greedy or a sampled request draws is one of them, and the
// greedy one is the argmax of its row's logits over them; without them the same request draws
// others.
TEST(RequestSampling, AllowedTokenIdsConfineEveryDraw) {
  const LlamaWeights w = LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 4);
  const std::vector<std::int32_t> plain =
      Generate(w, SamplingParams{}, {Prompt(0, 5, std::nullopt)}).at(0);
  const std::vector<std::int32_t> allowed = {3, 40, 41, 200};
  ASSERT_EQ(std::find_first_of(plain.begin(), plain.end(), allowed.begin(), allowed.end()),
            plain.end());
  for (const double temperature : {0.0, 1.5}) {
    RequestSampling own{temperature, 1.0, 7};
    own.allowed_token_ids = allowed;
    int checked = 0;
    const Tokens out =
        Generate(w, SamplingParams{}, {Prompt(0, 5, own), Prompt(1, 5, std::nullopt)},
                 [&](const StepPlan& plan, const StepResult& r, const CpuExecutor& ex) {
                   for (std::size_t i = 0; i < plan.requests.size(); ++i) {
                     if (!plan.requests[i].samples || plan.requests[i].id != 0) continue;
                     const Eigen::VectorXf& l = ex.last_logits()[i];
                     std::int32_t best = allowed[0];
                     for (const std::int32_t t : allowed) best = l[t] > l[best] ? t : best;
                     if (temperature == 0) {
                       EXPECT_EQ(r.sampled_tokens[i], best);
                     }
                     ++checked;
                   }
                 });
    EXPECT_EQ(checked, 10);
    for (const std::int32_t t : out.at(0)) {
      EXPECT_TRUE(std::binary_search(allowed.begin(), allowed.end(), t)) << t;
    }
    EXPECT_EQ(out.at(1), plain);  // the request beside it is untouched
  }
}

// A constraint (structured outputs, core/output_constraint.h) that depends on the outputs so far:
// output k must be one of 10 + 3k .. 12 + 3k. Every draw of a greedy or a sampled request, and of
// each of its parallel samples, keeps to it; the request beside it is untouched.
class StepConstraint final : public OutputConstraint {
 public:
  std::shared_ptr<const TokenMask> allowed(RequestId, std::span<const std::int32_t> earlier,
                                           std::span<const std::int32_t> later) const override {
    auto mask = std::make_shared<TokenMask>(16, 0u);
    const auto k = static_cast<std::int32_t>(earlier.size() + later.size());
    for (std::int32_t t = 10 + 3 * k; t < 13 + 3 * k; ++t) (*mask)[t / 32] |= 1u << (t % 32);
    return mask;
  }
};

// What a row may draw, as both executors mask it: allowed_token_ids (ids outside the vocabulary
// ignored), a grammar's mask (words past the vocabulary's cleared, a short mask allowing nothing
// beyond it), or the tokens in both.
TEST(RequestSampling, RowKeepMaskIsTheIdsTheGrammarOrBoth) {
  const std::int32_t vocab = 70;  // three words, the last with 6 tokens
  const auto tokens_of = [&](const TokenMask& m) {
    EXPECT_EQ(m.size(), 3u);
    std::vector<std::int32_t> kept;
    for (std::int32_t t = 0; t < 96; ++t) {
      if (token_allowed(m, t)) kept.push_back(t);
    }
    return kept;
  };
  const std::vector<std::int32_t> ids = {-1, 0, 31, 32, 64, 69, 70, 95};
  EXPECT_EQ(tokens_of(row_keep_mask(ids, nullptr, vocab)),
            (std::vector<std::int32_t>{0, 31, 32, 64, 69}));
  TokenMask grammar(4, 0u);  // allows 31, 33, 69, 71 and 100 (past the vocabulary)
  for (const std::int32_t t : {31, 33, 69, 71, 100}) grammar[t / 32] |= 1u << (t % 32);
  EXPECT_EQ(tokens_of(row_keep_mask({}, &grammar, vocab)), (std::vector<std::int32_t>{31, 33, 69}));
  EXPECT_EQ(tokens_of(row_keep_mask(ids, &grammar, vocab)), (std::vector<std::int32_t>{31, 69}));
  const TokenMask short_grammar = {1u << 3};  // one word: token 3, nothing from 32 on
  EXPECT_EQ(tokens_of(row_keep_mask({}, &short_grammar, vocab)), (std::vector<std::int32_t>{3}));
  EXPECT_TRUE(tokens_of(row_keep_mask(ids, &short_grammar, vocab)).empty());
}

TEST(RequestSampling, AConstraintConfinesEveryDrawByTheOutputsSoFar) {
  const LlamaWeights w = LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 4);
  const std::vector<std::int32_t> plain =
      Generate(w, SamplingParams{}, {Prompt(1, 5, std::nullopt)}).at(1);
  for (const double temperature : {0.0, 1.5}) {
    RequestSampling own{temperature, 1.0, 7};
    own.constraint = std::make_shared<StepConstraint>();
    const Tokens out =
        Generate(w, SamplingParams{}, {Prompt(0, 5, own, 3), Prompt(1, 5, std::nullopt)});
    for (const std::int32_t k : {0, 1, 2}) {
      const std::vector<std::int32_t>& seq = out.at(sample_request_id(0, k));
      ASSERT_EQ(seq.size(), 10u);
      for (std::size_t i = 0; i < seq.size(); ++i) {
        EXPECT_GE(seq[i], 10 + 3 * static_cast<std::int32_t>(i)) << k << " " << i;
        EXPECT_LE(seq[i], 12 + 3 * static_cast<std::int32_t>(i)) << k << " " << i;
      }
    }
    EXPECT_EQ(out.at(1), plain);
  }
}

// bad_words: a greedy request never generates a banned sequence; it generates what it would have
// up to the point where the sequence would end, and differs there.
TEST(RequestSampling, BadWordsNeverEndInTheOutputs) {
  const LlamaWeights w = LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 4);
  const std::vector<std::int32_t> plain =
      Generate(w, SamplingParams{}, {Prompt(0, 5, std::nullopt)}).at(0);
  ASSERT_EQ(plain.size(), 10u);
  const auto contains = [](const std::vector<std::int32_t>& out,
                           const std::vector<std::int32_t>& word) {
    return std::search(out.begin(), out.end(), word.begin(), word.end()) != out.end();
  };
  // One token: never drawn. Two and three: the last never follows the others.
  for (const std::vector<std::int32_t>& word :
       {std::vector<std::int32_t>{plain[0]}, std::vector<std::int32_t>{plain[3], plain[4]},
        std::vector<std::int32_t>{plain[5], plain[6], plain[7]}}) {
    RequestSampling own;
    own.bad_words = {word, {9999, 1}};  // the second never matches
    const std::vector<std::int32_t> out = Generate(w, SamplingParams{}, {Prompt(0, 5, own)}).at(0);
    const std::size_t at = static_cast<std::size_t>(
        std::search(plain.begin(), plain.end(), word.begin(), word.end()) - plain.begin());
    const std::size_t end = at + word.size() - 1;  // where plain drew the word's last token
    EXPECT_FALSE(contains(out, word));
    EXPECT_TRUE(
        std::equal(plain.begin(), plain.begin() + static_cast<std::ptrdiff_t>(end), out.begin()));
    EXPECT_NE(out[end], plain[end]);
  }
}

TEST(RequestSampling, BadWordBansMatchTheOutputsEnd) {
  const std::vector<std::vector<std::int32_t>> words = {{5}, {1, 2}, {2, 3, 4}, {9, 9}, {8, 6, 6}};
  const std::vector<std::int32_t> none;
  // No outputs: the one-token word only.
  EXPECT_EQ(bad_word_bans(words, none, none), (std::vector<std::int32_t>{5}));
  EXPECT_EQ(bad_word_bans(words, std::vector<std::int32_t>{1}, none),
            (std::vector<std::int32_t>{2, 5}));
  // The prefix across the earlier and later outputs.
  EXPECT_EQ(bad_word_bans(words, std::vector<std::int32_t>{7, 2}, std::vector<std::int32_t>{3}),
            (std::vector<std::int32_t>{4, 5}));
  EXPECT_EQ(bad_word_bans(words, none, std::vector<std::int32_t>{9}),
            (std::vector<std::int32_t>{5, 9}));
  // A prefix not at the end does not ban.
  EXPECT_EQ(bad_word_bans(words, std::vector<std::int32_t>{2, 3, 1, 7}, none),
            (std::vector<std::int32_t>{5}));
  // row_bans adds min_tokens' EOS, and counts the previous step's token as an output.
  RequestSpec spec = make_request(0, 0, {{1, 0, 8}}, 8);
  RequestSampling own;
  own.bad_words = {{1, 2}, {9, 9, 6}};
  spec.sampling = std::make_shared<const RequestSampling>(own);
  StopConditions stop;
  stop.eos_token_id = 7;
  stop.min_tokens = 2;
  spec.stop = std::make_shared<const StopConditions>(stop);
  const std::vector<std::int32_t> outputs = {9};
  ScheduledRequest e;
  e.spec = &spec;
  e.output_tokens = outputs;
  EXPECT_EQ(row_bans(e, 1, std::nullopt, {}), (std::vector<std::int32_t>{7}));
  EXPECT_EQ(row_bans(e, 2, 9, {}), (std::vector<std::int32_t>{6}));
  const std::vector<std::int32_t> drafts = {1};
  EXPECT_EQ(row_bans(e, 2, std::nullopt, drafts), (std::vector<std::int32_t>{2}));
}

// A row whose masks keep no token (the one allowed token banned) draws token 0, greedy or not.
TEST(RequestSampling, NothingAllowedDrawsTokenZero) {
  const LlamaWeights w = LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 4);
  for (const double temperature : {0.0, 1.0}) {
    RequestSampling own{temperature, 1.0, 3};
    own.allowed_token_ids = {40};
    own.bad_words = {{40}};
    EXPECT_EQ(Generate(w, SamplingParams{}, {Prompt(0, 5, own)}).at(0),
              std::vector<std::int32_t>(10, 0));
  }
}

TEST(RequestSampling, RowSamplingStreams) {
  const SamplingParams engine{0.5, 0.8, 9};
  RequestSpec spec = make_request(4, 0, {{1, 0, 4}}, 4);
  RowSampling r = row_sampling(engine, spec, 4, 2);
  EXPECT_EQ(r.temperature, 0.5);
  EXPECT_EQ(r.top_p, 0.8);
  EXPECT_NE(r.u, row_sampling(engine, spec, 5, 2).u);  // the id is part of the stream
  EXPECT_NE(r.u, row_sampling(engine, spec, 4, 3).u);  // so is the output index
  spec.sampling = std::make_shared<const RequestSampling>(RequestSampling{0.0, 0.3, 1});
  r = row_sampling(engine, spec, 4, 2);
  EXPECT_EQ(r.temperature, 0.0);
  EXPECT_EQ(r.u, 0.0);
  spec.sampling = std::make_shared<const RequestSampling>(RequestSampling{1.5, 0.3, 1});
  r = row_sampling(engine, spec, 4, 2);
  EXPECT_EQ(r.top_p, 0.3);
  EXPECT_EQ(r.u, row_sampling(engine, spec, 123, 2).u);  // a seed: not the id
  RequestSpec next = spec;
  next.sampling = std::make_shared<const RequestSampling>(RequestSampling{1.5, 0.3, 2});
  EXPECT_EQ(row_sampling(engine, spec, sample_request_id(4, 1), 2).u,
            row_sampling(engine, next, 4, 2).u);  // sample 1 of seed 1 = sample 0 of seed 2
  EXPECT_GE(r.u, 0.0);
  EXPECT_LT(r.u, 1.0);
}

}  // namespace
}  // namespace servelab
