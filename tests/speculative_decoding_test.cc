// Speculative decoding in the shared core (serving.speculative_config; vLLM v1's semantics):
// verify entries of 1 + d tokens under the token budget, lookahead slots (EAGLE), rollback of
// rejected drafts, preemption with drafts in flight, and prefix-cache registration of accepted
// tokens only. Hand-worked steps at the scheduler.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "core/victim_rule.h"
#include "serving/experiment.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/kv_capacity.h"
#include "serving/model_config.h"
#include "sim/roofline_cost_model.h"
#include "sim/run.h"
#include "sim/speculation.h"
#include "tests/scheduler_harness.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

RequestSpec Spec(RequestId id, std::int32_t len, std::int32_t max_out) {
  return make_request(id, 0, {{unique_content_id(21, id), 0, static_cast<std::uint32_t>(len)}},
                      max_out);
}

SchedulerConfig Config(std::int32_t k, SpecMethod method = SpecMethod::kNgram,
                       std::int32_t budget = 512, std::int32_t block_size = 16) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = 8;
  c.max_model_len = 1024;
  c.enable_prefix_caching = true;
  c.block_size = block_size;
  c.speculative.method = method;
  c.speculative.num_speculative_tokens = k;
  return c;
}

struct TokenEvent {
  RequestId id;
  std::int32_t value;  // the token appended (output_tokens.back() at the call)
  TimeNs prev;
};

class Recording : public SchedulerObserver {
 public:
  void on_token(const Request& req, TimeNs prev, TimeNs now) override {
    (void)now;
    tokens.push_back({req.id(), req.output_tokens.back(), prev});
  }
  std::vector<TokenEvent> tokens;
};

// A step's result: every entry samples `sampled`, accepts accepted[k] of its drafts (when the
// plan drafts) and proposes `propose` tokens 100, 101, ...
struct Harness : test_util::SchedulerHarness<Recording> {
  using SchedulerHarness::SchedulerHarness;
  void Complete(TimeNs now, std::vector<std::int32_t> accepted = {}, std::int32_t propose = 0,
                std::int32_t sampled = 7) {
    StepResult res;
    res.duration_ns = 1;
    res.sampled_tokens.assign(plan->requests.size(), sampled);
    if (plan->num_draft_tokens > 0) {
      accepted.resize(plan->requests.size(), 0);
      res.num_accepted = accepted;
    }
    res.num_proposed.assign(plan->requests.size(), propose);
    for (std::size_t k = 0; k < plan->requests.size(); ++k) {
      for (std::int32_t j = 0; j < propose; ++j) res.proposed_tokens.push_back(100 + j);
    }
    Finish(res, now);
  }
};

// A prefill samples the first token and the backend proposes 4 drafts; the next step verifies
// them: one decode entry of 1 + 4 tokens, counted in the budget, its drafts listed in the plan.
TEST(SpeculativeDecoding, VerifyEntryCarriesDraftsAndCountsInTheBudget) {
  Harness h(Config(4), 64);
  h.sched.add_request(Spec(0, 20, 50), 0);
  const StepPlan& p0 = h.Schedule(0);
  EXPECT_EQ(p0.num_draft_tokens, 0);
  h.Complete(10, {}, /*propose=*/4);
  ASSERT_EQ(h.Running(0)->spec_token_ids, (std::vector<std::int32_t>{100, 101, 102, 103}));
  EXPECT_EQ(h.Running(0)->num_tokens_with_spec(), 25);

  const StepPlan& p1 = h.Schedule(10);
  ASSERT_EQ(p1.requests.size(), 1u);
  const ScheduledRequest& e = p1.requests[0];
  EXPECT_EQ(e.first_token, 20);
  EXPECT_EQ(e.num_tokens, 5);
  EXPECT_FALSE(e.is_prefill);
  EXPECT_TRUE(e.samples);
  EXPECT_EQ(p1.num_decode_tokens, 5);
  EXPECT_EQ(p1.num_draft_tokens, 4);
  ASSERT_EQ(p1.drafts_of(0).size(), 4u);
  EXPECT_EQ(p1.drafts_of(0)[2], 102);
  // Causal pairs of 5 queries at positions 20..24 over the context: 5*20 + 15.
  EXPECT_EQ(p1.totals.decode_context_tokens + p1.totals.verify_extra_pairs, 5 * 20 + 15);
  EXPECT_EQ(h.Running(0)->num_computed_tokens, 25);
}

