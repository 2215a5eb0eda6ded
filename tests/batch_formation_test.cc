// Batch-formation plugins (static, orca, sarathi, prefill-first), the preemption victims
// fewest-computed and most-blocks, and the max_preemptions cap: scenarios with exact numbers
// worked out by hand (docs/policies.md describes each rule).
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/rng.h"
#include "core/scheduler.h"
#include "policies/registry.h"
#include "tests/scheduler_harness.h"

namespace servelab {
namespace {

constexpr std::uint64_t kSeed = 20251122;

// A prompt of `len` tokens no other request shares.
RequestSpec Spec(RequestId id, std::int32_t len, std::int32_t max_out, TimeNs arrival = 0,
                 std::int32_t priority = 0) {
  std::vector<PromptSegment> segs;
  segs.push_back({unique_content_id(kSeed, id), 0, static_cast<std::uint32_t>(len)});
  RequestSpec s = make_request(id, arrival, std::move(segs), max_out);
  s.priority = priority;
  return s;
}

struct Entry {
  RequestId id;
  std::int32_t first, n;
  bool prefill, samples;
  friend bool operator==(const Entry&, const Entry&) = default;
};

std::ostream& operator<<(std::ostream& os, const Entry& e) {
  return os << "{id " << e.id << ", first " << e.first << ", n " << e.n
            << (e.prefill ? ", prefill" : ", decode") << (e.samples ? ", samples}" : "}");
}

class Observer : public SchedulerObserver {
 public:
  void on_reject(const Request& req, TimeNs) override { rejected.push_back(req.id()); }
  void on_preempt(const Request& req, TimeNs) override { preempted.push_back(req.id()); }
  void on_finish(const Request& req, TimeNs) override {
    if (req.status == RequestStatus::kAborted) {
      aborted.push_back(req.id());
      abort_reasons.push_back(req.finish_reason);
      abort_preemptions.push_back(req.num_preemptions);
      EXPECT_TRUE(req.block_table.empty());
    } else {
      EXPECT_EQ(req.status, RequestStatus::kFinished);
      finished.push_back(req.id());
      finished_preemptions.push_back(req.num_preemptions);
    }
  }
  std::vector<RequestId> rejected, preempted, aborted, finished;
  std::vector<std::string> abort_reasons;
  std::vector<std::int32_t> abort_preemptions, finished_preemptions;
};

SchedulerConfig Config(const std::string& bf, std::int32_t budget, std::int32_t max_seqs = 16) {
  SchedulerConfig c;
  use_policy(c, PolicyKind::kBatch, bf);
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.enable_prefix_caching = false;
  c.block_size = 16;
  return c;
}

struct Harness : test_util::SchedulerHarness<Observer> {
  using SchedulerHarness::SchedulerHarness;
  // One step at time 0: its entries; every sampled token is 7.
  std::vector<Entry> Step() {
    const StepPlan& p = Schedule(0);
    std::vector<Entry> out;
    StepResult res;
    res.duration_ns = 1;
    for (const ScheduledRequest& e : p.requests) {
      EXPECT_GE(static_cast<std::int64_t>(e.block_table.size()) * 16, e.context_len());
      out.push_back({e.id, e.first_token, e.num_tokens, e.is_prefill, e.samples});
      res.sampled_tokens.push_back(e.samples ? 7 : -1);
    }
    if (!p.empty()) Finish(res, 0);
    return out;
  }
  std::int32_t UsedBlocks() const { return pool.num_usable_blocks() - pool.num_free_blocks(); }
};

using Plan = std::vector<Entry>;

// ---------------------------------------------------------------- static

// Four requests with equal 16-token prompts and 32, 128, 64 and 256 output tokens form one
// batch. It lasts 256 steps (1 prefill step sampling everyone's first token, then 255 decode
// steps) with 4, 3, 2, then 1 members: 4*32 + 3*32 + 2*64 + 1*128 = 480 useful slot-steps of
// 4*256 = 1024, a slot efficiency of 46.875 %. A request arriving meanwhile waits for the next
// batch even though seats and blocks are free.
TEST(StaticBatchTest, BatchRunsUntilItsLongestMemberEnds) {
  Harness h(Config("static", 8192, /*max_seqs=*/8), 101);
  const std::int32_t outs[] = {32, 128, 64, 256};
  for (RequestId id = 0; id < 4; ++id) h.sched.add_request(Spec(id, 16, outs[id]), 0);

  const Plan first = h.Step();
  ASSERT_EQ(first.size(), 4u);
  for (RequestId id = 0; id < 4; ++id) EXPECT_EQ(first[id], (Entry{id, 0, 16, true, true}));
  // Max length reserved at admission: ceil((16 + out) / 16) = 3 + 9 + 5 + 17 blocks.
  EXPECT_EQ(h.UsedBlocks(), 34);
  EXPECT_EQ(h.Running(3)->block_table.size(), 17u);
  h.sched.add_request(Spec(4, 16, 4), 0);  // a late arrival: must not join this batch

  std::vector<std::size_t> seqs = {first.size()};
  std::int64_t slot_steps = static_cast<std::int64_t>(first.size());
  while (h.obs.finished.size() < 4) {
    const Plan p = h.Step();
    ASSERT_FALSE(p.empty());
    for (const Entry& e : p) {
      EXPECT_NE(e.id, 4);
      EXPECT_FALSE(e.prefill);
      EXPECT_EQ(e.n, 1);
    }
    seqs.push_back(p.size());
    slot_steps += static_cast<std::int64_t>(p.size());
  }
  ASSERT_EQ(seqs.size(), 256u);
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const std::size_t want = s < 32 ? 4 : s < 64 ? 3 : s < 128 ? 2 : 1;
    EXPECT_EQ(seqs[s], want) << "step " << s;
  }
  EXPECT_EQ(slot_steps, 480);
  EXPECT_DOUBLE_EQ(static_cast<double>(slot_steps) / (4.0 * 256.0), 0.46875);
  EXPECT_EQ(h.obs.finished, (std::vector<RequestId>{0, 2, 1, 3}));
  EXPECT_EQ(h.UsedBlocks(), 0);

