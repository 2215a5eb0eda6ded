// Scheduler scenarios with exact numbers: vLLM v1 tests/v1/core/test_scheduler.py ported to the
// synchronous schedule() / complete() loop (docs: reference schedulers.md section 6, part B).
#include "core/scheduler.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"

namespace servelab {
namespace {

constexpr std::uint64_t kSeed = 20240601;

// A prompt of `len` tokens: the first `shared_len` from the shared stream `shared_content`, the
// rest from a stream only this request uses.
RequestSpec Spec(RequestId id, std::int32_t len, std::int32_t max_out,
                 std::uint64_t shared_content = 0, std::int32_t shared_len = 0) {
  std::vector<PromptSegment> segs;
  if (shared_len > 0) segs.push_back({shared_content, 0, static_cast<std::uint32_t>(shared_len)});
  segs.push_back({unique_content_id(kSeed, id), 0, static_cast<std::uint32_t>(len - shared_len)});
  return make_request(id, 0, std::move(segs), max_out);
}

// What the observer saw of a request when it finished (the request is deleted right after).
struct FinishRecord {
  RequestId id;
  RequestStatus status;
  TimeNs first_scheduled_ns, first_token_ns, last_token_ns, finish_ns;
  std::int32_t num_cached_tokens, num_preemptions, num_outputs;
  std::int64_t num_recomputed_tokens;
  std::size_t table_size;
};

struct TokenRecord {
  RequestId id;
  TimeNs prev, now;
};

class RecordingObserver : public SchedulerObserver {
 public:
  void on_reject(const Request& req, TimeNs now) override {
    EXPECT_EQ(req.status, RequestStatus::kRejected);
    EXPECT_EQ(req.finish_ns, now);
    rejected.push_back(req.id());
    reasons.push_back(req.finish_reason);
  }
  void on_token(const Request& req, TimeNs prev, TimeNs now) override {
    tokens.push_back({req.id(), prev, now});
  }
  void on_preempt(const Request& req, TimeNs now) override {
    (void)now;
    EXPECT_EQ(req.status, RequestStatus::kPreempted);
    preempted.push_back(req.id());
  }
  void on_finish(const Request& req, TimeNs now) override {
    EXPECT_EQ(req.finish_ns, now);
    finished.push_back({req.id(), req.status, req.first_scheduled_ns, req.first_token_ns,
                        req.last_token_ns, req.finish_ns, req.num_cached_tokens,
                        req.num_preemptions, req.num_output_tokens(), req.num_recomputed_tokens,
                        req.block_table.size()});
  }

  std::vector<RequestId> rejected, preempted;
  std::vector<std::string> reasons;
  std::vector<TokenRecord> tokens;
  std::vector<FinishRecord> finished;
};

// A plan entry, copied (the plan's spans die at complete()).
struct Entry {
  RequestId id;
  std::int32_t first, n, cached;
  bool prefill, samples;
  friend bool operator==(const Entry&, const Entry&) = default;
};

std::ostream& operator<<(std::ostream& os, const Entry& e) {
  return os << "{id " << e.id << ", first " << e.first << ", n " << e.n << ", cached " << e.cached
            << (e.prefill ? ", prefill" : ", decode") << (e.samples ? ", samples}" : "}");
}

SchedulerConfig Config(std::int32_t budget, std::int32_t max_seqs = 16, bool caching = false) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.enable_prefix_caching = caching;
  c.block_size = 16;
  return c;
}

// Pool + manager + scheduler, stepped by hand: Schedule() forms a plan and copies it, Complete()
// samples `token` for every entry that samples.
class Harness {
 public:
  Harness(const SchedulerConfig& config, std::int32_t num_blocks)
      : pool(num_blocks),
        kv(pool, config.block_size, config.max_model_len, config.enable_prefix_caching),
        sched(config, kv, &obs) {}

