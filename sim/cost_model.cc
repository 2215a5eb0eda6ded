#include "sim/cost_model.h"

namespace servelab {

CostModel::~CostModel() = default;

StepFeatures StepFeatures::from_plan(const StepPlan& plan) {
  StepFeatures f;
  for (const ScheduledRequest& r : plan.requests) {
    const std::int64_t n = r.num_tokens;
    const std::int64_t p = r.first_token;
    // Causal: token i of the chunk (0-based) sees the p cached tokens and i + 1 of the chunk.
    const std::int64_t pairs = n * p + n * (n + 1) / 2;
    if (r.is_prefill) {
      f.prefill_tokens += n;
      f.prefill_pairs += pairs;
      f.prefill_context_tokens += p + n;
    } else {
      f.decode_tokens += n;
      f.decode_pairs += pairs;
      f.decode_context_tokens += p + n;
    }
    f.num_sampled += r.samples ? 1 : 0;
  }
  f.num_tokens = f.prefill_tokens + f.decode_tokens;
  f.swap_out_blocks = static_cast<std::int64_t>(plan.swap_out.size());
  f.swap_in_blocks = static_cast<std::int64_t>(plan.swap_in.size());
  f.copy_blocks = static_cast<std::int64_t>(plan.copies.size());
  return f;
}

}  // namespace servelab
