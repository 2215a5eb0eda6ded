// StepPlan: everything a backend must do in one iteration. StepResult: what it reports back.
//
// A backend needs nothing but the plan: for each scheduled request the token range to compute
// and its block table, the block moves (swap out, swap in) and copies (copy-on-write), and which
// requests were preempted. The spans in a plan point into scheduler-owned storage and stay valid
// until the scheduler's complete() for that plan returns.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/request.h"
#include "core/request_state.h"
#include "core/time.h"

namespace servelab {

// The (query, key) pairs a causal chunk of n tokens starting at position p attends to: token i of
// the chunk (0-based) sees the p tokens before it and i + 1 of the chunk.
constexpr std::int64_t causal_pairs(std::int64_t p, std::int64_t n) {
  return n * p + n * (n + 1) / 2;
}

struct ScheduledRequest {
  RequestId id = 0;
  const RequestSpec* spec = nullptr;            // prompt content (for the engine's token values)
  std::span<const std::int32_t> output_tokens;  // outputs sampled before this step
  std::int32_t first_token = 0;                 // position of the first token computed
  std::int32_t num_tokens = 0;                  // tokens computed in this step (>= 1)
  std::int32_t num_cached_prefix = 0;  // of first_token, how many came from a prefix hit now
  bool is_prefill = false;             // computes part of the known sequence other than
                                       // its last token (prompt or resumed outputs)
  bool samples = false;                // reaches the end of the known tokens: samples one
  // Parallel sampling: on the entry that samples a request's first token with spec->n > 1, n
  // tokens are drawn from the same logits (sample k with the stream of sample_request_id(id,
  // k)); the request then forks. 1 everywhere else. (16 bits: it fits the padding after the
  // flags, so n = 1 plans cost nothing more; n <= kMaxSamples.)
  std::uint16_t num_samples = 1;
  std::span<const BlockId> block_table;  // covers at least first_token + num_tokens slots

  std::int32_t context_len() const { return first_token + num_tokens; }
};

struct BlockMove {
  BlockId src = 0;
  BlockId dst = 0;
  friend bool operator==(const BlockMove&, const BlockMove&) = default;
};

// KV offload (core/kv_offload_tiers.h): a block whose content a prefix hit found in an offload
// tier, loaded into device block `dst` before the forward pass. With host slots (the engine's
// real host tier) `src` is the host slot it is read from, and `stores_before` the number of the
// plan's tier_stores made before the allocation that took `dst`. Loads and stores then run in
// the scheduler's order: the first stores_before stores, then the load's read of `src`, then
// the stores up to the next load with a larger stores_before (those of its own allocation: they
// may copy out a block that becomes `dst`, and may reuse `src`, which the read came before),
// then the write of `dst`. Without host slots src is -1 and stores_before 0.
struct TierLoad {
  std::int32_t tier = 0;  // kHostTier, kDiskTier
  BlockId dst = 0;
  std::int32_t src = -1;
  std::int32_t stores_before = 0;
  friend bool operator==(const TierLoad&, const TierLoad&) = default;
};

// KV offload with host slots: device block `src`, evicted while forming the plan (its KV still
// intact), is copied into host slot `dst_slot` before the forward pass (see TierLoad for the
// order). Plans carry none without host slots (the simulator does not charge stores).
struct TierStore {
  BlockId src = 0;
  std::int32_t dst_slot = 0;
  friend bool operator==(const TierStore&, const TierStore&) = default;
};

struct StepPlan {
  std::int64_t step_index = 0;
  std::vector<ScheduledRequest> requests;  // in scheduling order
  std::vector<BlockMove> swap_out;         // device block -> host block, before the forward pass
  std::vector<BlockMove> swap_in;          // host block -> device block, before the forward pass,
                                           // after swap_out (a block may be both a swap-out's
                                           // source and a swap-in's destination)
  std::vector<BlockMove> copies;           // device -> device copies (copy-on-write)
  std::vector<RequestId> preempted;        // requests preempted while forming this plan
  std::vector<TierLoad> tier_loads;        // KV offload loads, before the forward pass
  std::vector<TierStore> tier_stores;      // KV offload stores (host slots only), likewise
  std::int32_t num_prefill_tokens = 0;     // sum of num_tokens over prefill entries
  std::int32_t num_decode_tokens = 0;      // sum over decode entries (one token each)
  std::int32_t num_fork_tokens = 0;        // sum over entries of num_samples - 1
  // Forward passes the plan runs back to back before the scheduler runs again (a multi-step
  // round, SchedulerConfig::num_scheduler_steps). 1 for an ordinary step. With N > 1 every entry
  // is a decode that samples; pass p (0-based) computes position first_token + p of each entry
  // and samples the next token, so an entry computes N positions (its block table covers them,
  // capped at the request's maximum length), though a request whose last token comes in pass p
  // samples nothing after it. The fields above describe one pass: a cost model prices a pass
  // (the simulator's round time is in docs/cost-model.md).
  std::int32_t num_steps = 1;
  // Async scheduling (SchedulerConfig::async_scheduling): the plan was formed while the plan
  // before it was still in flight, before that plan's sampled tokens were known. An entry of
  // such a plan may then start at the position one past its known tokens (first_token ==
  // prompt_len + output_tokens.size()): that position's token is the one the previous plan
  // samples for the request, which the backend takes from its own previous result (vLLM's
  // worker feeds the sampled ids of step N into step N+1 on the device). Such an entry is a
  // one-token decode, and the output it samples is number first_token + 1 - prompt_len.
  bool pipelined = false;
  // Speculative decoding (core/speculative_config.h). A verify entry is a decode (is_prefill
  // false, samples true) of num_tokens = 1 + d tokens: the request's last known token, then its
  // d draft tokens, draft_tokens[k] for entry k (positions first_token + 1 ..); the backend
  // verifies them in this pass and reports how many it accepted (StepResult::num_accepted).
  // draft_tokens is empty without speculation, else it has one span per entry up to the last
  // verify entry (empty spans for the others). num_draft_tokens = the sum of the d's.
  std::vector<std::span<const std::int32_t>> draft_tokens;
  std::int32_t num_draft_tokens = 0;
  // LoRA (core/lora_config.h): the tokens of entries whose request runs under an adapter, and
  // the distinct adapters among them. The Scheduler sets both when LoRA is on (0 otherwise); a
  // plan built elsewhere leaves them 0 and StepFeatures counts them from the entries.
  std::int32_t num_lora_tokens = 0;
  std::int32_t num_loras = 0;
  std::span<const std::int32_t> drafts_of(std::size_t k) const {
    return k < draft_tokens.size() ? draft_tokens[k] : std::span<const std::int32_t>{};
  }
  // Running totals the Scheduler keeps as it builds the plan, so that cost models need not walk
  // the entries of every step. valid is false in a plan built elsewhere (consumers then compute
  // what they need from the entries) and after clear().
  struct Totals {
    bool valid = false;
    std::int64_t decode_context_tokens = 0;   // sum of context_len() over decode entries
    std::int64_t prefill_pairs = 0;           // sum of causal_pairs over prefill entries
    std::int64_t prefill_context_tokens = 0;  // sum of context_len() over prefill entries
    std::int64_t num_sampled = 0;             // entries with samples
    std::int64_t prompt_logprob_rows = 0;     // sum of prompt_logprob_rows() over the entries
    // Verify entries (speculative decoding): their causal (query, key) pairs beyond their
    // context_len(), which decode_context_tokens counts once per entry.
    std::int64_t verify_extra_pairs = 0;
  };
  Totals totals;