// Budget 7 for two requests with 4 drafts each: the first gets 1 + 4, the second the 2 left
// (1 + 1: its other drafts are dropped, as vLLM trims spec_token_ids to the tokens scheduled).
TEST(SpeculativeDecoding, BudgetTruncatesDraftsOfTheLastRequest) {
  Harness h2(Config(4, SpecMethod::kNgram, /*budget=*/7), 64);
  h2.sched.add_request(Spec(0, 5, 50), 0);
  h2.sched.add_request(Spec(1, 2, 50), 0);
  h2.Schedule(0);  // 5 + 2 = 7 prompt tokens
  h2.Complete(10, {}, 4);
  const StepPlan& p = h2.Schedule(10);
  ASSERT_EQ(p.requests.size(), 2u);
  EXPECT_EQ(p.requests[0].num_tokens, 5);
  EXPECT_EQ(p.requests[1].num_tokens, 2);
  EXPECT_EQ(p.num_tokens(), 7);
  EXPECT_EQ(p.num_draft_tokens, 5);
  EXPECT_EQ(p.drafts_of(1).size(), 1u);
  EXPECT_EQ(h2.Running(1)->spec_token_ids.size(), 1u);
}

// Rollback: 2 of 4 drafts accepted. The request gains 3 tokens (the accepted drafts, then the
// verifier's token), num_computed_tokens falls by the 2 rejected, the blocks stay in the table
// and the slot accounting shrinks to the KV that remains. Each token is its own on_token call.
TEST(SpeculativeDecoding, RejectedDraftsRollBackKeepingTheirBlocks) {
  Harness h(Config(4), 64);
  h.sched.add_request(Spec(0, 30, 50), 0);
  h.Schedule(0);
  h.Complete(10, {}, 4);
  h.Schedule(10);  // positions 30..34: the table grows to 3 blocks
  const Request* r = h.Running(0);
  EXPECT_EQ(r->block_table.size(), 3u);
  EXPECT_EQ(r->kv_accounted_tokens(), 35);
  const std::vector<BlockId> table = r->block_table;
  h.obs.tokens.clear();
  h.Complete(20, {2}, 4, /*sampled=*/9);
  EXPECT_EQ(r->output_tokens, (std::vector<std::int32_t>{7, 100, 101, 9}));
  EXPECT_EQ(r->num_computed_tokens, 33);  // 30 + 1 + 2 accepted
  EXPECT_EQ(r->num_tokens(), 34);
  EXPECT_EQ(r->block_table, table);  // kept, as vLLM v1 does
  EXPECT_EQ(r->kv_accounted_tokens(), 33);
  EXPECT_EQ(h.kv.num_kv_slots(), 33);
  ASSERT_EQ(h.obs.tokens.size(), 3u);
  EXPECT_EQ(h.obs.tokens[0].value, 100);
  EXPECT_EQ(h.obs.tokens[0].prev, 10);
  EXPECT_EQ(h.obs.tokens[2].value, 9);
  EXPECT_EQ(h.obs.tokens[2].prev, 20);
  EXPECT_EQ(h.sched.counters().num_draft_tokens, 4);
  EXPECT_EQ(h.sched.counters().num_accepted_tokens, 2);
  // vLLM's spec-decode counters: one verify entry with drafts, positions 0 and 1 accepted.
  EXPECT_EQ(h.sched.counters().num_drafts, 1);
  EXPECT_EQ(h.sched.counters().num_accepted_tokens_per_pos,
            (std::vector<std::int64_t>{1, 1, 0, 0}));
  // The next verify starts at the last known token, in the slots the rejected drafts had.
  const StepPlan& p = h.Schedule(20);
  EXPECT_EQ(p.requests[0].first_token, 33);
  EXPECT_EQ(p.requests[0].num_tokens, 5);
  EXPECT_EQ(h.Running(0)->block_table, table);  // 38 slots still fit 3 blocks
}

// Drafts never outrun the request: at most max_output_tokens - outputs - 1 are kept, so a full
// acceptance ends exactly at the output length and the request finishes.
TEST(SpeculativeDecoding, ProposalsAreCappedByTheRemainingOutputs) {
  Harness h(Config(4), 64);
  h.sched.add_request(Spec(0, 10, 3), 0);
  h.Schedule(0);
  h.Complete(10, {}, 4);
  EXPECT_EQ(h.Running(0)->spec_token_ids.size(), 1u);  // 3 - 1 - 1
  const StepPlan& p = h.Schedule(10);
  EXPECT_EQ(p.requests[0].num_tokens, 2);
  h.Complete(20, {1}, 4);
  EXPECT_EQ(h.sched.counters().num_finished, 1);
  EXPECT_FALSE(h.sched.has_unfinished());
}

