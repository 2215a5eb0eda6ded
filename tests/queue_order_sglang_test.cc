// SGLang's schedule policies as queue orders (policies/queue_order_sglang.cc): lpm (with in-batch
// deprioritisation and its FCFS fallbacks), dfs-weight, lof and random, each on a hand-built
// queue with a fake prefix probe, then lpm and dfs-weight through the scheduler and its real
// prefix cache (every order also runs the burst experiment deterministically in
// policies_test.cc; experiments/cache-aware.yaml's numbers are held by lessons_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/radix_prefix_cache.h"
#include "core/request.h"
#include "core/scheduler.h"
#include "core/scheduler_observer.h"
#include "policies/queue_order.h"
#include "policies/registry.h"
#include "scheduler_harness.h"

namespace servelab {
namespace {

std::unique_ptr<WaitingQueue> Queue(const std::string& name,
                                    const std::map<std::string, ParamValue>& params = {}) {
  SchedulerConfig c;
  use_policy(c, PolicyKind::kQueue, name, params);
  return c.make_waiting_queue();
}

// A probe over made-up hash chains: request id -> its block hashes and how many are cached.
class FakeProbe final : public PrefixProbe {
 public:
  std::int32_t block_size() const override { return 16; }
  std::span<const BlockHash> hashes(Request& r) override { return chains.at(r.id()); }
  std::int32_t cached_blocks(Request& r) override { return cached.at(r.id()); }

  // Request `id` has the chain of `path` (each element a block's content, so equal prefixes of
  // two paths give equal hashes) with the first `num_cached` blocks cached.
  void Set(RequestId id, const std::vector<int>& path, std::int32_t num_cached) {
    std::vector<BlockHash> chain;
    BlockHash h = kNoneHash;
    for (const int b : path) {
      h = BlockHash{h.lo * 31 + static_cast<std::uint64_t>(b) + 1, h.hi ^ (h.lo + 7)};
      chain.push_back(h);
    }
    chains[id] = chain;
    cached[id] = num_cached;
  }
  std::map<RequestId, std::vector<BlockHash>> chains;
  std::map<RequestId, std::int32_t> cached;
};

// Requests 0..n-1 (output lengths `out`), pushed in id order.
struct Requests {
  explicit Requests(const std::vector<std::int32_t>& out) {
    for (std::size_t i = 0; i < out.size(); ++i) {
      all.push_back(
          std::make_unique<Request>(make_request(static_cast<RequestId>(i), static_cast<TimeNs>(i),
                                                 {{unique_content_id(9, i), 0, 64}}, out[i])));
    }
  }
  void PushAll(WaitingQueue& q, const std::vector<RequestId>& order) {
    for (const RequestId id : order) q.push_back(all[id].get());
  }
  std::vector<std::unique_ptr<Request>> all;
};

std::vector<RequestId> Ids(const WaitingQueue& q) {
  std::vector<RequestId> ids;
  for (const Request* r : q.snapshot()) ids.push_back(r->id());
  return ids;
}

TEST(SglangQueueOrder, LpmSortsByCachedPrefixStably) {
  auto q = Queue("lpm");
  ASSERT_TRUE(q->reorders());
  Requests rs({4, 4, 4, 4, 4});
  rs.PushAll(*q, {0, 1, 2, 3, 4});
  FakeProbe p;
  p.Set(0, {10, 11}, 0);
  p.Set(1, {20, 21, 22, 23}, 3);  // 48 cached tokens: above the 32-token check
  p.Set(2, {30, 31, 32}, 3);
  p.Set(3, {40, 41, 42, 43, 44}, 5);
  p.Set(4, {50}, 0);
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{0, 1, 2, 3, 4}));  // FCFS until a step starts
  q->reorder(&p, 0);
  // 3 (80 tokens), then 1 and 2 (48 each, in their order), then 0 and 4.
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{3, 1, 2, 0, 4}));
  // 3 and 1 are admitted; 1 is preempted and returns at the head, 3 comes back as a new
  // arrival at the back: FCFS until the next step re-sorts.
  q->pop_front();
  q->pop_front();
  q->push_front(rs.all[1].get());
  q->push_back(rs.all[3].get());
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{1, 2, 0, 4, 3}));
  q->reorder(&p, 0);
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{3, 1, 2, 0, 4}));
}

