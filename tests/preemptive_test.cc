// Preemptive scheduling: the `preemptive` batch formation (the schedule recomputed by the queue
// order's rank every step) and the `mlfq` queue order (FastServe's skip-join MLFQ), on
// hand-built scenarios, through experiments, and the combinations that are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/host_block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "policies/queue_order.h"
#include "policies/registry.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "sim/run.h"

namespace servelab {
namespace {

constexpr std::uint64_t kSeed = 11;
constexpr TimeNs kMs = kNsPerMs;

PolicySpec Spec(PolicyKind kind, const std::string& yaml) {
  const ConfigNode node = ConfigNode::load_string("v: " + yaml + "\n", "test");
  return parse_policy_spec(kind, node.at("v"));
}

RequestSpec MakeSpec(RequestId id, TimeNs arrival, std::int32_t prompt, std::int32_t max_out,
                     std::int32_t priority = 0) {
  RequestSpec s = make_request(
      id, arrival, {{unique_content_id(kSeed, id), 0, static_cast<std::uint32_t>(prompt)}},
      max_out);
  s.priority = priority;
  return s;
}

std::vector<RequestId> Ids(const std::vector<Request*>& rs) {
  std::vector<RequestId> ids;
  for (const Request* r : rs) ids.push_back(r->id());
  return ids;
}

// ---------------------------------------------------------------- mlfq on its own

// Levels of 10, 20, 40 and 80 ms; skip-join with 1000 prefill tokens/s puts a prompt of p tokens
// (p ms of prefill) at the first level whose quantum is at least p ms.
TEST(MlfqQueueTest, SkipJoinPlacesByPrefillTimeAndOrdersByLevelThenArrival) {
  auto q = make_waiting_queue(
      Spec(PolicyKind::kQueue,
           "{name: mlfq, levels: 4, quantum_ms: 10, growth: 2, prefill_tokens_per_s: 1000}"),
      kSeed);
  ASSERT_TRUE(q->ranks());
  ASSERT_TRUE(q->times_service());
  EXPECT_FALSE(q->reorders());  // no starvation prevention by default
  std::vector<std::unique_ptr<Request>> rs;
  const std::int32_t prompts[] = {1000, 50, 15, 5, 10, 11};
  for (RequestId id = 0; id < 6; ++id) {
    rs.push_back(
        std::make_unique<Request>(MakeSpec(id, static_cast<TimeNs>(id) * kMs, prompts[id], 10)));
    q->push_back(rs.back().get());
  }
  const std::int32_t levels[] = {3, 3, 1, 0, 0, 1};  // 1 s and 50 ms: last level; 10 ms: level 0
  for (std::size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(rs[i]->queue_level.level, levels[i]) << i;
  EXPECT_EQ(Ids(q->snapshot()), (std::vector<RequestId>{3, 4, 2, 5, 0, 1}));

  // Without skip-join every request starts at level 0, in arrival order.
  auto flat = make_waiting_queue(
      Spec(PolicyKind::kQueue, "{name: mlfq, skip_join: false, prefill_tokens_per_s: 1000}"),
      kSeed);
  std::vector<std::unique_ptr<Request>> fs;
  for (RequestId id = 0; id < 3; ++id) {
    fs.push_back(std::make_unique<Request>(MakeSpec(id, 0, 1000, 10)));
    flat->push_back(fs.back().get());
    EXPECT_EQ(fs.back()->queue_level.level, 0);
  }
  EXPECT_EQ(Ids(flat->snapshot()), (std::vector<RequestId>{0, 1, 2}));
}

TEST(MlfqQueueTest, StepsDemoteByServiceAndTheRateIsLearned) {
  auto q = make_waiting_queue(
      Spec(PolicyKind::kQueue, "{name: mlfq, levels: 4, quantum_ms: 10, growth: 2}"), kSeed);
  Request a(MakeSpec(0, 0, 100, 50));
  q->push_back(&a);
  EXPECT_EQ(a.queue_level.level, 0);  // no rate known yet: level 0
  q->pop_front();                     // admitted
  // A 25 ms step with 100 prefill tokens (4000 tokens/s): a uses up level 0's 10 ms and goes to
  // level 1 with 15 ms; another 10 ms step brings it to 25 >= 20: level 2, 5 ms carried over.
  Request* ran[] = {&a};
  q->on_step_completed(ran, 100, 0, 25 * kMs);
  EXPECT_EQ(a.queue_level.level, 1);
  EXPECT_EQ(a.queue_level.service_ns, 15 * kMs);
  EXPECT_EQ(a.queue_level.last_run_ns, 25 * kMs);
  q->on_step_completed(ran, 0, 25 * kMs, 35 * kMs);
  EXPECT_EQ(a.queue_level.level, 2);
  EXPECT_EQ(a.queue_level.service_ns, 5 * kMs);
  // One 200 ms step: 5 + 200 = 205 ms, level 2's 40 ms, then the last level keeps the rest.
  q->on_step_completed(ran, 0, 35 * kMs, 235 * kMs);
  EXPECT_EQ(a.queue_level.level, 3);
  EXPECT_EQ(a.queue_level.service_ns, 165 * kMs);
  // The learned rate (4000 tokens/s) places a 100-token prompt (25 ms) at level 2 (40 ms) and a
  // 30-token one (7.5 ms) at level 0; a running request ranks by its level against them.
  Request b(MakeSpec(1, 300 * kMs, 100, 5));
  Request c(MakeSpec(2, 301 * kMs, 30, 5));
  q->push_back(&b);
  q->push_back(&c);
  EXPECT_EQ(b.queue_level.level, 2);
  EXPECT_EQ(c.queue_level.level, 0);
  EXPECT_TRUE(q->ranks_before(c, b));
  EXPECT_TRUE(q->ranks_before(b, a));  // level 2 before the running a at level 3
  EXPECT_FALSE(q->ranks_before(a, b));
  EXPECT_FALSE(q->ranks_before(a, a));  // strict
}

TEST(MlfqQueueTest, StarvationPromotesRequestsIdleTooLongToLevelZero) {
  auto q = make_waiting_queue(
      Spec(PolicyKind::kQueue,
           "{name: mlfq, levels: 3, quantum_ms: 10, prefill_tokens_per_s: 1000, starve_s: 1}"),
      kSeed);
  ASSERT_TRUE(q->reorders());
  Request low(MakeSpec(0, 0, 35, 10));  // 35 ms: level 2
  Request top(MakeSpec(1, 500 * kMs, 5, 10));
  q->push_back(&low);
  q->push_back(&top);
  ASSERT_EQ(low.queue_level.level, 2);
  EXPECT_EQ(Ids(q->snapshot()), (std::vector<RequestId>{1, 0}));
  q->reorder(nullptr, 1000 * kMs);  // idle exactly 1 s: not longer
  EXPECT_EQ(Ids(q->snapshot()), (std::vector<RequestId>{1, 0}));
  q->reorder(nullptr, 1001 * kMs);
  EXPECT_EQ(low.queue_level.level, 0);
  EXPECT_EQ(Ids(q->snapshot()), (std::vector<RequestId>{0, 1}));  // level 0, earlier arrival
  EXPECT_TRUE(q->erase(&low));
  EXPECT_FALSE(q->erase(&low));
  EXPECT_EQ(Ids(q->snapshot()), (std::vector<RequestId>{1}));
}

// ---------------------------------------------------------------- the formation

// A scheduler stepped by hand: every step takes `step` and samples token 7.
// With `host_blocks` > 0 victims are swapped out to a host pool of that many blocks.
class Harness {
 public:
  Harness(const std::string& batch, const std::string& queue, std::int32_t seats,
          std::int32_t blocks, std::int32_t budget = 512, std::int32_t host_blocks = 0,
          std::int32_t max_loras = 0)
      : pool(blocks),
        host(host_blocks),
        kv(pool, 16, 4096, false, Options(host_blocks > 0 ? &host : nullptr)),
        sched(Config(batch, queue, seats, budget, host_blocks > 0, max_loras), kv, nullptr) {}
  static KvCacheOptions Options(HostBlockPool* host) {
    KvCacheOptions o;
    o.host_pool = host;
    return o;
  }
  static SchedulerConfig Config(const std::string& batch, const std::string& queue,
                                std::int32_t seats, std::int32_t budget, bool swap,
                                std::int32_t max_loras) {
    SchedulerConfig c;
    c.lora.max_loras = max_loras;
    if (swap) use_policy(c, PolicyKind::kPreemption, "swap");
    c.max_num_seqs = seats;
    c.max_num_batched_tokens = budget;
    c.block_size = 16;
    c.max_model_len = 4096;
    c.enable_prefix_caching = false;
    PolicyTarget t{&c, nullptr, kSeed};
    build_policy(PolicyKind::kBatch, Spec(PolicyKind::kBatch, batch), t);
    build_policy(PolicyKind::kQueue, Spec(PolicyKind::kQueue, queue), t);
    return c;
  }
  struct Entry {
    RequestId id;
    std::int32_t first, n;
    friend bool operator==(const Entry&, const Entry&) = default;
  };
  std::vector<Entry> Step(TimeNs step = kMs) {
    const StepPlan& plan = sched.schedule(now);
    std::vector<Entry> out;
    StepResult res;
    for (const ScheduledRequest& e : plan.requests) {
      out.push_back({e.id, e.first_token, e.num_tokens});
      res.sampled_tokens.push_back(e.samples ? 7 : -1);
    }
    preempted.assign(plan.preempted.begin(), plan.preempted.end());
    now += step;
    sched.complete(res, now);
    pool.check_invariants();
    kv.check_invariants();
    return out;
  }
  void Add(RequestId id, std::int32_t prompt, std::int32_t max_out, std::int32_t priority = 0,
           std::uint32_t lora_id = 0) {
    RequestSpec spec = MakeSpec(id, now, prompt, max_out, priority);
    spec.lora_id = lora_id;
    spec.lora_rank = lora_id != 0 ? 8 : 0;
    sched.add_request(spec, now);
  }

  TimeNs now = 0;
  BlockPool pool;
  HostBlockPool host;
  KvCacheManager kv;
  Scheduler sched;
  std::vector<RequestId> preempted;
};
using Entry = Harness::Entry;
std::ostream& operator<<(std::ostream& os, const Entry& e) {
  return os << "{id " << e.id << ", first " << e.first << ", n " << e.n << "}";
}

// One seat: a long request runs; a short one arrives. Under sjf with vllm's formation it waits
// for the long one to finish; with the preemptive formation it displaces it (SRTF), and the
// long one resumes by recompute (prompt and outputs) once the short one is done.
TEST(PreemptiveBatchTest, AShorterArrivalDisplacesTheRunningRequestForItsSeat) {
  Harness h("preemptive", "sjf", 1, 64);
  h.Add(0, 10, 100);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 0, 10}}));
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 10, 1}}));
  h.Add(1, 20, 3);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{1, 0, 20}}));
  EXPECT_EQ(h.preempted, (std::vector<RequestId>{0}));
  EXPECT_EQ(h.sched.counters().num_preemptions, 1);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{1, 20, 1}}));
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{1, 21, 1}}));  // 1's third token: it finishes
  EXPECT_EQ(h.sched.counters().num_finished, 1);
  // 0 had 2 outputs: its prompt and its first output are recomputed, the second sampled again.
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 0, 12}}));
  EXPECT_TRUE(h.preempted.empty());

  Harness v("vllm", "sjf", 1, 64);
  v.Add(0, 10, 100);
  v.Step();
  v.Step();
  v.Add(1, 20, 3);
  EXPECT_EQ(v.Step(), (std::vector<Entry>{{0, 11, 1}}));  // 1 waits
  EXPECT_EQ(v.sched.counters().num_preemptions, 0);
}