// EAGLE reserves k lookahead slots in every allocation (vLLM v1's num_lookahead_tokens), capped
// at the request's maximum length; n-gram reserves none.
TEST(SpeculativeDecoding, EagleAllocatesLookaheadSlots) {
  Harness ng(Config(3, SpecMethod::kNgram, 512, 4), 64);
  Harness ea(Config(3, SpecMethod::kEagle, 512, 4), 64);
  for (Harness* h : {&ng, &ea}) {
    h->sched.add_request(Spec(0, 8, 20), 0);
    h->Schedule(0);
  }
  // Admission reserves no lookahead (vLLM's effective_lookahead_tokens: nothing computed yet).
  EXPECT_EQ(ng.Running(0)->block_table.size(), 2u);  // 8 slots
  EXPECT_EQ(ea.Running(0)->block_table.size(), 2u);  // 8 slots
  // Running steps do: 1 token at position 8, then at 9, each with 3 lookahead slots (blocks of 4).
  for (Harness* h : {&ng, &ea}) {
    h->Complete(10, {}, 0);
    h->Schedule(10);
  }
  EXPECT_EQ(ng.Running(0)->block_table.size(), 3u);  // 9 slots
  EXPECT_EQ(ea.Running(0)->block_table.size(), 3u);  // 9 + 3 lookahead slots
  for (Harness* h : {&ng, &ea}) {
    h->Complete(20, {}, 0);
    h->Schedule(20);
  }
  EXPECT_EQ(ng.Running(0)->block_table.size(), 3u);  // 10 slots
  EXPECT_EQ(ea.Running(0)->block_table.size(), 4u);  // 10 + 3 lookahead slots
  // Near the end the lookahead shrinks: prompt 8 + 2 outputs = 9 positions ever hold KV.
  Harness end(Config(3, SpecMethod::kEagle, 512, 4), 64);
  end.sched.add_request(Spec(0, 8, 2), 0);
  end.Schedule(0);
  end.Complete(10, {}, 0);
  end.Schedule(10);
  EXPECT_EQ(end.Running(0)->block_table.size(), 3u);  // 9 slots, not 12
  EXPECT_EQ(end.Running(0)->kv_accounted_tokens(), 9);
}

// Preemption with drafts in flight: the victim (the last running request) loses its drafts and
// its KV; on resume it prefills prompt + outputs (num_tokens, no drafts) and proposes again.
TEST(SpeculativeDecoding, PreemptionDropsDraftsInFlight) {
  // Block size 4, 6 usable blocks: two requests of 8-token prompts take 4; their verify steps
  // (1 + 4 tokens from position 8) need 2 more blocks each.
  Harness h(Config(4, SpecMethod::kNgram, 512, 4), 7);
  h.sched.add_request(Spec(0, 8, 12), 0);
  h.sched.add_request(Spec(1, 8, 12), 0);
  h.Schedule(0);
  h.Complete(10, {}, 4);
  ASSERT_EQ(h.sched.running()[1]->spec_token_ids.size(), 4u);
  const StepPlan& p = h.Schedule(10);
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], 1u);
  ASSERT_EQ(p.requests.size(), 1u);
  EXPECT_EQ(p.requests[0].num_tokens, 5);
  const std::vector<Request*> waiting = h.sched.waiting();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_TRUE(waiting[0]->spec_token_ids.empty());
  EXPECT_EQ(waiting[0]->num_computed_tokens, 0);
  EXPECT_EQ(waiting[0]->num_tokens_with_spec(), 9);
  EXPECT_EQ(h.plan->num_draft_tokens, 4);
}

// The first running request: a victim already scheduled in the step (as vLLM's priority rule
// may pick).
class FirstRunningVictim final : public VictimRule {
 public:
  std::string_view name() const override { return "first-running"; }
  std::size_t pick(std::span<Request* const> running) const override {
    (void)running;
    return 0;
  }
};

// A refunded victim (a rule, already scheduled in this step) gives its 1 + d
// tokens and its d drafts back to the plan's totals.
TEST(SpeculativeDecoding, RefundedVictimReturnsItsVerifyTokens) {
  SchedulerConfig c = Config(4, SpecMethod::kNgram, 512, 4);
  c.victim = std::make_shared<FirstRunningVictim>();
  Harness h(c, 7);
  h.sched.add_request(Spec(0, 8, 12), 0);
  h.sched.add_request(Spec(1, 8, 12), 0);
  h.Schedule(0);
  h.Complete(10, {}, 4);
  const StepPlan& p = h.Schedule(10);
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], 0u);
  ASSERT_EQ(p.requests.size(), 1u);
  EXPECT_EQ(p.requests[0].id, 1u);
  EXPECT_EQ(p.num_decode_tokens, 5);
  EXPECT_EQ(p.num_draft_tokens, 4);
  EXPECT_EQ(p.drafts_of(0).size(), 4u);
  EXPECT_EQ(p.totals.verify_extra_pairs, 5 * 8 + 15 - 13);
}

// Drafts are never registered in the prefix cache: with block size 4 and a 3-token prompt, the
// verify step writes positions 3..7; block 1 (positions 4..7) holds only drafts and stays
// unregistered, whatever is rejected; it is registered once accepted tokens fill it.
TEST(SpeculativeDecoding, PrefixCacheRegistersAcceptedTokensOnly) {
  Harness h(Config(4, SpecMethod::kNgram, 512, 4), 32);
  h.sched.add_request(Spec(0, 3, 20), 0);
  h.Schedule(0);
  h.Complete(10, {}, 4);
  h.Schedule(10);
  const Request* r = h.Running(0);
  EXPECT_EQ(r->block_table.size(), 2u);
  EXPECT_EQ(r->num_cached_blocks(), 1);  // block 0: prompt + the first output
  h.Complete(20, {1}, 4);                // 3 + 1 + 1 = 5 computed, 6 known
  EXPECT_EQ(r->num_cached_blocks(), 1);
  h.Schedule(20);  // verifies positions 5..9; known tokens reach 6: block 1 not full of them
  EXPECT_EQ(r->num_cached_blocks(), 1);
  h.Complete(30, {4}, 4);  // all accepted: 10 computed, 11 known
  h.Schedule(30);
  EXPECT_EQ(r->num_cached_blocks(), 2);  // positions 4..7 now known and computed
}

