// Async scheduling (vLLM v1 --async-scheduling; core/scheduler.h, docs/policies.md "Async
// scheduling"): behaviour tests written from vLLM's semantics (vllm/v1/core/sched/
// async_scheduler.py, scheduler.py and engine/core.py's batch queue of two): the order of
// schedule and complete, output placeholders, the step a late stop wastes, preemption of a
// request whose step is in flight; the simulator's overlapped step time; the CPU engine's
// tokens against the synchronous loop; and the combinations refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/config_error.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "core/scheduler_invariants.h"
#include "core/stop_conditions.h"
#include "engine/cpu_executor.h"
#include "engine/engine_driver.h"
#include "engine/llama_weights.h"
#include "policies/registry.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "sim/cost_model.h"
#include "sim/run.h"
#include "sim/sim_backend.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using test_util::read_csv;
using test_util::read_file;
using test_util::temp_dir;
using test_util::write_file;
namespace fs = std::filesystem;

SchedulerConfig Config(bool async, std::int32_t seqs = 8) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 256;
  c.max_num_seqs = seqs;
  c.max_model_len = 1024;
  c.block_size = 16;
  c.async_scheduling = async;
  return c;
}

RequestSpec Spec(RequestId id, std::int32_t prompt, std::int32_t max_tokens,
                 std::shared_ptr<const StopConditions> stop = nullptr) {
  RequestSpec r =
      make_request(id, 0, {{id + 100, 0, static_cast<std::uint32_t>(prompt)}}, max_tokens);
  r.stop = std::move(stop);
  return r;
}

std::shared_ptr<const StopConditions> Eos(std::int32_t eos) {
  auto s = std::make_shared<StopConditions>();
  s->eos_token_id = eos;
  return s;
}

struct Reports : SchedulerObserver {
  void on_finish(const Request& r, TimeNs now) override {
    outputs[r.id()] = r.output_tokens;
    reason[r.id()] = r.finish_reason;
    finish_ns[r.id()] = now;
  }
  void on_preempt(const Request& r, TimeNs) override {
    if (r.num_output_placeholders > 0) ++preempted_in_flight;
  }
  std::map<RequestId, std::vector<std::int32_t>> outputs;
  std::map<RequestId, std::string> reason;
  std::map<RequestId, TimeNs> finish_ns;
  int preempted_in_flight = 0;
};

// The tokens of a plan's entries: `token(id, index)` for the output number index (0-based) an
// entry samples, which is context_len - prompt_len (StepPlan::pipelined).
using TokenFn = std::function<std::int32_t(RequestId, std::int32_t)>;
StepResult Sample(const StepPlan& p, const TokenFn& token) {
  StepResult r;
  r.sampled_tokens.assign(p.requests.size(), -1);
  for (std::size_t k = 0; k < p.requests.size(); ++k) {
    const ScheduledRequest& e = p.requests[k];
    if (e.samples) r.sampled_tokens[k] = token(e.id, e.context_len() - e.spec->prompt_len);
  }
  return r;
}

// Runs to the end in vLLM's order: sync schedule/complete, or async schedule(N+1) before
// complete(N). Checks the scheduler's and the KV manager's invariants after every plan.
// Returns the number of plans.
int Drain(Scheduler& s, KvCacheManager& kv, const TokenFn& token) {
  TimeNs now = 0;
  int plans = 0;
  bool pending = false;
  StepResult pending_result;
  for (int guard = 0; guard < 100000; ++guard) {
    const StepPlan& p = s.schedule(now);
    const bool ran = !p.empty();
    StepResult r;
    if (ran) {
      ++plans;
      check_scheduler_invariants(s, p);
      r = Sample(p, token);
    }
    now += kNsPerMs;
    if (pending) {
      s.complete(pending_result, now);  // async: after the next plan was formed
      pending = false;
    } else if (!ran) {
      break;
    }
    if (ran && s.config().async_scheduling) {
      pending_result = std::move(r);
      pending = true;
    } else if (ran) {
      s.complete(r, now);
    }
    kv.check_invariants();
  }
  EXPECT_FALSE(s.has_unfinished());
  return plans;
}

