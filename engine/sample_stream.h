// What a sampled row of a step draws with: the temperature and truncations (top_p, top_k, min_p)
// that apply to it (the request's own, else the engine's), its uniform draw u from the stream
// core/sampling_params.h describes, and the request's adjustments of its logits (logit_bias and
// the repetition, frequency and presence penalties). CpuExecutor and CudaExecutor both take
// their rows' parameters from here, so the two draw the same u for the same token of the same
// sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/output_constraint.h"
#include "core/request.h"
#include "core/sampling_params.h"
#include "core/step_plan.h"

namespace servelab {

struct RowSampling {
  double temperature = 0.0;  // 0: greedy (u unused, 0; the truncations below unused)
  double top_p = 1.0;
  std::int32_t top_k = 0;  // 0: every token
  double min_p = 0.0;
  double u = 0.0;  // in [0, 1)
};

// The row that samples output `index` of sequence `id` (the request's id, or
// sample_request_id(spec.id, k) for its sample k) of the request `spec`, under the engine's
// `engine` parameters.
RowSampling row_sampling(const SamplingParams& engine, const RequestSpec& spec, RequestId id,
                         std::uint64_t index);

// What steps 1-3 of core/sampling_params.h do to the logit of one token of a row:
//   logit' = rep(logit + bias) + delta, rep(x) = x / factor for x > 0, x * factor otherwise.
// (kernels::adjust_logits applies the same on the GPU.)
struct LogitAdjustment {
  std::int32_t token = 0;
  float bias = 0.0f;    // the request's logit_bias of the token
  float factor = 1.0f;  // its repetition_penalty where the sequence has seen the token
  float delta = 0.0f;   // -(frequency_penalty x count + presence_penalty) over its outputs
  friend bool operator==(const LogitAdjustment&, const LogitAdjustment&) = default;
};

inline float adjust_logit(float logit, const LogitAdjustment& a) {
  const float x = logit + a.bias;
  return (x > 0.0f ? x / a.factor : x * a.factor) + a.delta;
}

// The distinct token ids of the prompt of `spec`, ascending: the share of the tokens a sequence
// has seen that its repetition penalty takes from the prompt.
std::vector<std::int32_t> distinct_prompt_tokens(const RequestSpec& spec, std::int32_t vocab);

// The adjustments of the request `spec` for a row whose sequence has the prompt tokens
// `prompt_tokens` (distinct_prompt_tokens; only read with a repetition penalty) and has produced
// the tokens `earlier` followed by `later` (its outputs, then what the executor alone knows: the
// previous step's token, a verify row's drafts before it). One entry per token that changes, by
// token id ascending; empty when the request adjusts no logit (RequestSampling::adjusts_logits).
std::vector<LogitAdjustment> logit_adjustments(const RequestSpec& spec,
                                               std::span<const std::int32_t> prompt_tokens,
                                               std::span<const std::int32_t> earlier,
                                               std::span<const std::int32_t> later);

// The same for the row of plan entry `e` that samples output `index`: over e.output_tokens, then
// what the executor alone knows of the outputs before `index`: `previous` (the previous step's
// token, for an entry that takes it under async scheduling) and the entry's verify `drafts`.
std::vector<LogitAdjustment> row_adjustments(const ScheduledRequest& e, std::size_t index,
                                             std::optional<std::int32_t> previous,
                                             std::span<const std::int32_t> drafts,
                                             std::span<const std::int32_t> prompt_tokens);

// Step 0 of core/sampling_params.h, bad words: the last token of each of `words` whose other
// tokens end the outputs `earlier` followed by `later` (a one-token word: always), ascending and
// unique. vLLM's bad_words over the outputs only, not the prompt.
std::vector<std::int32_t> bad_word_bans(const std::vector<std::vector<std::int32_t>>& words,
                                        std::span<const std::int32_t> earlier,
                                        std::span<const std::int32_t> later);

// The tokens the row of plan entry `e` that samples output `index` must not draw (its outputs
// before `index` taken as row_adjustments takes them), ascending and unique: min_tokens' EOS and
// stop ids (core/stop_conditions.h suppressed_tokens) and the bad words'. The tokens outside the
// request's allowed_token_ids are not listed: each executor masks those itself.
std::vector<std::int32_t> row_bans(const ScheduledRequest& e, std::size_t index,
                                   std::optional<std::int32_t> previous,
                                   std::span<const std::int32_t> drafts);

// Step 0 of core/sampling_params.h, structured outputs: the tokens the request's constraint
// (RequestSampling::constraint) allows the row of plan entry `e` that samples output `index` of
// sequence `sequence` (e.id, or sample_request_id(e.id, k) for a fork's sample k, which has no
// outputs yet), its outputs before `index` taken as row_adjustments takes them; null when the
// request has no constraint or the constraint does not hold this row.
std::shared_ptr<const TokenMask> row_constraint(const ScheduledRequest& e, RequestId sequence,
                                                std::size_t index,
                                                std::optional<std::int32_t> previous,
                                                std::span<const std::int32_t> drafts);

// What a row may draw, as a mask of ceil(vocab / 32) words (core/output_constraint.h TokenMask,
// no bit at or above vocab): the tokens of `allowed_ids` (a request's allowed_token_ids; ids
// outside [0, vocab) ignored) when it is not empty, those `grammar` allows when it is not null,
// and with both, those in both. Both executors mask a row's logits to it (the CUDA one uploads
// it whole: kernels/sampling.h keep_allowed_logits). REQUIRES: !allowed_ids.empty() || grammar
TokenMask row_keep_mask(std::span<const std::int32_t> allowed_ids, const TokenMask* grammar,
                        std::int32_t vocab);

// Each executor's cache of distinct_prompt_tokens for the requests with a repetition penalty,
// so a request's prompt is read once while it keeps being scheduled rather than at every step.
class PromptTokenSets {
 public:
  // Forgets the requests that are not in `plan` (call once per step, before `of`).
  void retain(const StepPlan& plan);
  // The prompt tokens of entry `e` (its samples share them); empty without a repetition penalty.
  std::span<const std::int32_t> of(const ScheduledRequest& e, std::int32_t vocab);

 private:
  std::unordered_map<RequestId, std::vector<std::int32_t>> sets_;
};

}  // namespace servelab
