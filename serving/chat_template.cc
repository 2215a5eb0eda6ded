#include "serving/chat_template.h"

#include <string_view>

#include "core/config_error.h"

namespace servelab {

namespace {

std::int32_t special(const Tokenizer& tok, std::string_view name) {
  const std::optional<std::int32_t> id = tok.token_id(name);
  if (!id) {
    throw ConfigError("chat template: the tokenizer has no " + std::string(name) +
                      " token (the Llama 3 chat format needs <|begin_of_text|>, "
                      "<|start_header_id|>, <|end_header_id|> and <|eot_id|>)");
  }
  return *id;
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\v\f";
  const std::size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

void append(std::vector<std::int32_t>& ids, const std::vector<std::int32_t>& more) {
  ids.insert(ids.end(), more.begin(), more.end());
}

}  // namespace

std::vector<std::int32_t> apply_chat_template(const Tokenizer& tok,
                                              std::span<const ChatMessage> msgs,
                                              bool add_generation_prompt,
                                              bool continue_final_message) {
  const std::int32_t begin_of_text = special(tok, "<|begin_of_text|>");
  const std::int32_t start_header = special(tok, "<|start_header_id|>");
  const std::int32_t end_header = special(tok, "<|end_header_id|>");
  const std::int32_t eot = special(tok, "<|eot_id|>");
  std::vector<std::int32_t> ids{begin_of_text};
  auto header = [&](std::string_view role) {
    ids.push_back(start_header);
    append(ids, tok.encode(role));
    ids.push_back(end_header);
  };
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "ipython") {
      throw ConfigError("messages[" + std::to_string(i) + "].role: unknown role '" + m.role +
                        "' (expected system, user, assistant or ipython)");
    }
    header(m.role);
    append(ids, tok.encode("\n\n" + std::string(trim(m.content))));
    if (!(continue_final_message && i + 1 == msgs.size())) ids.push_back(eot);
  }
  if (add_generation_prompt) {
    header("assistant");
    append(ids, tok.encode("\n\n"));
  }
  return ids;
}

std::vector<std::int32_t> apply_chatml(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                       bool add_generation_prompt, bool continue_final_message) {
  for (const char* name : {"<|im_start|>", "<|im_end|>"}) {
    if (!tok.token_id(name)) {
      throw ConfigError("chat template: the tokenizer has no " + std::string(name) +
                        " token (the ChatML format needs <|im_start|> and <|im_end|>)");
    }
  }
  std::string text;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      throw ConfigError("messages[" + std::to_string(i) + "].role: unknown role '" + m.role +
                        "' (expected system, user or assistant)");
    }
    text += "<|im_start|>" + m.role + "\n" + m.content;
    if (!(continue_final_message && i + 1 == msgs.size())) text += "<|im_end|>\n";
  }
  if (add_generation_prompt) text += "<|im_start|>assistant\n";
  return tok.encode(text);
}

bool has_chatml_tokens(const Tokenizer& tok) {
  return tok.token_id("<|im_start|>") && tok.token_id("<|im_end|>");
}

bool has_llama3_chat_tokens(const Tokenizer& tok) {
  for (const char* name :
       {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}) {
    if (!tok.token_id(name)) return false;
  }
  return true;
}

std::vector<std::int32_t> encode_chat(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                      bool add_generation_prompt, bool continue_final_message) {
  if (has_llama3_chat_tokens(tok)) {
    return apply_chat_template(tok, msgs, add_generation_prompt, continue_final_message);
  }
  if (has_chatml_tokens(tok)) {
    return apply_chatml(tok, msgs, add_generation_prompt, continue_final_message);
  }
  std::string text;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    text += msgs[i].role + ": " + msgs[i].content;
    if (!(continue_final_message && i + 1 == msgs.size())) text += "\n";
  }
  if (add_generation_prompt) text += "assistant: ";
  return tok.encode(text);
}

}  // namespace servelab