  std::vector<Entry> Schedule(TimeNs now = 0) {
    plan_ = &sched.schedule(now);
    std::vector<Entry> out;
    for (const ScheduledRequest& e : plan_->requests) {
      EXPECT_GE(static_cast<std::int64_t>(e.block_table.size()) * 16, e.context_len());
      out.push_back(
          {e.id, e.first_token, e.num_tokens, e.num_cached_prefix, e.is_prefill, e.samples});
    }
    pool.check_invariants();
    return out;
  }
  void Complete(TimeNs now = 0, std::int32_t token = 7) {
    StepResult res;
    res.duration_ns = 1;
    for (const ScheduledRequest& e : plan_->requests)
      res.sampled_tokens.push_back(e.samples ? token : -1);
    sched.complete(res, now);
    pool.check_invariants();
  }
  const StepPlan& last_plan() const { return *plan_; }
  std::vector<Entry> Step(TimeNs now = 0) {
    std::vector<Entry> out = Schedule(now);
    Complete(now);
    return out;
  }
  std::vector<RequestId> RunningIds() const {
    std::vector<RequestId> ids;
    for (const Request* r : sched.running()) ids.push_back(r->id());
    return ids;
  }
  std::vector<RequestId> WaitingIds() const {
    std::vector<RequestId> ids;
    for (const Request* r : sched.waiting()) ids.push_back(r->id());
    return ids;
  }
  const Request* Find(RequestId id) const {
    for (const Request* r : sched.running()) {
      if (r->id() == id) return r;
    }
    for (const Request* r : sched.waiting()) {
      if (r->id() == id) return r;
    }
    return nullptr;
  }

  RecordingObserver obs;
  BlockPool pool;
  KvCacheManager kv;
  Scheduler sched;

 private:
  const StepPlan* plan_ = nullptr;
};

// Scenario 19 (test_schedule): ten 10-token requests all go in one step, in arrival order.
TEST(SchedulerTest, EverythingFitsInOneStep) {
  Harness h(Config(8192), 10000);
  for (RequestId id = 0; id < 10; ++id) h.sched.add_request(Spec(id, 10, 16), 0);
  const std::vector<Entry> plan = h.Schedule();
  ASSERT_EQ(plan.size(), 10u);
  for (RequestId id = 0; id < 10; ++id) {
    EXPECT_EQ(plan[id], (Entry{id, 0, 10, 0, true, true}));
  }
  EXPECT_EQ(h.RunningIds(), (std::vector<RequestId>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(h.sched.num_waiting(), 0u);
}

// Scenario 20 (test_schedule_concurrent_partial_requests): budget 1024, threshold 400, three
// 800-token prompts share the budget as 400/400/224, 400/400/224, then 1/1/352.
TEST(SchedulerTest, ConcurrentPartialPrefillsShareTheBudget) {
  SchedulerConfig c = Config(1024);
  c.long_prefill_token_threshold = 400;
  Harness h(c, 10000);
  for (RequestId id = 0; id < 3; ++id) h.sched.add_request(Spec(id, 800, 16), 0);

  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 0, 400, 0, true, false},
                                          {1, 0, 400, 0, true, false},
                                          {2, 0, 224, 0, true, false}}));
  EXPECT_TRUE(h.obs.tokens.empty());  // partial chunks sample nothing
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 400, 400, 0, true, true},
                                          {1, 400, 400, 0, true, true},
                                          {2, 224, 224, 0, true, false}}));
  ASSERT_EQ(h.obs.tokens.size(), 2u);
  EXPECT_EQ(h.obs.tokens[0].id, 0u);
  EXPECT_EQ(h.obs.tokens[1].id, 1u);
  const std::vector<Entry> third = h.Schedule();
  EXPECT_EQ(third, (std::vector<Entry>{{0, 800, 1, 0, false, true},
                                       {1, 800, 1, 0, false, true},
                                       {2, 448, 352, 0, true, true}}));
  EXPECT_EQ(h.last_plan().num_prefill_tokens, 352);
  EXPECT_EQ(h.last_plan().num_decode_tokens, 2);
  h.Complete();
}

