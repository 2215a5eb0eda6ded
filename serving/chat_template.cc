#include "serving/chat_template.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "core/config_error.h"
#include "serving/input_file.h"
#include "serving/unicode_space.h"

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

// Python's str.strip(): Unicode whitespace (U+00A0, U+3000, ...), as `| trim` and transformers
// strip.
std::string_view trim(std::string_view s) { return unicode_space::trim(s); }

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

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string read_text(const fs::path& file) {
  return read_input_file(file, "a chat template or tokenizer_config.json file");
}

json read_config(const fs::path& file) {
  try {
    json doc = json::parse(read_text(file));
    if (!doc.is_object()) throw ConfigError(file.string() + ": expected a JSON object");
    return doc;
  } catch (const json::exception& e) {
    throw ConfigError(file.string() + ": malformed JSON: " + e.what());
  }
}

// tokenizer_config.json's special tokens as the template sees them: each a string, or an
// AddedToken object whose "content" is taken; additional_special_tokens a list of them.
jinja::Dict special_tokens(const json& config) {
  jinja::Dict out;
  auto text = [](const json& t) -> std::optional<std::string> {
    if (t.is_string()) return t.get<std::string>();
    if (t.is_object() && t.contains("content") && t["content"].is_string()) {
      return t["content"].get<std::string>();
    }
    return std::nullopt;
  };
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    if (const std::optional<std::string> t = text(config[key])) {
      out.emplace_back(key, jinja::Value::string(*t));
    }
  }
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    jinja::List items;
    for (const json& t : config["additional_special_tokens"]) {
      if (const std::optional<std::string> s = text(t)) items.push_back(jinja::Value::string(*s));
    }
    out.emplace_back("additional_special_tokens", jinja::Value::list(std::move(items)));
  }
  return out;
}

// tokenizer_config.json's "chat_template": a string, or a list of {name, template} of which
// "default" is taken (transformers' rule without a template name). nullopt when absent.
std::optional<std::string> config_template(const json& config, const fs::path& file) {
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return std::nullopt;
  const json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const json& named : t) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string()) {
        return named["template"].get<std::string>();
      }
    }
    throw ConfigError(file.string() +
                      ": chat_template: a list of named templates without one named \"default\"");
  }
  throw ConfigError(file.string() +
                    ": chat_template: expected a string or a list of {name, template}");
}

// The template of a tokenizer_config.json with its special tokens; nullptr without one.
std::shared_ptr<const ChatTemplate> config_chat_template(const fs::path& file) {
  const json config = read_config(file);
  const std::optional<std::string> t = config_template(config, file);
  if (!t) return nullptr;
  return std::make_shared<const ChatTemplate>(*t, file.string() + " (chat_template)",
                                              special_tokens(config));
}

jinja::Dict special_tokens_beside(const fs::path& tokenizer_json) {
  if (tokenizer_json.empty()) return {};
  const fs::path config = tokenizer_json.parent_path() / "tokenizer_config.json";
  if (!fs::exists(config)) return {};
  return special_tokens(read_config(config));
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string origin,
                           jinja::Dict special_tokens)
    : template_(source, std::move(origin)),
      special_tokens_(std::move(special_tokens)),
      content_format_(template_.iterates_message_content() ? ContentFormat::kOpenAi
                                                           : ContentFormat::kString) {}

ChatTemplate ChatTemplate::with_content_format(ContentFormat format) const {
  ChatTemplate t = *this;
  t.content_format_ = format;
  return t;
}