TEST(SpeculativeDecoding, RefusesMultiStepNegativeKAndParallelSampling) {
  BlockPool pool(16);
  KvCacheManager kv(pool, 16, 1024, true);
  SchedulerConfig c = Config(2);
  c.num_scheduler_steps = 4;
  EXPECT_THROW({ Scheduler bad(c, kv, nullptr); }, std::invalid_argument);
  SchedulerConfig neg = Config(-1);
  EXPECT_THROW({ Scheduler bad(neg, kv, nullptr); }, std::invalid_argument);
  // Parallel sampling is refused at arrival.
  Scheduler s(Config(2), kv, nullptr);
  RequestSpec n2 = Spec(0, 8, 4);
  n2.n = 2;
  s.add_request(n2, 0);
  EXPECT_EQ(s.counters().num_rejected, 1);
}

// With speculation off nothing changes: no drafts, no proposals kept.
TEST(SpeculativeDecoding, OffByDefault) {
  SchedulerConfig c = Config(0);
  Harness h(c, 64);
  h.sched.add_request(Spec(0, 20, 5), 0);
  h.Schedule(0);
  h.Complete(10, {}, 4);
  EXPECT_TRUE(h.Running(0)->spec_token_ids.empty());
  EXPECT_EQ(h.Schedule(10).requests[0].num_tokens, 1);
}

// ---- The simulator: acceptance draws, draft cost, verify pricing, the experiment keys ----

StepPlan VerifyPlan(std::int32_t entries, std::int32_t drafts, std::int32_t context) {
  static const std::vector<std::int32_t> kDrafts(64, 0);
  StepPlan plan;
  for (std::int32_t i = 0; i < entries; ++i) {
    ScheduledRequest r;
    r.id = static_cast<RequestId>(i);
    r.first_token = context;
    r.num_tokens = 1 + drafts;
    r.samples = true;
    plan.requests.push_back(r);
    plan.num_decode_tokens += 1 + drafts;
    if (drafts > 0) {
      plan.draft_tokens.push_back(
          std::span<const std::int32_t>(kDrafts.data(), static_cast<std::size_t>(drafts)));
    }
  }
  plan.num_draft_tokens = entries * drafts;
  return plan;
}

struct Llama8B {
  ModelConfig model = load_model("Llama-3-8B", default_catalog_dir());
  HardwareConfig hw = load_hardware("H100-SXM", default_catalog_dir());
  RooflineCostModel roofline{model, hw, 16};
};

TEST(SimSpeculation, AcceptanceStopsAtTheFirstRejection) {
  Llama8B m;
  SpeculativeConfig c;
  c.method = SpecMethod::kNgram;
  c.num_speculative_tokens = 4;
  for (const double p : {0.0, 1.0}) {
    c.acceptance_rates = {p};
    SimSpeculation spec(c, 1, m.roofline, nullptr);
    StepResult r;
    EXPECT_EQ(spec.apply(VerifyPlan(3, 4, 100), r).seconds, 0.0);  // n-gram drafting is free
    EXPECT_EQ(r.num_accepted, std::vector<std::int32_t>(3, p == 1.0 ? 4 : 0));
    EXPECT_EQ(r.num_proposed, std::vector<std::int32_t>(3, 4));
    EXPECT_EQ(r.proposed_tokens.size(), 12u);
  }
  // p = 0.5 for 4 drafts: E[accepted] = 0.5 + 0.25 + 0.125 + 0.0625 = 0.9375. Per position:
  // {1, 0} accepts exactly the first draft.
  c.acceptance_rates = {0.5};
  SimSpeculation half(c, 7, m.roofline, nullptr);
  double sum = 0;
  const int n = 20000;
  StepResult r;
  const StepPlan one = VerifyPlan(1, 4, 100);
  for (int i = 0; i < n; ++i) {
    half.apply(one, r);
    sum += r.num_accepted[0];
  }
  EXPECT_NEAR(sum / n, 0.9375, 0.03);
  c.acceptance_rates = {1.0, 0.0};
  SimSpeculation table(c, 7, m.roofline, nullptr);
  table.apply(one, r);
  EXPECT_EQ(r.num_accepted[0], 1);
}

