// Stop conditions of a request: when generation ends before max_output_tokens (vLLM's
// SamplingParams eos handling, ignore_eos, min_tokens, stop_token_ids; vllm/v1/core/sched/utils.py
// check_stop). A request without StopConditions stops only at max_output_tokens ("length"), as
// every request did before stop conditions existed.
//
// After each sampled token the scheduler asks check_stop(), in vLLM's order
// (/work/shared/reference/schedulers.md, "Stop check"):
// 1. no stop while the request has fewer than min_tokens outputs (vLLM also masks EOS and every
//    stop id out of the logits until then, EOS even with ignore_eos; the engine's sampler and the
//    simulator's model do the same, so the earliest stop is output number min_tokens + 1);
// 2. "stop" when the token is the model's EOS (eos_token_id >= 0) and ignore_eos is false;
// 3. "stop" when the token is one of stop_token_ids;
// 4. "length" when the request has max_output_tokens outputs (an EOS there is a "stop").
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
  // Further ids masked while outputs < min_tokens that do not end the request: the model's extra
  // EOS ids under ignore_eos (vLLM's all_stop_token_ids keeps them).
  std::vector<std::int32_t> masked_ids;
  std::int32_t sim_eos_at = 0;  // simulator: the output token (1-based) from which the simulated
                                // model samples EOS; 0: never
};

inline constexpr std::int32_t kSimEosToken = 1;
inline constexpr std::int32_t kSimOtherToken = 0;

enum class StopReason : std::uint8_t { kNone, kLength, kStop };

// vLLM's check_stop for a request whose outputs are `outputs` (the last one just sampled).
inline StopReason check_stop(const RequestSpec& spec, const std::vector<std::int32_t>& outputs) {
  const auto n = static_cast<std::int32_t>(outputs.size());
  const StopConditions* s = spec.stop.get();
  // min_tokens holds back the stop tests only: the length still ends a request whose cap is
  // below it (vLLM refuses min_tokens > max_tokens; the cap may be max_model_len's).
  if (s != nullptr && n > 0 && n >= s->min_tokens) {
    const std::int32_t last = outputs.back();
    if (!s->ignore_eos && s->eos_token_id >= 0 && last == s->eos_token_id) {
      return StopReason::kStop;
    }
    if (std::find(s->stop_token_ids.begin(), s->stop_token_ids.end(), last) !=
        s->stop_token_ids.end()) {
      return StopReason::kStop;
    }
  }
  return n >= spec.max_output_tokens ? StopReason::kLength : StopReason::kNone;
}

// The tokens a sampler must not draw for a request with `num_outputs` outputs so far (vLLM's
// min_tokens logits processor, over its all_stop_token_ids): the stop token ids, EOS (with
// ignore_eos too) and masked_ids while num_outputs < min_tokens; empty otherwise.
inline std::vector<std::int32_t> suppressed_tokens(const RequestSpec& spec,
                                                   std::int32_t num_outputs) {
  const StopConditions* s = spec.stop.get();
  if (s == nullptr || num_outputs >= s->min_tokens) return {};
  std::vector<std::int32_t> out = s->stop_token_ids;
  if (s->eos_token_id >= 0) out.push_back(s->eos_token_id);
  out.insert(out.end(), s->masked_ids.begin(), s->masked_ids.end());
  return out;
}

// `stop` for a real model whose end-of-sequence ids are `eos_ids` (first: the EOS; others: stop
// ids unless ignore_eos, as vLLM adds generation_config's extra EOS ids), without the simulated
// EOS point. What the engine runs a workload's stop conditions with.
inline StopConditions with_model_eos(StopConditions stop,
                                     const std::vector<std::int32_t>& eos_ids) {
  stop.eos_token_id = eos_ids.empty() ? -1 : eos_ids.front();
  for (std::size_t k = 1; k < eos_ids.size(); ++k) {
    (stop.ignore_eos ? stop.masked_ids : stop.stop_token_ids).push_back(eos_ids[k]);
  }
  stop.sim_eos_at = 0;
  return stop;
}

// The token the simulator's model samples as output number `index` (0-based) of `spec`: EOS
// from sim_eos_at on, kSimOtherToken before; while min_tokens masks the stop tokens (index <
// min_tokens), the smallest id that is none of them.
inline std::int32_t sim_sampled_token(const RequestSpec& spec, std::size_t index) {
  const StopConditions* s = spec.stop.get();
  if (s == nullptr) return kSimOtherToken;
  if (static_cast<std::int64_t>(index) < s->min_tokens) {
    const std::vector<std::int32_t> masked =
        suppressed_tokens(spec, static_cast<std::int32_t>(index));
    std::int32_t token = kSimOtherToken;
    while (std::find(masked.begin(), masked.end(), token) != masked.end()) ++token;
    return token;
  }
  return s->sim_eos_at > 0 && static_cast<std::int64_t>(index) + 1 >= s->sim_eos_at
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
  // The first output that may stop: the tokens before it are masked (sim_sampled_token).
  const std::int32_t from = s->min_tokens + 1;
  std::int32_t first = cap;
  if (stops(kSimOtherToken) && from < s->sim_eos_at) first = std::min(first, from);
  if (stops(kSimEosToken)) first = std::min(first, std::max(from, s->sim_eos_at));
  return first;
}

}  // namespace servelab
