#include "core/step_plan.h"

namespace servelab {

void StepPlan::clear() {
  requests.clear();
  swap_out.clear();
  swap_in.clear();
  copies.clear();
  preempted.clear();
  tier_loads.clear();
  tier_stores.clear();
  num_prefill_tokens = 0;
  num_decode_tokens = 0;
  num_fork_tokens = 0;
  num_steps = 1;
  pipelined = false;
  draft_tokens.clear();
  num_draft_tokens = 0;
  num_lora_tokens = 0;
  num_loras = 0;
  totals = Totals{};
}

}  // namespace servelab