TEST(SimSpeculation, DraftCostByMethod) {
  Llama8B m;
  SpeculativeConfig c;
  c.num_speculative_tokens = 4;
  c.acceptance_rates = {0.7};
  c.method = SpecMethod::kEagle;
  const SimSpeculation eagle(c, 1, m.roofline, nullptr);
  c.method = SpecMethod::kDraftModel;
  const SimSpeculation draft(
      c, 1, m.roofline,
      std::make_unique<RooflineCostModel>(load_model("tiny", default_catalog_dir()), m.hw, 16));
  c.method = SpecMethod::kNgram;
  const SimSpeculation ngram(c, 1, m.roofline, nullptr);
  EXPECT_EQ(ngram.draft_seconds(8, 8000), 0.0);
  const double e = eagle.draft_seconds(8, 8000);
  // EAGLE: 4 x (one of 32 layers + the LM head) of a decode step: well under one target step.
  const StepCostBreakdown step = m.roofline.breakdown(VerifyPlan(8, 0, 1000));
  EXPECT_GT(e, 4 * step.lm_head);
  EXPECT_LT(e, step.total() - step.overhead);
  EXPECT_GT(draft.draft_seconds(8, 8000), 0.0);
  EXPECT_GT(draft.draft_seconds(64, 64000), draft.draft_seconds(8, 8000));
  EXPECT_EQ(draft.draft_seconds(0, 0), 0.0);
  // Their work, for MFU, MBU and the power model (the passes were priced at idle power): a draft
  // model's passes stream its weights once each; EAGLE's head is its share of a target step's.
  const DraftWork dw = draft.draft_work(8, 8000);
  const ModelConfig tiny = load_model("tiny", default_catalog_dir());
  EXPECT_GT(dw.bytes, 4.0 * static_cast<double>(tiny.num_layers) *
                          static_cast<double>(tiny.linear_weight_bytes_per_layer()));
  EXPECT_GT(dw.flops, 0.0);
  const DraftWork ew = eagle.draft_work(8, 8000);
  EXPECT_GT(ew.bytes, 0.0);
  EXPECT_LT(ew.bytes, step.bytes);
  EXPECT_EQ(ngram.draft_work(8, 8000).bytes, 0.0);
}

// The verify pass of 1 + 4 tokens: at batch 1 it costs a few percent more than a decode step
// (weights read once either way); at batch 256 its 1,280 GEMM rows are compute-bound and cost
// more than two decode steps. The LM head computes logits for the drafts too.
TEST(SimSpeculation, VerifyStepPricing) {
  Llama8B m;
  const auto t = [&](std::int32_t b, std::int32_t d) {
    return static_cast<double>(m.roofline.step_time(VerifyPlan(b, d, 512)));
  };
  EXPECT_LT(t(1, 4), 1.10 * t(1, 0));
  EXPECT_GT(t(256, 4), 2.0 * t(256, 0));
  const StepFeatures f = StepFeatures::from_plan(VerifyPlan(2, 4, 512));
  EXPECT_EQ(f.draft_tokens, 8);
  EXPECT_EQ(f.decode_pairs, 2 * causal_pairs(512, 5));
  const StepCostBreakdown with = m.roofline.breakdown(VerifyPlan(2, 4, 512));
  StepPlan no_drafts = VerifyPlan(2, 4, 512);
  no_drafts.num_draft_tokens = 0;
  EXPECT_GT(with.lm_head, m.roofline.breakdown(no_drafts).lm_head);
}

using namespace test_util;

// summary.json's spec_decode object: vLLM's counters, consistent with each other (docs/metrics.md).
void ExpectSpecDecode(const nlohmann::json& summary, std::size_t k) {
  ASSERT_TRUE(summary.contains("spec_decode"));
  const nlohmann::json& d = summary["spec_decode"];
  const auto drafts = d["num_drafts"].get<std::int64_t>();
  const auto draft_tokens = d["num_draft_tokens"].get<std::int64_t>();
  const auto accepted = d["num_accepted_tokens"].get<std::int64_t>();
  const auto per_pos = d["num_accepted_tokens_per_pos"].get<std::vector<std::int64_t>>();
  EXPECT_GT(drafts, 0);
  EXPECT_GE(draft_tokens, drafts);
  EXPECT_LE(draft_tokens, drafts * static_cast<std::int64_t>(k));
  EXPECT_GT(accepted, 0);
  EXPECT_LE(accepted, draft_tokens);
  ASSERT_EQ(per_pos.size(), k);
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < k; ++i) {
    sum += per_pos[i];
    if (i > 0) {
      EXPECT_LE(per_pos[i], per_pos[i - 1]);  // acceptance stops at a rejection
    }
  }
  EXPECT_EQ(sum, accepted);
  EXPECT_LE(per_pos[0], drafts);
  EXPECT_DOUBLE_EQ(d["acceptance_rate"].get<double>(),
                   static_cast<double>(accepted) / static_cast<double>(draft_tokens));
  EXPECT_DOUBLE_EQ(d["mean_acceptance_length"].get<double>(),
                   1.0 + static_cast<double>(accepted) / static_cast<double>(drafts));
}

std::string Experiment(const std::string& spec) {
  return "model: Llama-3-8B\nhardware: H100-SXM\nserving:\n  speculative_config: " + spec +
         "\nworkload: {type: synthetic, num_requests: 20, arrival: {process: poisson, rate: 50}, "
         "prompt_len: {dist: fixed, value: 64}, output_len: {dist: fixed, value: 32}}\n";
}

