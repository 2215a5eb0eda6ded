// Swap preemption (vLLM v0 preemption_mode=swap) and the `auto` mode: hand-built scenarios on a
// tiny cache, the cost oracle of the simulator, and an end-to-end run of experiments/burst.yaml.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/host_block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "policies/registry.h"
#include "serving/experiment.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/model_config.h"
#include "sim/roofline_cost_model.h"
#include "sim/run.h"
#include "sim/swap_cost.h"

namespace servelab {
namespace {

constexpr std::uint64_t kSeed = 20261122;
constexpr std::int32_t kBs = 4;

RequestSpec Spec(RequestId id, std::int32_t len, std::int32_t max_out, TimeNs arrival = 0) {
  std::vector<PromptSegment> segs;
  segs.push_back({unique_content_id(kSeed, id), 0, static_cast<std::uint32_t>(len)});
  return make_request(id, arrival, std::move(segs), max_out);
}

// Two 12-token prompts (3 blocks each) with 8 outputs in 8 usable blocks: both run until, at
// the step computing position 16, A needs a 5th block and B (the last running request, holding
// 4 blocks with 16 tokens computed) is preempted.
struct Fixture {
  explicit Fixture(std::string mode, std::int32_t host_blocks)
      : pool(9),
        host(host_blocks),
        kv(pool, kBs, 64, /*enable_prefix_caching=*/false, Options(host)),
        sched(Config(mode), kv, nullptr) {}

  static KvCacheOptions Options(HostBlockPool& host) {
    KvCacheOptions o;
    o.host_pool = &host;
    return o;
  }
  static SchedulerConfig Config(std::string mode) {
    SchedulerConfig c;
    c.block_size = kBs;
    c.max_model_len = 64;
    c.enable_prefix_caching = false;
    c.max_num_batched_tokens = 64;
    use_policy(c, PolicyKind::kPreemption, mode);
    return c;
  }
  // Runs one step; every sampling entry gets token 0.
  const StepPlan& Step() {
    const StepPlan& plan = sched.schedule(now);
    last = plan;  // a copy: complete() invalidates the spans but ids and moves stay
    StepResult r;
    r.duration_ns = kNsPerMs;
    for (const ScheduledRequest& e : plan.requests) r.sampled_tokens.push_back(e.samples ? 0 : -1);
    now += kNsPerMs;
    sched.complete(r, now);
    return last;
  }
  Request* Find(RequestId id) {
    for (Request* r : sched.running()) {
      if (r->id() == id) return r;
    }
    for (Request* r : sched.swapped()) {
      if (r->id() == id) return r;
    }
    for (Request* r : sched.waiting()) {
      if (r->id() == id) return r;
    }
    return nullptr;
  }

  BlockPool pool;
  HostBlockPool host;
  KvCacheManager kv;
  Scheduler sched;
  TimeNs now = 0;
  StepPlan last;
};

bool Scheduled(const StepPlan& plan, RequestId id) {
  return std::any_of(plan.requests.begin(), plan.requests.end(),
                     [&](const ScheduledRequest& e) { return e.id == id; });
}

// Steps until a plan preempts; returns B's device table just before that step.
std::vector<BlockId> RunUntilPreemption(Fixture& f) {
  f.sched.add_request(Spec(0, 12, 8), 0);
  f.sched.add_request(Spec(1, 12, 8), 0);
  for (int step = 0; step < 20; ++step) {
    const std::vector<BlockId> before = f.Find(1)->block_table;
    if (!f.Step().preempted.empty()) return before;
  }
  ADD_FAILURE() << "no preemption";
  return {};
}

TEST(SwapPreemptionTest, LastRunningIsSwappedOutAndBackIn) {
  Fixture f("swap", 16);
  const std::vector<BlockId> b_blocks = RunUntilPreemption(f);
  ASSERT_EQ(b_blocks.size(), 4u);
  const StepPlan out = f.last;
  EXPECT_EQ(out.preempted, std::vector<RequestId>{1});
  EXPECT_TRUE(out.swap_in.empty());
  ASSERT_EQ(out.swap_out.size(), 4u);
  Request* b = f.Find(1);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->status, RequestStatus::kSwapped);
  EXPECT_EQ(b->num_computed_tokens, 16);  // the KV is kept
  EXPECT_TRUE(b->block_table.empty());
  ASSERT_EQ(b->host_block_table().size(), 4u);
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(out.swap_out[k].src, b_blocks[k]);
    EXPECT_EQ(out.swap_out[k].dst, b->host_block_table()[k]);
  }
  const std::vector<BlockId> host_table = b->host_block_table();
  EXPECT_FALSE(Scheduled(out, 1));
  EXPECT_EQ(f.sched.num_swapped(), 1u);
  EXPECT_EQ(f.host.num_free_blocks(), 12);