TEST(AsyncScheduling, NextPlanIsFormedBeforeTheTokensAreKnown) {
  BlockPool pool(64);
  KvCacheManager kv(pool, 16, 1024, true);
  Reports obs;
  Scheduler s(Config(true), kv, &obs);
  s.add_request(Spec(0, 40, 5), 0);
  // Step 0: the whole prompt; it samples output 1, a placeholder until complete(0).
  const StepPlan& p0 = s.schedule(0);
  ASSERT_EQ(p0.requests.size(), 1u);
  EXPECT_FALSE(p0.pipelined);
  EXPECT_TRUE(p0.requests[0].samples);
  EXPECT_EQ(s.running()[0]->num_output_placeholders, 1);
  const StepResult r0 = Sample(p0, [](RequestId, std::int32_t) { return 7; });
  // Step 1 is formed while step 0 runs: it computes position 40, whose token (output 1) is not
  // known yet, and samples output 2.
  const StepPlan& p1 = s.schedule(1);
  ASSERT_EQ(p1.requests.size(), 1u);
  EXPECT_TRUE(p1.pipelined);
  EXPECT_EQ(p1.requests[0].first_token, 40);
  EXPECT_EQ(p1.requests[0].num_tokens, 1);
  EXPECT_TRUE(p1.requests[0].output_tokens.empty());
  EXPECT_TRUE(p1.requests[0].samples);
  EXPECT_FALSE(p1.requests[0].is_prefill);
  EXPECT_EQ(s.running()[0]->num_output_placeholders, 2);
  EXPECT_EQ(s.num_pending_plans(), 2);
  // A batch queue of two: a third plan must wait for a result.
  EXPECT_THROW(s.schedule(2), std::logic_error);
  const StepResult r1 = Sample(p1, [](RequestId, std::int32_t) { return 8; });
  s.complete(r0, 3);  // the oldest plan
  EXPECT_EQ(s.running()[0]->output_tokens, (std::vector<std::int32_t>{7}));
  EXPECT_EQ(s.running()[0]->num_output_placeholders, 1);
  EXPECT_EQ(s.num_pending_plans(), 1);
  const StepPlan& p2 = s.schedule(4);
  ASSERT_EQ(p2.requests.size(), 1u);
  EXPECT_EQ(p2.requests[0].first_token, 41);
  EXPECT_EQ(p2.requests[0].output_tokens.size(), 1u);
  s.complete(r1, 5);
  EXPECT_EQ(s.running()[0]->output_tokens, (std::vector<std::int32_t>{7, 8}));
  // Aborts and cache resets may come while one plan is in flight (engine serve's loop), not two.
  const StepResult r2 = Sample(p2, [](RequestId, std::int32_t) { return 9; });
  const StepPlan& p3 = s.schedule(6);
  const StepResult r3 = Sample(p3, [](RequestId, std::int32_t) { return 10; });
  EXPECT_EQ(s.num_pending_plans(), 2);
  EXPECT_THROW(s.abort(0, 6, "gone"), std::logic_error);
  EXPECT_THROW(s.reset_prefix_cache(), std::logic_error);
  s.complete(r2, 7);
  EXPECT_EQ(s.running()[0]->output_tokens, (std::vector<std::int32_t>{7, 8, 9}));
  EXPECT_FALSE(s.reset_prefix_cache());  // the request still holds its blocks
  // The client goes away while p3 (which samples output 4) is in flight: the request is
  // reported at once, its blocks go back, and p3's token for it is discarded at its complete().
  EXPECT_TRUE(s.abort(0, 8, "gone"));
  EXPECT_EQ(obs.reason[0], "gone");
  EXPECT_EQ(obs.outputs[0], (std::vector<std::int32_t>{7, 8, 9}));
  EXPECT_EQ(s.num_running(), 0u);
  EXPECT_EQ(kv.num_held_blocks(), 0);
  EXPECT_FALSE(s.abort(0, 8, "again"));
  s.complete(r3, 9);
  EXPECT_EQ(s.num_pending_plans(), 0);
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.counters().num_aborted, 1);
  EXPECT_TRUE(s.reset_prefix_cache());
  kv.check_invariants();
}