TEST(SpeculativeRun, BadKeysAreConfigErrorsNamingThem) {
  const fs::path dir = temp_dir("specdec_errors");
  const std::pair<std::string, std::string> cases[] = {
      {"{method: medusa, num_speculative_tokens: 2}", "serving.speculative_config.method"},
      {"{method: ngram}", "num_speculative_tokens"},
      {"{method: ngram, num_speculative_tokens: 65, acceptance_rate: 0.5}",
       "serving.speculative_config.num_speculative_tokens"},
      {"{method: ngram, num_speculative_tokens: 2, prompt_lookup_min: 3, prompt_lookup_max: 2, "
       "acceptance_rate: 0.5}",
       "serving.speculative_config.prompt_lookup_max"},
      {"{method: eagle, num_speculative_tokens: 2, prompt_lookup_min: 2, acceptance_rate: 0.5}",
       "serving.speculative_config.prompt_lookup_min"},
      {"{method: ngram, num_speculative_tokens: 2, acceptance_rate: 1.5}",
       "serving.speculative_config.acceptance_rate"},
      {"{method: ngram, num_speculative_tokens: 2, acceptance_rate: [0.5, 0.5, 0.5]}",
       "serving.speculative_config.acceptance_rate"},
      {"{method: ngram, num_speculative_tokens: 2, acceptance: 0.5}", "acceptance"},
      {"{method: ngram, num_speculative_tokens: 2}", "acceptance_rate"},
      {"{method: draft_model, num_speculative_tokens: 2, acceptance_rate: 0.5}", "model"},
      {"{method: draft_model, model: nosuch, num_speculative_tokens: 2, acceptance_rate: 0.5}",
       "serving.speculative_config.model"},
  };
  for (const auto& [spec, key] : cases) {
    write_file(dir / "e.yaml", Experiment(spec));
    const Cli cli =
        run_sim("run " + (dir / "e.yaml").string() + " -q --out " + (dir / "out").string(), dir);
    EXPECT_EQ(cli.code, 2) << spec << "\n" << cli.err;
    EXPECT_NE(cli.err.find("e.yaml:4:"), std::string::npos) << spec << "\n" << cli.err;
    EXPECT_NE(cli.err.find(key), std::string::npos) << spec << "\n" << cli.err;
  }
  fs::remove_all(dir);
}

// The drafter takes memory from the KV cache, as vLLM loads it: a draft model's weights and its
// layers' KV in every block; an EAGLE head one layer of the target's shape. n-gram takes none.
TEST(SpeculativeRun, DraftersTakeTheirMemoryFromTheKvCache) {
  const fs::path dir = temp_dir("specdec_memory");
  RunOptions o;
  o.write_files = false;
  const auto blocks = [&](const std::string& spec) {
    write_file(dir / "e.yaml", Experiment(spec));
    const RunOutput out = run_simulation(load_experiment((dir / "e.yaml").string(), {}), o);
    return std::make_pair(out.num_gpu_blocks, out.block_bytes);
  };
  const auto [plain, plain_bytes] = blocks("{method: ngram, num_speculative_tokens: 0}");
  const auto [ngram, ngram_bytes] =
      blocks("{method: ngram, num_speculative_tokens: 4, acceptance_rate: 0.5}");
  const auto [draft, draft_bytes] = blocks(
      "{method: draft_model, model: Llama-3.2-1B, num_speculative_tokens: 4, acceptance_rate: "
      "0.5}");
  const auto [eagle, eagle_bytes] =
      blocks("{method: eagle, num_speculative_tokens: 4, acceptance_rate: 0.5}");
  EXPECT_EQ(ngram, plain);
  EXPECT_EQ(ngram_bytes, plain_bytes);
  const std::string catalog = servelab_home().string() + "/experiments/catalog";
  const ModelConfig target = load_model("Llama-3-8B", catalog);
  const ModelConfig small = load_model("Llama-3.2-1B", catalog);
  EXPECT_EQ(draft_bytes, plain_bytes + kv_block_bytes(small, 16));
  EXPECT_EQ(eagle_bytes, plain_bytes + plain_bytes / target.num_layers);
  // The bytes the target's blocks had, less the drafter's weights, over the larger blocks (the
  // target's count was floored: at most one block more).
  EXPECT_NEAR(draft, (plain * plain_bytes - small.weight_bytes()) / draft_bytes, 1);
  EXPECT_NEAR(eagle, (plain * plain_bytes - target.layer_weight_bytes()) / eagle_bytes, 1);
  EXPECT_LT(draft, 0.8 * static_cast<double>(plain));  // 23 % fewer blocks (cost-model.md)
  // A quantized target keeps its EAGLE head in the dtype (vLLM's draft is unquantized unless
  // speculative_config.quantization says so): the head's bytes are those of a bf16 layer.
  const auto with_awq = [&](const std::string& spec) {
    write_file(dir / "e.yaml", Experiment(spec));
    const RunOutput out = run_simulation(
        load_experiment((dir / "e.yaml").string(), {"model.quantization=awq_marlin"}), o);
    return std::make_pair(out.num_gpu_blocks, out.block_bytes);
  };
  const auto [awq_plain, awq_bytes] = with_awq("{method: ngram, num_speculative_tokens: 0}");
  const auto [awq_eagle, awq_eagle_bytes] =
      with_awq("{method: eagle, num_speculative_tokens: 4, acceptance_rate: 0.5}");
  EXPECT_EQ(awq_eagle_bytes, awq_bytes + awq_bytes / target.num_layers);
  EXPECT_NEAR(awq_eagle, (awq_plain * awq_bytes - target.layer_weight_bytes()) / awq_eagle_bytes,
              1);
  fs::remove_all(dir);
}

