// Token selection from fp32 logits [num_rows][vocab] (kernels/sampling.cu), one CTA per row.
// Semantics and host references: kernels/sampling_ref.h.
//   greedy_sample: argmax, lowest id on exact ties. Exact.
//   top_p_sample: softmax(logits / temperature) restricted to the nucleus, one draw u[i] per row
//     (drawn on the host from the request's stream, as CpuExecutor does). No sort: 64-bit keys
//     (probability bits, inverted id) and two bisections of block-wide deterministic sums
//     (top_p_bisect is the same algorithm on the host). Agrees with top_p_reference except
//     where u lands within fp32 rounding of a boundary between two tokens' mass intervals.
#pragma once

#include <cstdint>

#include "kernels/device.h"

namespace servelab::kernels {

void greedy_sample(const float* logits, std::int32_t num_rows, std::int32_t vocab,
                   std::int32_t* out, Stream stream);

void top_p_sample(const float* logits, std::int32_t num_rows, std::int32_t vocab, float temperature,
                  float top_p, const float* u, float* scratch, std::int32_t* out, Stream stream);
// scratch: num_rows * vocab floats (the probabilities).

// Rows that each have their own parameters (requests with their own temperature and top_p):
// params [num_rows][2] = (temperature, top_p); a row with temperature 0 is greedy_sample's, any
// other top_p_sample's with its draw u[row]. scratch as above.
void sample_rows(const float* logits, std::int32_t num_rows, std::int32_t vocab,
                 const float* params, const float* u, float* scratch, std::int32_t* out,
                 Stream stream);

// Before sampling: logits[rows[i] * vocab + tokens[i]] = -infinity for i < n, the tokens a row
// must not draw yet (min_tokens: EOS and stop ids, core/stop_conditions.h suppressed_tokens);
// an entry whose token is outside [0, vocab) is skipped. rows, tokens: device [n].
void mask_logits(float* logits, std::int32_t vocab, const std::int32_t* rows,
                 const std::int32_t* tokens, std::int32_t n, Stream stream);

// logits[rows[i] * vocab + tokens[i]] += deltas[i] for i < n (presence and frequency penalties,
// engine/sample_stream.h penalty_deltas); each (row, token) at most once; an entry whose token is
// outside [0, vocab) is skipped. rows, tokens, deltas: device [n].
void add_to_logits(float* logits, std::int32_t vocab, const std::int32_t* rows,
                   const std::int32_t* tokens, const float* deltas, std::int32_t n, Stream stream);

}  // namespace servelab::kernels