TEST(SglangQueueOrder, LpmDeprioritisesRequestsSharingANewPrefix) {
  auto q = Queue("lpm");
  Requests rs({4, 4, 4, 4, 4});
  rs.PushAll(*q, {0, 1, 2, 3, 4});
  FakeProbe p;
  // 0, 2 and 4 share a 3-block prefix nothing has cached yet; 1 and 3 are unrelated.
  p.Set(0, {7, 8, 9, 100}, 0);
  p.Set(1, {1, 2}, 0);
  p.Set(2, {7, 8, 9, 200}, 0);
  p.Set(3, {3, 4}, 0);
  p.Set(4, {7, 8, 9}, 0);
  q->reorder(&p, 0);
  // Only 0 of the group goes first; 2 and 4 wait behind 1 and 3, for 0's blocks.
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{0, 1, 3, 2, 4}));
  // Deprioritised requests keep their list order whatever they have cached (SGLang gives them
  // all the key inf): 2 (16 cached) stays behind 1 (none); they were sorted by cached tokens.
  auto qd = Queue("lpm");
  Requests rd({4, 4, 4});
  rd.PushAll(*qd, {0, 1, 2});
  FakeProbe pd;
  pd.Set(0, {1, 2, 3, 4}, 1);
  pd.Set(1, {1, 2, 5}, 0);
  pd.Set(2, {1, 2, 6}, 1);
  qd->reorder(&pd, 0);
  EXPECT_EQ(Ids(*qd), (std::vector<RequestId>{0, 1, 2}));
  // A shared prefix of one block (16 tokens) is below the 32-token threshold: no effect.
  auto q1 = Queue("lpm");
  rs.PushAll(*q1, {0, 1, 2});
  p.Set(2, {7, 55}, 0);
  q1->reorder(&p, 0);
  EXPECT_EQ(Ids(*q1), (std::vector<RequestId>{0, 1, 2}));
  // in_batch_threshold 0 turns it off.
  auto q0 = Queue("lpm", {{"in_batch_threshold", std::int64_t{0}}});
  rs.PushAll(*q0, {0, 1, 2, 3, 4});
  p.Set(2, {7, 8, 9, 200}, 0);
  q0->reorder(&p, 0);
  EXPECT_EQ(Ids(*q0), (std::vector<RequestId>{0, 1, 2, 3, 4}));
}

TEST(SglangQueueOrder, LpmFallsBackToFcfsForLongQueuesAndWithoutCaching) {
  Requests rs({4, 4, 4});
  FakeProbe p;
  p.Set(0, {1}, 0);
  p.Set(1, {2}, 0);
  p.Set(2, {3, 4}, 2);
  auto q = Queue("lpm", {{"max_queue", std::int64_t{2}}});
  rs.PushAll(*q, {0, 1, 2});
  q->reorder(&p, 0);  // 3 waiting > max_queue 2
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{0, 1, 2}));
  q->pop_front();
  q->reorder(&p, 0);  // 2 waiting: sorted
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{2, 1}));
  auto off = Queue("lpm");
  rs.PushAll(*off, {0, 1, 2});
  off->reorder(nullptr, 0);  // prefix caching off
  EXPECT_EQ(Ids(*off), (std::vector<RequestId>{0, 1, 2}));
}

