// Chat messages -> prompt token ids, in the Llama 3 family's chat format (Llama 3, 3.1, 3.2 and
// 3.3 instruct models) or ChatML (Qwen2, Qwen2.5; apply_chatml below), written out here rather
// than by running the model's Jinja template. The Llama 3 format:
//
//   <|begin_of_text|>
//   for each message: <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
//   when add_generation_prompt: <|start_header_id|>assistant<|end_header_id|>\n\n
//
// CONTENT is the message's content with leading and trailing whitespace removed (the template's
// `| trim`: Python's Unicode whitespace, U+00A0 and U+3000 included). The text between special
// tokens is encoded with Tokenizer::encode, so special-token text inside a content is matched as
// the special token, exactly as tokenising the rendered template does. Roles: system, user,
// assistant, ipython (Llama 3.1's tool results). Llama 3.1's default system preamble (knowledge
// cutoff date, tools) is not added.
//
// A model's own template (Hugging Face's Jinja chat_template, which vLLM renders) replaces the
// built-in formats where one is given or found: ChatTemplate below, over serving/jinja.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "serving/jinja.h"
#include "serving/tokenizer.h"

namespace servelab {

struct ChatMessage {
  std::string role;
  std::string content;
  // OpenAI's optional participant name: a chat template sees it as the message's `name` (the
  // built-in formats do not show it).
  std::optional<std::string> name = {};
  // The text parts, where the content came as OpenAI's list of parts (`content` is then them
  // joined by "\n"); empty where it came as a string.
  std::vector<std::string> parts = {};
  // An assistant message's tool calls and a tool message's tool_call_id, as a chat template
  // sees them (engine/openai_tools.h; the built-in formats have no place for them).
  std::optional<jinja::Value> tool_calls = {};
  std::optional<std::string> tool_call_id = {};
  // A content that came as null or absent (an assistant message with tool calls): "" for a
  // template that takes strings, an empty list of parts for one that takes OpenAI's parts.
  bool no_content = false;
};

// The Llama 3 chat format (<|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n
// content<|eot_id|> ..., then the assistant header when add_generation_prompt). With
// continue_final_message (Hugging Face's and vLLM's), the last message stays open: its content
// (trimmed, as the template trims it) ends the prompt, without <|eot_id|>, so the model goes on
// with it. ConfigError on an unknown role or a tokenizer lacking the special tokens.
std::vector<std::int32_t> apply_chat_template(const Tokenizer& tok,
                                              std::span<const ChatMessage> msgs,
                                              bool add_generation_prompt = true,
                                              bool continue_final_message = false);

// True when `tok` has the Llama 3 chat format's special tokens.
bool has_llama3_chat_tokens(const Tokenizer& tok);

// The ChatML format of Qwen2 and Qwen2.5 instruct models: for each message
// "<|im_start|>ROLE\nCONTENT<|im_end|>\n" (CONTENT as given: the templates do not trim), then
// "<|im_start|>assistant\n" when add_generation_prompt; with continue_final_message the last
// message ends after its content. The text is encoded whole with Tokenizer::encode, as vLLM
// encodes a rendered template. Not written: the default system message the Qwen templates add
// when the first message is not a system one (Qwen2: "You are a helpful assistant."; Qwen2.5:
// "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."): send it as the
// first message to match vLLM. Roles: system, user, assistant. ConfigError on an unknown role or
// a tokenizer without <|im_start|> and <|im_end|>.
std::vector<std::int32_t> apply_chatml(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                       bool add_generation_prompt = true,
                                       bool continue_final_message = false);

// True when `tok` has ChatML's <|im_start|> and <|im_end|>.
bool has_chatml_tokens(const Tokenizer& tok);

// A Hugging Face chat template (Jinja, serving/jinja.h) with the variables transformers gives it
// besides the messages: the tokenizer's special tokens (bos_token, eos_token, unk_token,
// pad_token, ... as tokenizer_config.json names them).
class ChatTemplate {
 public:
  // ConfigError "ORIGIN:LINE: what" for a template outside the Jinja subset. The content
  // format is detected as vLLM detects it (jinja::Template::iterates_message_content): OpenAI's
  // content parts for a template that loops over a message's content, else strings.
  ChatTemplate(const std::string& source, std::string origin, jinja::Dict special_tokens = {});

  // vLLM's --chat-template-content-format: how a message's content reaches the template, a
  // string or a list of {"type": "text", "text": ...} parts (each text part as the request
  // gave it; a string content is one part).
  enum class ContentFormat { kString, kOpenAi };
  ContentFormat content_format() const { return content_format_; }
  // This template with its content format set (vLLM's option over its detection).
  ChatTemplate with_content_format(ContentFormat format) const;

  // The prompt text, as transformers' apply_chat_template(tokenize=False) renders it: the
  // variables messages (each {role, content}, content in content_format(), then tool_calls,
  // tool_call_id and name where given), add_generation_prompt, tools and documents (none), the
  // special tokens, then `extra` (vLLM's chat_template_kwargs, and the request's tools; a name
  // there overrides a special token's). With continue_final_message the text is cut after the last
  // message's content (its last text part with OpenAI's parts; its last occurrence, trimmed as
  // transformers trims it), and a
  // ConfigError says so when the template dropped it. raise_exception in the template throws
  // jinja::Raised with its message; other runtime errors are ConfigErrors naming the line.
  std::string render(std::span<const ChatMessage> msgs, bool add_generation_prompt,
                     bool continue_final_message, const jinja::Dict& extra = {},
                     const jinja::RenderOptions& options = {}) const;

  const std::string& origin() const { return template_.origin(); }

 private:
  jinja::Template template_;
  jinja::Dict special_tokens_;
  ContentFormat content_format_ = ContentFormat::kString;
};

// vLLM's --chat-template: a file (a Jinja template, or a tokenizer_config.json whose
// "chat_template" is taken), or, when no such file exists and the text has "{{" or "{%", the
// template itself. The special tokens come from the tokenizer_config.json beside
// `tokenizer_json` when there is one (or from the named tokenizer_config.json itself).
// ConfigError naming the file or key: unreadable, no chat_template, a list of named templates
// without "default", or a template outside the subset.
std::shared_ptr<const ChatTemplate> load_chat_template(const std::string& arg,
                                                       const std::filesystem::path& tokenizer_json);

// The template that ships with a tokenizer, as transformers finds it: chat_template.jinja
// beside tokenizer.json, else tokenizer_config.json's "chat_template"; nullptr when neither
// exists. ConfigError for one that exists and cannot be read or parsed.
std::shared_ptr<const ChatTemplate> find_chat_template(const std::filesystem::path& tokenizer_json);

// What `engine serve` encodes chat messages with: `tmpl` where given (rendered, then encoded
// with Tokenizer::encode, as vLLM encodes a rendered template: special-token text is matched,
// no post_processor tokens are added); else apply_chat_template when the tokenizer has the
// Llama 3 special tokens, apply_chatml when it has ChatML's; otherwise (a vocabulary without
// chat tokens, such as the tiny model's byte tokenizer) the plain text "ROLE: CONTENT\n" per
// message (the last without its "\n" with continue_final_message), then "assistant: " when
// add_generation_prompt, encoded with Tokenizer::encode.
std::vector<std::int32_t> encode_chat(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                      bool add_generation_prompt = true,
                                      bool continue_final_message = false,
                                      const ChatTemplate* tmpl = nullptr,
                                      const jinja::Dict& extra = {});

}  // namespace servelab
