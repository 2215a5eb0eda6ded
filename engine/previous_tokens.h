// Async scheduling (StepPlan::pipelined, core/step_plan.h) inside an executor: the token each
// entry of the last plan sampled, which a pipelined plan's one-token decode that starts one past
// its request's known tokens takes as its input (vLLM's worker keeps the previous step's sampled
// ids on the device for the same purpose). Shared by CpuExecutor and CudaExecutor, so both feed
// the same token and refuse the same plans.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "core/step_plan.h"

namespace servelab {

class PreviousTokens {
 public:
  // Per plan entry, 1 where the entry takes the previous step's token (a pipelined plan, the
  // entry starts at its request's known tokens); all 0 for a plan that is not pipelined. Throws
  // std::invalid_argument("<who>: request ID starts at a token the previous plan did not
  // sample") when such an entry's request sampled nothing in the last plan. Changes nothing.
  std::vector<std::uint8_t> takers(const StepPlan& plan, std::string_view who) const;
  // The token request `id` sampled in the last recorded plan, or -1.
  std::int32_t token(RequestId id) const;
  // Remembers what `plan`'s sampling entries sampled (result.sampled_tokens), forgetting the
  // plan before.
  void record(const StepPlan& plan, const StepResult& result);

 private:
  std::vector<std::pair<RequestId, std::int32_t>> tokens_;  // sorted by id
};

}  // namespace servelab
