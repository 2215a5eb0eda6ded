// vLLM's --generation-config and --override-generation-config for `engine serve`: the sampling
// parameters a request takes for the fields it leaves out, the cap on its max_tokens, and the
// extra end-of-sequence ids a checkpoint's generation_config.json names.
//
// `source`:
//   "servelab" (the default): greedy with nothing else, as engine serve has always been, so a
//     client that names no sampling field gets the same text every time (docs/serving.md);
//   "vllm": vLLM's SamplingParams defaults (temperature 1, top_p 1, top_k 0, min_p 0,
//     repetition_penalty 1): what vLLM serves with `--generation-config vllm`;
//   "auto" (vLLM's default): vLLM's, then the generation_config.json in the folder of `weights`
//     (the directory itself, or a file's folder) where there is one; vLLM's alone otherwise;
//   a folder or a .json file: vLLM's, then that generation_config.json (it must exist).
// From a file: temperature, top_p, top_k, min_p, repetition_penalty and max_new_tokens (vLLM's
// list; do_sample, max_length and the rest are ignored, as vLLM ignores them) and eos_token_id
// (an id or a list: vLLM stops at all of them). max_new_tokens is a default and a cap as vLLM's
// get_max_tokens has it (the fields below). `override_json` (vLLM's
// --override-generation-config: a JSON object of the same six sampling keys) applies last.
// Values must be in the ranges requests have (engine/openai_api.h; top_k -1 is 0).
// Throws ConfigError naming the file (or the option) and the key for anything else.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/sampling_params.h"

namespace servelab {

struct GenerationDefaults {
  std::string source;        // what was read, for the server's log
  RequestSampling sampling;  // each field's default (a seed is never set)
  // max_new_tokens (the override's, else the file's): a chat request's max_tokens when it
  // gives none (completions keep OpenAI's 16, as vLLM's protocol does).
  std::optional<std::int32_t> max_new_tokens;
  // What caps every request's max_tokens, an explicit one too (vLLM's override_max_tokens): the
  // override's max_new_tokens, else, with a folder or file source (not auto), the file's.
  std::optional<std::int32_t> max_tokens_cap;
  std::vector<std::int32_t> eos_token_ids;  // the file's, in its order

  // Whether a request that names nothing samples greedily with no adjustment (then it keeps
  // the engine's own parameters, RequestSpec::sampling null).
  bool greedy() const;
  // "temperature 0.6, top_p 0.9" : the fields that differ from greedy with nothing else.
  std::string describe() const;
};

GenerationDefaults load_generation_defaults(const std::string& source, const std::string& weights,
                                            const std::string& override_json,
                                            std::int32_t vocab_size);

}  // namespace servelab