// The same with swap preemption: the displaced request's KV goes to the host and comes back
// when the short one is done, so nothing is recomputed.
TEST(PreemptiveBatchTest, WithSwapTheDisplacedRequestResumesWithoutRecompute) {
  Harness h("preemptive", "sjf", 1, 64, 512, /*host_blocks=*/16);
  h.Add(0, 10, 100);
  h.Step();
  h.Step();
  h.Add(1, 20, 3);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{1, 0, 20}}));
  EXPECT_EQ(h.preempted, (std::vector<RequestId>{0}));
  ASSERT_EQ(h.sched.num_swapped(), 1u);
  EXPECT_EQ(h.host.num_free_blocks(), 15);  // 0's one block (11 tokens)
  h.Step();
  h.Step();                                               // 1 finishes
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 11, 1}}));  // swapped in, decodes on
  EXPECT_EQ(h.sched.num_swapped(), 0u);
  EXPECT_EQ(h.sched.counters().num_recomputed_tokens, 0);
  EXPECT_EQ(h.host.num_free_blocks(), 16);
}

// LoRA with one adapter slot: 0 (adapter 1) and 1 (adapter 1) run; 2 (adapter 2) cannot be
// admitted while adapter 1 holds the slot. Displacing only 1 (which 2 outranks) would not free
// the slot while 0 keeps adapter 1, so where 2 outranks 1 only nothing is displaced, and the
// free seat does not go to 3 (no adapter, ranked after 2) as vLLM's skipping admission would
// give it; where 2 outranks both (two seats), both are displaced and 2 runs.
TEST(PreemptiveBatchTest, AnAdapterSlotIsDisplacedForOnlyWhenItCanBeFreed) {
  // Priorities: 0 best, then 2, then 1; 3 (no adapter) ranks last.
  Harness p("preemptive", "priority", 3, 64, 512, 0, /*max_loras=*/1);
  p.Add(0, 10, 100, /*priority=*/0, /*lora_id=*/1);
  p.Add(1, 10, 100, 5, 1);
  p.Step();
  p.Step();
  p.Add(2, 10, 3, 2, 2);
  p.Add(3, 10, 3, 9, 0);
  // 2 outranks 1 but not 0 (which keeps adapter 1): no displacement, and 3 does not jump 2.
  EXPECT_EQ(p.Step(), (std::vector<Entry>{{0, 11, 1}, {1, 11, 1}}));
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_EQ(p.sched.waiting_queue().front()->id(), 2);

  // Priorities: 2 best. It outranks both runners; recomputing them frees adapter 1's slot.
  Harness h("preemptive", "priority", 2, 64, 512, 0, /*max_loras=*/1);
  h.Add(0, 10, 100, 3, 1);
  h.Add(1, 10, 100, 5, 1);
  h.Step();
  h.Step();
  h.Add(2, 10, 3, 1, 2);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{2, 0, 10}}));
  EXPECT_EQ(h.preempted, (std::vector<RequestId>{1, 0}));

  // The same with swap: swapped-out victims keep adapter 1 counted, so displacing cannot free
  // the slot and nobody is displaced.
  Harness w("preemptive", "priority", 2, 64, 512, /*host_blocks=*/16, /*max_loras=*/1);
  w.Add(0, 10, 100, 3, 1);
  w.Add(1, 10, 100, 5, 1);
  w.Step();
  w.Step();
  w.Add(2, 10, 3, 1, 2);
  EXPECT_EQ(w.Step(), (std::vector<Entry>{{0, 11, 1}, {1, 11, 1}}));
  EXPECT_TRUE(w.preempted.empty());

  // Swapped requests holding the only slot, nothing running: the waiting head (adapter 2,
  // ranked first) cannot get it until they resume and finish, so the best swapped one resumes
  // (the run stalled for ever before: the head waited, nothing else was offered).
  Harness s("preemptive", "priority", 1, 64, 512, /*host_blocks=*/16, /*max_loras=*/1);
  s.Add(0, 10, 20, 5, 1);
  s.Step();
  s.Add(1, 10, 2, 1, 0);                                  // no adapter, ranked first
  EXPECT_EQ(s.Step(), (std::vector<Entry>{{1, 0, 10}}));  // displaces 0 (swapped out)
  EXPECT_EQ(s.sched.num_swapped(), 1u);
  s.Add(2, 10, 3, 2, 2);  // adapter 2: ranks before 0, but 0 holds the slot
  EXPECT_EQ(s.Step(), (std::vector<Entry>{{1, 10, 1}}));  // 1 finishes
  EXPECT_EQ(s.Step(), (std::vector<Entry>{{0, 10, 1}}));  // 0 resumes
  for (int i = 0; i < 60 && s.sched.counters().num_finished < 3; ++i) s.Step();
  EXPECT_EQ(s.sched.counters().num_finished, 3);
}

