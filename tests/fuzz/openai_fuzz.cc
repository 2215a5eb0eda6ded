// Fuzz target: the OpenAI request parser of `engine serve` (engine/openai_api.h) on arbitrary
// bodies, the one input a server takes from anybody.
//
// Input layout: byte 0 chooses the endpoint (bit 0: chat), whether the server schedules by
// priority (bit 1), has generation-config defaults (bit 2), takes a /tokenize and /detokenize
// body instead (bit 3), and renders chats with a model's Jinja chat template (bit 4: Mistral's
// layout from tests/data/chat_templates, which raises on a role it does not know, so
// chat_template_kwargs and the template's errors are reached), or with a tool-calling template
// (bit 5: tests/data/chat_templates/hermes_tools.jinja, and the hermes tool-call parser, so tools,
// tool_choice and tool messages are reached); the remaining bytes are the body. Bit 6 instead
// takes the bytes as a model's output through each tool-call parser (engine/tool_parser.h), whole
// and streamed in pieces cut where the bytes say (engine/tool_call_stream.h), and through each
// reasoning parser (engine/reasoning_parser.h): the streamed content, calls and reasoning must be
// the whole text's (the contracts' exceptions aside).
// The parser must either throw ApiError with a 4xx status whose error_json() is a JSON object
// naming it, or return a request the engine can run: a non-empty prompt of ids inside the
// vocabulary, prompt + max_tokens within the context, min_tokens <= max_tokens, stop ids inside the
// vocabulary, a nonzero priority only when the server schedules by priority, a model that is the
// served one or an adapter with its id, n and logprobs in range, and sampling parameters the
// samplers take. Anything else (another exception, a broken invariant, a sanitizer report, a
// timeout) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/output_constraint.h"
#include "core/request.h"
#include "core/sampling_params.h"
#include "engine/openai_api.h"
#include "engine/reasoning_parser.h"
#include "engine/token_trie.h"
#include "engine/tool_call_stream.h"
#include "engine/tool_parser.h"
#include "serving/chat_template.h"
#include "serving/home.h"
#include "serving/tokenizer.h"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "openai_fuzz: %s\n", what);
  std::abort();
}

const servelab::Tokenizer& bytes_tokenizer() {
  static const std::unique_ptr<servelab::Tokenizer> tok =
      servelab::load_tokenizer(servelab::servelab_home() / "data/tokenizers/bytes/tokenizer.json");
  return *tok;
}

std::shared_ptr<const servelab::ChatTemplate> mistral_template() {
  static const std::shared_ptr<const servelab::ChatTemplate> t = [] {
    const auto path = servelab::servelab_home() / "tests/data/chat_templates/mistral.jinja";
    return servelab::load_chat_template(path.string(), "");
  }();
  return t;
}

std::shared_ptr<const servelab::ChatTemplate> tools_template() {
  static const std::shared_ptr<const servelab::ChatTemplate> t = [] {
    const auto path = servelab::servelab_home() / "tests/data/chat_templates/hermes_tools.jinja";
    return servelab::load_chat_template(path.string(), "");
  }();
  return t;
}