  // A newcomer that would fit now must wait until B is back.
  f.sched.add_request(Spec(2, 4, 2, f.now), f.now);
  bool swapped_in = false;
  for (int step = 0; step < 20 && !swapped_in; ++step) {
    const StepPlan& plan = f.Step();
    if (plan.swap_in.empty()) {
      EXPECT_FALSE(Scheduled(plan, 2)) << "admitted while B is swapped out";
      EXPECT_FALSE(Scheduled(plan, 1));
      continue;
    }
    swapped_in = true;
    EXPECT_TRUE(plan.swap_out.empty());
    ASSERT_EQ(plan.swap_in.size(), 4u);
    ASSERT_FALSE(plan.requests.empty());
    const ScheduledRequest& e = plan.requests[0];  // resumed before any admission
    EXPECT_EQ(e.id, 1u);
    EXPECT_EQ(e.first_token, 16);
    EXPECT_EQ(e.num_tokens, 1);
    EXPECT_FALSE(e.is_prefill);
    for (std::size_t k = 0; k < 4; ++k) {
      EXPECT_EQ(plan.swap_in[k].src, host_table[k]);
      EXPECT_EQ(plan.swap_in[k].dst, e.block_table[k]);
    }
  }
  ASSERT_TRUE(swapped_in);
  for (int step = 0; step < 40 && f.sched.has_unfinished(); ++step) f.Step();
  EXPECT_FALSE(f.sched.has_unfinished());
  EXPECT_EQ(f.sched.counters().num_finished, 3);
  EXPECT_EQ(f.sched.counters().num_preemptions, 1);
  EXPECT_EQ(f.sched.counters().num_recomputed_tokens, 0);
  EXPECT_EQ(f.host.num_free_blocks(), 16);
  EXPECT_EQ(f.pool.num_free_blocks(), f.pool.num_usable_blocks());
}

TEST(SwapPreemptionTest, ShortHostSpaceFallsBackToRecompute) {
  Fixture f("swap", 2);  // B holds 4 blocks
  RunUntilPreemption(f);
  EXPECT_TRUE(f.last.swap_out.empty());
  EXPECT_EQ(f.last.preempted, std::vector<RequestId>{1});
  Request* b = f.Find(1);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->status, RequestStatus::kPreempted);
  EXPECT_EQ(b->num_computed_tokens, 0);
  EXPECT_EQ(f.sched.num_swapped(), 0u);
  EXPECT_EQ(f.sched.waiting().front(), b);
  for (int step = 0; step < 60 && f.sched.has_unfinished(); ++step) f.Step();
  EXPECT_EQ(f.sched.counters().num_finished, 2);
  EXPECT_GT(f.sched.counters().num_recomputed_tokens, 0);
  EXPECT_EQ(f.host.num_free_blocks(), 2);
}

// A scheduler destroyed while a request is swapped out returns its host blocks (the path an
// abort of a swapped request takes too: kv.free releases the host table).
TEST(SwapPreemptionTest, DestroyingTheSchedulerFreesHostBlocks) {
  BlockPool pool(9);
  HostBlockPool host(16);
  KvCacheManager kv(pool, kBs, 64, false, Fixture::Options(host));
  {
    Scheduler s(Fixture::Config("swap"), kv, nullptr);
    s.add_request(Spec(0, 12, 8), 0);
    s.add_request(Spec(1, 12, 8), 0);
    for (int step = 0; step < 20 && s.num_swapped() == 0; ++step) {
      const StepPlan& plan = s.schedule(0);
      StepResult r;
      for (const ScheduledRequest& e : plan.requests) {
        r.sampled_tokens.push_back(e.samples ? 0 : -1);
      }
      s.complete(r, 0);
    }
    ASSERT_EQ(s.num_swapped(), 1u);
    EXPECT_EQ(host.num_free_blocks(), 12);
  }
  EXPECT_EQ(host.num_free_blocks(), 16);
  EXPECT_EQ(pool.num_free_blocks(), pool.num_usable_blocks());
  host.check_invariants();
}