// A swapped-out request that outranks a running one displaces it as a waiting one would: two
// seats, swap. Long (0) and medium (1) run; short (2) displaces the medium one (swapped out);
// then a still shorter one (3) displaces the long one. The medium one, swapped, ranks before
// the long one and comes back first.
TEST(PreemptiveBatchTest, SwappedRequestsResumeInRankOrder) {
  Harness h("preemptive", "sjf", 2, 64, 512, /*host_blocks=*/32);
  h.Add(0, 10, 200);
  h.Add(1, 10, 50);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{1, 0, 10}, {0, 0, 10}}));  // by rank: 1 first
  h.Add(2, 10, 5);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{2, 0, 10}, {1, 10, 1}}));
  EXPECT_EQ(h.preempted, (std::vector<RequestId>{0}));  // the worst, 0, not 1
  h.Add(3, 10, 3);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{3, 0, 10}, {2, 10, 1}}));
  EXPECT_EQ(h.preempted, (std::vector<RequestId>{1}));
  EXPECT_EQ(Ids({h.sched.swapped().begin(), h.sched.swapped().end()}),
            (std::vector<RequestId>{1, 0}));  // ranked: 1 has 48 tokens to go, 0 199
  h.Step();
  h.Step();  // 3 finishes (3 tokens)
  // No step both swaps out and in; the next step resumes 1 (rank 48 to go) before 0 (199).
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{2, 13, 1}, {1, 11, 1}}));
  EXPECT_EQ(Ids({h.sched.swapped().begin(), h.sched.swapped().end()}), (std::vector<RequestId>{0}));
  EXPECT_EQ(h.sched.counters().num_recomputed_tokens, 0);
}