std::string ChatTemplate::render(std::span<const ChatMessage> msgs, bool add_generation_prompt,
                                 bool continue_final_message, const jinja::Dict& extra,
                                 const jinja::RenderOptions& options) const {
  jinja::List messages;
  for (const ChatMessage& m : msgs) {
    jinja::Value content = jinja::Value::string(m.content);
    if (content_format_ == ContentFormat::kOpenAi) {
      jinja::List parts;
      const std::vector<std::string> none;
      const std::vector<std::string> whole{m.content};
      for (const std::string& text : m.no_content ? none : m.parts.empty() ? whole : m.parts) {
        parts.push_back(jinja::Value::dict(
            {{"type", jinja::Value::string("text")}, {"text", jinja::Value::string(text)}}));
      }
      content = jinja::Value::list(std::move(parts));
    }
    jinja::Dict fields{{"role", jinja::Value::string(m.role)}, {"content", std::move(content)}};
    if (m.tool_calls) fields.emplace_back("tool_calls", *m.tool_calls);
    if (m.tool_call_id) fields.emplace_back("tool_call_id", jinja::Value::string(*m.tool_call_id));
    if (m.name) fields.emplace_back("name", jinja::Value::string(*m.name));
    messages.push_back(jinja::Value::dict(std::move(fields)));
  }
  jinja::Dict context = special_tokens_;
  context.emplace_back("messages", jinja::Value::list(std::move(messages)));
  context.emplace_back("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  context.emplace_back("tools", jinja::Value::none());
  context.emplace_back("documents", jinja::Value::none());
  context.insert(context.end(), extra.begin(), extra.end());  // later entries win
  std::string text = template_.render(context, options);
  if (!continue_final_message || msgs.empty()) return text;
  // transformers: cut after the last occurrence of the final message's stripped content; keep
  // its trailing whitespace where the template kept it.
  const ChatMessage& last = msgs.back();
  const std::string& final = content_format_ == ContentFormat::kOpenAi && !last.parts.empty()
                                 ? last.parts.back()
                                 : last.content;
  const std::string stripped(trim(final));
  const std::size_t at = text.rfind(stripped);
  if (at == std::string::npos) {
    throw ConfigError(
        "continue_final_message: the final message does not appear in the chat after applying "
        "the chat template (" +
        origin() + " drops part of it)");
  }
  const bool no_leading_space = !final.empty() && unicode_space::at(final, 0) == 0;
  if (no_leading_space && text.compare(at, final.size(), final) == 0) {
    return text.substr(0, at + final.size());
  }
  return text.substr(0, at + stripped.size());
}

std::shared_ptr<const ChatTemplate> load_chat_template(const std::string& arg,
                                                       const fs::path& tokenizer_json) {
  const fs::path file(arg);
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) {
    if (arg.find("{{") != std::string::npos || arg.find("{%") != std::string::npos) {
      return std::make_shared<const ChatTemplate>(arg, "--chat-template",
                                                  special_tokens_beside(tokenizer_json));
    }
    throw ConfigError("--chat-template " + arg +
                      ": no such file, and not a template (no \"{{\" or \"{%\")");
  }
  if (file.extension() == ".json") {
    std::shared_ptr<const ChatTemplate> t = config_chat_template(file);
    if (!t) throw ConfigError(file.string() + ": no chat_template key");
    return t;
  }
  return std::make_shared<const ChatTemplate>(read_text(file), file.string(),
                                              special_tokens_beside(tokenizer_json));
}

std::shared_ptr<const ChatTemplate> find_chat_template(const fs::path& tokenizer_json) {
  const fs::path dir = tokenizer_json.parent_path();
  const fs::path jinja_file = dir / "chat_template.jinja";
  if (fs::exists(jinja_file)) {
    return std::make_shared<const ChatTemplate>(read_text(jinja_file), jinja_file.string(),
                                                special_tokens_beside(tokenizer_json));
  }
  const fs::path config_file = dir / "tokenizer_config.json";
  return fs::exists(config_file) ? config_chat_template(config_file) : nullptr;
}

std::vector<std::int32_t> encode_chat(const Tokenizer& tok, std::span<const ChatMessage> msgs,
                                      bool add_generation_prompt, bool continue_final_message,
                                      const ChatTemplate* tmpl, const jinja::Dict& extra) {
  if (tmpl != nullptr) {
    return tok.encode(tmpl->render(msgs, add_generation_prompt, continue_final_message, extra));
  }
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
