// StepFeatures: the operator structure of one StepPlan that every cost model prices and every
// engine profile records (the roofline, the calibrated model fitted to the same features, and
// `engine profile`'s CSV columns): how many tokens the GEMMs see, how many (query, context) pairs
// attention computes, how much KV it reads, how many sequences the LM head samples, how many
// blocks move. A pure function of the plan; no file format, no backend.
#pragma once

#include <cstdint>

#include "core/step_plan.h"

namespace servelab {

struct StepFeatures {
  std::int64_t num_tokens = 0;  // rows of every GEMM: sum of num_tokens over all entries

  // Over prefill entries (is_prefill) and decode entries (the rest) separately.
  // A chunk of n tokens starting at position p attends causally to n*p + n*(n+1)/2 (query, key)
  // pairs and reads the K/V of its p + n context tokens.
  std::int64_t prefill_tokens = 0;
  std::int64_t prefill_pairs = 0;
  std::int64_t prefill_context_tokens = 0;  // sum of context_len()
  std::int64_t decode_tokens = 0;
  std::int64_t decode_pairs = 0;
  std::int64_t decode_context_tokens = 0;

  std::int64_t num_sampled = 0;  // entries with samples: rows of the LM head
  // Speculative decoding: draft tokens verified in the step (StepPlan::num_draft_tokens); the
  // LM head computes logits for them too (rows num_sampled + draft_tokens).
  std::int64_t draft_tokens = 0;
  // Prompt log probabilities (RequestSpec::prompt_logprobs): prompt rows whose logits the LM
  // head computes too (rows num_sampled + draft_tokens + prompt_logprob_rows).
  std::int64_t prompt_logprob_rows = 0;
  std::int64_t swap_out_blocks = 0;
  std::int64_t swap_in_blocks = 0;
  std::int64_t copy_blocks = 0;  // device-to-device copy-on-write

  // KV blocks attention visits, per layer (a block table entry it dereferences): for each entry,
  // ceil(context_len() / block_size). 0 unless add_kv_blocks() filled them in: a cost model
  // that charges no per-block time never needs the walk over the entries.
  std::int64_t prefill_blocks = 0;
  std::int64_t decode_blocks = 0;

  // LoRA (Punica/S-LoRA): the rows the adapter GEMMs (shrink, expand) see, tokens of entries
  // under an adapter, and the distinct adapters whose weights the step reads. 0 without LoRA.
  std::int64_t lora_tokens = 0;
  std::int64_t num_loras = 0;

  // From the plan's totals when it carries them (plan.totals.valid, as Scheduler plans do), else
  // one pass over the entries; no allocation.
  static StepFeatures from_plan(const StepPlan& plan);
  // Sets prefill_blocks and decode_blocks from the plan's entries (one pass, no allocation).
  // REQUIRES: block_size >= 1.
  void add_kv_blocks(const StepPlan& plan, std::int32_t block_size);
};

}  // namespace servelab
