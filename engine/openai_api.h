// The OpenAI API subset `engine serve` speaks (docs/serving.md): request bodies of
// /v1/completions and /v1/chat/completions parsed and checked, and the JSON of responses,
// streamed chunks and errors.
//
// Every problem with a request is an ApiError carrying the HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}}: malformed JSON, a body that is not an object,
// an unknown field, a field of the wrong type or out of range, a sampling parameter the engine
// does not implement (best_of other than n), a token id outside the
// vocabulary, an empty prompt, or prompt + max_tokens over the model's context (max_model_len).
// A `model` that is neither the served model nor one of its LoRA adapters is 404. A nonzero
// `priority` where the server does not schedule by priority is 400 (param "priority").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/sampling_params.h"
#include "engine/grammar_cache.h"
#include "engine/token_trie.h"
#include "engine/tool_parser.h"
#include "serving/chat_template.h"
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
// A 400 "invalid_request_error" naming the field `param` (the parsers' one kind of refusal).
ApiError invalid_request(const std::string& message, const std::string& param = "",
                         const std::string& code = "");
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
  // Why the server cannot return log probabilities ("": it can); a request asking for them is
  // then 400 with this reason.
  std::string logprobs_unsupported = {};
  // The sampling parameters of the fields a request leaves out (engine/generation_config.h):
  // null, greedy with nothing else, and a request that names no sampling field keeps the
  // engine's; otherwise every request gets its own parameters, these overridden by its fields.
  std::optional<RequestSampling> sampling_defaults = {};
  // vLLM's generation-config max_new_tokens (engine/generation_config.h): a chat request's
  // max_tokens when it gives none (at most the rest of the context), and the cap of every
  // request's max_tokens.
  std::optional<std::int32_t> default_max_tokens = {};
  std::optional<std::int32_t> max_tokens_cap = {};
  // The model's chat template (vLLM's --chat-template, or the one beside the tokenizer;
  // serving/chat_template.h): chat messages are rendered with it; null: the built-in formats.
  std::shared_ptr<const ChatTemplate> chat_template = {};
  // vLLM's --enable-auto-tool-choice with --tool-call-parser (engine/tool_parser.h): requests with
  // tools and tool_choice "auto" get their choices' tool calls parsed; null: such requests are
  // refused. --exclude-tools-when-tool-choice-none: tool_choice "none" leaves the tools out of
  // the template (engine/openai_tools.h).
  std::shared_ptr<const ToolParser> tool_parser = {};
  bool exclude_tools_when_tool_choice_none = false;
  // Structured outputs (engine/openai_structured.h): the vocabulary's tokens by their bytes, and
  // the model's EOS ids (a constrained output may end where its grammar completes); null trie:
  // structured outputs are refused.
  std::shared_ptr<const TokenTrie> token_trie = {};
  std::vector<std::int32_t> eos_token_ids = {};
  // The server's compiled grammars by spec (engine/grammar_cache.h; null: each request compiles
  // its own).
  std::shared_ptr<GrammarCache> grammar_cache = {};
  // A server with a reasoning parser: its <think> and </think> ids. A constrained output is then
  // held only after the model's </think> (vLLM's default), or from its start where the prompt
  // already closed the thinking (its last <think> or </think> is a </think>: Qwen3's template
  // with enable_thinking false).
  std::optional<std::pair<std::int32_t, std::int32_t>> reasoning_tokens = {};
};

// The most prompts one completions request may batch.
inline constexpr std::size_t kMaxBatchPrompts = 1024;
// The most token sequences a request's bad_words may ban (after tokenization).
inline constexpr std::size_t kMaxBadWords = 1024;