// The EAGLE head of a quantized target is priced in the dtype: its draft passes cost what they
// cost on the unquantized target (one layer and the LM head each).
TEST(SimSpeculation, EagleHeadOfAQuantizedTargetIsUnquantized) {
  const std::string catalog = servelab_home().string() + "/experiments/catalog";
  const HardwareConfig hw = load_hardware("H100-SXM", catalog);
  ModelConfig plain = load_model("Llama-3-8B", catalog);
  ModelConfig awq = plain;
  awq.quantization = "awq_marlin";
  const RooflineCostModel plain_roofline(plain, hw, 16), awq_roofline(awq, hw, 16);
  SpeculativeConfig c;
  c.num_speculative_tokens = 4;
  c.acceptance_rates = {0.7};
  c.method = SpecMethod::kEagle;
  const SimSpeculation on_plain(c, 1, plain_roofline, nullptr);
  const SimSpeculation on_awq(c, 1, awq_roofline,
                              std::make_unique<RooflineCostModel>(plain, hw, 16));
  const SimSpeculation priced_quantized(c, 1, awq_roofline, nullptr);
  EXPECT_DOUBLE_EQ(on_awq.draft_seconds(8, 8000), on_plain.draft_seconds(8, 8000));
  EXPECT_LT(priced_quantized.draft_seconds(8, 8000), on_plain.draft_seconds(8, 8000));
}

// n-gram lookup lengths: vLLM's defaults, 5 and 5 when neither is given; one given sets both.
TEST(SpeculativeRun, NgramLookupDefaultsAreVllms) {
  const fs::path dir = temp_dir("specdec_ngram_defaults");
  const auto lookup = [&](const std::string& extra) {
    write_file(dir / "e.yaml", Experiment("{method: ngram, num_speculative_tokens: 2, "
                                          "acceptance_rate: 0.5" +
                                          extra + "}"));
    const SpeculativeConfig sp =
        load_experiment((dir / "e.yaml").string(), {}).scheduler.speculative;
    return std::make_pair(sp.prompt_lookup_min, sp.prompt_lookup_max);
  };
  EXPECT_EQ(lookup(""), std::make_pair(5, 5));
  EXPECT_EQ(lookup(", prompt_lookup_min: 2"), std::make_pair(2, 2));
  EXPECT_EQ(lookup(", prompt_lookup_max: 3"), std::make_pair(3, 3));
  EXPECT_EQ(lookup(", prompt_lookup_min: 1, prompt_lookup_max: 4"), std::make_pair(1, 4));
  fs::remove_all(dir);
}

// A run with speculation: deterministic, the same requests complete, fewer steps at batch 1
// with a high acceptance; num_speculative_tokens 0 is byte-identical to no section at all.
TEST(SpeculativeRun, RunsDeterministicallyAndOffIsIdentical) {
  const fs::path dir = temp_dir("specdec_run");
  const std::string body = "model: Llama-3-8B\nhardware: H100-SXM\nserving:\n  max_num_seqs: 1\n";
  const std::string workload =
      "workload: {type: synthetic, num_requests: 10, arrival: {process: poisson, rate: 50}, "
      "prompt_len: {dist: fixed, value: 64}, output_len: {dist: fixed, value: 64}}\n";
  write_file(dir / "plain.yaml", body + workload);
  write_file(dir / "off.yaml", body +
                                   "  speculative_config: {method: ngram, num_speculative_tokens: "
                                   "0, acceptance_rate: 0.9}\n" +
                                   workload);
  write_file(dir / "on.yaml", body +
                                  "  speculative_config: {method: ngram, num_speculative_tokens: "
                                  "4, acceptance_rate: 0.9}\n" +
                                  workload);
  for (const char* name : {"plain", "off", "on", "on2"}) {
    const std::string file = std::string(name) == "on2" ? "on" : name;
    const Cli cli = run_sim(
        "run " + (dir / (file + ".yaml")).string() + " -q --out " + (dir / name).string(), dir);
    ASSERT_EQ(cli.code, 0) << name << cli.err;
  }
  EXPECT_EQ(read_file(dir / "plain" / "requests.csv"), read_file(dir / "off" / "requests.csv"));
  EXPECT_EQ(read_file(dir / "plain" / "steps.csv"), read_file(dir / "off" / "steps.csv"));
  EXPECT_EQ(read_file(dir / "on" / "requests.csv"), read_file(dir / "on2" / "requests.csv"));
  const auto plain = nlohmann::json::parse(read_file(dir / "plain" / "summary.json"));
  const auto on = nlohmann::json::parse(read_file(dir / "on" / "summary.json"));
  EXPECT_EQ(on["requests"]["completed"], 10);
  EXPECT_LT(on["num_steps"].get<double>(), plain["num_steps"].get<double>() / 2);
  EXPECT_LT(on["tpot_ms"]["mean"].get<double>(), plain["tpot_ms"]["mean"].get<double>() / 2);
  // The spec-decode counters (docs/metrics.md): only with speculation on.
  EXPECT_FALSE(plain.contains("spec_decode"));
  EXPECT_FALSE(
      nlohmann::json::parse(read_file(dir / "off" / "summary.json")).contains("spec_decode"));
  ExpectSpecDecode(on, 4);
  // At 0.9 per position the acceptance rate is near 0.9 + 0.81 + ... over 4 (about 0.74).
  EXPECT_GT(on["spec_decode"]["acceptance_rate"].get<double>(), 0.6);
  fs::remove_all(dir);
}

