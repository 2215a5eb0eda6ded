// Stop conditions (vLLM SamplingParams: eos, ignore_eos, min_tokens, stop_token_ids, max_tokens;
// vllm/v1/core/sched/utils.py check_stop) and cache_salt (an extra key of the first block's hash),
// checked against vLLM's semantics in the shared core, with a scripted backend and with the
// simulator's backend.
#include "core/stop_conditions.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/block_hash.h"
#include "core/kv_cache_manager.h"
#include "core/prefix_hit_window.h"
#include "core/radix_prefix_cache.h"
#include "core/scheduler.h"

namespace servelab {
namespace {

std::shared_ptr<const StopConditions> Stops(std::int32_t eos, bool ignore_eos, std::int32_t min,
                                            std::vector<std::int32_t> ids = {},
                                            std::int32_t sim_eos_at = 0) {
  auto s = std::make_shared<StopConditions>();
  s->eos_token_id = eos;
  s->ignore_eos = ignore_eos;
  s->min_tokens = min;
  s->stop_token_ids = std::move(ids);
  s->sim_eos_at = sim_eos_at;
  return s;
}

RequestSpec Spec(RequestId id, std::int32_t max_tokens, std::shared_ptr<const StopConditions> s) {
  RequestSpec r = make_request(id, 0, {{id + 100, 0, 40}}, max_tokens);
  r.stop = std::move(s);
  return r;
}

TEST(CheckStop, FollowsVllmOrder) {
  RequestSpec r = Spec(0, 4, Stops(2, false, 0, {9}));
  EXPECT_EQ(check_stop(r, {5}), StopReason::kNone);
  EXPECT_EQ(check_stop(r, {5, 2}), StopReason::kStop);        // EOS
  EXPECT_EQ(check_stop(r, {5, 9}), StopReason::kStop);        // a stop token id
  EXPECT_EQ(check_stop(r, {5, 5, 5, 2}), StopReason::kStop);  // EOS as the last allowed token
  EXPECT_EQ(check_stop(r, {5, 5, 5, 9}), StopReason::kStop);  // (the length check goes last)
  EXPECT_EQ(check_stop(r, {5, 5, 5, 5}), StopReason::kLength);
  r.stop = Stops(2, true, 0, {9});  // ignore_eos
  EXPECT_EQ(check_stop(r, {5, 2}), StopReason::kNone);
  EXPECT_EQ(check_stop(r, {5, 9}), StopReason::kStop);  // stop ids still apply
  r.stop = Stops(2, false, 3, {9});                     // min_tokens 3
  EXPECT_EQ(check_stop(r, {2}), StopReason::kNone);
  EXPECT_EQ(check_stop(r, {2, 9}), StopReason::kNone);
  EXPECT_EQ(check_stop(r, {2, 9, 2}), StopReason::kStop);
  // min_tokens holds back the stop tests, not the length (a cap below it still ends it).
  EXPECT_EQ(check_stop(Spec(0, 2, Stops(2, false, 3, {9})), {5, 2}), StopReason::kLength);
  r.stop = nullptr;  // no stop conditions: only the length
  EXPECT_EQ(check_stop(r, {2, 9, 2}), StopReason::kNone);
  EXPECT_EQ(check_stop(r, {2, 9, 2, 2}), StopReason::kLength);
}

TEST(CheckStop, MinTokensSuppressesEosAndStopIdsUntilReached) {
  const RequestSpec r = Spec(0, 10, Stops(2, false, 3, {9}));
  EXPECT_EQ(suppressed_tokens(r, 0), (std::vector<std::int32_t>{9, 2}));
  EXPECT_EQ(suppressed_tokens(r, 2), (std::vector<std::int32_t>{9, 2}));
  EXPECT_TRUE(suppressed_tokens(r, 3).empty());
  // ignore_eos: EOS ends nothing, but min_tokens still masks it (vLLM's all_stop_token_ids
  // holds the model's EOS whatever ignore_eos says), and the model's extra EOS ids with it.
  EXPECT_EQ(suppressed_tokens(Spec(0, 10, Stops(2, true, 3, {9})), 0),
            (std::vector<std::int32_t>{9, 2}));
  const StopConditions extra = with_model_eos(*Stops(-1, true, 3, {9}), {2, 7});
  EXPECT_EQ(extra.stop_token_ids, (std::vector<std::int32_t>{9}));
  EXPECT_EQ(extra.masked_ids, (std::vector<std::int32_t>{7}));
  EXPECT_EQ(suppressed_tokens(Spec(0, 10, std::make_shared<const StopConditions>(extra)), 2),
            (std::vector<std::int32_t>{9, 2, 7}));
  const StopConditions stopping = with_model_eos(*Stops(-1, false, 3, {9}), {2, 7});
  EXPECT_EQ(stopping.stop_token_ids, (std::vector<std::int32_t>{9, 7}));
  EXPECT_TRUE(stopping.masked_ids.empty());
  EXPECT_TRUE(suppressed_tokens(Spec(0, 10, nullptr), 0).empty());
}

// The simulator's model obeys the min_tokens mask as the engine's sampler does: with EOS due at
// output 1 and min_tokens 2 it samples two other tokens first and stops at output 3 (it stopped
// at 2, one short of the engine and vLLM).
TEST(CheckStop, SimulatedModelDrawsNoMaskedToken) {
  const RequestSpec r = Spec(0, 30, Stops(kSimEosToken, false, 2, {}, /*sim_eos_at=*/1));
  EXPECT_EQ(sim_sampled_token(r, 0), kSimOtherToken);
  EXPECT_EQ(sim_sampled_token(r, 1), kSimOtherToken);
  EXPECT_EQ(sim_sampled_token(r, 2), kSimEosToken);
  EXPECT_EQ(sim_output_length(r), 3);
  EXPECT_EQ(check_stop(r, {sim_sampled_token(r, 0), sim_sampled_token(r, 1)}), StopReason::kNone);
  // A stop id that is the model's ordinary token: masked too, so the model draws another id,
  // and the first output after the mask stops.
  const RequestSpec o =
      Spec(0, 30, Stops(kSimEosToken, false, 2, {kSimOtherToken}, /*sim_eos_at=*/10));
  EXPECT_EQ(sim_sampled_token(o, 0), 2);
  EXPECT_EQ(sim_sampled_token(o, 2), kSimOtherToken);
  EXPECT_EQ(sim_output_length(o), 3);
  // Without min_tokens: EOS as output 1; and at the cap, an EOS is a stop.
  EXPECT_EQ(sim_output_length(Spec(0, 30, Stops(kSimEosToken, false, 0, {}, 1))), 1);
  const RequestSpec capped = Spec(0, 3, Stops(kSimEosToken, false, 0, {}, 3));
  EXPECT_EQ(sim_output_length(capped), 3);
  EXPECT_EQ(check_stop(capped, {0, 0, kSimEosToken}), StopReason::kStop);
}

struct Finished {
  std::int32_t outputs;
  std::string reason;
  RequestStatus status;
};

class Reports : public SchedulerObserver {
 public:
  void on_finish(const Request& r, TimeNs) override {
    done[r.id()] = {r.num_total_output_tokens(), r.finish_reason, r.status};
  }
  std::map<RequestId, Finished> done;
};

SchedulerConfig Config(std::int32_t steps = 1, bool caching = true) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 512;
  c.max_num_seqs = 8;
  c.max_model_len = 1024;
  c.enable_prefix_caching = caching;
  c.block_size = 16;
  c.num_scheduler_steps = steps;
  return c;
}

// Steps the scheduler to the end; `token(id, index)` is the token a request samples as its
// output number `index` (0-based).
using TokenFn = std::function<std::int32_t(RequestId, std::size_t)>;
void Drain(Scheduler& s, KvCacheManager& kv, const TokenFn& token) {
  TimeNs now = 0;
  for (int guard = 0; s.has_unfinished() && guard < 10000; ++guard) {
    const StepPlan& p = s.schedule(now);
    ASSERT_FALSE(p.empty());
    StepResult r;
    const std::size_t entries = p.requests.size();
    r.sampled_tokens.assign(entries * static_cast<std::size_t>(p.num_steps), -1);
    for (std::size_t pass = 0; pass < static_cast<std::size_t>(p.num_steps); ++pass) {
      for (std::size_t k = 0; k < entries; ++k) {
        const ScheduledRequest& e = p.requests[k];
        if (e.samples)
          r.sampled_tokens[pass * entries + k] = token(e.id, e.output_tokens.size() + pass);
      }
    }
    now += kNsPerMs;
    s.complete(r, now);
    kv.check_invariants();
  }
  EXPECT_FALSE(s.has_unfinished());
}

TEST(StopConditions, SchedulerFinishesOnEosStopIdsAndLength) {
  for (const std::int32_t steps : {1, 4}) {  // single steps and multi-step rounds
    BlockPool pool(200);
    KvCacheManager kv(pool, 16, 1024, true);
    Reports obs;
    Scheduler s(Config(steps), kv, &obs);
    // The model samples EOS (2) as output 6 (index 5), stop id 9 as output 4, else 5.
    const TokenFn model = [](RequestId, std::size_t i) { return i == 5 ? 2 : i == 3 ? 9 : 5; };
    s.add_request(Spec(0, 20, Stops(2, false, 0)), 0);       // EOS at 6: stop
    s.add_request(Spec(1, 20, Stops(2, true, 0)), 0);        // ignore_eos: length 20
    s.add_request(Spec(2, 20, Stops(2, false, 0, {9})), 0);  // stop id at 4
    s.add_request(Spec(3, 20, Stops(2, false, 5, {9})), 0);  // min_tokens 5: EOS at 6
    s.add_request(Spec(4, 6, Stops(2, false, 0)), 0);        // EOS is the 6th and last: stop
    s.add_request(Spec(5, 20, nullptr), 0);                  // no stop conditions
    s.add_request(Spec(6, 20, Stops(-1, false, 0)), 0);      // no EOS known: length
    Drain(s, kv, model);
    const std::string at = "steps " + std::to_string(steps);
    EXPECT_EQ(obs.done[0].outputs, 6) << at;
    EXPECT_EQ(obs.done[0].reason, "stop") << at;
    EXPECT_EQ(obs.done[0].status, RequestStatus::kFinished) << at;
    EXPECT_EQ(obs.done[1].outputs, 20) << at;
    EXPECT_EQ(obs.done[1].reason, "length") << at;
    EXPECT_EQ(obs.done[2].outputs, 4) << at;
    EXPECT_EQ(obs.done[2].reason, "stop") << at;
    EXPECT_EQ(obs.done[3].outputs, 6) << at;
    EXPECT_EQ(obs.done[3].reason, "stop") << at;
    EXPECT_EQ(obs.done[4].outputs, 6) << at;
    EXPECT_EQ(obs.done[4].reason, "stop") << at;
    EXPECT_EQ(obs.done[5].outputs, 20) << at;
    EXPECT_EQ(obs.done[5].reason, "length") << at;
    EXPECT_EQ(obs.done[6].outputs, 20) << at;
    EXPECT_EQ(s.counters().num_finished, 7) << at;
    EXPECT_EQ(kv.num_free_blocks(), pool.num_usable_blocks()) << at;
  }
}

TEST(StopConditions, ParallelSamplesStopOneByOne) {
  BlockPool pool(200);
  KvCacheManager kv(pool, 16, 1024, true);
  Reports obs;
  Scheduler s(Config(), kv, &obs);
  RequestSpec r = Spec(0, 30, Stops(2, false, 0));
  r.n = 3;
  s.add_request(r, 0);
  // Sample k samples EOS as its output number 3k + 2 (sample 0: its 2nd).
  const TokenFn model = [](RequestId id, std::size_t i) {
    const auto k = static_cast<std::size_t>(id >> kSampleIdShift);
    return i + 1 == 3 * k + 2 ? 2 : 5;
  };
  TimeNs now = 0;
  while (s.has_unfinished()) {
    const StepPlan& p = s.schedule(now);
    StepResult res;
    for (const ScheduledRequest& e : p.requests) {
      res.sampled_tokens.push_back(e.samples ? model(e.id, e.output_tokens.size()) : -1);
      for (std::int32_t k = 1; k < e.num_samples; ++k) {
        res.fork_tokens.push_back(model(sample_request_id(e.id, k), 0));
      }
    }
    now += kNsPerMs;
    s.complete(res, now);
    kv.check_invariants();
  }
  ASSERT_EQ(obs.done.size(), 1u);
  EXPECT_EQ(obs.done[0].outputs, 2 + 5 + 8);
  EXPECT_EQ(obs.done[0].status, RequestStatus::kFinished);
  EXPECT_EQ(kv.num_free_blocks(), pool.num_usable_blocks());
}

TEST(CacheSalt, SaltIsAnExtraKeyOfTheFirstBlockOnly) {
  RequestSpec a = make_request(0, 0, {{7, 0, 64}}, 1);
  RequestSpec b = a;
  b.id = 1;
  const BlockHash a0 = hash_block(kNoneHash, a, 0, 16);
  EXPECT_EQ(hash_block(kNoneHash, b, 0, 16), a0);  // no salt: the same prompt, the same hash
  b.cache_salt = 42;
  const BlockHash b0 = hash_block(kNoneHash, b, 0, 16);
  EXPECT_FALSE(b0 == a0);
  // Later blocks differ only through the chain: the same parent gives the same hash.
  EXPECT_EQ(hash_block(a0, b, 1, 16), hash_block(a0, a, 1, 16));
  EXPECT_FALSE(hash_block(b0, b, 1, 16) == hash_block(a0, a, 1, 16));
}

// Two requests with the same prompt, the second after the first finished: a prefix hit only when
// their salts agree.
std::int32_t SecondRequestHit(std::uint64_t salt_a, std::uint64_t salt_b) {
  BlockPool pool(200);
  KvCacheManager kv(pool, 16, 1024, true);
  Reports obs;
  Scheduler s(Config(), kv, &obs);
  RequestSpec a = make_request(0, 0, {{7, 0, 64}}, 2);
  a.cache_salt = salt_a;
  s.add_request(a, 0);
  Drain(s, kv, [](RequestId, std::size_t) { return 5; });
  RequestSpec b = a;
  b.id = 1;
  b.cache_salt = salt_b;
  s.add_request(b, 0);
  const StepPlan& p = s.schedule(1'000'000'000);
  EXPECT_EQ(p.requests.size(), 1u);
  const std::int32_t hit = p.requests.empty() ? -1 : p.requests[0].num_cached_prefix;
  StepResult r;
  r.sampled_tokens.assign(p.requests.size(), 5);
  s.complete(r, 1'000'000'000 + 1);
  return hit;
}

TEST(CacheSalt, SameSaltHitsDifferentSaltsNever) {
  EXPECT_EQ(SecondRequestHit(0, 0), 48);    // 4 blocks, the last kept to compute one token
  EXPECT_EQ(SecondRequestHit(11, 11), 48);  // the same salt shares
  EXPECT_EQ(SecondRequestHit(11, 12), 0);   // different salts never do
  EXPECT_EQ(SecondRequestHit(0, 12), 0);
  EXPECT_EQ(SecondRequestHit(11, 0), 0);
}

// vLLM's reset_prefix_cache: refused while a request holds blocks; afterwards nothing hits.
TEST(ResetPrefixCache, RefusedWhileBlocksAreHeldThenDropsEveryCachedBlock) {
  for (const bool radix : {false, true}) {
    BlockPool pool(200);
    KvCacheOptions o;
    if (radix) o.prefix_cache = make_radix_prefix_cache;
    KvCacheManager kv(pool, 16, 1024, true, o);
    Reports obs;
    Scheduler s(Config(), kv, &obs);
    const std::string at = radix ? "radix" : "hash";
    s.add_request(make_request(0, 0, {{7, 0, 64}}, 3), 0);
    const StepPlan& p = s.schedule(0);
    EXPECT_THROW(s.reset_prefix_cache(), std::logic_error) << at;  // a plan awaits complete()
    StepResult r;
    r.sampled_tokens.assign(p.requests.size(), 5);
    s.complete(r, 1);
    EXPECT_FALSE(s.reset_prefix_cache()) << at;  // request 0 runs and holds its blocks
    EXPECT_EQ(kv.stats().resets, 0) << at;
    Drain(s, kv, [](RequestId, std::size_t) { return 5; });
    EXPECT_GT(kv.num_free_cached_blocks(), 0) << at;
    EXPECT_TRUE(s.reset_prefix_cache()) << at;
    EXPECT_EQ(kv.stats().resets, 1) << at;
    EXPECT_EQ(kv.num_free_cached_blocks(), 0) << at;
    EXPECT_EQ(pool.num_cached_blocks(), 0) << at;
    EXPECT_EQ(kv.num_free_blocks(), pool.num_usable_blocks()) << at;
    kv.check_invariants();
    // The same prompt again: no hit.
    s.add_request(make_request(1, 0, {{7, 0, 64}}, 3), 0);
    const StepPlan& q = s.schedule(10);
    ASSERT_EQ(q.requests.size(), 1u) << at;
    EXPECT_EQ(q.requests[0].num_cached_prefix, 0) << at;
    r.sampled_tokens.assign(q.requests.size(), 5);
    s.complete(r, 11);
    Drain(s, kv, [](RequestId, std::size_t) { return 5; });
    // And a third time: it hits what the second cached.
    s.add_request(make_request(2, 0, {{7, 0, 64}}, 3), 0);
    const StepPlan& t = s.schedule(20);
    ASSERT_EQ(t.requests.size(), 1u) << at;
    EXPECT_EQ(t.requests[0].num_cached_prefix, 48) << at;
    r.sampled_tokens.assign(t.requests.size(), 5);
    s.complete(r, 21);
    Drain(s, kv, [](RequestId, std::size_t) { return 5; });
  }
}

TEST(ResetPrefixCache, WithoutCachingSucceedsWhenNothingIsHeld) {
  BlockPool pool(50);
  KvCacheManager kv(pool, 16, 1024, false);
  EXPECT_TRUE(kv.reset_prefix_cache());
  EXPECT_EQ(kv.stats().resets, 1);
}

TEST(PrefixHitWindow, KeepsTheMostRecentRequestsLikeVllm) {
  PrefixHitWindow w(10);
  EXPECT_EQ(w.hit_rate(), 0.0);
  w.observe(4, 100, 50, false);
  w.observe(0, 0, 0, false);  // a step without lookups changes nothing
  EXPECT_EQ(w.requests(), 4);
  EXPECT_DOUBLE_EQ(w.hit_rate(), 0.5);
  w.observe(6, 100, 100, false);  // 10 requests: nothing dropped yet
  EXPECT_DOUBLE_EQ(w.hit_rate(), 0.75);
  w.observe(1, 200, 0, false);  // 11 > 10: the oldest step (4 requests) goes
  EXPECT_EQ(w.requests(), 7);
  EXPECT_EQ(w.queried_tokens(), 300);
  EXPECT_DOUBLE_EQ(w.hit_rate(), 100.0 / 300.0);
  w.observe(25, 50, 50, false);  // one step over the limit: it alone is the window
  EXPECT_EQ(w.requests(), 25);
  EXPECT_DOUBLE_EQ(w.hit_rate(), 1.0);
  w.observe(2, 10, 0, true);  // a reset empties the window first
  EXPECT_EQ(w.requests(), 2);
  EXPECT_DOUBLE_EQ(w.hit_rate(), 0.0);
  w.observe(0, 0, 0, true);  // a reset in a step without lookups: empty
  EXPECT_EQ(w.requests(), 0);
}

}  // namespace
}  // namespace servelab