  // The next batch: the late arrival alone, 1 prefill + 3 decode steps.
  EXPECT_EQ(h.Step(), (Plan{{4, 0, 16, true, true}}));
  for (int s = 0; s < 3; ++s) EXPECT_EQ(h.Step().size(), 1u);
  EXPECT_FALSE(h.sched.has_unfinished());
  EXPECT_EQ(h.sched.counters().num_preemptions, 0);
}

// Prompts larger than the budget are prefilled chunk by chunk; a member whose prompt is done
// waits (lockstep) until every member's is, then all decode together.
TEST(StaticBatchTest, ChunkedPrefillThenLockstepDecode) {
  Harness h(Config("static", 40), 101);
  for (RequestId id = 0; id < 3; ++id) h.sched.add_request(Spec(id, 30, 2), 0);
  EXPECT_EQ(h.Step(), (Plan{{0, 0, 30, true, true}, {1, 0, 10, true, false}}));
  EXPECT_EQ(h.Step(), (Plan{{1, 10, 20, true, true}, {2, 0, 20, true, false}}));
  EXPECT_EQ(h.Step(), (Plan{{2, 20, 10, true, true}}));  // 0 and 1 wait for 2
  EXPECT_EQ(h.Step(),
            (Plan{{0, 30, 1, false, true}, {1, 30, 1, false, true}, {2, 30, 1, false, true}}));
  EXPECT_EQ(h.obs.finished, (std::vector<RequestId>{0, 1, 2}));
  EXPECT_FALSE(h.sched.has_unfinished());
}

// ---------------------------------------------------------------- orca

// 10 usable blocks. Request 0 reserves ceil((16 + 100) / 16) = 8 blocks. Request 1's prompt
// needs 1 block, which is free, but its maximum length needs ceil((16 + 48) / 16) = 4 > 2 free
// blocks, so it is not admitted until request 0 ends (vllm would admit it at once).
TEST(OrcaBatchTest, MaxLengthReservationKeepsOutARequestWhosePromptWouldFit) {
  Harness h(Config("orca", 8192), 11);
  h.sched.add_request(Spec(0, 16, 100), 0);
  h.sched.add_request(Spec(1, 16, 48), 0);
  EXPECT_EQ(h.Step(), (Plan{{0, 0, 16, true, true}}));
  EXPECT_EQ(h.UsedBlocks(), 8);
  for (int s = 1; s < 100; ++s) {
    ASSERT_EQ(h.Step(), (Plan{{0, 15 + s, 1, false, true}})) << "step " << s;
  }
  EXPECT_EQ(h.obs.finished, (std::vector<RequestId>{0}));
  EXPECT_EQ(h.Step(), (Plan{{1, 0, 16, true, true}}));
  EXPECT_EQ(h.UsedBlocks(), 4);
  EXPECT_EQ(h.sched.counters().num_preemptions, 0);

  // The same two requests under vllm: both start at once.
  Harness v(Config("vllm", 8192), 11);
  v.sched.add_request(Spec(0, 16, 100), 0);
  v.sched.add_request(Spec(1, 16, 48), 0);
  EXPECT_EQ(v.Step().size(), 2u);
}

// Budget 20: whole prompts only. Step 0: 16 tokens for request 0; request 1's 8 > 4 left waits
// (head-of-line, no chunking). Step 1: a decode and request 1 (9 tokens); request 2's 12 > 11
// waits. Step 2: two decodes and request 2's 12 tokens (14 <= 20): requests join every step.
TEST(OrcaBatchTest, WholePromptsJoinEveryIteration) {
  Harness h(Config("orca", 20), 101);
  h.sched.add_request(Spec(0, 16, 3), 0);
  h.sched.add_request(Spec(1, 8, 2), 0);
  h.sched.add_request(Spec(2, 12, 1), 0);
  EXPECT_EQ(h.Step(), (Plan{{0, 0, 16, true, true}}));
  EXPECT_EQ(h.Step(), (Plan{{0, 16, 1, false, true}, {1, 0, 8, true, true}}));
  EXPECT_EQ(h.Step(),
            (Plan{{0, 17, 1, false, true}, {1, 8, 1, false, true}, {2, 0, 12, true, true}}));
  EXPECT_EQ(h.obs.finished, (std::vector<RequestId>{0, 1, 2}));
  EXPECT_FALSE(h.sched.has_unfinished());
}

TEST(OrcaBatchTest, PromptOverTheBudgetIsRejected) {
  Harness h(Config("orca", 20), 101);
  h.sched.add_request(Spec(0, 21, 1), 0);
  EXPECT_EQ(h.obs.rejected, (std::vector<RequestId>{0}));
}

// ---------------------------------------------------------------- sarathi

// tau = chunk_size 32 under max_num_batched_tokens 100. Each step: decodes (1 token each),
// then partial prefills, then new prompts, each chunked to what is left of tau.
TEST(SarathiBatchTest, DecodesFirstThenChunksWithExactSplits) {
  SchedulerConfig c = Config("sarathi", 100);
  use_policy(c, PolicyKind::kBatch, "sarathi", {{"chunk_size", std::int64_t{32}}});
  Harness h(c, 101);
  h.sched.add_request(Spec(0, 40, 3), 0);
  EXPECT_EQ(h.Step(), (Plan{{0, 0, 32, true, false}}));
  h.sched.add_request(Spec(1, 50, 2), 0);
  // 8 left of request 0's prompt, then request 1 gets 32 - 8 = 24.
  EXPECT_EQ(h.Step(), (Plan{{0, 32, 8, true, true}, {1, 0, 24, true, false}}));
  h.sched.add_request(Spec(2, 10, 1), 0);
  // Decode 1, request 1's remaining 26 (27 used), request 2 gets 32 - 27 = 5.
  EXPECT_EQ(h.Step(),
            (Plan{{0, 40, 1, false, true}, {1, 24, 26, true, true}, {2, 0, 5, true, false}}));
  EXPECT_EQ(h.Step(),
            (Plan{{0, 41, 1, false, true}, {1, 50, 1, false, true}, {2, 5, 5, true, true}}));
  EXPECT_EQ(h.obs.finished, (std::vector<RequestId>{0, 1, 2}));
  EXPECT_FALSE(h.sched.has_unfinished());
}

// Admission needs the whole prompt's blocks above the watermark: 10 usable blocks, watermark
// 0.1 = 1 block. A 144-token prompt (9 blocks) is admitted (9 + 1 <= 10); then a 16-token one
// (1 block) is not (1 + 1 > 1 free) although the budget has room for a chunk.
TEST(SarathiBatchTest, AdmissionKeepsTheWatermark) {
  SchedulerConfig c = Config("sarathi", 256);
  use_policy(c, PolicyKind::kBatch, "sarathi", {{"watermark", 0.1}});
  Harness h(c, 11);
  h.sched.add_request(Spec(0, 144, 1), 0);
  h.sched.add_request(Spec(1, 16, 1), 0);
  EXPECT_EQ(h.Step(), (Plan{{0, 0, 144, true, true}}));
  EXPECT_EQ(h.Step(), (Plan{{1, 0, 16, true, true}}));
}

// ---------------------------------------------------------------- prefill-first

// Budget 64. Steps are prefill-only while a waiting request can be admitted whole, else
// decode-only; never mixed.
TEST(PrefillFirstBatchTest, PrefillOnlyAndDecodeOnlySteps) {
  Harness h(Config("prefill-first", 64), 101);
  h.sched.add_request(Spec(0, 30, 3), 0);
  h.sched.add_request(Spec(1, 30, 2), 0);
  h.sched.add_request(Spec(2, 30, 2), 0);  // 90 > 64: waits for the next prefill step
  EXPECT_EQ(h.Step(), (Plan{{0, 0, 30, true, true}, {1, 0, 30, true, true}}));
  EXPECT_EQ(h.Step(), (Plan{{2, 0, 30, true, true}}));  // 0 and 1 do not decode
  EXPECT_EQ(h.Step(),
            (Plan{{0, 30, 1, false, true}, {1, 30, 1, false, true}, {2, 30, 1, false, true}}));
  h.sched.add_request(Spec(3, 10, 1), 0);
  EXPECT_EQ(h.Step(), (Plan{{3, 0, 10, true, true}}));  // a newcomer stalls the decodes
  EXPECT_EQ(h.Step(), (Plan{{0, 31, 1, false, true}}));
  EXPECT_EQ(h.obs.finished, (std::vector<RequestId>{1, 2, 3, 0}));
  EXPECT_FALSE(h.sched.has_unfinished());
}

// 4 usable blocks, two 16-token prompts (1 block each; the watermark int(0.01 * 4) is 0). In
// step 1 both decodes take a second block, which fills the cache.
TEST(PrefillFirstBatchTest, DecodePreemptsTheLastRunningByRecompute) {
  Harness h(Config("prefill-first", 64), 5);
  h.sched.add_request(Spec(0, 16, 40), 0);
  h.sched.add_request(Spec(1, 16, 20), 0);
  EXPECT_EQ(h.Step(), (Plan{{0, 0, 16, true, true}, {1, 0, 16, true, true}}));
  for (int s = 1; s <= 16; ++s) {
    ASSERT_EQ(h.Step(), (Plan{{0, 15 + s, 1, false, true}, {1, 15 + s, 1, false, true}}));
  }
  EXPECT_EQ(h.UsedBlocks(), 4);
  // Step 17: position 32 needs a third block for each; request 0 cannot get one, so the last
  // running request (1) is preempted; request 0 then takes one of its 2 freed blocks.
  EXPECT_EQ(h.Step(), (Plan{{0, 32, 1, false, true}}));
  EXPECT_EQ(h.obs.preempted, (std::vector<RequestId>{1}));
  // Request 1 now has 16 + 17 = 33 tokens (3 blocks) and 1 block is free: it waits.
  EXPECT_EQ(h.Step(), (Plan{{0, 33, 1, false, true}}));
}

// vLLM v0's prompt limit is the budget (32 here): a prompt over it is rejected at arrival; a
// request whose prompt fits is admitted even if prompt + outputs could pass it, and once resumed
// by recompute with more tokens than the limit it is aborted at the head ("ignored", v0's
// FINISHED_IGNORED), not left to block the queue. Same cache as above.
TEST(PrefillFirstBatchTest, APromptPastTheLimitIsIgnoredAsVllmV0Does) {
  Harness h(Config("prefill-first", 32), 5);
  h.sched.add_request(Spec(0, 16, 40), 0);
  h.sched.add_request(Spec(1, 16, 20), 0);
  h.sched.add_request(Spec(2, 33, 2), 0);  // its prompt alone passes the limit
  EXPECT_EQ(h.obs.rejected, (std::vector<RequestId>{2}));
  EXPECT_EQ(h.Step(), (Plan{{0, 0, 16, true, true}, {1, 0, 16, true, true}}));
  for (int s = 1; s <= 16; ++s) {
    ASSERT_EQ(h.Step(), (Plan{{0, 15 + s, 1, false, true}, {1, 15 + s, 1, false, true}}));
  }
  EXPECT_EQ(h.Step(), (Plan{{0, 32, 1, false, true}}));
  EXPECT_EQ(h.obs.preempted, (std::vector<RequestId>{1}));
  // Request 1 now has 16 + 17 = 33 tokens, past the limit: ignored when it reaches the head.
  EXPECT_EQ(h.Step(), (Plan{{0, 33, 1, false, true}}));
  ASSERT_EQ(h.obs.aborted, (std::vector<RequestId>{1}));
  EXPECT_NE(h.obs.abort_reasons[0].find("ignored: its prompt and outputs (33 tokens) exceed the "
                                        "prompt limit, max_num_batched_tokens 32"),
            std::string::npos)
      << h.obs.abort_reasons[0];
  while (h.sched.has_unfinished()) h.Step();
  EXPECT_EQ(h.obs.finished, (std::vector<RequestId>{0}));
}

// ---------------------------------------------------------------- victims

// Three requests fill 7 usable blocks in step 0: 0 (16 tokens, 1 block), 1 (40 tokens, 3
// blocks, arrived at t=5), 2 (33 tokens, 3 blocks, arrived at t=3). In step 1, request 0's
// decode at position 16 needs a block and none is free.
Plan VictimScenario(const std::string& victim, std::vector<RequestId>& preempted) {
  SchedulerConfig c = Config("vllm", 8192);
  use_policy(c, PolicyKind::kVictim, victim);
  Harness h(c, 8);
  h.sched.add_request(Spec(0, 16, 8, 0), 0);
  h.sched.add_request(Spec(1, 40, 8, 5), 0);
  h.sched.add_request(Spec(2, 33, 8, 3), 0);
  EXPECT_EQ(h.Step().size(), 3u);
  EXPECT_EQ(h.UsedBlocks(), 7);
  Plan p = h.Step();
  preempted = h.obs.preempted;
  return p;
}

TEST(VictimTest, LastRunningPreemptsTheLastAdmitted) {
  std::vector<RequestId> preempted;
  EXPECT_EQ(VictimScenario("last-running", preempted),
            (Plan{{0, 16, 1, false, true}, {1, 40, 1, false, true}}));
  EXPECT_EQ(preempted, (std::vector<RequestId>{2}));
}

// SGLang's retract order: fewest outputs (all have 1), then the longest prompt: request 1.
TEST(VictimTest, FewestComputedPreemptsFewestOutputsThenLongestPrompt) {
  std::vector<RequestId> preempted;
  EXPECT_EQ(VictimScenario("fewest-computed", preempted),
            (Plan{{0, 16, 1, false, true}, {2, 33, 1, false, true}}));
  EXPECT_EQ(preempted, (std::vector<RequestId>{1}));
}

// Requests 1 and 2 hold 3 blocks each; the tie goes to the later arrival, request 1 (t=5).
TEST(VictimTest, MostBlocksPreemptsTheBiggestTiesToTheLaterArrival) {
  std::vector<RequestId> preempted;
  EXPECT_EQ(VictimScenario("most-blocks", preempted),
            (Plan{{0, 16, 1, false, true}, {2, 33, 1, false, true}}));
  EXPECT_EQ(preempted, (std::vector<RequestId>{1}));
}

// The victim can be a request already scheduled in this step: its entry is removed and its
// token refunded. 4 usable blocks: request 0 (40 tokens, 3 blocks) decodes at position 40
// first; request 1 (16 tokens) then needs a second block; fewest-computed picks request 0
// (equal outputs, longer prompt), which is unscheduled.
TEST(VictimTest, AVictimScheduledEarlierInTheStepIsRefunded) {
  SchedulerConfig c = Config("vllm", 8192);
  use_policy(c, PolicyKind::kVictim, "fewest-computed");
  Harness h(c, 5);
  h.sched.add_request(Spec(0, 40, 8), 0);
  h.sched.add_request(Spec(1, 16, 8), 0);
  EXPECT_EQ(h.Step().size(), 2u);
  EXPECT_EQ(h.UsedBlocks(), 4);
  const Plan p = h.Step();
  EXPECT_EQ(p, (Plan{{1, 16, 1, false, true}}));
  EXPECT_EQ(h.obs.preempted, (std::vector<RequestId>{0}));
  const std::vector<Request*> waiting = h.sched.waiting();
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0]->num_computed_tokens, 0);
  EXPECT_EQ(waiting[0]->num_computed_total(), 40);  // step 1's token was refunded
  EXPECT_EQ(waiting[0]->num_output_tokens(), 1);
}