// Stop conditions (workload.sampling's eos_probability): an accepted draft is the target's token,
// so every request stops where it stops without speculation, whatever the number of drafts
// (the drafts were token 0, never the simulated EOS: requests ran on past their stop).
TEST(SpeculativeRun, AcceptedDraftsStopWhereTheModelStops) {
  const fs::path dir = temp_dir("specdec_stops");
  const std::string base = servelab_home().string() +
                           "/experiments/burst-tiny.yaml -q --set workload.num_requests=60 "
                           "--set 'workload.sampling={max_tokens: 120, eos_probability: 0.2}'";
  const auto outputs = [&](const std::string& name, const std::string& spec) {
    const Cli cli = run_sim("run " + base + spec + " --out " + (dir / name).string(), dir);
    EXPECT_EQ(cli.code, 0) << name << cli.err;
    std::vector<std::string> out;  // each request's output tokens and finish reason
    for (const auto& r : read_csv(dir / name / "requests.csv")) {
      out.push_back(r.at("id") + ":" + r.at("output_tokens") + ":" + r.at("reason"));
    }
    return out;
  };
  const std::vector<std::string> plain = outputs("plain", "");
  ASSERT_EQ(plain.size(), 60u);
  for (const char* k : {"4", "64"}) {
    for (const char* rate : {"1", "0.5"}) {
      SCOPED_TRACE(std::string("k ") + k + ", acceptance " + rate);
      EXPECT_EQ(outputs(std::string("k") + k + "-" + rate,
                        std::string(" --set 'serving.speculative_config={method: ngram, "
                                    "num_speculative_tokens: ") +
                            k + ", acceptance_rate: " + rate + "}'"),
                plain);
    }
  }
  fs::remove_all(dir);
}

// A cluster run speculates per replica: each replica's counters add up in summary.json, the run
// is deterministic, and prefill/decode disaggregation works with it.
TEST(SpeculativeRun, ClusterRunsSpeculatePerReplica) {
  const fs::path dir = temp_dir("specdec_cluster");
  const std::string body =
      "model: Llama-3-8B\nhardware: H100-SXM\nserving:\n  max_num_seqs: 4\n"
      "  speculative_config: {method: ngram, num_speculative_tokens: 3, acceptance_rate: 0.7}\n"
      "workload: {type: synthetic, num_requests: 24, arrival: {process: poisson, rate: 50}, "
      "prompt_len: {dist: fixed, value: 64}, output_len: {dist: fixed, value: 32}}\n";
  write_file(dir / "rr.yaml", body + "cluster: {router: round_robin, pools: [{count: 3}]}\n");
  write_file(dir / "pd.yaml", body +
                                  "cluster:\n  router: round_robin\n"
                                  "  kv_transfer: {bandwidth_gb_s: 10, latency_us: 20}\n"
                                  "  pools:\n    - {name: p, count: 1, role: prefill}\n"
                                  "    - {name: d, count: 2, role: decode}\n");
  for (const char* name : {"rr", "rr2", "pd"}) {
    const std::string file = std::string(name) == "rr2" ? "rr" : name;
    const Cli cli = run_sim(
        "run " + (dir / (file + ".yaml")).string() + " -q --out " + (dir / name).string(), dir);
    ASSERT_EQ(cli.code, 0) << name << cli.err;
    const auto s = nlohmann::json::parse(read_file(dir / name / "summary.json"));
    EXPECT_EQ(s["requests"]["completed"], 24) << name;
    ExpectSpecDecode(s, 3);
  }
  EXPECT_EQ(read_file(dir / "rr" / "summary.json"), read_file(dir / "rr2" / "summary.json"));
  EXPECT_EQ(read_file(dir / "rr" / "requests.csv"), read_file(dir / "rr2" / "requests.csv"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
