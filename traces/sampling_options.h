// SampledWorkload: per-request options that vLLM takes with each request, set on every request of
// any workload: stop conditions (SamplingParams) and cache_salt. make_workload() wraps the
// workload it builds when either key is present; without them requests are unchanged (they stop
// at their output length, unsalted).
//
// YAML, inside any `workload:` section (all keys optional):
//
//   sampling:                # vLLM SamplingParams; the request's output length (from the trace or
//                            # the generator) is where the simulated model samples EOS
//     max_tokens: 512        # (>= 1) every request's max_tokens: outputs end at the model's EOS
//                            # or at max_tokens, whichever comes first ("stop" / "length").
//                            # Default: the request's own output length (always "length")
//     eos_probability: 0.01  # (in (0, 1]) instead of the output length, the simulated model
//                            # samples EOS with this probability at each output token (a
//                            # geometric draw per request from Rng::stream(seed, "eos"))
//     min_tokens: 16         # (>= 0) EOS does not end a request before this many outputs
//     ignore_eos: false      # true: EOS never ends a request (max_tokens does)
//     temperature: 0.8       # (>= 0) the engine's draws, as a client's request fields
//     top_p: 0.95            # ((0, 1]) (engine/sample_stream.h): `engine run` samples
//     seed: 7                # (an integer) each request with them, request i with seed + i
//     presence_penalty: 0.5  # ([-2, 2]) when given (without a seed: the engine's seed
//     frequency_penalty: 0.5 # ([-2, 2]) and the request's id); `sim bench` sends them.
//                            # The simulator's steps cost the same whatever is drawn. Given
//                            # alone (no stop key above), they leave the stop conditions off.
//     logprobs: 5            # ([0, 20]) each output token's log probability with this many
//                            # alternatives (`engine run` computes them, `sim bench` asks)
//     prompt_logprobs: 1     # ([0, 20]) the prompt tokens' (vLLM's prompt_logprobs; an
//                            # lm-eval loglikelihood request): the request reads no prefix-cache
//                            # block and the LM head computes every prompt row, in the
//                            # simulator too (core/request.h). Like the draw keys, these two
//                            # alone leave the stop conditions off.
//   cache_salt:              # vLLM cache_salt (an extra key of the first block's hash): prompts
//                            # with different salts never share prefix-cache blocks. One of:
//     value: tenant-a        #   one salt (a non-empty string) for every request
//     per_tenant: true       #   each request salted with its tenant (trace column `tenant`)
//
// The engine's model samples its own EOS: there the simulated EOS point is ignored and the
// model's eos_token_id applies (engine/engine_driver.cc); the simulator's backend samples
// kSimEosToken at the EOS point (core/stop_conditions.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/rng.h"
#include "core/sampling_params.h"
#include "serving/config_node.h"
#include "traces/workload.h"

namespace servelab {

struct SamplingOptions {
  std::optional<std::int32_t> max_tokens;  // >= 1
  std::optional<double> eos_probability;   // in (0, 1]
  std::int32_t min_tokens = 0;             // >= 0
  bool ignore_eos = false;
  bool stops = true;  // the stop conditions are on (a stop key given, or no draw key)
  // The draw keys (temperature, top_p, top_k, min_p, seed, presence_penalty, frequency_penalty,
  // repetition_penalty), when any is given; `seed` is the first request's (request i: seed + i).
  std::optional<RequestSampling> draws;
  std::optional<std::int32_t> logprobs;         // RequestSpec::logprobs, 0 .. kMaxLogprobs
  std::optional<std::int32_t> prompt_logprobs;  // RequestSpec::prompt_logprobs
};

struct CacheSaltOptions {
  std::string value;        // non-empty: one salt for every request
  bool per_tenant = false;  // salt = the request's tenant
};

struct RequestOptions {
  std::optional<SamplingOptions> sampling;
  std::optional<CacheSaltOptions> cache_salt;
  // The workload's `transforms.max_output_tokens` (applied before these options): sampling's
  // max_tokens never raises a request's output past it (it did, with eos_probability).
  std::optional<std::int32_t> output_cap;
};

// Reads the `sampling:` and `cache_salt:` keys of a workload section (absent keys: nullopt).
// Throws ConfigError naming the key for any invalid value.
RequestOptions parse_request_options(const ConfigNode& section);

// The 64-bit salt key of a cache_salt string (never 0; vLLM hashes the string into the first
// block's extra keys). engine serve uses the same function for its requests' cache_salt field.
std::uint64_t cache_salt_key(const std::string& salt);

class SampledWorkload : public WorkloadDecorator {
 public:
  // `seed` is the experiment seed (for eos_probability).
  SampledWorkload(std::unique_ptr<Workload> inner, RequestOptions options, std::uint64_t seed);

  std::optional<RequestSpec> next() override;
  std::string describe() const override;

 private:
  RequestOptions options_;
  Rng eos_rng_;
  std::uint64_t salt_ = 0;                        // options_.cache_salt->value's key
  std::shared_ptr<const RequestSampling> draws_;  // the unseeded draws, shared by every request
};

}  // namespace servelab