// Scenario 21 (test_schedule_order), chunking on: budget 1024, four requests (800, 800, 10, 10)
// and max_num_seqs 3. The second 800-token prompt takes the remaining 224 tokens.
TEST(SchedulerTest, ChunkingOnFillsTheBudgetWithAPartialPrompt) {
  Harness h(Config(1024, 3), 10000);
  h.sched.add_request(Spec(0, 800, 16), 0);
  h.sched.add_request(Spec(1, 800, 16), 0);
  h.sched.add_request(Spec(2, 10, 16), 0);
  h.sched.add_request(Spec(3, 10, 16), 0);
  EXPECT_EQ(h.Schedule(),
            (std::vector<Entry>{{0, 0, 800, 0, true, true}, {1, 0, 224, 0, true, false}}));
  EXPECT_EQ(h.WaitingIds(), (std::vector<RequestId>{2, 3}));
}

// Scenario 21, chunking off: the second 800-token prompt does not fit the 224 tokens left, and
// the 10-token requests behind it are not pulled forward.
TEST(SchedulerTest, ChunkingOffDoesNotSkipAheadInTheQueue) {
  SchedulerConfig c = Config(1024, 3);
  c.enable_chunked_prefill = false;
  Harness h(c, 10000);
  h.sched.add_request(Spec(0, 800, 16), 0);
  h.sched.add_request(Spec(1, 800, 16), 0);
  h.sched.add_request(Spec(2, 10, 16), 0);
  h.sched.add_request(Spec(3, 10, 16), 0);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 0, 800, 0, true, true}}));
  EXPECT_EQ(h.WaitingIds(), (std::vector<RequestId>{1, 2, 3}));
  // Next step: 1 decode token leaves 1023, so request 1 goes in whole, then both small ones
  // (max_num_seqs 3 stops the last).
  EXPECT_EQ(h.Schedule(), (std::vector<Entry>{{0, 800, 1, 0, false, true},
                                              {1, 0, 800, 0, true, true},
                                              {2, 0, 10, 0, true, true}}));
  EXPECT_EQ(h.WaitingIds(), (std::vector<RequestId>{3}));
}

// Scenario 23 (test_preempt_during_execution), adapted to the synchronous loop. bs 16, 11 blocks
// (10 usable), budget 100, no prefix cache. vLLM admits two 80-token prompts in back-to-back
// schedule() calls without completing; here every plan is completed first, so the numbers are
// chosen to reach the same state: req0 has 79 prompt tokens (5 blocks, one slot spare), req1 80
// (5 blocks, full).
//   step 1: req0 0+79 (samples), req1 0+21 (chunk)   -> 5 + 2 blocks, 3 free
//   step 2: req0 79+1 (decode),  req1 21+59 (samples) -> 5 + 5 blocks, 0 free
//   step 3: req0 computes position 80 and needs a 6th block: the LAST running request (req1) is
//           preempted, keeping its sampled output, and goes to the head of the waiting queue.
TEST(SchedulerTest, PreemptsTheLastRunningRequest) {
  Harness h(Config(100), 11);
  h.sched.add_request(Spec(0, 79, 3), 0);
  h.sched.add_request(Spec(1, 80, 10), 0);

  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 0, 79, 0, true, true}, {1, 0, 21, 0, true, false}}));
  EXPECT_EQ(h.pool.num_free_blocks(), 3);
  EXPECT_EQ(h.Schedule(),
            (std::vector<Entry>{{0, 79, 1, 0, false, true}, {1, 21, 59, 0, true, true}}));
  EXPECT_EQ(h.pool.num_free_blocks(), 0);
  h.Complete(0, 42);

  EXPECT_EQ(h.Schedule(), (std::vector<Entry>{{0, 80, 1, 0, false, true}}));
  EXPECT_EQ(h.last_plan().preempted, (std::vector<RequestId>{1}));
  EXPECT_EQ(h.obs.preempted, (std::vector<RequestId>{1}));
  EXPECT_EQ(h.RunningIds(), (std::vector<RequestId>{0}));
  EXPECT_EQ(h.WaitingIds(), (std::vector<RequestId>{1}));
  const Request* req1 = h.Find(1);
  ASSERT_NE(req1, nullptr);
  EXPECT_EQ(req1->status, RequestStatus::kPreempted);
  EXPECT_EQ(req1->output_tokens, (std::vector<std::int32_t>{42}));
  EXPECT_EQ(req1->num_computed_tokens, 0);
  EXPECT_TRUE(req1->block_table.empty());
  EXPECT_EQ(req1->num_preemptions, 1);
  EXPECT_EQ(h.pool.num_free_blocks(), 4);  // req0 holds 6
  EXPECT_EQ(h.sched.counters().num_preemptions, 1);
  h.Complete();  // req0's third output: it finishes and frees its 6 blocks
  EXPECT_EQ(h.pool.num_free_blocks(), 10);

  // Resumed without a prefix cache: prompt + 1 output = 81 tokens again, 80 of them recomputed.
  EXPECT_EQ(h.Schedule(), (std::vector<Entry>{{1, 0, 81, 0, true, true}}));
  EXPECT_EQ(req1->status, RequestStatus::kRunning);
  EXPECT_EQ(req1->num_recomputed_tokens, 80);
  EXPECT_EQ(h.sched.counters().num_recomputed_tokens, 80);
  EXPECT_EQ(req1->num_cached_tokens, 0);  // set at the first admission only
  h.Complete();
}