// Seats to spare, blocks short. Priorities: A 0 (best), B 2; C (1) needs more blocks than are
// free. C outranks B only: B's blocks plus the free ones suffice, so B is displaced and C runs.
// D (priority 1 too, later) would need A's blocks as well: it outranks nobody that would make
// room, so nobody is displaced for it.
TEST(PreemptiveBatchTest, BlocksAreTakenOnlyFromRequestsTheNewcomerOutranks) {
  // 13 blocks: 12 usable (192 slots at block size 16).
  Harness h("preemptive", "priority", 8, 13);
  h.Add(0, 64, 50, 0);  // A: 4 blocks (a 5th for its first decode)
  h.Add(1, 96, 50, 2);  // B: 6 blocks
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 0, 64}, {1, 0, 96}}));
  EXPECT_EQ(h.kv.num_free_blocks(), 2);
  h.Add(2, 80, 5, 1);  // C: 5 blocks; the 2 free and B's 6 make room, A keeps its own
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 64, 1}, {2, 0, 80}}));
  EXPECT_EQ(h.preempted, (std::vector<RequestId>{1}));
  EXPECT_EQ(Ids(h.sched.waiting()), (std::vector<RequestId>{1}));

  Harness g("preemptive", "priority", 8, 13);
  g.Add(0, 64, 50, 0);
  g.Add(1, 96, 50, 2);
  g.Step();
  g.Add(3, 150, 5, 1);  // 10 blocks: more than the 2 free and B's 6
  EXPECT_EQ(g.Step(), (std::vector<Entry>{{0, 64, 1}, {1, 96, 1}}));
  EXPECT_TRUE(g.preempted.empty());
  EXPECT_EQ(Ids(g.sched.waiting()), (std::vector<RequestId>{3}));
}