TEST(AsyncScheduling, PrefillChunksAddNoPlaceholderAndTheFirstTokenIsPipelined) {
  BlockPool pool(64);
  KvCacheManager kv(pool, 16, 1024, true);
  SchedulerConfig c = Config(true);
  c.max_num_batched_tokens = 32;  // a 40-token prompt takes two chunks
  Scheduler s(c, kv, nullptr);
  s.add_request(Spec(0, 40, 3), 0);
  const StepPlan& p0 = s.schedule(0);
  EXPECT_FALSE(p0.requests[0].samples);
  EXPECT_EQ(s.running()[0]->num_output_placeholders, 0);
  const StepResult r0 = Sample(p0, [](RequestId, std::int32_t) { return 1; });
  const StepPlan& p1 = s.schedule(1);  // the rest of the prompt, as without async scheduling
  EXPECT_EQ(p1.requests[0].first_token, 32);
  EXPECT_EQ(p1.requests[0].num_tokens, 8);
  EXPECT_TRUE(p1.requests[0].samples);
  const StepResult r1 = Sample(p1, [](RequestId, std::int32_t) { return 1; });
  s.complete(r0, 2);
  // The first output's position is scheduled before the first output is known.
  const StepPlan& p2 = s.schedule(3);
  EXPECT_EQ(p2.requests[0].first_token, 40);
  EXPECT_TRUE(p2.requests[0].output_tokens.empty());
  (void)r1;
}

// max_tokens is known in advance: vLLM skips a request whose pending token is its last, so a
// length stop costs no extra step; every request yields the same tokens as the synchronous loop.
TEST(AsyncScheduling, LengthStopsCostNoExtraStep) {
  std::map<bool, int> plans;
  std::map<bool, std::map<RequestId, std::vector<std::int32_t>>> outputs;
  for (const bool async : {false, true}) {
    BlockPool pool(64);
    KvCacheManager kv(pool, 16, 1024, true);
    Reports obs;
    Scheduler s(Config(async), kv, &obs);
    s.add_request(Spec(0, 20, 6), 0);
    plans[async] = Drain(
        s, kv, [](RequestId id, std::int32_t i) { return static_cast<std::int32_t>(id * 10 + i); });
    outputs[async] = obs.outputs;
    EXPECT_EQ(obs.reason[0], "length");
    EXPECT_EQ(kv.num_free_blocks(), pool.num_usable_blocks());
  }
  EXPECT_EQ(plans[true], 6);  // the prefill and five decodes, no seventh
  EXPECT_EQ(plans[false], 6);
  EXPECT_EQ(outputs[true], outputs[false]);
}

// A stop token is seen only when its step completes: the plan formed meanwhile holds one more
// decode of the request, whose token is discarded; its blocks are freed when the stop is seen.
TEST(AsyncScheduling, LateStopWastesOneEntryAndFreesBlocksAtTheStop) {
  BlockPool pool(64);
  KvCacheManager kv(pool, 16, 1024, true);
  Reports obs;
  Scheduler s(Config(true), kv, &obs);
  s.add_request(Spec(0, 20, 50, Eos(2)), 0);
  // EOS is output 3 (index 2, sampled by plan 2).
  const TokenFn model = [](RequestId, std::int32_t i) { return i == 2 ? 2 : 5; };
  std::vector<StepResult> results;
  std::vector<std::int64_t> entries;
  for (int step = 0; step < 3; ++step) {
    const StepPlan& p = s.schedule(step);
    entries.push_back(static_cast<std::int64_t>(p.requests.size()));
    results.push_back(Sample(p, model));
    if (step > 0) s.complete(results[static_cast<std::size_t>(step - 1)], step);
  }
  // Plan 3 is formed before plan 2's EOS is known: the request is in it.
  const StepPlan& p3 = s.schedule(3);
  ASSERT_EQ(p3.requests.size(), 1u);
  EXPECT_EQ(p3.requests[0].first_token, 22);
  const StepResult r3 = Sample(p3, model);
  const std::int32_t free_before = kv.num_free_blocks();
  s.complete(results[2], 4);  // EOS: finished now, blocks freed now
  EXPECT_EQ(obs.reason[0], "stop");
  EXPECT_EQ(obs.outputs[0], (std::vector<std::int32_t>{5, 5, 2}));
  EXPECT_EQ(obs.finish_ns[0], 4);
  EXPECT_GT(kv.num_free_blocks(), free_before);
  EXPECT_EQ(kv.num_free_blocks(), pool.num_usable_blocks());
  EXPECT_FALSE(s.has_unfinished());
  // The wasted entry's token is dropped; nothing more is reported.
  s.complete(r3, 5);
  EXPECT_EQ(s.counters().num_finished, 1);
  EXPECT_TRUE(s.schedule(6).empty());
  EXPECT_EQ(entries, (std::vector<std::int64_t>{1, 1, 1}));
}

