// Batch formation `sglang` (policies/batch_sglang.cc): prefill batches before decode steps, the
// chunked request continuing first, admission under the reservation of the running requests'
// future outputs and new_token_ratio's decay, and a rejection for what could never be admitted;
// then through an experiment against vLLM's formation.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/request.h"
#include "core/scheduler_observer.h"
#include "policies/registry.h"
#include "scheduler_harness.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "serving/recorder.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

struct Observer : SchedulerObserver {
  void on_reject(const Request& r, TimeNs) override { rejected.push_back(r.id()); }
  std::vector<RequestId> rejected;
};

struct Harness : test_util::SchedulerHarness<Observer> {
  using SchedulerHarness::SchedulerHarness;
  // Runs one step; returns its entries as (id, first token, tokens).
  std::vector<std::tuple<RequestId, std::int32_t, std::int32_t>> Step(TimeNs now) {
    const StepPlan& plan = Schedule(now);
    std::vector<std::tuple<RequestId, std::int32_t, std::int32_t>> out;
    StepResult res;
    res.duration_ns = 1;
    for (const ScheduledRequest& e : plan.requests) {
      out.emplace_back(e.id, e.first_token, e.num_tokens);
      res.sampled_tokens.push_back(e.samples ? 100 : -1);
    }
    Finish(res, now);
    return out;
  }
};

RequestSpec Spec(RequestId id, std::int32_t len, std::int32_t max_out, TimeNs arrival = 0) {
  return make_request(id, arrival,
                      {{unique_content_id(77, id), 0, static_cast<std::uint32_t>(len)}}, max_out);
}

SchedulerConfig Config(const std::string& bf, std::map<std::string, ParamValue> params = {}) {
  SchedulerConfig c;
  use_policy(c, PolicyKind::kBatch, bf, params);
  c.max_num_batched_tokens = 2048;
  c.max_num_seqs = 16;
  c.block_size = 16;
  c.max_model_len = 4096;
  c.enable_prefix_caching = false;
  return c;
}

using Entries = std::vector<std::tuple<RequestId, std::int32_t, std::int32_t>>;

TEST(SglangBatch, PrefillBatchesComeBeforeDecodesAndNeverMix) {
  Harness h(Config("sglang"), 201);
  h.sched.add_request(Spec(0, 40, 50), 0);
  EXPECT_EQ(h.Step(0), (Entries{{0, 0, 40}}));
  EXPECT_EQ(h.Step(1), (Entries{{0, 40, 1}}));  // nothing to admit: a decode step
  h.sched.add_request(Spec(1, 30, 50, 2), 2);
  EXPECT_EQ(h.Step(2), (Entries{{1, 0, 30}}));  // a prefill batch: 0 does not decode
  EXPECT_EQ(h.Step(3), (Entries{{0, 41, 1}, {1, 30, 1}}));
  // vLLM's formation mixes them.
  Harness v(Config("vllm"), 201);
  v.sched.add_request(Spec(0, 40, 50), 0);
  v.Step(0);
  v.Step(1);
  v.sched.add_request(Spec(1, 30, 50, 2), 2);
  EXPECT_EQ(v.Step(2), (Entries{{0, 41, 1}, {1, 0, 30}}));
}

TEST(SglangBatch, TheChunkedRequestContinuesFirst) {
  Harness h(Config("sglang", {{"chunked_prefill_size", std::int64_t{32}}}), 201);
  h.sched.add_request(Spec(0, 70, 5), 0);
  h.sched.add_request(Spec(1, 20, 5), 0);
  EXPECT_EQ(h.Step(0), (Entries{{0, 0, 32}}));
  EXPECT_EQ(h.Step(1), (Entries{{0, 32, 32}}));
  EXPECT_EQ(h.Step(2), (Entries{{0, 64, 6}, {1, 0, 20}}));  // the rest, then an admission
  EXPECT_EQ(h.Step(3), (Entries{{0, 70, 1}, {1, 20, 1}}));
}

