#include "core/step_features.h"

namespace servelab {

namespace {

// Adds one entry (n tokens from position p) to the sums of its kind (prefill or decode).
void add_entry(const ScheduledRequest& r, std::int64_t& tokens, std::int64_t& pairs,
               std::int64_t& context) {
  const std::int64_t n = r.num_tokens;
  const std::int64_t p = r.first_token;
  tokens += n;
  pairs += causal_pairs(p, n);
  context += p + n;
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
        .decode_pairs = t.decode_context_tokens + t.verify_extra_pairs,
        .decode_context_tokens = t.decode_context_tokens,
        .num_sampled = t.num_sampled,
        .draft_tokens = plan.num_draft_tokens,
        .prompt_logprob_rows = t.prompt_logprob_rows,
        .swap_out_blocks = static_cast<std::int64_t>(plan.swap_out.size()),
        .swap_in_blocks = static_cast<std::int64_t>(plan.swap_in.size()),
        .copy_blocks = static_cast<std::int64_t>(plan.copies.size()),
        .prefill_blocks = 0,
        .decode_blocks = 0,
        .lora_tokens = plan.num_lora_tokens,
        .num_loras = plan.num_loras,
    };
  }
  StepFeatures f;
  for (const ScheduledRequest& r : plan.requests) {
    if (r.is_prefill) {
      add_entry(r, f.prefill_tokens, f.prefill_pairs, f.prefill_context_tokens);
    } else {
      add_entry(r, f.decode_tokens, f.decode_pairs, f.decode_context_tokens);
    }
    f.num_sampled += r.samples ? 1 : 0;
    if (r.spec != nullptr) f.prompt_logprob_rows += servelab::prompt_logprob_rows(r);
    const std::uint32_t lora = r.spec != nullptr ? r.spec->lora_id : 0;
    if (lora != 0) [[unlikely]] {
      f.lora_tokens += r.num_tokens;
      // A new adapter unless an earlier entry had it (plans built outside the Scheduler only:
      // quadratic in the LoRA entries, no allocation).
      bool seen = false;
      for (const ScheduledRequest* q = plan.requests.data(); q != &r && !seen; ++q) {
        seen = q->spec != nullptr && q->spec->lora_id == lora;
      }
      f.num_loras += seen ? 0 : 1;
    }
  }
  f.num_tokens = f.prefill_tokens + f.decode_tokens;
  f.draft_tokens = plan.num_draft_tokens;
  f.swap_out_blocks = static_cast<std::int64_t>(plan.swap_out.size());
  f.swap_in_blocks = static_cast<std::int64_t>(plan.swap_in.size());
  f.copy_blocks = static_cast<std::int64_t>(plan.copies.size());
  return f;
}

void StepFeatures::add_kv_blocks(const StepPlan& plan, std::int32_t block_size) {
  prefill_blocks = 0;
  decode_blocks = 0;
  for (const ScheduledRequest& r : plan.requests) {
    const std::int64_t blocks = (std::int64_t{r.context_len()} + block_size - 1) / block_size;
    (r.is_prefill ? prefill_blocks : decode_blocks) += blocks;
  }
}

}  // namespace servelab
