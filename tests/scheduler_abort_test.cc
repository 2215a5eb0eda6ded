// Scheduler::abort (vLLM's finish_requests with FINISHED_ABORTED): a request given up between
// steps wherever it is (waiting, running, preempted, swapped, a forked group) leaves no block
// held on the device or the host, is reported once as aborted, and the others run on.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/host_block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "policies/registry.h"

namespace servelab {
namespace {

class Reports : public SchedulerObserver {
 public:
  void on_finish(const Request& r, TimeNs now) override {
    finished.push_back(r.id());
    statuses.push_back(r.status);
    reasons.push_back(r.finish_reason);
    times.push_back(now);
  }
  std::vector<RequestId> finished;
  std::vector<RequestStatus> statuses;
  std::vector<std::string> reasons;
  std::vector<TimeNs> times;
};

StepResult Tokens(const StepPlan& plan) {
  StepResult r;
  r.duration_ns = kNsPerMs;
  for (const ScheduledRequest& e : plan.requests) {
    r.sampled_tokens.push_back(e.samples ? 7 : -1);
    for (std::int32_t k = 1; k < e.num_samples; ++k) r.fork_tokens.push_back(8);
  }
  return r;
}

// Runs steps until nothing is left; returns the steps run.
int Drain(Scheduler& s, KvCacheManager& kv, TimeNs& now) {
  int steps = 0;
  while (s.has_unfinished()) {
    const StepPlan& p = s.schedule(now);
    if (p.empty()) break;
    now += kNsPerMs;
    s.complete(Tokens(p), now);
    kv.check_invariants();
    ++steps;
  }
  return steps;
}

TEST(SchedulerAbort, WaitingAndRunningRequestsFreeTheirBlocks) {
  BlockPool pool(40);
  KvCacheManager kv(pool, 16, 1024, true);
  SchedulerConfig c;
  c.max_num_seqs = 2;  // the third request waits
  Reports obs;
  Scheduler s(c, kv, &obs);
  for (RequestId id = 0; id < 3; ++id) s.add_request(make_request(id, 0, {{id + 1, 0, 40}}, 20), 0);
  TimeNs now = 0;
  const StepPlan& p = s.schedule(now);
  ASSERT_EQ(p.requests.size(), 2u);
  // Not while a plan awaits complete().
  EXPECT_THROW(s.abort(0, now, "client disconnected"), std::logic_error);
  now += kNsPerMs;
  s.complete(Tokens(p), now);
  ASSERT_EQ(s.num_running(), 2u);
  ASSERT_EQ(s.num_waiting(), 1u);
  EXPECT_LT(kv.num_free_blocks(), pool.num_usable_blocks());

  EXPECT_TRUE(s.abort(1, now, "client disconnected"));  // running
  EXPECT_TRUE(s.abort(2, now, "client disconnected"));  // waiting
  EXPECT_FALSE(s.abort(2, now, "again"));               // gone
  EXPECT_FALSE(s.abort(99, now, "unknown"));
  kv.check_invariants();
  EXPECT_EQ(s.num_running(), 1u);
  EXPECT_EQ(s.num_waiting(), 0u);
  EXPECT_EQ(s.counters().num_aborted, 2);
  ASSERT_EQ(obs.finished.size(), 2u);
  EXPECT_EQ(obs.finished[0], 1u);
  EXPECT_EQ(obs.statuses[0], RequestStatus::kAborted);
  EXPECT_EQ(obs.reasons[0], "client disconnected");
  EXPECT_EQ(obs.times[0], now);
  EXPECT_EQ(obs.statuses[1], RequestStatus::kAborted);

  Drain(s, kv, now);
  ASSERT_EQ(obs.finished.size(), 3u);
  EXPECT_EQ(obs.finished[2], 0u);
  EXPECT_EQ(obs.statuses[2], RequestStatus::kFinished);
  EXPECT_EQ(kv.num_free_blocks(), pool.num_usable_blocks());
}

TEST(SchedulerAbort, PreemptedAndSwappedRequestsFreeDeviceAndHostBlocks) {
  for (const std::string mode : {"recompute", "swap"}) {
    SCOPED_TRACE(mode);
    // 6 usable blocks, two requests of 40 + 40 tokens: they cannot both grow, so one is
    // preempted (recomputed: back to waiting; swapped: its blocks in the host pool).
    BlockPool pool(7);
    HostBlockPool host(16);
    KvCacheOptions ko;
    ko.host_pool = &host;
    KvCacheManager kv(pool, 16, 1024, true, ko);
    SchedulerConfig c;
    use_policy(c, PolicyKind::kPreemption, mode);
    Reports obs;
    Scheduler s(c, kv, &obs);
    s.add_request(make_request(0, 0, {{1, 0, 40}}, 40), 0);
    s.add_request(make_request(1, 0, {{2, 0, 40}}, 40), 0);
    TimeNs now = 0;
    RequestId victim = 0;
    bool found = false;
    for (int i = 0; i < 100 && !found; ++i) {
      const StepPlan& p = s.schedule(now);
      ASSERT_FALSE(p.empty());
      if (!p.preempted.empty()) victim = p.preempted[0];
      now += kNsPerMs;
      s.complete(Tokens(p), now);
      found = !p.preempted.empty();
    }
    ASSERT_TRUE(found);
    if (mode == "swap") {
      ASSERT_EQ(s.num_swapped(), 1u);
      EXPECT_LT(host.num_free_blocks(), host.num_blocks());
    } else {
      ASSERT_EQ(s.num_waiting(), 1u);
    }
    EXPECT_TRUE(s.abort(victim, now, "client disconnected"));
    kv.check_invariants();
    EXPECT_EQ(s.num_swapped(), 0u);
    EXPECT_EQ(s.num_waiting(), 0u);
    EXPECT_EQ(host.num_free_blocks(), host.num_blocks());
    Drain(s, kv, now);
    EXPECT_EQ(kv.num_free_blocks(), pool.num_usable_blocks());
    ASSERT_EQ(obs.finished.size(), 2u);
    EXPECT_EQ(obs.finished[0], victim);
    EXPECT_EQ(obs.statuses[0], RequestStatus::kAborted);
    EXPECT_EQ(obs.statuses[1], RequestStatus::kFinished);
  }
}

TEST(SchedulerAbort, AForkedRequestGoesWholeAndIsReportedOnce) {
  BlockPool pool(33);
  KvCacheManager kv(pool, 16, 1024, true);
  SchedulerConfig c;
  Reports obs;
  Scheduler s(c, kv, &obs);
  RequestSpec spec = make_request(5, 0, {{9, 0, 40}}, 10);
  spec.n = 3;
  s.add_request(spec, 0);
  TimeNs now = 0;
  for (int i = 0; i < 2; ++i) {
    const StepPlan& p = s.schedule(now);
    now += kNsPerMs;
    s.complete(Tokens(p), now);
  }
  ASSERT_EQ(s.num_running(), 3u);  // forked
  EXPECT_TRUE(s.abort(5, now, "client disconnected"));
  kv.check_invariants();
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(kv.num_free_blocks(), pool.num_usable_blocks());
  ASSERT_EQ(obs.finished.size(), 1u);
  EXPECT_EQ(obs.finished[0], 5u);
  EXPECT_EQ(obs.statuses[0], RequestStatus::kAborted);
  EXPECT_EQ(s.counters().num_aborted, 1);
}

}  // namespace
}  // namespace servelab