// Under KV pressure a request whose step is in flight gets preempted while the next plan is
// formed; its token still arrives (vLLM test_preempt_during_execution). Every request ends with
// the tokens the synchronous loop gives it (the model's token depends on (request, index) only),
// with stops by EOS and by length, and the invariants hold after every plan.
TEST(AsyncScheduling, PreemptionInFlightKeepsEveryRequestsTokens) {
  std::map<bool, std::map<RequestId, std::vector<std::int32_t>>> outputs;
  std::map<bool, std::map<RequestId, std::string>> reasons;
  int in_flight = 0;
  std::int64_t preemptions = 0;
  for (const bool async : {false, true}) {
    BlockPool pool(24);  // 23 usable blocks of 16 slots: a few requests at a time
    KvCacheManager kv(pool, 16, 1024, true);
    Reports obs;
    Scheduler s(Config(async, 16), kv, &obs);
    for (RequestId id = 0; id < 12; ++id) {
      s.add_request(
          Spec(id, 30 + static_cast<std::int32_t>(id % 4) * 7,
               40 + static_cast<std::int32_t>(id % 3) * 9, id % 2 == 0 ? Eos(2) : nullptr),
          0);
    }
    const TokenFn model = [](RequestId id, std::int32_t i) {
      return i == 20 + static_cast<std::int32_t>(id) ? 2 : static_cast<std::int32_t>(3 + i % 5);
    };
    Drain(s, kv, model);
    outputs[async] = obs.outputs;
    reasons[async] = obs.reason;
    EXPECT_EQ(kv.num_free_blocks(), pool.num_usable_blocks());
    if (async) {
      in_flight = obs.preempted_in_flight;
      preemptions = s.counters().num_preemptions;
    }
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(in_flight, 0) << "no request was preempted while its step was in flight";
  EXPECT_EQ(outputs[true].size(), 12u);
  EXPECT_EQ(outputs[true], outputs[false]);
  EXPECT_EQ(reasons[true], reasons[false]);
}

TEST(AsyncScheduling, RefusesWhatVllmV1DoesNotRunWithIt) {
  BlockPool pool(64);
  KvCacheManager kv(pool, 16, 1024, true);
  SchedulerConfig multi = Config(true);
  multi.num_scheduler_steps = 4;
  EXPECT_THROW(Scheduler(multi, kv, nullptr), std::invalid_argument);
  SchedulerConfig spec = Config(true);
  spec.speculative.method = SpecMethod::kNgram;
  spec.speculative.num_speculative_tokens = 2;
  EXPECT_THROW(Scheduler(spec, kv, nullptr), std::invalid_argument);
  // Parallel sampling is refused at arrival, with the reason.
  Reports obs;
  Scheduler s(Config(true), kv, &obs);
  RequestSpec n2 = Spec(0, 20, 4);
  n2.n = 2;
  s.add_request(n2, 0);
  EXPECT_EQ(s.counters().num_rejected, 1);
}

// ---- The simulator: the host part overlaps the previous step's device part. ----

// A cost model of fixed parts: `device` seconds of GEMMs and `host` seconds of overhead.
class FixedCost : public CostModel {
 public:
  FixedCost(double device, double host) : device_(device), host_(host) {}
  TimeNs step_time(const StepPlan& plan) const override {
    return seconds_to_ns(breakdown(plan).total());
  }
  StepCostBreakdown breakdown(const StepPlan& plan) const override {
    StepCostBreakdown b;
    if (plan.empty()) return b;
    b.gemm = device_;
    b.overhead = host_;
    return b;
  }
  TimeNs swap_time(std::int64_t) const override { return 0; }
  std::string_view name() const override { return "fixed"; }

 private:
  double device_, host_;
};

TEST(AsyncScheduling, SimBackendChargesTheLongerPartOfAPipelinedStep) {
  StepPlan plan;
  RequestSpec spec = Spec(0, 20, 4);
  plan.requests.emplace_back();
  plan.requests[0].spec = &spec;
  plan.requests[0].first_token = 20;
  plan.requests[0].num_tokens = 1;
  plan.requests[0].samples = true;
  plan.num_decode_tokens = 1;
  for (const auto& [device, host] :
       std::vector<std::pair<double, double>>{{3e-3, 1e-3}, {1e-3, 3e-3}}) {
    FixedCost cost(device, host);
    SimBackend backend(cost);
    plan.pipelined = false;
    EXPECT_EQ(backend.execute(plan).duration_ns, seconds_to_ns(device + host));
    plan.pipelined = true;
    EXPECT_EQ(backend.execute(plan).duration_ns, seconds_to_ns(std::max(device, host)));
  }
}

// `sim run` end to end on the tiny model, whose device part is far below the H100's 500 us step
// overhead: with async scheduling every pipelined step lasts exactly the host part (500 us +
// 4 us per sampled sequence), the first step the whole of it, and the tokens are the same.
TEST(AsyncScheduling, SimRunOverlapsHostTimeWithTheDevice) {
  const fs::path dir = temp_dir("async_sim");
  write_file(dir / "e.yaml",
             "name: async-sim\nseed: 3\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {block_size: 16, num_gpu_blocks: 256, max_num_seqs: 8, max_model_len: 512}\n"
             "workload:\n  type: synthetic\n  num_requests: 8\n  start_s: 0\n"
             "  arrival: {process: fixed, rate: 1.0e12}\n"
             "  prompt_len: {dist: fixed, value: 32}\n  output_len: {dist: fixed, value: 16}\n");
  const auto run = [&](const std::string& name, bool async) {
    ExperimentConfig c = load_experiment(
        (dir / "e.yaml").string(), async ? std::vector<std::string>{"serving.async_scheduling=true"}
                                         : std::vector<std::string>{});
    RunOptions o;
    o.out_dir = (dir / name).string();
    return run_simulation(c, o);
  };
  const RunOutput sync = run("sync", false);
  const RunOutput async = run("async", true);
  const auto sync_steps = read_csv(dir / "sync" / "steps.csv");
  const auto async_steps = read_csv(dir / "async" / "steps.csv");
  ASSERT_EQ(sync_steps.size(), 16u);  // the prefill of all eight, then 15 decodes
  ASSERT_EQ(async_steps.size(), sync_steps.size());
  EXPECT_EQ(async_steps[0].at("duration_ms"), sync_steps[0].at("duration_ms"));
  for (std::size_t k = 1; k < async_steps.size(); ++k) {
    EXPECT_DOUBLE_EQ(std::stod(async_steps[k].at("duration_ms")), 0.5 + 8 * 0.004) << k;
    EXPECT_GT(std::stod(sync_steps[k].at("duration_ms")), 0.532) << k;
  }
  EXPECT_LT(async.summary.duration_s, sync.summary.duration_s);
  EXPECT_NE(read_file(dir / "async" / "config.yaml").find("async_scheduling: true"),
            std::string::npos);
  EXPECT_EQ(read_file(dir / "sync" / "config.yaml").find("async_scheduling"), std::string::npos);
  const auto sync_req = read_csv(dir / "sync" / "requests.csv");
  const auto async_req = read_csv(dir / "async" / "requests.csv");
  ASSERT_EQ(sync_req.size(), async_req.size());
  for (std::size_t k = 0; k < sync_req.size(); ++k) {
    EXPECT_EQ(sync_req[k].at("output_tokens"), async_req[k].at("output_tokens"));
  }
  fs::remove_all(dir);
}

// With the simulated EOS (workload sampling:), a stop costs the pipelined plan one wasted entry:
// the requests end where they end without async scheduling.
TEST(AsyncScheduling, SimRunStopsWhereTheSynchronousRunStops) {
  const fs::path dir = temp_dir("async_sim_stops");
  write_file(dir / "e.yaml",
             "name: async-stops\nseed: 5\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {block_size: 16, num_gpu_blocks: 48, max_num_seqs: 8, max_model_len: 512}\n"
             "workload:\n  type: synthetic\n  num_requests: 40\n"
             "  arrival: {process: poisson, rate: 400}\n"
             "  prompt_len: {dist: uniform, min: 16, max: 96}\n"
             "  output_len: {dist: uniform, min: 4, max: 60}\n"
             "  sampling: {max_tokens: 64}\n");
  const auto run = [&](const std::string& name, bool async) {
    ExperimentConfig c = load_experiment(
        (dir / "e.yaml").string(), async ? std::vector<std::string>{"serving.async_scheduling=true"}
                                         : std::vector<std::string>{});
    RunOptions o;
    o.out_dir = (dir / name).string();
    o.before_step = [](const Scheduler& s, const StepPlan& p) { check_scheduler_invariants(s, p); };
    return run_simulation(c, o);
  };
  const RunOutput sync = run("sync", false);
  const RunOutput async = run("async", true);
  EXPECT_EQ(async.summary.completed, 40);
  const auto a = read_csv(dir / "sync" / "requests.csv");
  const auto b = read_csv(dir / "async" / "requests.csv");
  ASSERT_EQ(a.size(), b.size());
  int stops = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].at("output_tokens"), b[k].at("output_tokens")) << k;
    EXPECT_EQ(a[k].at("reason"), b[k].at("reason")) << k;
    stops += a[k].at("reason") == "stop" ? 1 : 0;
  }
  EXPECT_GT(stops, 0);
  (void)sync;
  fs::remove_all(dir);
}