struct CompletionRequest {
  bool chat = false;
  // The model the request named (the served model when it named none), and the LoRA adapter
  // that name serves (lora_id 0: the base model).
  std::string model;
  std::uint32_t lora_id = 0;
  std::int32_t lora_rank = 0;
  std::vector<std::int32_t> prompt;  // token ids
  // A batch of prompts (completions' `prompt` as an array of strings or of token-id arrays, as
  // vLLM takes it): `prompt` is the first, these the others (each checked as `prompt` is, and
  // prompt + max_tokens within the context for the longest); the response has n choices per
  // prompt, prompt i's at indices i * n .. i * n + n - 1. more_echo_texts: their echo_text.
  std::vector<std::vector<std::int32_t>> more_prompts;
  std::vector<std::string> more_echo_texts;
  std::int32_t max_tokens = 0;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // stream_options.continuous_usage_stats (with include_usage): usage in every chunk, the
  // choice's completion tokens so far (vLLM's).
  bool continuous_usage = false;
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
  // temperature, top_p, seed, the presence and frequency penalties, OpenAI's logit_bias and vLLM's
  // top_k, min_p and repetition_penalty (core/sampling_params.h): present when the server has
  // sampling defaults (ApiLimits::sampling_defaults: the missing fields take them) or the body
  // gave any of the first three or another that changes something (a nonzero penalty or bias,
  // top_k >= 1, min_p > 0, repetition_penalty != 1; the others then take temperature 0, top_p 1,
  // no seed, no penalty); absent, the engine's own (greedy). A temperature below 1e-5 is greedy
  // (vLLM's _SAMPLING_EPS); top_k -1 is 0; each bias is clamped to [-100, 100], as vLLM does.
  // vLLM's allowed_token_ids (repeats dropped) and bad_words (bad_word_token_ids) also make it
  // present.
  std::optional<RequestSampling> sampling;
  std::int32_t n = 1;  // choices (parallel samples), 1 .. kMaxSamples
  // Log probabilities of the output tokens with this many alternatives each (completions'
  // `logprobs: K`; chat's `logprobs: true` and `top_logprobs: K`, default 0); -1: none.
  std::int32_t logprobs = -1;
  // Log probabilities of the prompt's tokens with this many alternatives each: vLLM's
  // `prompt_logprobs` (both endpoints; not with stream), or completions' `echo` with
  // `logprobs: K` (K); -1: none.
  std::int32_t prompt_logprobs = -1;
  bool prompt_logprobs_field = false;  // asked for by `prompt_logprobs` (the response carries it)
  // vLLM's return_tokens_as_token_ids: the logprobs objects name each token (and alternative) as
  // "token_id:N" instead of its text, so tokens that show the same text stay apart.
  bool return_tokens_as_token_ids = false;
  // vLLM's return_token_ids (vLLM 0.10.2 on): each choice carries its output's token ids
  // (`token_ids`; a stream's chunk, those it adds) and its prompt's (`prompt_token_ids`;
  // completions: in the choice, a stream's first chunk of it; chat: beside the choices, a
  // stream's first chunk), so a client can quote the reply exactly in its next prompt.
  bool return_token_ids = false;
  // vLLM's skip_special_tokens (default true): the choices' text leaves out the tokenizer's
  // special tokens (Tokenizer::special; they stay in token counts and logprobs).
  bool skip_special_tokens = true;
  // Completions' `echo`: each choice's text starts with the prompt (and, with `logprobs`, its
  // logprobs object with the prompt's tokens, the first without a logprob). echo_text: the prompt
  // as the client sent it when a string; empty for token ids (the server decodes them).
  bool echo = false;
  std::string echo_text;
  // vLLM's truncate_prompt_tokens (k >= 1, or -1: max_model_len) is applied to `prompt` and
  // `more_prompts` before they are checked against the context: each keeps its last k tokens (a
  // text prompt with add_special_tokens keeps its special tokens and its last text tokens, as
  // Hugging Face's left truncation does); a truncated prompt is echoed as its ids decode.
  // `echo` with `max_tokens: 0`: each choice is the prompt alone (its text and logprobs); as in
  // vLLM one token is generated (max_tokens is 1 here, and usage counts it) and not shown.
  bool echo_only = false;
  // Chat with tools and tool_choice "auto" (engine/openai_tools.h): each choice's text is parsed
  // for tool calls with ApiLimits::tool_parser (its special tokens kept in the text where the
  // parser reads them: skip_special_tokens is then false); parallel_tool_calls false keeps a
  // choice's first call.
  bool parse_tool_calls = false;
  bool parallel_tool_calls = true;
  // The parser of those calls: the server's (auto), or a forced tool choice's
  // (engine/forced_tool_parser.h), whose output is held to the tools' schema by
  // sampling->constraint. Structured outputs (response_format, structured_outputs) set the
  // constraint alone.
  std::shared_ptr<const ToolParser> tool_parser = {};
};