TEST(SglangQueueOrder, DfsWeightWalksTheCachedTreeHeaviestFirst) {
  auto q = Queue("dfs-weight");
  Requests rs({4, 4, 4, 4, 4, 4});
  rs.PushAll(*q, {5, 4, 3, 2, 1, 0});
  FakeProbe p;
  // Cached tree: a -> {b: requests 0, 1; c: request 2}, a itself: request 5; d: request 3;
  // nothing cached: request 4.
  p.Set(0, {1, 2, 9}, 2);  // a, b
  p.Set(1, {1, 2}, 2);     // a, b
  p.Set(2, {1, 3, 9}, 2);  // a, c
  p.Set(3, {4, 9}, 1);     // d
  p.Set(4, {5, 9}, 0);     // root
  p.Set(5, {1, 8}, 1);     // a
  q->reorder(&p, 0);
  // a (weight 4) before d (1); under a, b (2) before c (1), then a's own request; the root's
  // request last. Within b, the list's order (1 came before 0).
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{1, 0, 2, 5, 3, 4}));
  // Equal weights keep the list's order: c now also weighs 2.
  p.Set(5, {1, 3}, 2);
  q->reorder(&p, 0);
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{1, 0, 2, 5, 3, 4}));
  auto off = Queue("dfs-weight");
  rs.PushAll(*off, {5, 4, 3});
  off->reorder(nullptr, 0);
  EXPECT_EQ(Ids(*off), (std::vector<RequestId>{5, 4, 3}));
}

// The cached tree is as deep as the longest cached prefix in blocks: a 4.8 M-token prompt in
// 16-token blocks is a chain of 300,000 nodes. The walk keeps its own stack (a recursive one
// overflowed the thread's stack at this depth).
TEST(SglangQueueOrder, DfsWeightWalksADeepChainWithoutRecursion) {
  auto q = Queue("dfs-weight");
  Requests rs({4, 4, 4});
  rs.PushAll(*q, {0, 1, 2});
  FakeProbe p;
  constexpr int kDepth = 300000;
  std::vector<int> deep(kDepth, 7), side(kDepth, 7);
  side[kDepth / 2] = 8;  // shares the first half, then its own branch
  p.Set(0, deep, kDepth / 4);
  p.Set(1, side, kDepth);
  p.Set(2, deep, kDepth);
  q->reorder(&p, 0);
  // At the fork (depth kDepth / 2) both branches weigh 1: the list's order, 1 then 2; request 0
  // sits higher up, after its subtree.
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{1, 2, 0}));
}

TEST(SglangQueueOrder, LofPutsTheLongestOutputFirst) {
  auto q = Queue("lof");
  Requests rs({5, 9, 5, 1, 9});
  rs.PushAll(*q, {0, 1, 2, 3, 4});
  q->reorder(nullptr, 0);  // needs no cache
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{1, 4, 0, 2, 3}));
}

TEST(SglangQueueOrder, RandomShufflesEveryStepFromTheSeed) {
  Requests rs(std::vector<std::int32_t>(12, 4));
  std::vector<RequestId> order(12);
  for (RequestId i = 0; i < 12; ++i) order[i] = i;
  auto shuffles = [&](std::uint64_t seed) {
    PolicySpec spec;
    spec.name = "random";
    auto q = make_waiting_queue(spec, seed);
    rs.PushAll(*q, order);
    std::vector<std::vector<RequestId>> out;
    for (int step = 0; step < 3; ++step) {
      q->reorder(nullptr, 0);
      out.push_back(Ids(*q));
    }
    return out;
  };
  const auto a = shuffles(1);
  EXPECT_EQ(a, shuffles(1));  // deterministic
  EXPECT_NE(a, shuffles(2));  // the seed matters
  EXPECT_NE(a[0], a[1]);      // a fresh shuffle each step
  for (const auto& s : a) {
    EXPECT_TRUE(std::is_permutation(s.begin(), s.end(), order.begin()));
    EXPECT_NE(s, order);
  }
}

// ---------------------------------------------------------------- through the scheduler

struct NoObserver : SchedulerObserver {};