// A cache so small that preemption leaves only requests whose last tokens are in the plan in
// flight: the scheduler's refill passes change nothing, and it must stop passing (it looped
// forever, unstoppable by SIGTERM) and hand back a plan that only preempted. Seeds 1, 3 and 6
// hung; the engine runs the same scheduler.
TEST(AsyncScheduling, PreemptionWithEveryOtherRequestFinishingEnds) {
  const fs::path dir = temp_dir("async_tiny_cache");
  write_file(dir / "e.yaml",
             "name: async-tiny\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {num_gpu_blocks: 8, max_num_seqs: 16, max_model_len: 512, "
             "async_scheduling: true}\n"
             "workload:\n  type: synthetic\n  num_requests: 40\n"
             "  arrival: {process: fixed, rate: 1.0e12}\n"
             "  prompt_len: {dist: uniform, min: 20, max: 60}\n"
             "  output_len: {dist: uniform, min: 4, max: 40}\n");
  for (const std::uint64_t seed : {1, 3, 6}) {
    SCOPED_TRACE(seed);
    const ExperimentConfig c = load_experiment((dir / "e.yaml").string(), {}, seed);
    RunOptions o;
    o.write_files = false;
    o.before_step = [](const Scheduler& s, const StepPlan& p) { check_scheduler_invariants(s, p); };
    const RunOutput out = run_simulation(c, o);
    EXPECT_EQ(out.summary.completed + out.summary.rejected + out.summary.aborted, 40);
    EXPECT_GT(out.summary.preemptions, 0);
  }
  fs::remove_all(dir);
}