// 100 usable blocks (1,600 tokens). Request 0 (16 tokens, up to 1,500 outputs) runs; request 1
// (750 tokens, 100 outputs) needs 850 tokens below what is left after 0's reservation:
// 1,584 - 0.7 x 1,499 = 535 at first. vLLM admits 1 at once; sglang waits while 0 decodes, its
// reservation shrinking as new_token_ratio decays (0.7 down by 0.602 / 600 a step) and 0's
// remaining outputs fall, and admits it only then.
std::int64_t AdmissionStep(const std::string& bf, std::map<std::string, ParamValue> params = {}) {
  Harness h(Config(bf, std::move(params)), 101);
  h.sched.add_request(Spec(0, 16, 1500), 0);
  h.Step(0);
  h.sched.add_request(Spec(1, 750, 100, 1), 1);
  for (TimeNs t = 1; t < 1400; ++t) {
    for (const auto& [id, first, n] : h.Step(t)) {
      if (id == 1 && first == 0) return t;
    }
  }
  return -1;
}

TEST(SglangBatch, AdmissionWaitsForTheReservationAndTheRatioDecays) {
  EXPECT_EQ(AdmissionStep("vllm"), 1);
  const std::int64_t t = AdmissionStep("sglang");
  // Worked out: at the start of step t, 0 has computed 15 + t tokens in ceil((15 + t) / 16)
  // blocks and has 1,500 - t outputs left, and t - 1 decode steps have taken the ratio to
  // 0.7 - (t - 1) x 0.602 / 600 (at least 0.098); the reservation leaves
  // (100 - blocks) x 16 - floor(ratio x (1500 - t)) tokens, which must exceed 850. Without the
  // decay it never would while 0 runs (at most 535).
  std::int64_t expect = -1;
  for (std::int64_t k = 1; k < 1400 && expect < 0; ++k) {
    const double ratio = std::max(0.7 - static_cast<double>(k - 1) * 0.602 / 600, 0.098);
    const std::int64_t blocks = (15 + k + 15) / 16;
    const std::int64_t left =
        (100 - blocks) * 16 - static_cast<std::int64_t>(ratio * static_cast<double>(1500 - k));
    if (850 < left) expect = k;
  }
  EXPECT_EQ(t, expect);
  EXPECT_EQ(t, 397);
  EXPECT_GT(t, 100);
  // A conservativeness near 0 reserves nothing: admitted at once; a large one starts the ratio
  // at SGLang's cap of 1 (10 and 1 / 0.7 alike), later than the default's 0.7.
  EXPECT_EQ(AdmissionStep("sglang", {{"schedule_conservativeness", 0.01}}), 1);
  const std::int64_t capped = AdmissionStep("sglang", {{"schedule_conservativeness", 10.0}});
  EXPECT_EQ(capped, AdmissionStep("sglang", {{"schedule_conservativeness", 1 / 0.7}}));
  EXPECT_GT(capped, t);
  EXPECT_GT(capped, 0);
}

TEST(SglangBatch, RefusesWhatCouldNeverBeAdmitted) {
  Harness h(Config("sglang"), 101);            // 1,600 tokens
  h.sched.add_request(Spec(0, 1000, 600), 0);  // 1,600: not below the cache
  h.sched.add_request(Spec(1, 1000, 599), 0);
  EXPECT_EQ(h.obs.rejected, (std::vector<RequestId>{0}));
  Harness v(Config("vllm"), 101);
  v.sched.add_request(Spec(0, 1000, 600), 0);  // vLLM only needs its blocks: 1,599 tokens
  EXPECT_TRUE(v.obs.rejected.empty());
}

