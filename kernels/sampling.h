// Token selection from fp32 logits [num_rows][vocab] (kernels/sampling.cu), one CTA per row.
// Semantics and host references: kernels/sampling_ref.h.
//   greedy_sample: argmax, lowest id on exact ties. Exact.
//   top_p_sample: softmax(logits / temperature) restricted to the nucleus, one draw u[i] per row
//     (drawn on the host from the request's stream, as CpuExecutor does). No sort: 64-bit keys
//     (probability bits, inverted id) and bisections of block-wide deterministic sums
//     (sample_bisect is the same algorithm on the host). Agrees with sample_reference except
//     where u lands within fp32 rounding of a boundary between two tokens' mass intervals.
//   A row whose every logit is -infinity (its masks keep no token) draws token 0, in both.
#pragma once

#include <cstdint>

#include "kernels/device.h"

namespace servelab::kernels {

void greedy_sample(const float* logits, std::int32_t num_rows, std::int32_t vocab,
                   std::int32_t* out, Stream stream);

void top_p_sample(const float* logits, std::int32_t num_rows, std::int32_t vocab, float temperature,
                  float top_p, const float* u, float* scratch, std::int32_t* out, Stream stream);
// scratch: num_rows * vocab floats (the probabilities).

// Rows that each have their own parameters (requests with their own temperature, top_p, top_k
// and min_p): params [num_rows][4] = (temperature, top_p, top_k, min_p), top_k a whole number
// (0: every token); a row with temperature 0 is greedy_sample's, any other draws u[row] from the
// tokens its truncations keep (kernels/sampling_ref.h sample_bisect, step for step). scratch as
// above.
void sample_rows(const float* logits, std::int32_t num_rows, std::int32_t vocab,
                 const float* params, const float* u, float* scratch, std::int32_t* out,
                 Stream stream);

// Before sampling: logits[rows[i] * vocab + tokens[i]] = -infinity for i < n, the tokens a row
// must not draw yet (min_tokens: EOS and stop ids, core/stop_conditions.h suppressed_tokens);
// an entry whose token is outside [0, vocab) is skipped. rows, tokens: device [n].
void mask_logits(float* logits, std::int32_t vocab, const std::int32_t* rows,
                 const std::int32_t* tokens, std::int32_t n, Stream stream);

// Before sampling: every logit of row rows[i] (i < n) whose token the row's mask does not allow
// becomes -infinity (a request's allowed_token_ids, its structured output's grammar, or both:
// engine/sample_stream.h row_keep_mask). Row i's mask is masks[i * words .. (i + 1) * words),
// token t allowed when bit t % 32 of word t / 32 is set (core/output_constraint.h TokenMask);
// tokens at or above 32 words are not. rows: device [n]; masks: device [n][words]. A CTA per
// 4,096 tokens of a listed row.
void keep_allowed_logits(float* logits, std::int32_t vocab, const std::int32_t* rows,
                         const std::uint32_t* masks, std::int32_t words, std::int32_t n,
                         Stream stream);

// The requests' logit_bias and penalties (engine/sample_stream.h LogitAdjustment, with the same
// fp32 arithmetic): for i < n, with l = logits[rows[i] * vocab + tokens[i]] + adjust[3i] (the
// bias), l = (l > 0 ? l / adjust[3i + 1] : l * adjust[3i + 1]) + adjust[3i + 2] (the repetition
// factor, then the delta). Each (row, token) at most once; an entry whose token is outside
// [0, vocab) is skipped. rows, tokens: device [n]; adjust: device [n][3].
void adjust_logits(float* logits, std::int32_t vocab, const std::int32_t* rows,
                   const std::int32_t* tokens, const float* adjust, std::int32_t n, Stream stream);

}  // namespace servelab::kernels
