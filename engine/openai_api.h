// The OpenAI API subset `engine serve` speaks (docs/serving.md): request bodies of
// /v1/completions and /v1/chat/completions parsed and checked, and the JSON of responses,
// streamed chunks and errors.
//
// Every problem with a request is an ApiError carrying the HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}}: malformed JSON, a body that is not an object,
// an unknown field, a field of the wrong type or out of range, a sampling parameter the engine
// does not implement (anything but greedy decoding of one sequence), a token id outside the
// vocabulary, an empty prompt, or prompt + max_tokens over the model's context (max_model_len).
// A `model` that is neither the served model nor one of its LoRA adapters is 404. A nonzero
// `priority` where the server does not schedule by priority is 400 (param "priority").
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "serving/lora_modules.h"
#include "serving/tokenizer.h"

namespace servelab {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string type, std::string param = "",
           std::string code = "");
  int status;
  std::string type;   // "invalid_request_error", "server_overloaded", ...
  std::string param;  // the offending field ("" -> null)
  std::string code;   // a machine-readable code ("" -> null)
};
// {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
std::string error_json(const ApiError& e);

struct ApiLimits {
  std::string model;            // the served model name (requests may name it or omit it)
  std::int32_t vocab_size = 0;  // token ids must be below
  std::int32_t max_model_len = 0;
  // LoRA adapters served under their own names (serving/lora_modules.h; empty: none).
  std::vector<LoraModule> lora_modules;
  // Whether the scheduler reads request priorities (queue order `priority`, or the
  // `lowest-priority` victim rule): without, a nonzero `priority` is refused, as vLLM refuses
  // one when priority scheduling is off.
  bool priority_scheduling = false;
};

struct CompletionRequest {
  bool chat = false;
  // The model the request named (the served model when it named none), and the LoRA adapter
  // that name serves (lora_id 0: the base model).
  std::string model;
  std::uint32_t lora_id = 0;
  std::int32_t lora_rank = 0;
  std::vector<std::int32_t> prompt;  // token ids
  std::int32_t max_tokens = 0;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // vLLM's SamplingParams stop conditions (core/stop_conditions.h) and cache_salt.
  std::vector<std::int32_t> stop_token_ids;  // token ids in the vocabulary
  bool ignore_eos = false;
  std::int32_t min_tokens = 0;  // <= max_tokens
  std::string cache_salt;       // "" : none
  // Stop strings (`stop`: a string or an array of strings, none empty; engine/stop_strings.h)
  // and vLLM's include_stop_str_in_output.
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
  // vLLM's `priority` (smaller is served first; 0 by default) and OpenAI's `user` ("": none), the
  // end user on whose behalf the request is made: the server makes it the request's tenant, so
  // the `fair` queue order shares the server among users.
  std::int32_t priority = 0;
  std::string user;
};

// The tenant of a request made for end user `user` (OpenAI's `user` field): 0 for none (""),
// otherwise a stable hash of the name in [1, 2^31 - 1], so the same user is the same tenant in
// every run and on every replica without a table that grows with the users.
std::uint32_t user_tenant(std::string_view user);

// Parses a /v1/completions (chat = false) or /v1/chat/completions (chat = true) body. Text
// prompts and chat messages are encoded with `tokenizer` (chat messages through
// encode_chat: the Llama 3 format, or plain text for a tokenizer without chat tokens).
// Throws ApiError (status 400).
CompletionRequest parse_completion_request(std::string_view body, bool chat,
                                           const ApiLimits& limits, const Tokenizer& tokenizer);

// Response pieces. `id` is "cmpl-N" / "chatcmpl-N", `created` Unix seconds.
struct ResponseMeta {
  std::string id;
  std::string model;
  std::int64_t created = 0;
  bool chat = false;
};
// The whole non-streaming response: one choice with `text`, `finish_reason` ("length" or "stop"),
// usage. A non-empty `stop_reason` (the stop string that ended the output) adds vLLM's
// `stop_reason` field to the choice.
std::string completion_json(const ResponseMeta& meta, const std::string& text,
                            std::int32_t prompt_tokens, std::int32_t completion_tokens,
                            const std::string& finish_reason = "length",
                            const std::string& stop_reason = "");
// One streamed chunk with `text` (a delta; the chat stream's first chunk also carries the role)
// and, when `finish_reason` is non-empty, that reason (and `stop_reason` as above). Without the
// "data: " framing.
std::string chunk_json(const ResponseMeta& meta, const std::string& text, bool first,
                       const std::string& finish_reason, const std::string& stop_reason = "");
// The usage chunk (stream_options.include_usage): no choices, usage filled in.
std::string usage_chunk_json(const ResponseMeta& meta, std::int32_t prompt_tokens,
                             std::int32_t completion_tokens);
// GET /v1/models: the served model, then each LoRA adapter with the model as its `parent` (as
// vLLM lists --lora-modules).
std::string models_json(const std::string& model, std::int64_t created, std::int32_t max_model_len,
                        const std::vector<LoraModule>& lora_modules = {});

}  // namespace servelab