// A request preempted near its end needs prompt + outputs + min(outputs left, clip) to come back,
// up to prompt + max_output_tokens: here the whole cache (160 tokens). It starts again once the
// cache is free; it waited for ever ("simulator stalled", exit 1: the audit's case).
TEST(SglangBatchExperiment, ARequestPreemptedNearItsEndStartsAgain) {
  const auto dir = test_util::temp_dir("sglang_resume");
  test_util::write_file(dir / "t.csv",
                        "arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments\n"
                        "0,143,17,0,0,1:0:143\n1000,1,3,0,0,2:0:1\n");
  test_util::write_file(dir / "exp.yaml",
                        "name: resume\nmodel: tiny\nhardware: H100-SXM\nseed: 1\n"
                        "serving: {block_size: 16, num_gpu_blocks: 11, max_num_batched_tokens: "
                        "256, max_num_seqs: 4, max_model_len: 2048}\n"
                        "policies:\n  batch: {name: sglang, clip_max_new_tokens: 16}\n"
                        "  preemption: {name: recompute, victim: fewest-computed}\n"
                        "  prefix_cache: none\n"
                        "workload: {type: servelab, path: t.csv}\n");
  RunOptions o;
  o.write_files = false;
  const RunSummary s = run_simulation(load_experiment((dir / "exp.yaml").string(), {}), o).summary;
  EXPECT_EQ(s.completed, 2);
  EXPECT_GE(s.preemptions, 1);
}

// On the burst experiment with SGLang's victim (fewest-computed), sglang's reservation all but
// removes preemptions for the same throughput and a later first token (docs/policies.md quotes
// these numbers).
TEST(SglangBatchExperiment, ReservesInsteadOfPreempting) {
  const std::string burst = servelab_home().string() + "/experiments/burst.yaml";
  RunOptions o;
  o.write_files = false;
  auto run = [&](const std::string& bf) {
    return run_simulation(load_experiment(burst, {"policies.batch=" + bf,
                                                  "policies.preemption={name: recompute, victim: "
                                                  "fewest-computed}"}),
                          o)
        .summary;
  };
  const RunSummary vllm = run("vllm"), sglang = run("sglang"), again = run("sglang");
  EXPECT_EQ(sglang.completed, 2000);
  EXPECT_EQ(sglang.num_steps, again.num_steps);
  EXPECT_EQ(sglang.ttft_ms.mean, again.ttft_ms.mean);
  EXPECT_EQ(vllm.preemptions, 254);
  EXPECT_EQ(sglang.preemptions, 1);
  EXPECT_NEAR(vllm.output_tokens_per_s, 3107, 0.5);
  EXPECT_NEAR(sglang.output_tokens_per_s, 3106, 0.5);
  EXPECT_NEAR(vllm.ttft_ms.p50, 281, 0.5);
  EXPECT_NEAR(sglang.ttft_ms.p50, 497, 0.5);
  EXPECT_NEAR(vllm.goodput_requests_per_s, 10.85, 0.005);
  EXPECT_NEAR(sglang.goodput_requests_per_s, 9.42, 0.005);
  // The two prefix-cache rates (docs/metrics.md): the lookup rate counts every lookup but
  // resumed requests' (vLLM's), the lookups repeated while a request waits included; the
  // prompt hit rate (the prompt tokens cached at each request's first
  // admission) is the same 21.8 % for both.
  for (const RunSummary* s : {&vllm, &sglang}) {
    EXPECT_GT(s->prompt_cached_tokens, 0);
    EXPECT_LE(s->prompt_cached_tokens, s->prefix_hit_tokens);
    EXPECT_DOUBLE_EQ(s->prompt_hit_rate, static_cast<double>(s->prompt_cached_tokens) /
                                             static_cast<double>(s->input_tokens));
    EXPECT_NEAR(s->prompt_hit_rate, 0.218, 0.0005);
  }
  // vLLM's rate leaves resumed requests' lookups out: they are counted, and apart.
  EXPECT_GT(vllm.prefix_preempted_hit_tokens, 0);
  EXPECT_LT(vllm.prefix_preempted_queried_tokens, vllm.prefix_queried_tokens);
  EXPECT_DOUBLE_EQ(
      vllm.prefix_hit_rate,
      static_cast<double>(vllm.prefix_hit_tokens - vllm.prefix_preempted_hit_tokens) /
          static_cast<double>(vllm.prefix_queried_tokens - vllm.prefix_preempted_queried_tokens));
  EXPECT_NEAR(vllm.prefix_hit_rate, 0.124, 0.0005);
  EXPECT_NEAR(sglang.prefix_hit_rate, 0.118, 0.0005);
}

}  // namespace
}  // namespace servelab