// The tenant of a request made for end user `user` (OpenAI's `user` field): 0 for none (""),
// otherwise a stable hash of the name in [1, 2^31 - 1], so the same user is the same tenant in
// every run and on every replica without a table that grows with the users.
std::uint32_t user_tenant(std::string_view user);

// The token sequences vLLM bans for one of a request's bad_words: the word without its leading
// whitespace (Python's str.lstrip: Unicode's too), encoded without special tokens, then " " + that
// word when it encodes to as many tokens starting with another (the word in mid-text, for
// tokenizers that mark a leading space). Empty when the word encodes to nothing (whitespace alone).
std::vector<std::vector<std::int32_t>> bad_word_token_ids(std::string_view word,
                                                          const Tokenizer& tokenizer);

// Parses a /v1/completions (chat = false) or /v1/chat/completions (chat = true) body. Text
// prompts and chat messages are encoded with `tokenizer` (chat messages through
// encode_chat: limits.chat_template where there is one, with the body's chat_template_kwargs;
// else the Llama 3 format or ChatML, or plain text for a tokenizer without chat tokens). A
// template's raise_exception and runtime errors are 400s carrying its message; a request's own
// `chat_template` is refused (vLLM without --trust-request-chat-template).
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
// One output token's log probabilities as a response shows them: the token's text (its raw
// bytes, which may be part of a UTF-8 character), its logprob and the alternatives'.
struct TokenLogprobText {
  std::string token;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
  bool none = false;  // no log probability (an echoed prompt's first token): null in the JSON
};
// One prompt token's entry of vLLM's `prompt_logprobs` list (whose first item is null): a dict
// {"<id>": {"logprob", "rank", "decoded_token"}} of the token and its alternatives (ranked 1, 2,
// ... in order).
struct PromptTokenLogprobs {
  std::int32_t id = 0;
  std::string text;
  float logprob = 0.0f;
  std::int32_t rank = 1;
  struct Alternative {
    std::int32_t id = 0;
    std::string text;
    float logprob = 0.0f;
  };
  std::vector<Alternative> top;
};
// A choice's `logprobs` object for tokens [0, tokens.size()) of its output, the first at
// character `text_offset` of the choice's text (a stream's chunk: what was sent before). Chat:
// {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}; completions: vLLM's
// {"text_offset", "token_logprobs", "tokens", "top_logprobs": [{token: logprob}]} (each dict
// holds the token itself and its alternatives). Logprobs below -9999 are -9999, as vLLM clamps.
// One choice of a response: its text, `finish_reason` ("length" or "stop"), when non-empty
// vLLM's `stop_reason` (the stop string that ended the output), and its tokens' log
// probabilities when the request asked for them.
struct ChoiceText {
  std::string text;
  std::string finish_reason = "length";
  std::string stop_reason;
  std::optional<std::vector<TokenLogprobText>> logprobs;
  // vLLM's prompt_logprobs of the choice's prompt (positions 1 .. its length - 1), when the
  // request asked for them with `prompt_logprobs`.
  std::optional<std::vector<PromptTokenLogprobs>> prompt_logprobs;
  // vLLM's stop_reason when a stop token id (not the model's EOS) ended the choice: the id.
  std::optional<std::int32_t> stop_token = {};
  // Chat with parsed tool calls (CompletionRequest::parse_tool_calls): the calls the text held
  // (the message's `tool_calls`; finish_reason "tool_calls"), and content_null when the rest of
  // the text is no content (the message's content null).
  std::vector<ToolCall> tool_calls = {};
  bool content_null = false;
  // A server with a reasoning parser (engine/reasoning_parser.h): the message's
  // `reasoning_content` (nullopt: null).
  bool reasoning_field = false;
  std::optional<std::string> reasoning = {};
  // CompletionRequest::return_token_ids: the choice's output and prompt ids.
  std::optional<std::vector<std::int32_t>> token_ids = {};
  std::optional<std::vector<std::int32_t>> prompt_token_ids = {};
};
// The whole non-streaming response: the choices (index 0, 1, ... in order) and usage
// (prompt_tokens: every prompt's of a batch; completion_tokens: all choices' tokens together, as
// OpenAI and vLLM count them). Choices' prompt_logprobs: vLLM's `prompt_logprobs` field, in each
// choice for completions, beside the choices (the first choice's) for chat.
std::string completion_json(const ResponseMeta& meta, const std::vector<ChoiceText>& choices,
                            std::int32_t prompt_tokens, std::int32_t completion_tokens);
