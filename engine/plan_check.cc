#include "engine/plan_check.h"

#include <stdexcept>
#include <string>

namespace servelab {

void check_plan(const StepPlan& plan, const PlanLimits& limits, std::string_view who) {
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(std::string(who) + ": " + what);
  };
  auto device = [&](BlockId b) { return b >= 0 && b < limits.num_blocks; };
  auto host = [&](BlockId b) { return b >= 0 && b < limits.num_host_blocks; };
  for (const BlockMove& m : plan.swap_out) {
    check(device(m.src) && host(m.dst), "swap_out block out of range");
  }
  for (const BlockMove& m : plan.swap_in) {
    check(host(m.src) && device(m.dst), "swap_in block out of range");
  }
  for (const BlockMove& m : plan.copies) {
    check(device(m.src) && device(m.dst), "copy block out of range");
  }
  const std::int32_t bs = limits.block_size;
  for (std::size_t k = 0; k < plan.requests.size(); ++k) {
    const ScheduledRequest& e = plan.requests[k];
    const std::string id = "request " + std::to_string(e.id);
    check(e.spec != nullptr && e.num_tokens >= 1 && e.first_token >= 0, id + ": empty entry");
    check(static_cast<std::int64_t>(e.block_table.size()) * bs >= e.context_len(),
          id + ": block table too short");
    for (std::int32_t b = 0; b * bs < e.context_len(); ++b) {
      check(device(e.block_table[b]), id + ": block id out of range");
    }
    // Known tokens, plus the draft tokens a verify entry checks (speculative decoding), plus in
    // a pipelined plan the previous step's token of a one-token decode (async scheduling).
    const std::int64_t known =
        e.spec->prompt_len + static_cast<std::int64_t>(e.output_tokens.size());
    const bool takes_previous = plan.pipelined && e.num_tokens == 1 && e.first_token == known;
    check(e.context_len() <= known + static_cast<std::int64_t>(plan.drafts_of(k).size()) +
                                 (takes_previous ? 1 : 0),
          id + ": positions beyond the known tokens");
    check(e.context_len() <= limits.max_context, id + ": context beyond max_model_len");
  }
}

}  // namespace servelab
