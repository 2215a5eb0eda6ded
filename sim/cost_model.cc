#include "sim/cost_model.h"

namespace servelab {

CostModel::~CostModel() = default;

StepFeatures StepFeatures::from_plan(const StepPlan& plan) {
  StepFeatures f;
  // Branch-free (this runs once per scheduled request per simulated step, and a branch on the
  // entry kind mispredicts whenever prefills and decodes mix): sums over all entries and, masked,
  // over prefill entries; the decode sums are the difference.
  std::int64_t tokens = 0, pairs = 0, context = 0, sampled = 0;
  std::int64_t prefill_tokens = 0, prefill_pairs = 0, prefill_context = 0;
  for (const ScheduledRequest& r : plan.requests) {
    const std::int64_t n = r.num_tokens;
    const std::int64_t p = r.first_token;
    const std::int64_t mask = -static_cast<std::int64_t>(r.is_prefill);  // all ones if prefill
    // Causal: token i of the chunk (0-based) sees the p cached tokens and i + 1 of the chunk.
    const std::int64_t q = n * p + n * (n + 1) / 2;
    tokens += n;
    pairs += q;
    context += p + n;
    prefill_tokens += n & mask;
    prefill_pairs += q & mask;
    prefill_context += (p + n) & mask;
    sampled += static_cast<std::int64_t>(r.samples);
  }
  f.prefill_tokens = prefill_tokens;
  f.prefill_pairs = prefill_pairs;
  f.prefill_context_tokens = prefill_context;
  f.decode_tokens = tokens - prefill_tokens;
  f.decode_pairs = pairs - prefill_pairs;
  f.decode_context_tokens = context - prefill_context;
  f.num_sampled = sampled;
  f.num_tokens = f.prefill_tokens + f.decode_tokens;
  f.swap_out_blocks = static_cast<std::int64_t>(plan.swap_out.size());
  f.swap_in_blocks = static_cast<std::int64_t>(plan.swap_in.size());
  f.copy_blocks = static_cast<std::int64_t>(plan.copies.size());
  return f;
}

}  // namespace servelab