  // A plan with only tier stores is not empty: the evicted blocks' KV must still be copied.
  bool empty() const {
    return requests.empty() && swap_out.empty() && swap_in.empty() && tier_stores.empty();
  }
  std::int32_t num_tokens() const { return num_prefill_tokens + num_decode_tokens; }
  void clear();
};

// A sampled token's log probability under its row's raw logits (log softmax before temperature,
// top_p and the min_tokens mask: vLLM's default raw_logprobs) and the row's `k` most likely
// tokens (most likely first; equal logits: the lower id first), as a client asked
// (RequestSpec::logprobs).
struct TokenLogprobs {
  float logprob = 0.0f;
  std::int32_t rank = 1;  // 1 + the number of tokens with a larger logit (vLLM's rank)
  std::vector<std::pair<std::int32_t, float>> top;  // (token, logprob)
};

// Prompt log probabilities (RequestSpec::prompt_logprobs) an entry's rows give: row j's logits
// predict position first_token + j + 1, so an entry of a request that asked (its sample 0) gives
// those of prompt positions [first_token + 1, first_token + prompt_logprob_rows(e)], the ones
// below prompt_len. A resumed entry (recompute after a preemption) gives them again.
inline std::int32_t prompt_logprob_rows(const ScheduledRequest& e) {
  if (e.spec->prompt_logprobs < 0 || e.spec->sample != 0) [[likely]]
    return 0;
  return std::max(0, std::min(e.context_len(), e.spec->prompt_len - 1) - e.first_token);
}
struct PromptLogprobs {
  std::size_t entry = 0;            // the plan entry
  std::int32_t first_position = 0;  // the prompt position of values[0] (>= 1)
  std::vector<TokenLogprobs> values;
};

struct StepResult {
  TimeNs duration_ns = 0;
  // One value per plan entry, in plan order; meaningful where the entry samples (-1 elsewhere).
  // For a plan with num_steps N > 1: N values per entry, pass by pass (pass p's token of entry k
  // at p * entries + k).
  std::vector<std::int32_t> sampled_tokens;
  // For each entry with num_samples > 1, in plan order: the first tokens of samples 1 .. n-1.
  std::vector<std::int32_t> fork_tokens;
  // Speculative decoding. num_accepted: for a plan with draft tokens, one value per entry: how
  // many of the entry's drafts (a prefix of them) the verifier accepted; the entry's new tokens
  // are those drafts followed by its sampled_tokens value (the verifier's own token at the first
  // rejected position, or the bonus token when all were accepted). Empty when no entry drafts.
  std::vector<std::int32_t> num_accepted;
  // Proposals for the next step: num_proposed has one count per entry (or is empty: no
  // proposals), proposed_tokens the proposals of the entries in plan order. The scheduler keeps
  // at most num_speculative_tokens of an entry's proposals, and fewer near its output length.
  std::vector<std::int32_t> num_proposed;
  std::vector<std::int32_t> proposed_tokens;
  // Log probabilities (engine executors; plans without draft tokens): when an entry that samples
  // has spec->logprobs >= 0, one value per entry (meaningful where asked) and one per fork token;
  // both empty when no entry asked.
  std::vector<TokenLogprobs> logprobs;
  std::vector<TokenLogprobs> fork_logprobs;
  // Prompt log probabilities (engine executors): one item per entry with prompt_logprob_rows > 0,
  // in plan order.
  std::vector<PromptLogprobs> prompt_logprobs;
};

}  // namespace servelab