// Same run with prefix caching on: the resumed request finds its own earlier full blocks. req1
// freed its 5 blocks tail first into an empty free queue, and req0's 6th block was then taken
// from the head, i.e. req1's last block (evicting its hash). So of the 5 blocks (floor(80/16))
// a lookup of 81 tokens may return, 4 remain: a hit of exactly 64 tokens, 17 computed, of which
// 16 (positions 64..79) are recomputed.
TEST(SchedulerTest, ResumedRequestHitsItsOwnCachedBlocks) {
  Harness h(Config(100, 16, /*caching=*/true), 11);
  h.sched.add_request(Spec(0, 79, 3), 0);
  h.sched.add_request(Spec(1, 80, 10), 0);
  h.Step();
  h.Step();
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 80, 1, 0, false, true}}));  // preempts req1
  EXPECT_EQ(h.sched.counters().num_preemptions, 1);
  EXPECT_EQ(h.pool.num_free_blocks(), 10);  // req0 finished

  const Request* req1 = h.Find(1);
  ASSERT_NE(req1, nullptr);
  EXPECT_EQ(h.Schedule(), (std::vector<Entry>{{1, 64, 17, 64, true, true}}));
  EXPECT_EQ(req1->block_table.size(), 6u);
  EXPECT_EQ(req1->num_recomputed_tokens, 16);
  EXPECT_EQ(req1->num_cached_tokens, 0);
  EXPECT_EQ(h.kv.stats().preempted_lookups, 1);
  EXPECT_EQ(h.kv.stats().preempted_queried_tokens, 81);
  EXPECT_EQ(h.kv.stats().preempted_hit_tokens, 64);
  h.Complete();
}

// A step that preempts admits nobody, even a head-of-queue request that would fit. bs 16,
// 6 blocks (5 usable), budget 17, no cache; req0 47 tokens, req1 30.
//   step 1: req0 0+17; step 2: req0 17+17; step 3: req0 34+13 (samples), req1 0+4
//   step 4: req0 47+1, req1 4+16 (2 blocks)                  -> 3 + 2 blocks, 0 free
//   step 5: req0 needs a 4th block: req1 is preempted (2 freed, 1 taken, 1 free). req1 could now
//           take 16 tokens in that 1 free block, but the step that preempted admits nothing.
//   step 6: req1 is readmitted with 16 tokens.
TEST(SchedulerTest, NoAdmissionInAStepThatPreempted) {
  Harness h(Config(17), 6);
  h.sched.add_request(Spec(0, 47, 5), 0);
  h.sched.add_request(Spec(1, 30, 5), 0);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 0, 17, 0, true, false}}));
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 17, 17, 0, true, false}}));
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 34, 13, 0, true, true}, {1, 0, 4, 0, true, false}}));
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 47, 1, 0, false, true}, {1, 4, 16, 0, true, false}}));
  EXPECT_EQ(h.pool.num_free_blocks(), 0);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 48, 1, 0, false, true}}));
  EXPECT_EQ(h.obs.preempted, (std::vector<RequestId>{1}));
  EXPECT_EQ(h.pool.num_free_blocks(), 1);
  EXPECT_EQ(h.WaitingIds(), (std::vector<RequestId>{1}));
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 49, 1, 0, false, true}, {1, 0, 16, 0, true, false}}));
  EXPECT_EQ(h.pool.num_free_blocks(), 0);
  EXPECT_EQ(h.Find(1)->num_recomputed_tokens, 16);  // it had reached position 20 before
}