// The text through each parser whole, and streamed in pieces: a piece ends after each byte
// whose low two bits are 0.
void check_tool_parsers(std::string_view text) {
  for (const std::string& name : servelab::tool_parser_names()) {
    const auto parser = servelab::make_tool_parser(name);
    const servelab::ExtractedToolCalls whole =
        servelab::parse_tool_calls(*parser, text, "chatcmpl-1", 0, true);
    if (whole.calls.empty() && name != "mistral" && whole.content != std::string(text)) {
      finding("no calls, but the content is not the text");
    }
    servelab::ToolCallStream stream(*parser, "chatcmpl-1", 0, true);
    std::string pushed;
    std::size_t at = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if ((static_cast<unsigned char>(text[i]) & 3) == 0 || i + 1 == text.size()) {
        pushed += stream.push(text.substr(at, i + 1 - at));
        at = i + 1;
      }
    }
    const servelab::ToolCallStream::End end = stream.finish();
    const std::string want = whole.content.value_or("");
    if (want.starts_with(pushed)) {
      if (pushed + end.content != want) finding("streamed content differs from the whole text's");
    } else if (name != "mistral" || !whole.calls.empty()) {
      finding("streamed content that the whole text does not begin with");
    }
    if (end.calls.size() != whole.calls.size()) finding("streamed calls differ in number");
    for (std::size_t i = 0; i < end.calls.size(); ++i) {
      if (end.calls[i].id != whole.calls[i].id || end.calls[i].name != whole.calls[i].name ||
          end.calls[i].arguments != whole.calls[i].arguments) {
        finding("a streamed call differs");
      }
      if (!nlohmann::json::accept(end.calls[i].arguments)) finding("arguments that are not JSON");
    }
  }
  // The reasoning parsers, the same way (engine/reasoning_parser.h; a <think> after the start is
  // the contract's exception).
  for (const std::string& name : servelab::reasoning_parser_names()) {
    const auto parser = servelab::make_reasoning_parser(name);
    const servelab::ExtractedReasoning whole = parser->extract(text);
    servelab::ReasoningStream stream(*parser);
    std::string reasoning, content;
    std::size_t at = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if ((static_cast<unsigned char>(text[i]) & 3) == 0 || i + 1 == text.size()) {
        const servelab::ReasoningStream::Piece p = stream.push(text.substr(at, i + 1 - at));
        reasoning += p.reasoning;
        content += p.content;
        at = i + 1;
      }
    }
    const servelab::ReasoningStream::Piece p = stream.finish();
    const std::size_t think = text.find("<think>");
    if (think == std::string_view::npos || think == 0) {
      if (reasoning + p.reasoning != whole.reasoning.value_or("") ||
          content + p.content != whole.content.value_or("")) {
        finding("a streamed reasoning split differs from the whole text's");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) != 0;
  servelab::ApiLimits limits{"tiny", 256, 512, {{"sql", 1, 8}, {"chat", 2, 16}}};
  limits.priority_scheduling = (data[0] & 2) != 0;
  if ((data[0] & 4) != 0) {  // a server with vLLM's generation-config defaults
    servelab::RequestSampling defaults;
    defaults.temperature = 0.6;
    defaults.top_p = 0.9;
    defaults.top_k = 40;
    defaults.repetition_penalty = 1.05;
    limits.sampling_defaults = defaults;
    limits.default_max_tokens = 64;
    limits.max_tokens_cap = 100;
  }
  if ((data[0] & 16) != 0) limits.chat_template = mistral_template();
  if ((data[0] & 32) != 0) {
    limits.chat_template = tools_template();
    limits.tool_parser = servelab::make_tool_parser("hermes");
    // Structured outputs and forced tool choices too: the vocabulary and an EOS.
    static const auto trie =
        std::make_shared<const servelab::TokenTrie>(bytes_tokenizer(), limits.vocab_size);
    limits.token_trie = trie;
    limits.eos_token_ids = {0};
  }
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((data[0] & 64) != 0) {
    check_tool_parsers(body);
    return 0;
  }
  if ((data[0] & 8) != 0) {  // vLLM's /tokenize and /detokenize bodies
    try {
      for (const std::int32_t id :
           servelab::parse_tokenize_request(body, limits, bytes_tokenizer())) {
        if (id < 0 || id >= limits.vocab_size) finding("a tokenized id outside the vocabulary");
      }
    } catch (const servelab::ApiError& e) {
      if (e.status < 400 || e.status >= 500) finding("an ApiError outside 4xx");
    }
    try {
      for (const std::int32_t id : servelab::parse_detokenize_request(body, limits)) {
        if (id < 0 || id >= limits.vocab_size) finding("a detokenized id outside the vocabulary");
      }
    } catch (const servelab::ApiError& e) {
      if (e.status < 400 || e.status >= 500) finding("an ApiError outside 4xx");
    }
    return 0;
  }
  servelab::CompletionRequest r;
  try {
    r = servelab::parse_completion_request(body, chat, limits, bytes_tokenizer());
  } catch (const servelab::ApiError& e) {
    if (e.status < 400 || e.status >= 500) finding("an ApiError outside 4xx");
    const nlohmann::json j = nlohmann::json::parse(servelab::error_json(e), nullptr, false);
    if (!j.is_object() || !j.contains("error") || !j["error"].contains("message")) {
      finding("error_json is not an OpenAI error object");
    }
    return 0;
  }
  if (r.chat != chat) finding("the endpoint changed");
  if (r.parse_tool_calls && (!chat || r.tool_parser == nullptr)) {
    finding("tool calls parsed without a chat or a parser");
  }
  if (r.tool_parser != nullptr && r.tool_parser->forced() &&
      (!r.sampling || r.sampling->constraint == nullptr)) {
    finding("a forced tool choice without a constraint");
  }
  if (r.sampling && r.sampling->constraint != nullptr) {
    if (limits.token_trie == nullptr) finding("a constraint on a server without a vocabulary");
    // The first token's mask: never empty (at worst the EOS alone).
    const auto mask = r.sampling->constraint->allowed(0, {}, {});
    if (mask == nullptr) finding("a constraint not holding the first token without reasoning");
    bool any = false;
    for (const std::uint32_t w : *mask) any = any || w != 0;
    if (!any) finding("a constraint allows no first token");
  }
  if (r.prompt.empty()) finding("an empty prompt was accepted");
  for (const std::int32_t id : r.prompt) {
    if (id < 0 || id >= limits.vocab_size) finding("a prompt id outside the vocabulary");
  }
  for (const std::int32_t id : r.stop_token_ids) {
    if (id < 0 || id >= limits.vocab_size) finding("a stop id outside the vocabulary");
  }
  if (r.more_echo_texts.size() != r.more_prompts.size()) finding("a batch's echo texts misaligned");
  if (r.chat && !r.more_prompts.empty()) finding("a batch on the chat endpoint");
  for (const std::vector<std::int32_t>& more : r.more_prompts) {
    if (more.empty()) finding("an empty prompt in a batch");
    for (const std::int32_t id : more) {
      if (id < 0 || id >= limits.vocab_size) finding("a batch prompt id outside the vocabulary");
    }
    if (static_cast<std::int64_t>(more.size()) + r.max_tokens > limits.max_model_len) {
      finding("a batch prompt + max_tokens over the context");
    }
  }
  if (r.more_prompts.size() + 1 > servelab::kMaxBatchPrompts) finding("a batch too large");
  if (r.max_tokens < 1) finding("max_tokens below 1");
  if (static_cast<std::int64_t>(r.prompt.size()) + r.max_tokens > limits.max_model_len) {
    finding("prompt + max_tokens over the context");
  }
  if (r.min_tokens < 0 || r.min_tokens > r.max_tokens)
    finding("min_tokens outside [0, max_tokens]");
  if (r.priority != 0 && !limits.priority_scheduling)
    finding("a priority without priority scheduling");
  if (r.lora_id == 0 ? r.model != "tiny" : r.lora_rank < 1) finding("an unknown model accepted");
  if (r.n < 1 || r.n > servelab::kMaxSamples) finding("n outside [1, kMaxSamples]");
  if (r.logprobs < -1 || r.logprobs > servelab::kMaxLogprobs) finding("logprobs out of range");
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > servelab::kMaxLogprobs) {
    finding("prompt_logprobs out of range");
  }
  if (r.prompt_logprobs >= 0 && r.stream && r.prompt_logprobs_field) {
    finding("prompt_logprobs accepted with a stream");
  }
  if (r.echo && r.chat) finding("echo on the chat endpoint");
  if (!r.echo && !r.echo_text.empty()) finding("an echo text without echo");
  if (r.echo_only && (!r.echo || r.max_tokens != 1))
    finding("echo_only without echo or not 1 token");
  if (limits.sampling_defaults && !r.sampling) finding("a request without the server's defaults");
  if (limits.max_tokens_cap && r.max_tokens > *limits.max_tokens_cap) {
    finding("max_tokens above the generation config's cap");
  }
  if (r.sampling) {
    const servelab::RequestSampling& s = *r.sampling;
    if (!(s.temperature >= 0) || !(s.top_p > 0 && s.top_p <= 1)) {
      finding("a temperature or top_p the samplers refuse");
    }
    if (!(s.presence_penalty >= -2 && s.presence_penalty <= 2) ||
        !(s.frequency_penalty >= -2 && s.frequency_penalty <= 2)) {
      finding("a penalty outside [-2, 2]");
    }
    if (s.top_k < 0 || !(s.min_p >= 0 && s.min_p <= 1)) finding("a top_k or min_p out of range");
    if (!(s.repetition_penalty >= servelab::kMinRepetitionPenalty &&
          s.repetition_penalty <= servelab::kMaxRepetitionPenalty)) {
      finding("a repetition penalty out of range");
    }
    for (std::size_t i = 0; i < s.logit_bias.size(); ++i) {
      const auto [token, bias] = s.logit_bias[i];
      if (token < 0 || token >= limits.vocab_size)
        finding("a logit_bias token outside the vocabulary");
      if (!(bias >= -100 && bias <= 100) || bias == 0)
        finding("a logit_bias outside [-100, 100] or 0");
      if (i > 0 && token <= s.logit_bias[i - 1].first) finding("logit_bias ids not ascending");
    }
    for (std::size_t i = 0; i < s.allowed_token_ids.size(); ++i) {
      const std::int32_t t = s.allowed_token_ids[i];
      if (t < 0 || t >= limits.vocab_size) finding("an allowed token outside the vocabulary");
      if (i > 0 && t <= s.allowed_token_ids[i - 1]) finding("allowed_token_ids not ascending");
    }
    if (s.bad_words.size() > servelab::kMaxBadWords) finding("more bad words than the cap");
    for (const std::vector<std::int32_t>& word : s.bad_words) {
      if (word.empty()) finding("an empty bad word");
      for (const std::int32_t t : word) {
        if (t < 0 || t >= limits.vocab_size) finding("a bad word token outside the vocabulary");
      }
    }
  }
  (void)servelab::user_tenant(r.user);
  return 0;
}