// One streamed chunk of one choice.
struct ChunkFields {
  std::int32_t index = 0;     // the choice
  std::string text;           // a delta of its text
  bool first = false;         // its first chunk (the chat stream's carries the role)
  std::string finish_reason;  // non-empty on its last chunk ("length" or "stop")
  std::string stop_reason;    // the stop string that ended it (vLLM's field), when non-empty
  // The chunk's tokens' log probabilities, the first at character `text_offset` of the choice's
  // text; text_offset -1: `logprobs` null.
  std::vector<TokenLogprobText> logprobs;
  std::int64_t text_offset = -1;
  // vLLM's stream_options.continuous_usage_stats: usage with the choice's tokens so far
  // (completion_tokens < 0: none).
  std::int32_t prompt_tokens = 0;
  std::int32_t completion_tokens = -1;
  // vLLM's stop_reason when a stop token id ended the choice (ChoiceText::stop_token).
  std::optional<std::int32_t> stop_token = {};
  // The choice's tool calls (on its last chunk: engine/tool_call_stream.h), delta.tool_calls
  // [{"index", "id", "type", "function": {"name", "arguments"}}]; a chunk with calls and no text
  // has no delta.content.
  std::vector<ToolCall> tool_calls = {};
  // A delta of the choice's reasoning (delta.reasoning_content, when non-empty).
  std::string reasoning = {};
  // CompletionRequest::return_token_ids: the ids this chunk adds, and on the choice's first
  // chunk its prompt's.
  std::optional<std::vector<std::int32_t>> token_ids = {};
  std::optional<std::vector<std::int32_t>> prompt_token_ids = {};
};
// Its JSON, without the "data: " framing.
std::string chunk_json(const ResponseMeta& meta, const ChunkFields& chunk);
// The usage chunk (stream_options.include_usage): no choices, usage filled in.
std::string usage_chunk_json(const ResponseMeta& meta, std::int32_t prompt_tokens,
                             std::int32_t completion_tokens);
// vLLM's POST /tokenize: a completions-shaped body ({"prompt": TEXT, "add_special_tokens"
// (default true)}) or a chat-shaped one ({"messages", "add_generation_prompt",
// "continue_final_message", "add_special_tokens" (default false)}), with an optional "model"
// (404 for a name not served); the prompt's ids as the completion endpoints encode it, and in
// *token_strs (where given) its "return_token_strs" (default false). The response: {"count",
// "max_model_len", "tokens", "token_strs"}: null, or with `strings` each id's
// Tokenizer::token_string (vLLM's convert_ids_to_tokens; null for an id no token uses). Throws
// ApiError as parse_completion_request does.
std::vector<std::int32_t> parse_tokenize_request(std::string_view body, const ApiLimits& limits,
                                                 const Tokenizer& tokenizer,
                                                 bool* token_strs = nullptr);
std::string tokenize_json(std::span<const std::int32_t> ids, std::int32_t max_model_len,
                          const Tokenizer* strings = nullptr);
// vLLM's POST /detokenize: {"tokens": [ids], "model"} -> the ids (each in the vocabulary: 400
// naming `tokens` otherwise); the response {"prompt": their text}.
std::vector<std::int32_t> parse_detokenize_request(std::string_view body, const ApiLimits& limits);
std::string detokenize_json(const std::string& text);

// GET /v1/models: the served model, then each LoRA adapter with the model as its `parent` (as
// vLLM lists --lora-modules).
std::string models_json(const std::string& model, std::int64_t created, std::int32_t max_model_len,
                        const std::vector<LoraModule>& lora_modules = {});

}  // namespace servelab