// ---------------------------------------------------------------- preemption cap

// A stream with heavy memory pressure: with max_preemptions 1, a request is aborted exactly on
// its second preemption; without the cap the same stream preempts some request twice and
// aborts nobody. Everything ends: finished, or aborted with the reason.
struct CapRun {
  std::int64_t max_preemptions_seen = 0;
  Observer obs;
};

void RunCapStream(std::int32_t cap, CapRun& run) {
  SchedulerConfig c = Config("vllm", 64, 8);
  c.max_preemptions = cap;
  BlockPool pool(9);
  KvCacheManager kv(pool, 16, c.max_model_len, false);
  Scheduler sched(c, kv, &run.obs);
  Rng rng(7);
  for (RequestId id = 0; id < 40; ++id) {
    sched.add_request(Spec(id, 8 + static_cast<std::int32_t>(rng.next_u64() % 40),
                           20 + static_cast<std::int32_t>(rng.next_u64() % 60)),
                      0);
  }
  for (int step = 0; step < 100000 && sched.has_unfinished(); ++step) {
    const StepPlan& plan = sched.schedule(0);
    for (const Request* r : sched.running()) {
      run.max_preemptions_seen =
          std::max<std::int64_t>(run.max_preemptions_seen, r->num_preemptions);
    }
    StepResult res;
    res.duration_ns = 1;
    for (const ScheduledRequest& e : plan.requests)
      res.sampled_tokens.push_back(e.samples ? 7 : -1);
    if (!plan.empty()) sched.complete(res, 0);
    pool.check_invariants();
  }
  EXPECT_FALSE(sched.has_unfinished());
  EXPECT_EQ(run.obs.finished.size() + run.obs.aborted.size() + run.obs.rejected.size(), 40u);
  EXPECT_EQ(sched.counters().num_aborted, static_cast<std::int64_t>(run.obs.aborted.size()));
}

