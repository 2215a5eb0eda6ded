// How a sequence's next token is chosen from its logits.
//
// SamplingParams is the engine's default (CpuExecutorOptions/CudaExecutorOptions::sampling);
// a request may carry its own (RequestSpec::sampling, from an HTTP client's temperature, top_p and
// seed: engine/openai_api.h), which then decides its every token, its parallel samples' too.
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
#include <optional>

namespace servelab {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy (argmax, lowest token id on exact ties)
  double top_p = 1.0;        // nucleus: smallest set of most likely tokens with mass >= top_p
  std::uint64_t seed = 0;
};

// A request's own sampling parameters. REQUIRES (checked where they are made): temperature >= 0,
// 0 < top_p <= 1.
struct RequestSampling {
  double temperature = 0.0;
  double top_p = 1.0;
  std::optional<std::uint64_t> seed;  // none: the engine's seed and the sequence's id
  // OpenAI's penalties on the sequence's own output tokens so far (not the prompt's), applied to
  // the logits before temperature and top_p: logit[t] -= frequency_penalty x count(t) +
  // presence_penalty x (count(t) > 0). In [-2, 2] (checked where they are made).
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  bool penalized() const { return presence_penalty != 0 || frequency_penalty != 0; }
};

}  // namespace servelab
