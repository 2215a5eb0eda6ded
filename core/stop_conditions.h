// Stop conditions of a request: when generation ends before max_output_tokens (vLLM's
// SamplingParams eos handling, ignore_eos, min_tokens, stop_token_ids; vllm/v1/core/sched/utils.py
// check_stop). A request without StopConditions stops only at max_output_tokens ("length"), as
// every request did before stop conditions existed.
//
// After each sampled token the scheduler asks check_stop(), in vLLM's order:
// 1. "length" when the request has max_output_tokens outputs (even if that token is EOS);
// 2. nothing else while it has fewer than min_tokens outputs (vLLM also masks EOS and the stop
//    token ids out of the logits until then; the engine's sampler does the same);
// 3. "stop" when the token is the model's EOS (eos_token_id >= 0) and ignore_eos is false;
// 4. "stop" when the token is one of stop_token_ids.
// Stop strings are the front end's business (engine serve matches them in the detokenized text).
//
// The simulator has no model to sample EOS: its backend samples kSimEosToken as output token
// number sim_eos_at (1-based) and every later one, and kSimOtherToken otherwise; a workload sets
// sim_eos_at to the output length the "model" wants (traces/stop_sampling.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/request.h"

namespace servelab {

struct StopConditions {
  std::int32_t eos_token_id = -1;  // the model's end-of-sequence token (-1: none)
  bool ignore_eos = false;         // keep generating past EOS (up to max_output_tokens)
  std::int32_t min_tokens = 0;     // no EOS / stop token ends the request before this many outputs
  std::vector<std::int32_t> stop_token_ids;  // tokens that end the request (kept in the output)
  std::int32_t sim_eos_at = 0;  // simulator: the output token (1-based) from which the simulated
                                // model samples EOS; 0: never
};

inline constexpr std::int32_t kSimEosToken = 1;
inline constexpr std::int32_t kSimOtherToken = 0;

enum class StopReason : std::uint8_t { kNone, kLength, kStop };

// vLLM's check_stop for a request whose outputs are `outputs` (the last one just sampled).
inline StopReason check_stop(const RequestSpec& spec, const std::vector<std::int32_t>& outputs) {
  const auto n = static_cast<std::int32_t>(outputs.size());
  if (n >= spec.max_output_tokens) return StopReason::kLength;
  const StopConditions* s = spec.stop.get();
  if (s == nullptr || n == 0 || n < s->min_tokens) return StopReason::kNone;
  const std::int32_t last = outputs.back();
  if (!s->ignore_eos && s->eos_token_id >= 0 && last == s->eos_token_id) return StopReason::kStop;
  if (std::find(s->stop_token_ids.begin(), s->stop_token_ids.end(), last) !=
      s->stop_token_ids.end()) {
    return StopReason::kStop;
  }
  return StopReason::kNone;
}

// The tokens a sampler must not draw for a request with `num_outputs` outputs so far (vLLM's
// min_tokens logits processor): EOS (unless ignore_eos) and the stop token ids while num_outputs
// < min_tokens; empty otherwise.
inline std::vector<std::int32_t> suppressed_tokens(const RequestSpec& spec,
                                                   std::int32_t num_outputs) {
  const StopConditions* s = spec.stop.get();
  if (s == nullptr || num_outputs >= s->min_tokens) return {};
  std::vector<std::int32_t> out = s->stop_token_ids;
  if (s->eos_token_id >= 0 && !s->ignore_eos) out.push_back(s->eos_token_id);
  return out;
}

// `stop` for a real model whose end-of-sequence ids are `eos_ids` (first: the EOS; others: stop
// ids unless ignore_eos, as vLLM adds generation_config's extra EOS ids), without the simulated
// EOS point. What the engine runs a workload's stop conditions with.
inline StopConditions with_model_eos(StopConditions stop,
                                     const std::vector<std::int32_t>& eos_ids) {
  stop.eos_token_id = eos_ids.empty() ? -1 : eos_ids.front();
  if (!stop.ignore_eos) {
    for (std::size_t k = 1; k < eos_ids.size(); ++k) stop.stop_token_ids.push_back(eos_ids[k]);
  }
  stop.sim_eos_at = 0;
  return stop;
}

// The token the simulator's model samples as output number `index` (0-based) of `spec`.
inline std::int32_t sim_sampled_token(const RequestSpec& spec, std::size_t index) {
  const StopConditions* s = spec.stop.get();
  return s != nullptr && s->sim_eos_at > 0 && static_cast<std::int64_t>(index) + 1 >= s->sim_eos_at
             ? kSimEosToken
             : kSimOtherToken;
}

// The number of outputs the simulator's model gives `spec` (an oracle's "true length"): the first
// n at which check_stop stops on the tokens sim_sampled_token draws, at most max_output_tokens.
// A request without a simulated EOS point (no StopConditions, sim_eos_at 0: the engine's real
// model, whose length nobody knows in advance) gives max_output_tokens.
inline std::int32_t sim_output_length(const RequestSpec& spec) {
  const StopConditions* s = spec.stop.get();
  const std::int32_t cap = spec.max_output_tokens;
  if (s == nullptr || s->sim_eos_at <= 0) return cap;
  const auto stops = [s](std::int32_t token) {
    return (!s->ignore_eos && s->eos_token_id >= 0 && token == s->eos_token_id) ||
           std::find(s->stop_token_ids.begin(), s->stop_token_ids.end(), token) !=
               s->stop_token_ids.end();
  };
  const std::int32_t from = std::max(1, s->min_tokens);  // check_stop's first candidate
  std::int32_t first = cap;
  if (stops(kSimOtherToken) && from < s->sim_eos_at) first = std::min(first, from);
  if (stops(kSimEosToken)) first = std::min(first, std::max(from, s->sim_eos_at));
  return first;
}

}  // namespace servelab