TEST(PreemptionCapTest, AbortsExactlyWhenTheCapIsExceeded) {
  CapRun uncapped;
  RunCapStream(0, uncapped);
  EXPECT_TRUE(uncapped.obs.aborted.empty());
  EXPECT_GE(uncapped.max_preemptions_seen, 2);  // the stream does preempt someone twice

  CapRun capped;
  RunCapStream(1, capped);
  ASSERT_FALSE(capped.obs.aborted.empty());
  for (std::size_t k = 0; k < capped.obs.aborted.size(); ++k) {
    EXPECT_EQ(capped.obs.abort_preemptions[k], 2);
    EXPECT_EQ(capped.obs.abort_reasons[k], "preempted 2 times (max_preemptions 1)");
  }
  for (std::int32_t n : capped.obs.finished_preemptions) EXPECT_LE(n, 1);
}

// ---------------------------------------------------------------- registry

TEST(BatchPluginRegistryTest, SpecsReachTheSchedulerConfig) {
  SchedulerConfig sc;
  PolicyTarget target{&sc, nullptr, 0};
  PolicySpec batch = default_policy_spec(PolicyKind::kBatch, "sarathi");
  batch.params["chunk_size"] = std::int64_t{512};
  PolicySpec pre = default_policy_spec(PolicyKind::kPreemption, "recompute");
  pre.params["victim"] = std::string("most-blocks");
  pre.params["max_preemptions"] = std::int64_t{3};
  build_policy(PolicyKind::kBatch, batch, target);
  build_policy(PolicyKind::kPreemption, pre, target);
  ASSERT_NE(sc.batch, nullptr);
  EXPECT_EQ(sc.batch->name(), "sarathi");
  ASSERT_NE(sc.victim, nullptr);
  EXPECT_EQ(sc.victim->name(), "most-blocks");
  ASSERT_NE(sc.preemption, nullptr);
  EXPECT_EQ(sc.preemption->name(), "recompute");
  EXPECT_EQ(sc.max_preemptions, 3);
  for (const char* name : {"static", "orca", "prefill-first", "vllm"}) {
    build_policy(PolicyKind::kBatch, default_policy_spec(PolicyKind::kBatch, name), target);
    EXPECT_EQ(sc.batch->name(), name);
  }
}