// Scenario 25 under FCFS (priorities are ignored): 5 blocks (4 usable), max_num_seqs 2, budget
// 200. req_low (priority 1, 30 tokens) runs first; req_high (priority 0, 32 tokens) arrives and
// takes the last 2 blocks. When req_high's 33rd token needs a 3rd block it is itself the last
// running request, so it preempts itself; req_low runs on untouched.
TEST(SchedulerTest, LastRunningRequestPreemptsItself) {
  SchedulerConfig c = Config(200, 2);
  Harness h(c, 5);
  RequestSpec low = Spec(0, 30, 4);
  low.priority = 1;
  RequestSpec high = Spec(1, 32, 4);
  high.priority = 0;
  h.sched.add_request(low, 0);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 0, 30, 0, true, true}}));
  h.sched.add_request(high, 0);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 30, 1, 0, false, true}, {1, 0, 32, 0, true, true}}));
  EXPECT_EQ(h.pool.num_free_blocks(), 0);

  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 31, 1, 0, false, true}}));
  EXPECT_EQ(h.obs.preempted, (std::vector<RequestId>{1}));
  EXPECT_EQ(h.RunningIds(), (std::vector<RequestId>{0}));
  EXPECT_EQ(h.WaitingIds(), (std::vector<RequestId>{1}));
  // req_low's 33rd token takes a 3rd block (1 left); req_high needs 3, so it waits.
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 32, 1, 0, false, true}}));  // req_low finishes
  ASSERT_EQ(h.obs.finished.size(), 1u);
  EXPECT_EQ(h.obs.finished[0].id, 0u);
  // Resumed with its prompt and its one output.
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{1, 0, 33, 0, true, true}}));
}

TEST(SchedulerTest, MaxNumSeqsCapsRunningRequests) {
  Harness h(Config(8192, 2), 100);
  for (RequestId id = 0; id < 5; ++id) h.sched.add_request(Spec(id, 10, 1), 0);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 0, 10, 0, true, true}, {1, 0, 10, 0, true, true}}));
  EXPECT_EQ(h.WaitingIds(), (std::vector<RequestId>{2, 3, 4}));
  // Both finished (1 output each), freeing both seats.
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{2, 0, 10, 0, true, true}, {3, 0, 10, 0, true, true}}));
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{4, 0, 10, 0, true, true}}));
  EXPECT_FALSE(h.sched.has_unfinished());
  EXPECT_EQ(h.sched.counters().num_finished, 5);
}

TEST(SchedulerTest, RejectsRequestsLongerThanMaxModelLen) {
  SchedulerConfig c = Config(8192);
  c.max_model_len = 100;
  Harness h(c, 11);
  h.sched.add_request(Spec(0, 90, 20), 5);
  h.sched.add_request(Spec(1, 90, 10), 5);  // exactly max_model_len: accepted
  EXPECT_EQ(h.obs.rejected, (std::vector<RequestId>{0}));
  EXPECT_EQ(h.obs.reasons, (std::vector<std::string>{"exceeds max_model_len (110 > 100)"}));
  EXPECT_EQ(h.sched.counters().num_rejected, 1);
  EXPECT_EQ(h.sched.counters().num_arrived, 2);
  EXPECT_EQ(h.WaitingIds(), (std::vector<RequestId>{1}));
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{1, 0, 90, 0, true, true}}));
}