// The budget goes by rank: a better-ranked arrival is admitted ahead of a running request's
// chunked prefill, which gets what is left.
TEST(PreemptiveBatchTest, TheBudgetGoesToTheBetterRankedFirst) {
  Harness h("preemptive", "priority", 4, 200, /*budget=*/100);
  h.Add(0, 300, 5, 3);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 0, 100}}));
  h.Add(1, 60, 5, 0);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{1, 0, 60}, {0, 100, 40}}));
  EXPECT_TRUE(h.preempted.empty());
  EXPECT_EQ(Ids(h.sched.running()), (std::vector<RequestId>{1, 0}));

  Harness v("vllm", "priority", 4, 200, /*budget=*/100);
  v.Add(0, 300, 5, 3);
  v.Step();
  v.Add(1, 60, 5, 0);
  EXPECT_EQ(v.Step(), (std::vector<Entry>{{0, 100, 100}}));  // running first: nothing left
}

// FastServe: one seat, level-0 quantum 2 ms. A long request is demoted step by step while it
// runs alone; a new request joins level 0 and displaces it at once; the long one resumes after.
TEST(PreemptiveBatchTest, MlfqDemotesTheLongRunningAndANewcomerDisplacesIt) {
  Harness h("preemptive", "{name: mlfq, levels: 4, quantum_ms: 2, skip_join: false}", 1, 64);
  h.Add(0, 10, 100);
  for (int i = 0; i < 6; ++i) h.Step();  // 6 ms: 2 at level 0, 4 at level 1, then level 2
  const Request* long_one = h.sched.running().front();
  EXPECT_EQ(long_one->queue_level.level, 2);
  h.Add(1, 10, 2);
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{1, 0, 10}}));
  EXPECT_EQ(h.preempted, (std::vector<RequestId>{0}));
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{1, 10, 1}}));       // its 2nd token: done
  EXPECT_EQ(h.Step(), (std::vector<Entry>{{0, 0, 16}}));       // 10 prompt + 6 outputs recomputed
  EXPECT_EQ(h.sched.running().front()->queue_level.level, 2);  // it kept its level
}