// experiments/async.yaml shows what docs/cost-model.md reports: async scheduling cuts TPOT by
// about the host part at 256 seats, and keeps up with the load at 64 seats where the synchronous
// engine saturates.
TEST(AsyncScheduling, ShippedComparisonShowsWhatItDocuments) {
  const fs::path dir = temp_dir("async_shipped");
  const std::string exp = servelab_home().string() + "/experiments/async.yaml";
  const test_util::Cli cli =
      test_util::run_sim("compare " + exp + " --out " + (dir / "c").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  const auto summary = [&](const std::string& variant) {
    return nlohmann::json::parse(read_file(dir / "c" / variant / "summary.json"));
  };
  const nlohmann::json s256 = summary("sync-256"), a256 = summary("async-256"),
                       s64 = summary("sync-64"), a64 = summary("async-64");
  const auto tpot = [](const nlohmann::json& j) { return j["tpot_ms"]["p50"].get<double>(); };
  const auto rate = [](const nlohmann::json& j) {
    return j["requests"]["completed"].get<double>() / j["duration_s"].get<double>();
  };
  for (const nlohmann::json* j : {&s256, &a256, &s64, &a64}) {
    EXPECT_EQ((*j)["requests"]["completed"].get<int>(), 4000);
  }
  EXPECT_LT(tpot(a256), 0.65 * tpot(s256));
  EXPECT_GT(rate(a64), 1.25 * rate(s64));
  EXPECT_GT(rate(a64), 0.95 * rate(a256));
  fs::remove_all(dir);
}

TEST(AsyncScheduling, ExperimentRefusalsNameTheKey) {
  const fs::path dir = temp_dir("async_refusals");
  const std::string head = "name: x\nmodel: tiny\nhardware: H100-SXM\n";
  const std::string workload = "workload: {type: synthetic, num_requests: 2}\n";
  const auto error = [&](const std::string& text) -> std::string {
    write_file(dir / "e.yaml", text);
    try {
      load_experiment((dir / "e.yaml").string(), {});
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  std::string e =
      error(head + "serving:\n  async_scheduling: true\n  num_scheduler_steps: 4\n" + workload);
  EXPECT_NE(e.find("e.yaml:5:"), std::string::npos) << e;
  EXPECT_NE(e.find("serving.async_scheduling"), std::string::npos) << e;
  EXPECT_NE(e.find("num_scheduler_steps"), std::string::npos) << e;
  e = error(head + "serving:\n  async_scheduling: true\npolicies: {preemption: swap}\n" + workload);
  EXPECT_NE(e.find("e.yaml:5:"), std::string::npos) << e;
  EXPECT_NE(e.find("recompute"), std::string::npos) << e;
  e = error(head + "serving:\n  async_scheduling: true\npolicies: {batch: sarathi}\n" + workload);
  EXPECT_NE(e.find("policies.batch vllm"), std::string::npos) << e;
  e = error(head +
            "serving:\n  async_scheduling: true\n  speculative_config: {method: ngram, "
            "num_speculative_tokens: 2}\n" +
            workload);
  EXPECT_NE(e.find("speculative_config"), std::string::npos) << e;
  e = error(head + "serving:\n  async_scheduling: true\nparallel: {pipeline: 2}\n" + workload);
  EXPECT_NE(e.find("pipeline"), std::string::npos) << e;
  e = error(head + "serving:\n  async_scheduling: yes please\n" + workload);
  EXPECT_NE(e.find("e.yaml:5:"), std::string::npos) << e;
  EXPECT_EQ(error(head + "serving:\n  async_scheduling: false\n" + workload), "");
  fs::remove_all(dir);
}

// ---- The CPU engine: the same tokens as the synchronous loop. ----

// Requests on random tiny weights through the scheduler and the CPU executor, in the engine
// loop's order (sync, or async: plan N+1 before N's tokens are applied), with the invariants
// checked before every plan runs. Returns each request's tokens.
std::map<RequestId, std::vector<std::int32_t>> RunCpu(bool async, double temperature,
                                                      std::int32_t blocks,
                                                      int* in_flight_preemptions = nullptr) {
  const LlamaConfig config =
      load_llama_config("tiny", servelab_home().string() + "/experiments/catalog");
  const LlamaWeights w = LlamaWeights::random(config, 11);
  CpuExecutorOptions opt;
  opt.block_size = 16;
  opt.num_blocks = blocks;
  opt.sampling.temperature = temperature;
  opt.sampling.top_p = 0.9;
  opt.sampling.seed = 42;
  CpuExecutor exec(w, opt);
  BlockPool pool(blocks);
  KvCacheManager kv(pool, 16, 1024, true);
  Reports obs;
  Scheduler s(Config(async, 6), kv, &obs);
  // Stop ids the random model samples now and then, after min_tokens 2.
  auto stops = std::make_shared<StopConditions>();
  stops->min_tokens = 2;
  for (std::int32_t t = 0; t < config.model.vocab_size; t += 7) stops->stop_token_ids.push_back(t);
  for (RequestId id = 0; id < 10; ++id) {
    RequestSpec spec = make_request(
        id, 0, {{7, 0, 16}, {id + 50, 0, 5 + static_cast<std::uint32_t>(id) * 3}}, 12 + id % 4);
    if (id % 3 != 2) spec.stop = stops;
    s.add_request(spec, 0);
  }
  bool pending = false;
  StepResult pending_result;
  TimeNs now = 0;
  for (int guard = 0; guard < 10000; ++guard) {
    const StepPlan& p = s.schedule(++now);
    // Checked as the plan is formed: a late stop applied below leaves a finished request in it.
    if (!p.empty()) check_scheduler_invariants(s, p);
    if (pending) {
      s.complete(pending_result, ++now);
      pending = false;
      if (p.empty()) continue;
    }
    if (p.empty()) break;
    StepResult r = exec.execute(p);
    if (async) {
      pending_result = std::move(r);
      pending = true;
    } else {
      s.complete(r, ++now);
    }
    kv.check_invariants();
  }
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(obs.outputs.size(), 10u);
  if (in_flight_preemptions != nullptr) *in_flight_preemptions = obs.preempted_in_flight;
  return obs.outputs;
}

TEST(AsyncScheduling, CpuEngineGivesTheSynchronousTokensGreedy) {
  const auto sync = RunCpu(false, 0.0, 64);
  EXPECT_EQ(RunCpu(true, 0.0, 64), sync);
  // Under KV pressure (preemptions, some while a step is in flight).
  int in_flight = 0;
  EXPECT_EQ(RunCpu(true, 0.0, 14, &in_flight), RunCpu(false, 0.0, 14));
  EXPECT_GT(in_flight, 0);
  int stopped = 0;
  for (const auto& [id, tokens] : sync) stopped += tokens.size() < 12 + id % 4 ? 1 : 0;
  EXPECT_GT(stopped, 0) << "no request met a stop token";
}

TEST(AsyncScheduling, CpuEngineGivesTheSynchronousTokensSeeded) {
  EXPECT_EQ(RunCpu(true, 0.8, 64), RunCpu(false, 0.8, 64));
  int in_flight = 0;
  EXPECT_EQ(RunCpu(true, 0.8, 10, &in_flight), RunCpu(false, 0.8, 10));
  EXPECT_GT(in_flight, 0);
}

// A request given up by max_preemptions while its step is in flight keeps that step's token, as
// in the synchronous loop (the abort lost it: three requests one token short, in the simulator
// and the engine alike).
TEST(AsyncScheduling, GivingUpARequestInFlightKeepsItsToken) {
  const fs::path dir = temp_dir("async_give_up");
  write_file(dir / "e.yaml",
             "name: async-give-up\nseed: 5\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {block_size: 16, num_gpu_blocks: 12, max_num_batched_tokens: 256, "
             "max_num_seqs: 16, max_model_len: 180}\n"
             "policies: {preemption: {name: recompute, victim: most-blocks, max_preemptions: 1}}\n"
             "workload:\n  type: synthetic\n  num_requests: 40\n  start_s: 0\n"
             "  arrival: {process: fixed, rate: 1.0e12}\n"
             "  prompt_len: {dist: uniform, min: 60, max: 120}\n"
             "  output_len: {dist: uniform, min: 30, max: 60}\n"
             "  shared_prefix: {num_prefixes: 3, length: 32, fraction: 0.6}\n");
  const auto config = [&](bool async) {
    return load_experiment((dir / "e.yaml").string(),
                           async ? std::vector<std::string>{"serving.async_scheduling=true"}
                                 : std::vector<std::string>{});
  };
  for (const bool async : {false, true}) {
    const std::string name = async ? "async" : "sync";
    EngineOptions o;
    o.out_dir = (dir / ("engine-" + name)).string();
    o.write_tokens = true;
    o.before_step = [](const Scheduler& s, const StepPlan& p) { check_scheduler_invariants(s, p); };
    run_engine(config(async), o);
    RunOptions so;
    so.out_dir = (dir / ("sim-" + name)).string();
    run_simulation(config(async), so);
  }
  EXPECT_EQ(read_file(dir / "engine-async" / "tokens.jsonl"),
            read_file(dir / "engine-sync" / "tokens.jsonl"));
  for (const char* side : {"engine", "sim"}) {
    const auto a = read_csv(dir / (std::string(side) + "-sync") / "requests.csv");
    const auto b = read_csv(dir / (std::string(side) + "-async") / "requests.csv");
    ASSERT_EQ(a.size(), b.size());
    int aborted = 0;
    for (std::size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].at("output_tokens"), b[k].at("output_tokens")) << side << " " << k;
      EXPECT_EQ(a[k].at("reason"), b[k].at("reason")) << side << " " << k;
      aborted += a[k].at("status") == "aborted" ? 1 : 0;
    }
    EXPECT_GT(aborted, 0) << side;
  }
  fs::remove_all(dir);
}

// `engine run` with serving.async_scheduling: the same tokens.jsonl as without.
TEST(AsyncScheduling, EngineRunWritesTheSynchronousTokens) {
  const fs::path dir = temp_dir("async_engine");
  write_file(dir / "e.yaml",
             "name: async-engine\nseed: 3\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {block_size: 16, num_gpu_blocks: 24, max_num_seqs: 6, max_model_len: 256}\n"
             "workload:\n  type: synthetic\n  num_requests: 10\n  start_s: 0\n"
             "  arrival: {process: fixed, rate: 1.0e12}\n"
             "  prompt_len: {dist: uniform, min: 10, max: 60}\n"
             "  output_len: {dist: uniform, min: 4, max: 20}\n");
  const auto run = [&](const std::string& name, bool async) {
    ExperimentConfig c = load_experiment(
        (dir / "e.yaml").string(), async ? std::vector<std::string>{"serving.async_scheduling=true"}
                                         : std::vector<std::string>{});
    EngineOptions o;
    o.out_dir = (dir / name).string();
    o.write_tokens = true;
    o.before_step = [](const Scheduler& s, const StepPlan& p) { check_scheduler_invariants(s, p); };
    return run_engine(c, o);
  };
  const RunOutput sync = run("sync", false);
  const RunOutput async = run("async", true);
  EXPECT_EQ(async.summary.completed, 10);
  EXPECT_EQ(read_file(dir / "async" / "tokens.jsonl"), read_file(dir / "sync" / "tokens.jsonl"));
  (void)sync;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