// One seat; request 0 runs first and leaves its 64-token prompt cached. Then 1 (unrelated) and
// 2 (0's prompt plus 32 tokens) wait; returns the order of the three admissions and the tokens
// each admission found cached.
std::vector<std::pair<RequestId, std::int32_t>> Admissions(const std::string& queue) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 512;
  c.max_num_seqs = 1;
  c.block_size = 16;
  c.enable_prefix_caching = true;
  use_policy(c, PolicyKind::kQueue, queue);
  test_util::SchedulerHarness<NoObserver> h(c, 64);
  const std::uint64_t shared = unique_content_id(5, 0);
  h.sched.add_request(make_request(0, 0, {{shared, 0, 64}}, 2), 0);
  h.sched.add_request(make_request(1, 1, {{unique_content_id(5, 1), 0, 64}}, 2), 1);
  h.sched.add_request(make_request(2, 2, {{shared, 0, 64}, {unique_content_id(5, 2), 0, 32}}, 2),
                      2);
  std::vector<std::pair<RequestId, std::int32_t>> order;
  for (TimeNs t = 3; h.sched.has_unfinished() && t < 100; ++t) {
    const StepPlan& plan = h.Schedule(t);
    StepResult res;
    res.duration_ns = 1;
    for (const ScheduledRequest& e : plan.requests) {
      if (e.is_prefill && e.first_token == e.num_cached_prefix) {
        order.emplace_back(e.id, e.first_token);
      }
      res.sampled_tokens.push_back(e.samples ? 100 : -1);
    }
    h.Finish(res, t);
  }
  return order;
}

TEST(SglangQueueOrderScheduler, LpmAdmitsTheCachedPrefixFirst) {
  using V = std::vector<std::pair<RequestId, std::int32_t>>;
  // FCFS: 1 before 2 (request 1 was first in the queue, 0 had the seat).
  EXPECT_EQ(Admissions("fcfs"), (V{{0, 0}, {1, 0}, {2, 64}}));
  // lpm and dfs-weight: 2 jumps ahead of 1 to reuse 0's four cached blocks.
  EXPECT_EQ(Admissions("lpm"), (V{{0, 0}, {2, 64}, {1, 0}}));
  EXPECT_EQ(Admissions("dfs-weight"), (V{{0, 0}, {2, 64}, {1, 0}}));
}

// With the radix cache, lpm's probe refreshes the prefixes waiting requests match (SGLang's
// match_prefix stamps the nodes it walks): requests 0 and 1 leave prefixes P and Q cached,
// request 2's long decode evicts while 3 (P + 16 tokens) waits, and P, which 3 matches at every
// step, outlives Q although Q was cached later. Without the refresh P went first and 3 found one
// block of it.
TEST(SglangQueueOrderScheduler, LpmKeepsThePrefixAWaitingRequestMatches) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 256;
  c.max_num_seqs = 1;
  c.block_size = 16;
  c.max_model_len = 1024;
  c.enable_prefix_caching = true;
  use_policy(c, PolicyKind::kQueue, "lpm");
  BlockPool pool(20);
  KvCacheOptions radix;
  radix.prefix_cache = make_radix_prefix_cache;
  KvCacheManager kv(pool, c.block_size, c.max_model_len, true, radix);
  NoObserver obs;
  Scheduler sched(c, kv, &obs);
  const auto req = [](RequestId id, std::vector<PromptSegment> segments, std::int32_t out) {
    return make_request(id, static_cast<TimeNs>(id), std::move(segments), out);
  };
  sched.add_request(req(0, {{100, 0, 64}, {201, 0, 1}}, 2), 0);
  sched.add_request(req(1, {{300, 0, 64}, {202, 0, 1}}, 2), 1);
  sched.add_request(req(2, {{400, 0, 16}}, 180), 2);
  std::map<RequestId, std::int32_t> cached;
  for (TimeNs t = 3; sched.has_unfinished() && t < 1000; ++t) {
    if (t == 10) {
      sched.add_request(req(3, {{100, 0, 64}, {203, 0, 16}}, 2), t);
    }
    const StepPlan& plan = sched.schedule(t);
    StepResult res;
    res.duration_ns = 1;
    for (const ScheduledRequest& e : plan.requests) {
      if (e.is_prefill && e.first_token == e.num_cached_prefix) cached[e.id] = e.first_token;
      res.sampled_tokens.push_back(e.samples ? 100 : -1);
    }
    sched.complete(res, t);
    kv.check_invariants();
  }
  EXPECT_FALSE(sched.has_unfinished());
  EXPECT_GE(radix_tree_of(kv.prefix_cache())->num_evictions(), 2);  // request 2 evicted
  EXPECT_EQ(cached.at(3), 64);
}

// ---------------------------------------------------------------- through an experiment

}  // namespace
}  // namespace servelab
