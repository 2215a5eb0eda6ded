// A request's own sampling parameters (RequestSpec::sampling: an HTTP client's temperature, top_p
// and seed; core/sampling_params.h) on the CPU engine, through the real scheduler: a seeded
// request draws the same tokens whatever its id and whatever runs beside it; sample k of a seeded
// request is what the same request seeded with seed + k draws as sample 0 (vLLM's child seeds);
// an unseeded one draws from the engine's stream of its id; a request at temperature 0 is greedy
// on an engine that samples, and the others keep the engine's parameters.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/sampling_params.h"
#include "core/scheduler.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "engine/sample_stream.h"
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

// Presence and frequency penalties: each token of a greedy request is the argmax of its row's
// raw logits lowered by penalty_deltas over the outputs before it; with a large enough
// frequency penalty the output differs from the unpenalized one; unpenalized requests beside it
// are untouched.
TEST(RequestSampling, PenaltiesLowerTheLogitsOfTheOutputsSoFar) {
  const LlamaWeights w = LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 4);
  RequestSampling penalized;
  penalized.presence_penalty = 1.5;
  penalized.frequency_penalty = 2.0;
  int checked = 0;
  const Tokens out =
      Generate(w, SamplingParams{}, {Prompt(0, 5, penalized), Prompt(1, 5, std::nullopt)},
               [&](const StepPlan& plan, const StepResult& r, const CpuExecutor& ex) {
                 for (std::size_t i = 0; i < plan.requests.size(); ++i) {
                   const ScheduledRequest& e = plan.requests[i];
                   if (!e.samples || e.id != 0) continue;
                   Eigen::VectorXf logits = ex.last_logits()[i];
                   for (const auto& [token, delta] : penalty_deltas(*e.spec, e.output_tokens, {})) {
                     logits[token] += delta;
                   }
                   Eigen::Index best = 0;
                   logits.maxCoeff(&best);
                   EXPECT_EQ(r.sampled_tokens[i], best) << "output " << e.output_tokens.size();
                   ++checked;
                 }
               });
  EXPECT_EQ(checked, 10);
  EXPECT_NE(out.at(0), out.at(1));  // the same prompt, greedy, penalized or not
  EXPECT_EQ(out.at(1), Generate(w, SamplingParams{}, {Prompt(1, 5, std::nullopt)}).at(1));
  // The deltas: -(frequency x count + presence) per distinct token, ids ascending.
  const std::vector<std::int32_t> earlier = {7, 3, 7}, later = {7};
  const auto d = penalty_deltas(Prompt(2, 5, penalized), earlier, later);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], (std::pair<std::int32_t, float>{3, -3.5f}));
  EXPECT_EQ(d[1], (std::pair<std::int32_t, float>{7, -7.5f}));
  EXPECT_TRUE(penalty_deltas(Prompt(2, 5, RequestSampling{1.0, 1.0, 1}), earlier, later).empty());
  // A row's: its outputs, then the previous step's token, then the drafts before its index.
  const RequestSpec spec = Prompt(3, 5, penalized);
  ScheduledRequest e;
  e.spec = &spec;
  e.output_tokens = earlier;
  const std::vector<std::int32_t> drafts = {3, 4, 5};
  EXPECT_EQ(row_penalties(e, 6, 7, drafts),
            penalty_deltas(spec, earlier, std::vector<std::int32_t>{7, 3, 4}));
  EXPECT_EQ(row_penalties(e, 5, std::nullopt, drafts),
            penalty_deltas(spec, earlier, std::vector<std::int32_t>{3, 4}));
  EXPECT_EQ(row_penalties(e, 3, 7, drafts), penalty_deltas(spec, earlier, {}));
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