TEST(SchedulerTest, RejectsRequestsThatCouldNeverFitTheCache) {
  Harness h(Config(8192), 5);              // 4 usable blocks = 64 tokens
  h.sched.add_request(Spec(0, 60, 5), 0);  // 65 tokens -> 5 blocks
  h.sched.add_request(Spec(1, 60, 4), 0);  // 64 tokens -> 4 blocks
  ASSERT_EQ(h.obs.rejected, (std::vector<RequestId>{0}));
  EXPECT_NE(h.obs.reasons[0].find("capacity of 4 blocks"), std::string::npos) << h.obs.reasons[0];
  EXPECT_EQ(h.sched.counters().num_rejected, 1);
  EXPECT_EQ(h.WaitingIds(), (std::vector<RequestId>{1}));
  while (h.sched.has_unfinished()) {
    for (const Entry& e : h.Step()) EXPECT_EQ(e.id, 1u);
  }
  EXPECT_EQ(h.sched.counters().num_finished, 1);
}

// With chunking off a request must fit one step whole; one that may need more than the budget
// (up to prompt + output - 1 tokens once resumed) would block the queue forever.
TEST(SchedulerTest, RejectsRequestsOverTheBudgetWithChunkingOff) {
  SchedulerConfig c = Config(64);
  c.enable_chunked_prefill = false;
  Harness h(c, 100);
  h.sched.add_request(Spec(0, 60, 10), 0);  // may need 69
  h.sched.add_request(Spec(1, 50, 15), 0);  // at most 64
  EXPECT_EQ(h.obs.rejected, (std::vector<RequestId>{0}));
  EXPECT_EQ(h.WaitingIds(), (std::vector<RequestId>{1}));
}

TEST(SchedulerTest, RejectsEmptyPromptsAndZeroOutputs) {
  Harness h(Config(64), 100);
  h.sched.add_request(make_request(0, 0, {}, 4), 0);
  h.sched.add_request(Spec(1, 10, 0), 0);
  EXPECT_EQ(h.obs.rejected, (std::vector<RequestId>{0, 1}));
  EXPECT_FALSE(h.sched.has_unfinished());
}

TEST(SchedulerTest, FinishingFreesBlocksAndKeepsRunningOrder) {
  Harness h(Config(8192), 11);
  h.sched.add_request(Spec(0, 20, 3), 0);
  h.sched.add_request(Spec(1, 20, 1), 0);
  h.sched.add_request(Spec(2, 20, 3), 0);
  h.Step();
  // req1 finished at its first token; its 2 blocks are back.
  EXPECT_EQ(h.RunningIds(), (std::vector<RequestId>{0, 2}));
  EXPECT_EQ(h.pool.num_free_blocks(), 10 - 4);
  ASSERT_EQ(h.obs.finished.size(), 1u);
  EXPECT_EQ(h.obs.finished[0].id, 1u);
  EXPECT_EQ(h.obs.finished[0].status, RequestStatus::kFinished);
  EXPECT_EQ(h.obs.finished[0].num_outputs, 1);
  h.Step();
  h.Step();
  EXPECT_FALSE(h.sched.has_unfinished());
  EXPECT_EQ(h.pool.num_free_blocks(), 10);
  EXPECT_EQ(h.sched.counters().num_finished, 3);
}

