// engine/plan_check.h: the plan checks both executors make, each violation named.
#include "engine/plan_check.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/request.h"

namespace servelab {
namespace {

// The message check_plan throws for `plan`, or "" when it accepts it.
std::string error_of(const StepPlan& plan, const PlanLimits& limits) {
  try {
    check_plan(plan, limits, "TestExecutor");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(PlanCheck, AcceptsAValidPlanAndNamesEachViolation) {
  PlanLimits limits;
  limits.num_blocks = 4;
  limits.num_host_blocks = 2;
  limits.block_size = 4;
  limits.max_context = 8;
  RequestSpec spec;
  spec.prompt_len = 8;
  const std::vector<BlockId> table = {0, 3};
  ScheduledRequest e;
  e.id = 7;
  e.spec = &spec;
  e.first_token = 0;
  e.num_tokens = 8;
  e.block_table = table;
  StepPlan plan;
  plan.requests = {e};
  plan.swap_out = {{1, 1}};
  plan.swap_in = {{0, 2}};
  plan.copies = {{2, 1}};
  EXPECT_EQ(error_of(plan, limits), "");

  StepPlan bad = plan;
  bad.swap_out = {{1, 2}};
  EXPECT_EQ(error_of(bad, limits), "TestExecutor: swap_out block out of range");
  bad = plan;
  bad.swap_in = {{2, 0}};
  EXPECT_EQ(error_of(bad, limits), "TestExecutor: swap_in block out of range");
  bad = plan;
  bad.copies = {{0, 4}};
  EXPECT_EQ(error_of(bad, limits), "TestExecutor: copy block out of range");
  bad = plan;
  bad.requests[0].num_tokens = 0;
  EXPECT_EQ(error_of(bad, limits), "TestExecutor: request 7: empty entry");
  bad = plan;
  bad.requests[0].block_table = std::span<const BlockId>(table).first(1);
  EXPECT_EQ(error_of(bad, limits), "TestExecutor: request 7: block table too short");
  const std::vector<BlockId> wild = {0, 9};
  bad = plan;
  bad.requests[0].block_table = wild;
  EXPECT_EQ(error_of(bad, limits), "TestExecutor: request 7: block id out of range");
  spec.prompt_len = 7;
  EXPECT_EQ(error_of(plan, limits), "TestExecutor: request 7: positions beyond the known tokens");
  spec.prompt_len = 8;
  limits.max_context = 7;
  EXPECT_EQ(error_of(plan, limits), "TestExecutor: request 7: context beyond max_model_len");
}

}  // namespace
}  // namespace servelab
