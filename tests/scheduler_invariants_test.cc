// check_scheduler_invariants (core/scheduler_invariants.h) and HookedBackend
// (core/hooked_backend.h), what the Python module runs after every step while a Python policy is
// active: quiet on a correct scheduler through preemptions, loud on a broken waiting queue.
#include "core/scheduler_invariants.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/hooked_backend.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "core/waiting_queue.h"

namespace servelab {
namespace {

RequestSpec Spec(RequestId id, std::int32_t len, std::int32_t max_out) {
  return make_request(id, 0, {{unique_content_id(7, id), 0, static_cast<std::uint32_t>(len)}},
                      max_out);
}

StepResult Tokens(const StepPlan& plan) {
  StepResult res;
  res.duration_ns = 1;
  for (const ScheduledRequest& e : plan.requests) res.sampled_tokens.push_back(e.samples ? 3 : -1);
  return res;
}

// A queue that forgets to take a preempted request out of its old place: push_front adds a
// second copy of a request that is already queued.
class DuplicatingQueue final : public DequeWaitingQueue {
 public:
  const char* name() const override { return "duplicating"; }
  void push_front(Request* r) override {
    q_.push_front(r);
    q_.push_back(r);
  }
  // Drops the copies, so that the scheduler's destructor deletes each request once.
  void dedupe() {
    std::deque<Request*> once;
    for (Request* r : q_) {
      if (std::find(once.begin(), once.end(), r) == once.end()) once.push_back(r);
    }
    q_ = std::move(once);
  }
};

TEST(SchedulerInvariantsTest, HoldThroughPreemptionsOfACorrectScheduler) {
  BlockPool pool(17);  // 16 usable blocks of 16 tokens: six 40-token requests must preempt
  KvCacheManager kv(pool, 16, 8192, /*enable_prefix_caching=*/true);
  SchedulerConfig c;
  c.max_num_batched_tokens = 128;
  Scheduler s(c, kv, nullptr);
  for (RequestId id = 0; id < 6; ++id) s.add_request(Spec(id, 40, 60), 0);
  std::int64_t preempted = 0;
  for (TimeNs now = 0; s.has_unfinished(); ++now) {
    ASSERT_LT(now, 10000);
    const StepPlan& plan = s.schedule(now);
    ASSERT_NO_THROW(check_scheduler_invariants(s, plan));
    preempted += static_cast<std::int64_t>(plan.preempted.size());
    s.complete(Tokens(plan), now + 1);
  }
  EXPECT_GT(preempted, 0);
}

TEST(SchedulerInvariantsTest, BrokenQueueIsCaughtAfterTheStepThatPreempted) {
  BlockPool pool(17);
  KvCacheManager kv(pool, 16, 8192, /*enable_prefix_caching=*/true);
  SchedulerConfig c;
  c.max_num_batched_tokens = 128;
  auto queue = std::make_unique<DuplicatingQueue>();
  DuplicatingQueue* q = queue.get();
  Scheduler s(c, kv, nullptr, std::move(queue));
  for (RequestId id = 0; id < 6; ++id) s.add_request(Spec(id, 40, 60), 0);
  std::string error;
  for (TimeNs now = 0; s.has_unfinished() && error.empty(); ++now) {
    ASSERT_LT(now, 10000);
    const StepPlan& plan = s.schedule(now);
    try {
      check_scheduler_invariants(s, plan);
    } catch (const std::logic_error& e) {
      error = e.what();
      EXPECT_FALSE(plan.preempted.empty());  // the first step that used push_front
      break;
    }
    s.complete(Tokens(plan), now + 1);
  }
  q->dedupe();
  EXPECT_NE(error.find("scheduler invariant broken: request"), std::string::npos) << error;
  EXPECT_NE(error.find("is held twice"), std::string::npos) << error;
}

class CountingBackend final : public Backend {
 public:
  std::string_view name() const override { return "counting"; }
  StepResult execute(const StepPlan& plan) override {
    ++executed;
    return Tokens(plan);
  }
  int executed = 0;
};

TEST(HookedBackendTest, HookSeesEachPlanBeforeTheInnerBackendAndCanStopIt) {
  CountingBackend inner;
  int seen = 0;
  HookedBackend hooked(inner, [&](const StepPlan& plan) {
    EXPECT_EQ(inner.executed, seen);  // before the inner backend runs it
    if (plan.step_index == 2) throw std::logic_error("stop");
    ++seen;
  });
  EXPECT_EQ(hooked.name(), "counting");
  StepPlan plan;
  StepResult result;
  plan.step_index = 0;
  hooked.execute_into(plan, result);
  plan.step_index = 1;
  (void)hooked.execute(plan);
  plan.step_index = 2;
  EXPECT_THROW(hooked.execute(plan), std::logic_error);
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(inner.executed, 2);
}

}  // namespace
}  // namespace servelab
