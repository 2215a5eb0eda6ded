#include "core/step_features.h"

namespace servelab {

namespace {

// Adds one prefill entry (a chunk of n tokens from position p) to the prefill sums.
void add_prefill(StepFeatures& f, const ScheduledRequest& r) {
  const std::int64_t n = r.num_tokens;
  const std::int64_t p = r.first_token;
  f.prefill_tokens += n;
  f.prefill_pairs += causal_pairs(p, n);
  f.prefill_context_tokens += p + n;
  f.num_sampled += r.samples ? 1 : 0;
}

}  // namespace

StepFeatures StepFeatures::from_plan(const StepPlan& plan) {
  if (plan.totals.valid) {
    // A Scheduler plan: the sums come with it (each decode entry is one token that samples, so
    // its pairs equal its context). Every field set here, once: a default-initialised struct
    // costs a block clear on every simulated step.
    const StepPlan::Totals& t = plan.totals;
    return StepFeatures{
        .num_tokens = std::int64_t{plan.num_prefill_tokens} + plan.num_decode_tokens,
        .prefill_tokens = plan.num_prefill_tokens,
        .prefill_pairs = t.prefill_pairs,
        .prefill_context_tokens = t.prefill_context_tokens,
        .decode_tokens = plan.num_decode_tokens,
        .decode_pairs = t.decode_context_tokens,
        .decode_context_tokens = t.decode_context_tokens,
        .num_sampled = t.num_sampled,
        .swap_out_blocks = static_cast<std::int64_t>(plan.swap_out.size()),
        .swap_in_blocks = static_cast<std::int64_t>(plan.swap_in.size()),
        .copy_blocks = static_cast<std::int64_t>(plan.copies.size()),
    };
  }
  StepFeatures f;
  for (const ScheduledRequest& r : plan.requests) {
    if (r.is_prefill) {
      add_prefill(f, r);
      continue;
    }
    const std::int64_t n = r.num_tokens;
    const std::int64_t p = r.first_token;
    f.decode_tokens += n;
    f.decode_pairs += causal_pairs(p, n);
    f.decode_context_tokens += p + n;
    f.num_sampled += r.samples ? 1 : 0;
  }
  f.num_tokens = f.prefill_tokens + f.decode_tokens;
  f.swap_out_blocks = static_cast<std::int64_t>(plan.swap_out.size());
  f.swap_in_blocks = static_cast<std::int64_t>(plan.swap_in.size());
  f.copy_blocks = static_cast<std::int64_t>(plan.copies.size());
  return f;
}

}  // namespace servelab