TEST(SchedulerTest, TimestampsAreSetWhenScheduledAndWhenTokensComplete) {
  Harness h(Config(8192), 11);
  h.sched.add_request(Spec(0, 10, 2), 0);
  h.Schedule(100);
  const Request* r = h.Find(0);
  EXPECT_EQ(r->first_scheduled_ns, 100);
  EXPECT_EQ(r->first_token_ns, -1);
  h.Complete(150);
  EXPECT_EQ(r->first_token_ns, 150);
  EXPECT_EQ(r->last_token_ns, 150);
  h.Schedule(200);
  h.Complete(260);
  ASSERT_EQ(h.obs.finished.size(), 1u);
  const FinishRecord& f = h.obs.finished[0];
  EXPECT_EQ(f.first_scheduled_ns, 100);
  EXPECT_EQ(f.first_token_ns, 150);
  EXPECT_EQ(f.last_token_ns, 260);
  EXPECT_EQ(f.finish_ns, 260);
  ASSERT_EQ(h.obs.tokens.size(), 2u);
  EXPECT_EQ(h.obs.tokens[0].prev, -1);
  EXPECT_EQ(h.obs.tokens[0].now, 150);
  EXPECT_EQ(h.obs.tokens[1].prev, 150);
  EXPECT_EQ(h.obs.tokens[1].now, 260);
}

// Scenario 1 through the scheduler: blocks are registered at allocation, so a request admitted
// later in the same step already hits the 48-token common prefix of an earlier one.
TEST(SchedulerTest, PrefixHitInTheSameStep) {
  Harness h(Config(8192, 16, /*caching=*/true), 11);
  const std::uint64_t common = unique_content_id(kSeed, 1000);
  h.sched.add_request(Spec(0, 55, 4, common, 48), 0);
  h.sched.add_request(Spec(1, 53, 4, common, 48), 0);
  EXPECT_EQ(h.Schedule(),
            (std::vector<Entry>{{0, 0, 55, 0, true, true}, {1, 48, 5, 48, true, true}}));
  EXPECT_EQ(h.Find(0)->num_cached_tokens, 0);
  EXPECT_EQ(h.Find(1)->num_cached_tokens, 48);
  EXPECT_EQ(h.pool.num_free_blocks(), 5);  // 4 + 1 blocks, 3 shared
  h.Complete();
}

// The last token is always computed: two identical 32-token prompts share 1 block, not 2.
TEST(SchedulerTest, IdenticalPromptHitsAllButTheLastBlock) {
  Harness h(Config(8192, 16, /*caching=*/true), 11);
  const std::uint64_t common = unique_content_id(kSeed, 2000);
  h.sched.add_request(Spec(0, 32, 2, common, 32), 0);
  h.Step();
  h.sched.add_request(Spec(1, 32, 2, common, 32), 0);
  EXPECT_EQ(h.Schedule(),
            (std::vector<Entry>{{0, 32, 1, 0, false, true}, {1, 16, 16, 16, true, true}}));
  EXPECT_EQ(h.Find(1)->num_cached_tokens, 16);
  h.Complete();
}

TEST(SchedulerTest, ConfigMustAgreeWithTheKvCacheManager) {
  BlockPool pool(11);
  KvCacheManager kv(pool, 16, 8192, /*enable_prefix_caching=*/true);
  SchedulerConfig c = Config(64, 4, /*caching=*/false);
  EXPECT_THROW({ Scheduler s(c, kv, nullptr); }, std::invalid_argument);
  c.enable_prefix_caching = true;
  c.block_size = 8;
  EXPECT_THROW({ Scheduler s(c, kv, nullptr); }, std::invalid_argument);
  c.block_size = 16;
  c.max_num_seqs = 0;
  EXPECT_THROW({ Scheduler s(c, kv, nullptr); }, std::invalid_argument);
}

// Requests left when the scheduler goes away are deleted and their blocks returned.
TEST(SchedulerTest, DestructorReleasesRemainingRequests) {
  BlockPool pool(11);
  KvCacheManager kv(pool, 16, 8192, false);
  {
    Scheduler s(Config(20), kv, nullptr);
    s.add_request(Spec(0, 40, 4), 0);
    s.add_request(Spec(1, 40, 4), 0);
    s.schedule(0);  // req0 holds 2 blocks, req1 waits
    EXPECT_EQ(pool.num_free_blocks(), 8);
  }
  EXPECT_EQ(pool.num_free_blocks(), 10);
  pool.check_invariants();
}

}  // namespace
}  // namespace servelab