// Scheduling the same stream twice gives the same plans (no dependence on addresses).
TEST(PreemptiveBatchTest, PlansAreDeterministic) {
  const auto run = [] {
    Harness h("preemptive", "{name: mlfq, levels: 3, quantum_ms: 1, starve_s: 0.004}", 3, 40);
    std::vector<Entry> all;
    for (RequestId id = 0; id < 40; ++id) {
      h.Add(id, 8 + static_cast<std::int32_t>(id * 37 % 90), 1 + static_cast<std::int32_t>(id % 7));
      for (const Entry& e : h.Step()) all.push_back(e);
    }
    while (h.sched.has_unfinished()) {
      for (const Entry& e : h.Step()) all.push_back(e);
    }
    EXPECT_EQ(h.sched.counters().num_finished, 40);
    EXPECT_GT(h.sched.counters().num_preemptions, 0);
    return all;
  };
  EXPECT_EQ(run(), run());
}

// ---------------------------------------------------------------- experiments

const std::string kBurst = servelab_home().string() + "/experiments/burst.yaml";

std::string LoadError(const std::vector<std::string>& overrides) {
  try {
    load_experiment(kBurst, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

TEST(PreemptiveExperimentTest, RefusedCombinationsNameTheKey) {
  // The default queue (fcfs) puts a preempted request at its head: no rank.
  std::string m = LoadError({"policies.batch=preemptive"});
  EXPECT_NE(m.find("burst.yaml: policies.queue: 'fcfs' does not rank"), std::string::npos) << m;
  EXPECT_NE(m.find("batch 'preemptive'"), std::string::npos) << m;
  EXPECT_NE(m.find("orders that do: priority, sjf, predicted-sjf, edf, mlfq"), std::string::npos)
      << m;
  m = LoadError({"policies.batch=preemptive", "policies.queue=fair"});
  EXPECT_NE(m.find("policies.queue: 'fair' does not rank"), std::string::npos) << m;
  m = LoadError({"policies.queue=mlfq", "serving.async_scheduling=true"});
  EXPECT_NE(m.find("key 'serving.async_scheduling': async scheduling does not combine with "
                   "policies.queue 'mlfq'"),
            std::string::npos)
      << m;
  m = LoadError({"policies.queue={name: mlfq, levels: 0}"});
  EXPECT_NE(m.find("levels"), std::string::npos) << m;
}

// On the burst experiment: preemptive shortest-remaining-first beats non-preemptive sjf on
// median TTFT, FastServe's MLFQ runs, and every run is deterministic.
TEST(PreemptiveExperimentTest, BurstRunsDeterministicallyUnderEveryRankedOrder) {
  RunOptions o;
  o.write_files = false;
  DistributionSummary sjf_ttft, srtf_ttft;
  for (const char* queue : {"priority", "sjf", "{name: predicted-sjf, error: 0.5}", "edf", "mlfq",
                            "{name: mlfq, starve_s: 2}"}) {
    SCOPED_TRACE(queue);
    const ExperimentConfig c =
        load_experiment(kBurst, {std::string("policies.queue=") + queue,
                                 "policies.batch=preemptive", "workload.num_requests=600"});
    const RunOutput a = run_simulation(c, o);
    const RunOutput b = run_simulation(c, o);
    EXPECT_EQ(a.summary.completed, 600);
    EXPECT_EQ(a.summary.num_steps, b.summary.num_steps);
    EXPECT_EQ(a.summary.ttft_ms.mean, b.summary.ttft_ms.mean);
    EXPECT_EQ(a.summary.preemptions, b.summary.preemptions);
    if (std::string(queue) == "sjf") srtf_ttft = a.summary.ttft_ms;
  }
  sjf_ttft = run_simulation(
                 load_experiment(kBurst, {"policies.queue=sjf", "workload.num_requests=600"}), o)
                 .summary.ttft_ms;
  EXPECT_LT(srtf_ttft.p50, sjf_ttft.p50);
}

}  // namespace
}  // namespace servelab