// auto: the oracle decides per victim. Here it swaps victims with at least 16 computed tokens.
TEST(SwapPreemptionTest, AutoSwapsLongVictimsAndRecomputesShortOnes) {
  for (const std::int32_t min_tokens : {16, 17}) {
    SCOPED_TRACE(min_tokens);
    BlockPool pool(9);
    HostBlockPool host(16);
    KvCacheManager kv(pool, kBs, 64, false, Fixture::Options(host));
    SchedulerConfig c = Fixture::Config("auto");
    c.prefer_swap = [min_tokens](const Request& r) { return r.num_computed_tokens >= min_tokens; };
    Scheduler s(c, kv, nullptr);
    s.add_request(Spec(0, 12, 8), 0);
    s.add_request(Spec(1, 12, 8), 0);
    bool seen = false;
    for (int step = 0; step < 20 && !seen; ++step) {
      const StepPlan& plan = s.schedule(0);
      if (!plan.preempted.empty()) {
        seen = true;
        // The victim has 16 tokens computed.
        EXPECT_EQ(plan.swap_out.size(), min_tokens <= 16 ? 4u : 0u);
        EXPECT_EQ(s.num_swapped(), min_tokens <= 16 ? 1u : 0u);
      }
      StepResult r;
      for (const ScheduledRequest& e : plan.requests) {
        r.sampled_tokens.push_back(e.samples ? 0 : -1);
      }
      s.complete(r, 0);
    }
    EXPECT_TRUE(seen);
  }
}

TEST(SwapPreemptionTest, AutoWithoutAnOracleRecomputes) {
  Fixture f("auto", 16);
  RunUntilPreemption(f);
  EXPECT_TRUE(f.last.swap_out.empty());
  EXPECT_EQ(f.Find(1)->status, RequestStatus::kPreempted);
}

// The simulator's oracle: a long context is cheaper to move over the host link twice than to
// prefill again; a short one is cheaper to recompute.
TEST(SwapPreemptionTest, CostOraclePrefersSwapForLongContexts) {
  const std::string catalog = default_catalog_dir();
  const RooflineCostModel cost(load_model("Llama-3-8B", catalog),
                               load_hardware("H100-SXM", catalog), 16);
  Request long_ctx(Spec(9, 4096, 1));
  long_ctx.num_computed_tokens = 4096;
  long_ctx.block_table.assign(256, 1);
  EXPECT_TRUE(swap_is_cheaper(cost, long_ctx));
  // Swapping moves whole blocks (2 MiB, 82 us there and back); recomputing 4 tokens costs
  // almost nothing on top of a step that streams the weights anyway.
  Request short_ctx(Spec(10, 4, 1));
  short_ctx.num_computed_tokens = 4;
  short_ctx.block_table.assign(1, 1);
  EXPECT_FALSE(swap_is_cheaper(cost, short_ctx));
  EXPECT_GT(recompute_seconds(cost, 4096), recompute_seconds(cost, 4));
  EXPECT_DOUBLE_EQ(swap_round_trip_seconds(cost, 256), 2.0 * ns_to_s(cost.swap_time(256)));
}

TEST(SwapPreemptionTest, SwapNeedsTheVllmBatchFormation) {
  SchedulerConfig sc;
  for (const char* batch : {"sarathi", "prefill-first"}) {
    for (const char* mode : {"swap", "auto"}) {
      try {
        use_policy(sc, PolicyKind::kBatch, batch);
        use_policy(sc, PolicyKind::kPreemption, mode);
        check_policy_combination(sc);
        ADD_FAILURE() << batch << " + " << mode << " accepted";
      } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("policies.preemption"), std::string::npos);
      }
    }
  }
  use_policy(sc, PolicyKind::kBatch, "vllm");
  use_policy(sc, PolicyKind::kPreemption, "auto");
  check_policy_combination(sc);
  EXPECT_EQ(sc.preemption->name(), "auto");
}

// End to end: swapping on the bursty experiment moves blocks and recomputes less.
TEST(SwapPreemptionTest, BurstExperimentSwaps) {
  const std::string burst = servelab_home().string() + "/experiments/burst.yaml";
  RunOptions o;
  o.write_files = false;
  const RunOutput rec = run_simulation(load_experiment(burst, {}), o);
  const RunOutput swap = run_simulation(load_experiment(burst, {"policies.preemption=swap"}), o);
  const RunOutput aut = run_simulation(load_experiment(burst, {"policies.preemption=auto"}), o);
  EXPECT_EQ(rec.summary.swapped_out_blocks, 0);
  EXPECT_GT(rec.summary.recomputed_tokens, 0);
  for (const RunOutput* r : {&swap, &aut}) {
    EXPECT_EQ(r->summary.completed, rec.summary.completed);
    EXPECT_GT(r->summary.swapped_out_blocks, 0);
    EXPECT_EQ(r->summary.swapped_in_blocks, r->summary.swapped_out_blocks);
    EXPECT_LT(r->summary.recomputed_tokens, rec.summary.recomputed_tokens);
  }
}

}  // namespace
}  // namespace servelab