// Every registered plugin of every kind has a factory that builds what its name says.
TEST(BatchPluginRegistryTest, EveryPluginBuilds) {
  for (PolicyKind kind : {PolicyKind::kBatch, PolicyKind::kPreemption, PolicyKind::kVictim}) {
    for (const PluginInfo* info : PolicyRegistry::instance().list(kind)) {
      SchedulerConfig sc;
      PolicyTarget target{&sc, nullptr, 0};
      build_policy(kind, default_policy_spec(kind, info->name), target);
      const std::string_view built = kind == PolicyKind::kBatch        ? sc.batch->name()
                                     : kind == PolicyKind::kPreemption ? sc.preemption->name()
                                                                       : sc.victim->name();
      EXPECT_EQ(built, info->name);
    }
  }
}

// An unknown name is an error that lists the known ones, wherever it comes from.
TEST(BatchPluginRegistryTest, UnknownNamesListTheKnownOnes) {
  SchedulerConfig sc;
  PolicyTarget target{&sc, nullptr, 0};
  PolicySpec spec;
  spec.name = "nope";
  try {
    build_policy(PolicyKind::kBatch, spec, target, "exp.yaml: policies.batch");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("exp.yaml: policies.batch"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("vllm, static, orca, sarathi, prefill-first"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(use_policy(sc, PolicyKind::kVictim, "nope"), ConfigError);
  EXPECT_THROW(use_policy(sc, PolicyKind::kBatch, "sarathi", {{"tau", std::int64_t{1}}}),
               ConfigError);
}

}  // namespace
}  // namespace servelab
