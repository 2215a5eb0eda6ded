// How a sequence's next token is chosen from its logits.
//
// SamplingParams is the engine's default (CpuExecutorOptions/CudaExecutorOptions::sampling);
// a request may carry its own (RequestSpec::sampling, from an HTTP client's sampling fields:
// engine/openai_api.h), which then decides its every token, its parallel samples' too.
// The simulator ignores both: what a step costs does not depend on the token drawn.
//
// The uniform draw u of a sampled token (engine/sample_stream.h) comes from one stream per
// (seed, sequence, output index), so a token never depends on the batch it was drawn in:
//   - a request without a seed of its own: the engine's seed and the sequence's id (the request's
//     id, or sample_request_id(id, k) for its sample k), so two runs of the same experiment draw
//     the same tokens, and two requests with the same prompt draw different ones;
//   - a request with a seed: that seed plus the sample's index k (as vLLM seeds the child
//     requests of parallel sampling with seed + k) and not its id, so the same request with the
//     same seed gets the same output from any server at any time, as a client expects of `seed`.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace servelab {

class OutputConstraint;  // core/output_constraint.h

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy (argmax, lowest token id on exact ties)
  double top_p = 1.0;        // nucleus: smallest set of most likely tokens with mass >= top_p
  std::uint64_t seed = 0;
};

// vLLM's _SAMPLING_EPS: a temperature below it is greedy (0).
inline constexpr double kSamplingEps = 1e-5;
// A requested temperature as vLLM's SamplingParams takes it: one in (0, 0.01) is raised to 0.01
// (its _MAX_TEMP, against overflow in the division), so only 0 is greedy.
inline double vllm_temperature(double t) {
  if (t > 0 && t < 0.01) return 0.01;
  return t < kSamplingEps ? 0.0 : t;
}
// The repetition_penalty every reader of one accepts (engine serve's requests and generation
// config, workload.sampling): vLLM takes any value > 0; the bounds keep the fp32 factor and the
// adjusted logits finite.
inline constexpr double kMinRepetitionPenalty = 1e-6, kMaxRepetitionPenalty = 1e6;

// A request's own sampling parameters. REQUIRES (checked where they are made): temperature >= 0,
// 0 < top_p <= 1, top_k >= 0, 0 <= min_p <= 1, repetition_penalty > 0, logit_bias ids ascending
// and unique, its values in [-100, 100]; allowed_token_ids ascending and unique; each bad word
// non-empty.
//
// A sampled row's logits go through them in vLLM v1's order (engine/sample_stream.h
// logit_adjustments and row_bans; kernels/sampling_ref.h for the draw):
//   0. every token outside allowed_token_ids (when given), every token the constraint (structured
//      outputs, core/output_constraint.h) does not allow after the outputs so far, and the last
//      token of each bad word
//      whose other tokens end the sequence's outputs so far (not its prompt: vLLM's bad_words)
//      cannot be drawn (-infinity; as these masks and min_tokens' only set -infinity, which the
//      later steps keep, they may be applied after them). A row that keeps no token draws 0;
//   1. logit_bias added to its tokens' logits (and min_tokens' mask, core/stop_conditions.h);
//   2. repetition_penalty on every token the sequence has seen (its prompt and its outputs so
//      far): a positive logit divided by it, any other multiplied by it;
//   3. frequency_penalty x count + presence_penalty subtracted from the logits of the tokens
//      of its outputs so far (not the prompt's);
//   4. greedy (temperature 0): the argmax; otherwise softmax(logits / temperature), then min_p
//      (the tokens with at least min_p x the largest probability), then top_k (the k most likely
//      of those, 0: all), then top_p (the shortest most-likely-first prefix holding top_p of
//      what is left), and one draw from what remains.
struct RequestSampling {
  double temperature = 0.0;
  double top_p = 1.0;
  std::optional<std::uint64_t> seed = {};  // none: the engine's seed and the sequence's id
  double presence_penalty = 0.0;           // in [-2, 2]
  double frequency_penalty = 0.0;          // in [-2, 2]
  std::int32_t top_k = 0;                  // vLLM's: 0 keeps every token
  double min_p = 0.0;                      // vLLM's: 0 keeps every token
  double repetition_penalty = 1.0;         // vLLM's (and HF's): 1 changes nothing
  std::vector<std::pair<std::int32_t, float>> logit_bias = {};  // OpenAI's: (token id, bias)
  std::vector<std::int32_t> allowed_token_ids = {};             // vLLM's: empty keeps every token
  std::vector<std::vector<std::int32_t>> bad_words = {};        // vLLM's, as token id sequences
  std::shared_ptr<const OutputConstraint> constraint = {};      // structured outputs; null: none

  // Whether anything of steps 1-3 applies (otherwise the raw logits are sampled).
  bool adjusts_logits() const {
    return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1 ||
           !logit_bias.empty();
  }
  // Whether step 0 applies.
  bool masks_logits() const {
    return !allowed_token_ids.empty() || !bad_words.empty() || constraint != nullptr;
  }
};

}  // namespace servelab
