#include "engine/openai_api.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/config_error.h"
#include "core/json_depth.h"
#include "core/request.h"
#include "core/rng.h"
#include "engine/grammar_cache.h"
#include "engine/grammar_constraint.h"
#include "engine/openai_structured.h"
#include "engine/openai_tools.h"
#include "engine/reasoning_parser.h"
#include "serving/chat_template.h"
#include "serving/unicode_space.h"
#include "serving/utf8.h"

namespace servelab {

namespace {

using nlohmann::json;

// Compact JSON text. Strings that are not UTF-8 (a client's bytes quoted in an error, text decoded
// from byte tokens) get U+FFFD instead of making the dump throw, which turned answers into 500s.
std::string text_of(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// The fields each endpoint knows. Unknown ones are refused rather than silently ignored.
bool known_field(const std::string& key, bool chat) {
  static const char* const kCommon[] = {
      "model", "max_tokens", "stream",    "stream_options", "temperature",      "top_p",
      "n",     "ignore_eos", "user",      "seed",           "presence_penalty", "frequency_penalty",
      "stop",  "logprobs",   "logit_bias"};
  // vLLM's extra sampling parameters and its cache_salt.
  static const char* const kVllm[] = {"stop_token_ids",
                                      "min_tokens",
                                      "cache_salt",
                                      "include_stop_str_in_output",
                                      "priority",
                                      "prompt_logprobs",
                                      "top_k",
                                      "min_p",
                                      "repetition_penalty",
                                      "allowed_token_ids",
                                      "bad_words",
                                      "truncate_prompt_tokens",
                                      "return_tokens_as_token_ids",
                                      "return_token_ids",
                                      "skip_special_tokens",
                                      "spaces_between_special_tokens",
                                      "structured_outputs",
                                      "response_format"};
  for (const char* k : kVllm) {
    if (key == k) return true;
  }
  for (const char* k : kCommon) {
    if (key == k) return true;
  }
  if (chat) {
    return key == "messages" || key == "max_completion_tokens" || key == "top_logprobs" ||
           key == "add_generation_prompt" || key == "continue_final_message" ||
           key == "add_special_tokens" || key == "chat_template" || key == "chat_template_kwargs" ||
           key == "tools" || key == "tool_choice" || key == "parallel_tool_calls";
  }
  return key == "prompt" || key == "best_of" || key == "echo" || key == "add_special_tokens";
}

void expect(bool ok, const std::string& param, const std::string& what) {
  if (!ok) throw invalid_request("'" + param + "': expected " + what, param);
}

// A chat message's content: a string, or OpenAI's array of content parts, of which text parts
// ({"type": "text", "text": ...}) are taken (into *parts), joined by "\n" as vLLM joins them
// for a template that takes string content; any other part (images, audio) is refused.
std::string message_content(const json& m, std::vector<std::string>* parts) {
  expect(m.contains("content"), "messages", "a 'content' in every message");
  const json& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  expect(c.is_array(), "messages", "a string 'content' or an array of content parts");
  std::string text;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const json& part = c[i];
    expect(part.is_object() && part.contains("type") && part["type"].is_string(), "messages",
           "content parts with a string 'type'");
    const std::string type = part["type"].get<std::string>();
    if (type != "text") {
      throw invalid_request(
          "'messages': content parts of type '" + type +
              "' are not supported (text parts only; multimodal inputs exist in the "
              "simulator's workloads)",
          "messages");
    }
    expect(part.contains("text") && part["text"].is_string(), "messages",
           "a string 'text' in each text part");
    for (const auto& [key, value] : part.items()) {
      if (key != "type" && key != "text") {
        throw invalid_request("unknown field 'messages[].content[]." + key + "'", "messages",
                              "unknown_field");
      }
    }
    if (i > 0) text += '\n';
    text += part["text"].get<std::string>();
    parts->push_back(part["text"].get<std::string>());
  }
  return text;
}

std::vector<std::int32_t> token_array(const json& a, const std::string& param,
                                      const ApiLimits& limits) {
  std::vector<std::int32_t> ids;
  ids.reserve(a.size());
  for (const json& t : a) {
    expect(t.is_number_integer(), param, "an array of token ids (integers)");
    // A JSON integer past INT64_MAX is unsigned: compared as such, not wrapped negative.
    const bool in_vocab =
        t.is_number_unsigned()
            ? t.get<std::uint64_t>() < static_cast<std::uint64_t>(limits.vocab_size)
            : t.get<std::int64_t>() >= 0 && t.get<std::int64_t>() < limits.vocab_size;
    const auto v = t.get<std::int64_t>();
    if (!in_vocab) {
      throw invalid_request("'" + param + "': token id " + t.dump() +
                                " is outside the vocabulary [0, " +
                                std::to_string(limits.vocab_size) + ")",
                            param);
    }
    ids.push_back(static_cast<std::int32_t>(v));
  }
  return ids;
}

}  // namespace

std::vector<std::vector<std::int32_t>> bad_word_token_ids(std::string_view word,
                                                          const Tokenizer& tokenizer) {
  // Python's str.lstrip(): every leading character for which str.isspace() holds.
  std::size_t start = 0;
  while (const std::size_t n = unicode_space::at(word, start)) start += n;
  if (start == word.size()) return {};
  const std::string bare(word.substr(start));
  std::vector<std::vector<std::int32_t>> out;
  std::vector<std::int32_t> ids = tokenizer.encode(bare);
  if (ids.empty()) return out;
  out.push_back(std::move(ids));
  ids = tokenizer.encode(" " + bare);
  if (!ids.empty() && ids.front() != out.back().front() && ids.size() == out.back().size()) {
    out.push_back(std::move(ids));
  }
  return out;
}

namespace {

// truncate_prompt_tokens: keeps the last `keep` tokens of `ids` (Hugging Face's left truncation)
// where it is longer, the first `before` and last `after` (a text prompt's special tokens) kept
// in place; whether it cut any.
bool keep_last_tokens(std::vector<std::int32_t>& ids, std::int32_t keep, std::size_t before,
                      std::size_t after) {
  const auto k = static_cast<std::size_t>(keep);
  if (ids.size() <= k) return false;
  if (k <= before + after) {
    throw invalid_request("'truncate_prompt_tokens' (" + std::to_string(keep) +
                              ") leaves no room for the prompt's text beside its " +
                              std::to_string(before + after) + " special tokens",
                          "truncate_prompt_tokens");
  }
  ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(before),
            ids.end() - static_cast<std::ptrdiff_t>(k - before));
  return true;
}

// `zero_ok`: 0 is accepted (completions' echo: the prompt alone).
std::int32_t max_tokens_field(const json& body, const char* key, std::int32_t fallback,
                              bool zero_ok = false) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  expect(body[key].is_number_integer(), key, "an integer");
  constexpr std::int64_t kMost = 1 << 24;  // far past any context; keeps the sums in int32
  if ((body[key].is_number_unsigned() && body[key].get<std::uint64_t>() > kMost) ||
      body[key].get<std::int64_t>() > kMost) {
    throw invalid_request(std::string("'") + key + "': expected at most " + std::to_string(kMost) +
                              ", got " + body[key].dump(),
                          key);
  }
  const auto v = body[key].get<std::int64_t>();
  if (v < (zero_ok ? 0 : 1)) {
    throw invalid_request(
        std::string("'") + key + "': expected at least " + (zero_ok ? "0" : "1") +
            (!zero_ok && v == 0 ? " (0 only with echo: true, on completions)" : ""),
        key);
  }
  return static_cast<std::int32_t>(v);
}

// vLLM clamps log probabilities at -9999 (JSON has no -infinity).
double shown(float logprob) { return std::max(static_cast<double>(logprob), -9999.0); }

json token_bytes(const std::string& token) {
  json bytes = json::array();
  for (const unsigned char c : token) bytes.push_back(c);
  return bytes;
}

json logprobs_json(bool chat, const std::vector<TokenLogprobText>& tokens,
                   std::int64_t text_offset) {
  if (chat) {
    json content = json::array();
    for (const TokenLogprobText& t : tokens) {
      json top = json::array();
      for (const auto& [text, lp] : t.top) {
        top.push_back({{"token", text}, {"logprob", shown(lp)}, {"bytes", token_bytes(text)}});
      }
      content.push_back({{"token", t.token},
                         {"logprob", shown(t.logprob)},
                         {"bytes", token_bytes(t.token)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  json offsets = json::array(), values = json::array(), texts = json::array(), tops = json::array();
  for (const TokenLogprobText& t : tokens) {
    offsets.push_back(text_offset);
    text_offset += static_cast<std::int64_t>(utf8::characters(t.token));
    texts.push_back(t.token);
    if (t.none) {  // an echoed prompt's first token (vLLM: null, null)
      values.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    values.push_back(shown(t.logprob));
    json top = json::object();
    for (const auto& [text, lp] : t.top) top[text] = shown(lp);
    top[t.token] = shown(t.logprob);
    tops.push_back(std::move(top));
  }
  return {{"text_offset", std::move(offsets)},
          {"token_logprobs", std::move(values)},
          {"tokens", std::move(texts)},
          {"top_logprobs", std::move(tops)}};
}

// vLLM's prompt_logprobs list: null for the first prompt token, then one dict per token.
json prompt_logprobs_json(const std::vector<PromptTokenLogprobs>& tokens) {
  json list = json::array({nullptr});
  for (const PromptTokenLogprobs& t : tokens) {
    json entry = json::object();
    std::int32_t rank = 1;
    for (const PromptTokenLogprobs::Alternative& a : t.top) {
      entry[std::to_string(a.id)] = {
          {"logprob", shown(a.logprob)}, {"rank", rank++}, {"decoded_token", a.text}};
    }
    entry[std::to_string(t.id)] = {
        {"logprob", shown(t.logprob)}, {"rank", t.rank}, {"decoded_token", t.text}};
    list.push_back(std::move(entry));
  }
  return list;
}

// OpenAI's usage object.
json usage_json(std::int32_t prompt_tokens, std::int32_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace

ApiError::ApiError(int status_, std::string message, std::string type_, std::string param_,
                   std::string code_)
    : std::runtime_error(std::move(message)),
      status(status_),
      type(std::move(type_)),
      param(std::move(param_)),
      code(std::move(code_)) {}

ApiError invalid_request(const std::string& message, const std::string& param,
                         const std::string& code) {
  return ApiError(400, message, "invalid_request_error", param, code);
}

std::string error_json(const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return text_of(json{{"error", err}});  // the message may quote the client's bytes
}

std::uint32_t user_tenant(std::string_view user) {
  if (user.empty()) return 0;
  constexpr std::uint64_t kRange = 0x7fffffff;  // tenants 1 .. 2^31 - 1
  return static_cast<std::uint32_t>(1 + mix64(name_hash(user)) % kRange);
}

namespace {

// The JSON object of a request body whose fields `known` accepts: 400 for malformed or too deep
// JSON, a body that is not an object, an unknown field.
template <typename Known>
json parse_body(std::string_view text, Known known) {
  json body;
  if (json_too_deep(text)) {
    throw invalid_request(
        "the JSON body is nested more than " + std::to_string(kMaxJsonDepth) + " levels deep", "",
        "invalid_json");
  }
  try {
    body = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw invalid_request(std::string("malformed JSON body: ") + e.what(), "", "invalid_json");
  }
  if (!body.is_object()) throw invalid_request("the request body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (!known(key)) {
      throw invalid_request(
          "unknown field '" + key + "' (docs/serving.md lists the supported ones)", key,
          "unknown_field");
    }
  }
  return body;
}

// The model a body names (the served one when it names none), and the LoRA adapter serving that
// name (null: the base model); 404 for a name the server does not serve.
const LoraModule* named_model(const json& body, const ApiLimits& limits, std::string& model) {
  model = limits.model;
  if (!body.contains("model") || body["model"].is_null()) return nullptr;
  expect(body["model"].is_string(), "model", "a string");
  model = body["model"].get<std::string>();
  const auto adapter = std::find_if(limits.lora_modules.begin(), limits.lora_modules.end(),
                                    [&](const LoraModule& m) { return m.name == model; });
  if (adapter != limits.lora_modules.end()) return &*adapter;
  if (model != limits.model) {
    throw ApiError(404, "the model '" + model + "' does not exist", "NotFoundError", "model",
                   "model_not_found");
  }
  return nullptr;
}

// A boolean field, `fallback` when absent or null.
bool flag_field(const json& body, const char* key, bool fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  expect(body[key].is_boolean(), key, "true or false");
  return body[key].get<bool>();
}

// The body's text parsed again keeping each object's keys in order, where the prompt or the output
// depends on that order (tools' schemas, tool calls' arguments, chat_template_kwargs: a
// template's tojson writes them as the client did, as vLLM's Python dicts keep them; a
// structured output's schema lists its properties in that order); an empty object otherwise.
nlohmann::ordered_json ordered_body(const json& body, std::string_view raw) {
  bool needed = body.contains("tools") || body.contains("chat_template_kwargs") ||
                has_structured_outputs(body);
  if (body.contains("messages") && body["messages"].is_array()) {
    for (const json& m : body["messages"]) {
      needed = needed || (m.is_object() && m.contains("tool_calls"));
    }
  }
  if (!needed) return nlohmann::ordered_json::object();
  return nlohmann::ordered_json::parse(raw);  // already parsed once: valid
}

// A chat body's prompt: its `messages` through the chat format (serving/chat_template.h) with
// vLLM's add_generation_prompt (default true), continue_final_message (default false; the last
// message stays open and the model continues it; not both) and add_special_tokens (default
// false: the format has them; true adds the post_processor's around it), through the server's
// chat template where it has one, with the body's chat_template_kwargs as extra variables and
// its tools (engine/openai_tools.h; what they ask of the output in *tools_out; null: /tokenize,
// which renders the tools whatever the tool_choice).
std::vector<std::int32_t> chat_prompt(const json& body, const nlohmann::ordered_json& ordered,
                                      const Tokenizer& tokenizer, const ApiLimits& limits,
                                      ChatTools* tools_out = nullptr) {
  if (!body.contains("messages")) throw invalid_request("'messages' is required", "messages");
  const json& msgs = body["messages"];
  expect(msgs.is_array() && !msgs.empty(), "messages", "a non-empty array of messages");
  const ChatTools tools = parse_chat_tools(body, ordered, limits, tools_out == nullptr);
  if (tools_out != nullptr) *tools_out = tools;
  std::vector<ChatMessage> messages;
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    expect(m.is_object(), "messages", "objects with 'role' and 'content'");
    for (const auto& [key, value] : m.items()) {
      if (key != "role" && key != "content" && key != "name" && key != "tool_calls" &&
          key != "tool_call_id") {
        throw invalid_request("unknown field 'messages[]." + key + "'", "messages",
                              "unknown_field");
      }
    }
    expect(m.contains("role") && m["role"].is_string(), "messages", "a string 'role'");
    const std::string role = m["role"].get<std::string>();
    // "developer" is OpenAI's newer name for system instructions; vLLM passes it to the chat
    // template as it is (a built-in format without the role refuses it there).
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool") {
      throw invalid_request(
          "'messages': unknown role '" + role + "' (system, developer, user, assistant or tool)",
          "messages");
    }
    const std::string where = "messages[" + std::to_string(i) + "]";
    std::optional<std::string> name;
    if (m.contains("name") && !m["name"].is_null()) {
      expect(m["name"].is_string(), "messages", "a string 'name'");
      name = m["name"].get<std::string>();
    }
    ChatMessage& msg = messages.emplace_back();
    msg.role = role;
    msg.name = std::move(name);
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (role != "assistant") {
        throw invalid_request(
            "'" + where + ".tool_calls': only an assistant message makes tool calls", "messages");
      }
      msg.tool_calls = message_tool_calls(ordered["messages"][i], i);
    }
    if (m.contains("tool_call_id") && !m["tool_call_id"].is_null()) {
      expect(role == "tool" && m["tool_call_id"].is_string(), "messages",
             "a string 'tool_call_id' in tool messages only");
      msg.tool_call_id = m["tool_call_id"].get<std::string>();
    }
    // An assistant's content may be null or absent (a message of tool calls), as vLLM takes it.
    if (role == "assistant" && (!m.contains("content") || m["content"].is_null())) {
      msg.no_content = true;
    } else {
      msg.content = message_content(m, &msg.parts);
    }
    if (limits.chat_template == nullptr && (role == "tool" || msg.tool_calls)) {
      throw invalid_request(
          "'" + where +
              "': " + (role == "tool" ? std::string("tool messages") : std::string("tool calls")) +
              " need the model's chat template (start engine serve with --chat-template, "
              "or a tokenizer whose tokenizer_config.json has one)",
          "messages");
    }
  }
  const bool continue_final = flag_field(body, "continue_final_message", false);
  const bool generation_prompt = flag_field(body, "add_generation_prompt", true);
  if (continue_final && generation_prompt) {
    throw invalid_request(
        "'continue_final_message': not with add_generation_prompt true (send "
        "\"add_generation_prompt\": false)",
        "continue_final_message");
  }
  if (body.contains("chat_template") && !body["chat_template"].is_null()) {
    throw invalid_request(
        "'chat_template': a request's own chat template is not accepted (vLLM refuses one "
        "without --trust-request-chat-template); start engine serve with --chat-template",
        "chat_template");
  }
  jinja::Dict kwargs;
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    const json& kw = body["chat_template_kwargs"];
    expect(kw.is_object(), "chat_template_kwargs", "an object");
    if (limits.chat_template == nullptr) throw needs_chat_template("chat_template_kwargs");
    for (const auto& [key, value] : ordered["chat_template_kwargs"].items()) {
      if (key == "messages" || key == "add_generation_prompt" || key == "tools" ||
          key == "documents") {
        throw invalid_request(
            "'chat_template_kwargs." + key + "': set by the request itself, not here",
            "chat_template_kwargs");
      }
      kwargs.emplace_back(key, jinja::Value::from_json(value));
    }
  }
  if (!tools.tools.is_none()) kwargs.emplace_back("tools", tools.tools);
  std::vector<std::int32_t> ids;
  try {
    ids = encode_chat(tokenizer, messages, generation_prompt, continue_final,
                      limits.chat_template.get(), kwargs);
  } catch (const ConfigError& e) {  // the template's raise_exception, or an error in it
    throw invalid_request(std::string("'messages': ") + e.what(), "messages");
  }
  if (flag_field(body, "add_special_tokens", false)) {
    const SequenceTemplate& t = tokenizer.sequence_template();
    ids.insert(ids.begin(), t.before.begin(), t.before.end());
    ids.insert(ids.end(), t.after.begin(), t.after.end());
  }
  return ids;
}

// Holds the request's outputs to `spec` (engine/grammar_constraint.h): compiled here, so a
// schema or pattern it cannot take is the request's 400; the outputs may end (EOS) where the
// grammar completes, and at the request's stop token ids too.
void attach_constraint(const StructuredOutputSpec& spec, const std::string& param,
                       const ApiLimits& limits, CompletionRequest& r) {
  if (limits.token_trie == nullptr) {
    throw invalid_request(
        "structured outputs need the server's vocabulary, which this server lacks", param);
  }
  std::vector<std::int32_t> ends =
      r.ignore_eos ? std::vector<std::int32_t>{} : limits.eos_token_ids;
  ends.insert(ends.end(), r.stop_token_ids.begin(), r.stop_token_ids.end());
  if (ends.empty()) {
    throw invalid_request(
        std::string("structured outputs need a token that ends the output where its grammar "
                    "completes: ") +
            (r.ignore_eos ? "the request ignores EOS (ignore_eos)" : "the model has no EOS token") +
            "; give stop_token_ids",
        param);
  }
  std::shared_ptr<const GrammarAutomaton> automaton;
  try {
    automaton = limits.grammar_cache != nullptr
                    ? limits.grammar_cache->get(spec, ends, limits.token_trie)
                    : std::make_shared<const GrammarAutomaton>(compile_structured_output(spec),
                                                               limits.token_trie, ends);
  } catch (const std::invalid_argument& e) {
    throw invalid_request(std::string("structured outputs: ") + e.what(), param);
  } catch (const std::length_error& e) {
    throw invalid_request(std::string("structured outputs: ") + e.what(), param);
  }
  std::optional<std::int32_t> reasoning_end;
  if (limits.reasoning_tokens) {
    const auto [open, close] = *limits.reasoning_tokens;
    if (!prompt_ends_reasoning(r.prompt, open, close)) reasoning_end = close;
  }
  if (!r.sampling) r.sampling = limits.sampling_defaults.value_or(RequestSampling{});
  r.sampling->constraint =
      std::make_shared<const GrammarConstraint>(std::move(automaton), reasoning_end);
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view text, bool chat,
                                           const ApiLimits& limits, const Tokenizer& tokenizer) {
  json body = parse_body(text, [&](const std::string& key) { return known_field(key, chat); });
  CompletionRequest r;
  r.chat = chat;
  if (const LoraModule* adapter = named_model(body, limits, r.model)) {
    r.lora_id = adapter->id;
    r.lora_rank = adapter->rank;
  }
  if (body.contains("stream") && !body["stream"].is_null()) {
    expect(body["stream"].is_boolean(), "stream", "true or false");
    r.stream = body["stream"].get<bool>();
  }
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const json& so = body["stream_options"];
    expect(so.is_object(), "stream_options", "an object");
    for (const auto& [key, value] : so.items()) {
      if (key != "include_usage" && key != "continuous_usage_stats") {
        throw invalid_request("unknown field 'stream_options." + key + "'", "stream_options",
                              "unknown_field");
      }
      expect(value.is_boolean(), "stream_options." + key, "true or false");
    }
    if (!r.stream)
      throw invalid_request("'stream_options' is only allowed with stream: true", "stream_options");
    r.include_usage = so.value("include_usage", false);
    // vLLM: usage in every chunk when both are true.
    r.continuous_usage = r.include_usage && so.value("continuous_usage_stats", false);
  }
  if (body.contains("ignore_eos") && !body["ignore_eos"].is_null()) {
    expect(body["ignore_eos"].is_boolean(), "ignore_eos", "true or false");
    r.ignore_eos = body["ignore_eos"].get<bool>();
  }
  if (body.contains("stop_token_ids") && !body["stop_token_ids"].is_null()) {
    expect(body["stop_token_ids"].is_array(), "stop_token_ids", "an array of token ids");
    r.stop_token_ids = token_array(body["stop_token_ids"], "stop_token_ids", limits);
  }
  if (body.contains("min_tokens") && !body["min_tokens"].is_null()) {
    expect(body["min_tokens"].is_number_integer() && body["min_tokens"].get<std::int64_t>() >= 0 &&
               body["min_tokens"].get<std::int64_t>() <= (1 << 24),
           "min_tokens", "a non-negative integer");
    r.min_tokens = body["min_tokens"].get<std::int32_t>();
  }
  if (body.contains("cache_salt") && !body["cache_salt"].is_null()) {
    expect(body["cache_salt"].is_string() && !body["cache_salt"].get<std::string>().empty(),
           "cache_salt", "a non-empty string");
    r.cache_salt = body["cache_salt"].get<std::string>();
  }
  if (body.contains("user") && !body["user"].is_null()) {
    expect(body["user"].is_string(), "user", "a string");
    r.user = body["user"].get<std::string>();
  }
  if (body.contains("priority") && !body["priority"].is_null()) {
    const json& p = body["priority"];
    using Limits = std::numeric_limits<std::int32_t>;
    // An unsigned JSON number is compared as one: get<int64_t>() would wrap one above 2^63.
    const bool fits = p.is_number_unsigned()
                          ? p.get<std::uint64_t>() <= static_cast<std::uint64_t>(Limits::max())
                          : p.is_number_integer() && p.get<std::int64_t>() >= Limits::min() &&
                                p.get<std::int64_t>() <= Limits::max();
    expect(fits, "priority", "a 32-bit integer");
    r.priority = p.get<std::int32_t>();
    if (r.priority != 0 && !limits.priority_scheduling) {
      throw invalid_request(
          "'priority': got " + std::to_string(r.priority) +
              " but the server does not schedule by priority (serve an experiment with "
              "policies.queue: priority or the lowest-priority victim rule)",
          "priority");
    }
  }
  const auto given = [&](const char* key) { return body.contains(key) && !body[key].is_null(); };
  const auto penalty = [&](const char* key) {
    if (!given(key)) return 0.0;
    const json& v = body[key];
    expect(v.is_number() && v.get<double>() >= -2 && v.get<double>() <= 2, key,
           "a number in [-2, 2]");
    return v.get<double>();
  };
  // The server's defaults of the fields the request leaves out (greedy with nothing else when
  // it has none).
  const RequestSampling base = limits.sampling_defaults.value_or(RequestSampling{});
  const double presence = penalty("presence_penalty"), frequency = penalty("frequency_penalty");
  // vLLM's top_k (-1 or 0: every token), min_p and repetition_penalty.
  std::int32_t top_k = base.top_k;
  if (given("top_k")) {
    const json& v = body["top_k"];
    constexpr std::uint64_t kMax = std::numeric_limits<std::int32_t>::max();
    const bool ok = v.is_number_unsigned()  ? v.get<std::uint64_t>() <= kMax
                    : v.is_number_integer() ? v.get<std::int64_t>() >= -1
                                            : false;
    expect(ok, "top_k", "an integer: -1 or 0 (every token) or at least 1");
    top_k = std::max<std::int32_t>(0, v.get<std::int32_t>());
  }
  double min_p = base.min_p;
  if (given("min_p")) {
    const json& v = body["min_p"];
    expect(v.is_number() && v.get<double>() >= 0 && v.get<double>() <= 1, "min_p",
           "a number in [0, 1]");
    min_p = v.get<double>();
  }
  double repetition = base.repetition_penalty;
  if (given("repetition_penalty")) {
    const json& v = body["repetition_penalty"];
    expect(v.is_number() && v.get<double>() >= kMinRepetitionPenalty &&
               v.get<double>() <= kMaxRepetitionPenalty,
           "repetition_penalty", "a number > 0 (1: none), in [1e-6, 1e6]");
    repetition = v.get<double>();
  }
  // OpenAI's logit_bias: {"token id": bias}; as vLLM, each bias is clamped to [-100, 100].
  std::vector<std::pair<std::int32_t, float>> logit_bias;
  if (given("logit_bias")) {
    const json& v = body["logit_bias"];
    expect(v.is_object(), "logit_bias", "an object of token ids (strings) to numbers");
    for (const auto& [key, bias] : v.items()) {
      std::int64_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || key.empty() || id < 0 ||
          id >= limits.vocab_size) {
        throw invalid_request("'logit_bias': key \"" + key + "\" is not a token id in [0, " +
                                  std::to_string(limits.vocab_size) + ")",
                              "logit_bias");
      }
      if (!bias.is_number()) {
        throw invalid_request("'logit_bias': the bias of token " + key + " is not a number",
                              "logit_bias");
      }
      const double b = std::clamp(bias.get<double>(), -100.0, 100.0);
      logit_bias.emplace_back(static_cast<std::int32_t>(id), static_cast<float>(b));
    }
    std::sort(logit_bias.begin(), logit_bias.end());
    for (std::size_t i = 1; i < logit_bias.size(); ++i) {
      if (logit_bias[i].first == logit_bias[i - 1].first) {
        throw invalid_request(
            "'logit_bias': token " + std::to_string(logit_bias[i].first) + " is given twice",
            "logit_bias");
      }
    }
    std::erase_if(logit_bias, [](const auto& b) { return b.second == 0; });
  }
  // vLLM's allowed_token_ids (a non-empty list of ids in the vocabulary; repeats are one) and
  // bad_words (strings, each tokenized as vLLM does: engine/openai_api.h).
  std::vector<std::int32_t> allowed;
  if (given("allowed_token_ids")) {
    const json& v = body["allowed_token_ids"];
    expect(v.is_array() && !v.empty(), "allowed_token_ids", "a non-empty array of token ids");
    allowed = token_array(v, "allowed_token_ids", limits);
    std::sort(allowed.begin(), allowed.end());
    allowed.erase(std::unique(allowed.begin(), allowed.end()), allowed.end());
  }
  std::vector<std::vector<std::int32_t>> bad_words;
  if (given("bad_words")) {
    const json& v = body["bad_words"];
    expect(v.is_array(), "bad_words", "an array of strings");
    for (const json& word : v) {
      expect(word.is_string(), "bad_words", "an array of strings");
      const std::vector<std::vector<std::int32_t>> ids =
          bad_word_token_ids(word.get<std::string>(), tokenizer);
      if (ids.empty()) {
        throw invalid_request(
            "'bad_words': \"" + word.get<std::string>() + "\" has no token to ban", "bad_words");
      }
      for (const std::vector<std::int32_t>& one : ids) {
        for (const std::int32_t t : one) {
          if (t >= limits.vocab_size) {
            throw invalid_request("'bad_words': \"" + word.get<std::string>() +
                                      "\" encodes to token " + std::to_string(t) +
                                      ", outside the model's vocabulary [0, " +
                                      std::to_string(limits.vocab_size) + ")",
                                  "bad_words");
          }
        }
        bad_words.push_back(one);
      }
      if (bad_words.size() > kMaxBadWords) {
        throw invalid_request(
            "'bad_words': more than " + std::to_string(kMaxBadWords) + " token sequences to ban",
            "bad_words");
      }
    }
  }
  if (limits.sampling_defaults || given("temperature") || given("top_p") || given("seed") ||
      presence != 0 || frequency != 0 || top_k != 0 || min_p != 0 || repetition != 1 ||
      !logit_bias.empty() || !allowed.empty() || !bad_words.empty()) {
    RequestSampling sp = base;
    if (given("temperature")) {
      expect(body["temperature"].is_number() && body["temperature"].get<double>() >= 0,
             "temperature", "a number >= 0");
      sp.temperature = body["temperature"].get<double>();
      sp.temperature = vllm_temperature(sp.temperature);
    }
    if (given("top_p")) {
      const bool ok = body["top_p"].is_number() && body["top_p"].get<double>() > 0 &&
                      body["top_p"].get<double>() <= 1;
      expect(ok, "top_p", "a number in (0, 1]");
      sp.top_p = body["top_p"].get<double>();
    }
    if (given("seed")) {
      // Any 64-bit integer, negative ones too (vLLM takes torch.long's range).
      const json& seed = body["seed"];
      expect(seed.is_number_integer(), "seed", "an integer");
      sp.seed = seed.is_number_unsigned() ? seed.get<std::uint64_t>()
                                          : static_cast<std::uint64_t>(seed.get<std::int64_t>());
    }
    sp.presence_penalty = presence;
    sp.frequency_penalty = frequency;
    sp.top_k = top_k;
    sp.min_p = min_p;
    sp.repetition_penalty = repetition;
    sp.logit_bias = std::move(logit_bias);
    sp.allowed_token_ids = std::move(allowed);
    sp.bad_words = std::move(bad_words);
    r.sampling = sp;
  }
  if (given("n")) {
    const json& n = body["n"];
    const bool ok =
        n.is_number_integer() && n.get<std::int64_t>() >= 1 && n.get<std::int64_t>() <= kMaxSamples;
    expect(ok, "n", "an integer in [1, " + std::to_string(kMaxSamples) + "]");
    r.n = n.get<std::int32_t>();
    // vLLM's _verify_greedy_sampling: n identical greedy choices are refused.
    if (r.n > 1 && (!r.sampling || r.sampling->temperature == 0)) {
      throw invalid_request(
          "n must be 1 when using greedy sampling (temperature 0" +
              std::string(limits.sampling_defaults ? ")"
                                                   : "; this server's default: give a temperature, "
                                                     "or start it with --generation-config vllm)"),
          "n");
    }
  }
  if (given("best_of")) {
    // vLLM's v1 engine has no best_of beyond n: accepted only equal to n.
    expect(body["best_of"].is_number_integer(), "best_of", "an integer");
    if (body["best_of"].get<std::int64_t>() != r.n) {
      throw invalid_request(
          "'best_of': only best_of = n (" + std::to_string(r.n) + ") is supported", "best_of");
    }
  }
  // Log probabilities: completions take `logprobs: K`, chat `logprobs: true` with
  // `top_logprobs: K` (K alternatives per token, 0 .. kMaxLogprobs); false or null: none.
  const std::string k_range = "an integer in [0, " + std::to_string(kMaxLogprobs) + "]";
  const auto alternatives = [&](const char* key) {
    const json& v = body[key];
    expect(v.is_number_integer() && v.get<std::int64_t>() >= 0 &&
               v.get<std::int64_t>() <= kMaxLogprobs,
           key, k_range);
    return v.get<std::int32_t>();
  };
  const bool logprobs_off =
      !given("logprobs") || (body["logprobs"].is_boolean() && !body["logprobs"].get<bool>());
  if (chat) {
    if (!logprobs_off) {
      expect(body["logprobs"].is_boolean(), "logprobs", "true or false");
      r.logprobs = given("top_logprobs") ? alternatives("top_logprobs") : 0;
    } else if (given("top_logprobs")) {
      throw invalid_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    }
  } else if (!logprobs_off) {
    r.logprobs = alternatives("logprobs");
  }
  if (r.logprobs >= 0 && !limits.logprobs_unsupported.empty()) {
    throw invalid_request("'logprobs': " + limits.logprobs_unsupported, "logprobs");
  }
  if (given("prompt_logprobs")) {
    r.prompt_logprobs = alternatives("prompt_logprobs");
    r.prompt_logprobs_field = true;
    if (r.stream)
      throw invalid_request("'prompt_logprobs': not available with stream: true",
                            "prompt_logprobs");
  }
  r.return_tokens_as_token_ids = flag_field(body, "return_tokens_as_token_ids", false);
  r.return_token_ids = flag_field(body, "return_token_ids", false);
  r.skip_special_tokens = flag_field(body, "skip_special_tokens", true);
  // vLLM's spaces_between_special_tokens (default true) changes only the text of its slow
  // (Python) tokenizers; its fast tokenizers, which decode as this server does, ignore it.
  flag_field(body, "spaces_between_special_tokens", true);
  if (given("echo")) {
    expect(body["echo"].is_boolean(), "echo", "true or false");
    r.echo = body["echo"].get<bool>();
    // vLLM: an echo with logprobs returns the prompt's too, with as many alternatives.
    if (r.echo && r.logprobs >= 0 && r.prompt_logprobs < 0) r.prompt_logprobs = r.logprobs;
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    // A string or an array of strings (OpenAI: up to 4; vLLM takes any number); an empty string
    // alone means none, as an empty array does.
    const json& st = body["stop"];
    if (st.is_string()) {
      if (!st.get<std::string>().empty()) r.stop.push_back(st.get<std::string>());
    } else {
      expect(st.is_array(), "stop", "a string or an array of strings");
      for (const json& s : st) {
        expect(s.is_string() && !s.get<std::string>().empty(), "stop",
               "an array of non-empty strings");
        r.stop.push_back(s.get<std::string>());
      }
    }
  }
  if (body.contains("include_stop_str_in_output") &&
      !body["include_stop_str_in_output"].is_null()) {
    expect(body["include_stop_str_in_output"].is_boolean(), "include_stop_str_in_output",
           "true or false");
    r.include_stop_str_in_output = body["include_stop_str_in_output"].get<bool>();
  }

  // vLLM's truncate_prompt_tokens: k >= 1 keeps each prompt's last k tokens, -1 the last
  // max_model_len.
  std::optional<std::int32_t> keep_last;
  if (given("truncate_prompt_tokens")) {
    const json& v = body["truncate_prompt_tokens"];
    const bool ok = v.is_number_integer() && !v.is_number_unsigned()
                        ? v.get<std::int64_t>() == -1
                        : v.is_number_unsigned() && v.get<std::uint64_t>() >= 1;
    expect(ok, "truncate_prompt_tokens", "an integer >= 1, or -1 (the model's maximum length)");
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() > static_cast<std::uint64_t>(limits.max_model_len)) {
      throw invalid_request("'truncate_prompt_tokens' (" + std::to_string(v.get<std::uint64_t>()) +
                                ") is greater than the model's maximum context length (" +
                                std::to_string(limits.max_model_len) + ")",
                            "truncate_prompt_tokens");
    }
    keep_last = v.is_number_unsigned() ? v.get<std::int32_t>() : limits.max_model_len;
  }
  // Structured outputs (engine/openai_structured.h), or a forced tool choice's schema below.
  std::optional<StructuredOutputSpec> structured;
  const nlohmann::ordered_json ordered = ordered_body(body, text);
  if (has_structured_outputs(body)) structured = parse_structured_outputs(body, ordered);
  if (chat) {
    ChatTools tools;
    r.prompt = chat_prompt(body, ordered, tokenizer, limits, &tools);
    r.parse_tool_calls = tools.parse;
    r.tool_parser = tools.parser;
    r.parallel_tool_calls = tools.parallel;
    // vLLM's parsers' adjust_request: their markers are special tokens.
    if (tools.parse && tools.parser->keeps_special_tokens()) r.skip_special_tokens = false;
    if (tools.forced_schema) {
      if (structured) {
        throw invalid_request(
            "'tool_choice': a forced tool choice already constrains the output; not with '" +
                std::string(body.contains("structured_outputs") ? "structured_outputs"
                                                                : "response_format") +
                "'",
            "tool_choice");
      }
      structured = StructuredOutputSpec{};
      structured->schema = std::move(*tools.forced_schema);
    }
    if (keep_last) keep_last_tokens(r.prompt, *keep_last, 0, 0);
  } else {
    if (!body.contains("prompt")) throw invalid_request("'prompt' is required", "prompt");
    const json& p = body["prompt"];
    // One prompt (a string, an array of token ids) or a batch of them (an array of strings, or
    // of arrays of token ids), as vLLM takes `prompt`.
    // vLLM's add_special_tokens (default true): a text prompt between the tokenizer's
    // post_processor tokens (Llama 3's <|begin_of_text|>), as Hugging Face encodes it.
    const bool special = flag_field(body, "add_special_tokens", true);
    const auto add = [&](const json& one) {
      std::vector<std::int32_t> ids =
          !one.is_string() ? token_array(one, "prompt", limits)
          : special        ? tokenizer.encode_with_special_tokens(one.get<std::string>())
                           : tokenizer.encode(one.get<std::string>());
      // Hugging Face's left truncation keeps a text prompt's special tokens.
      const SequenceTemplate& around = tokenizer.sequence_template();
      const bool with_specials = one.is_string() && special;
      const bool truncated =
          keep_last && keep_last_tokens(ids, *keep_last, with_specials ? around.before.size() : 0,
                                        with_specials ? around.after.size() : 0);
      // A truncated prompt is echoed as what the model saw (its ids decoded).
      std::string text =
          r.echo && one.is_string() && !truncated ? one.get<std::string>() : std::string();
      if (r.prompt.empty() && r.more_prompts.empty() && r.echo_text.empty()) {
        r.prompt = std::move(ids);
        r.echo_text = std::move(text);
      } else {
        r.more_prompts.push_back(std::move(ids));
        r.more_echo_texts.push_back(std::move(text));
      }
    };
    const bool batch = p.is_array() && !p.empty() && (p[0].is_array() || p[0].is_string());
    if (p.is_string() || (p.is_array() && !batch)) {
      add(p);
    } else if (batch) {
      if (p.size() > kMaxBatchPrompts) {
        throw invalid_request("'prompt': a batch of " + std::to_string(p.size()) +
                                  " prompts, more than " + std::to_string(kMaxBatchPrompts),
                              "prompt");
      }
      for (const json& one : p) {
        expect(one.is_string() == p[0].is_string() && (one.is_string() || one.is_array()), "prompt",
               "a batch of strings or of arrays of token ids, not a mix");
        add(one);
        if ((r.more_prompts.empty() ? r.prompt : r.more_prompts.back()).empty()) {
          throw invalid_request(
              "prompt " + std::to_string(r.more_prompts.size()) + " of the batch is empty",
              "prompt");
        }
      }
    } else {
      throw invalid_request("'prompt': expected a string or an array of token ids", "prompt");
    }
  }
  if (r.prompt.empty()) throw invalid_request("the prompt is empty", chat ? "messages" : "prompt");
  std::size_t longest = r.prompt.size();
  for (const std::vector<std::int32_t>& more : r.more_prompts) {
    longest = std::max(longest, more.size());
  }
  if (structured) {
    const std::string param = r.tool_parser && r.tool_parser->forced() ? "tool_choice"
                              : body.contains("structured_outputs")    ? "structured_outputs"
                                                                       : "response_format";
    attach_constraint(*structured, param, limits, r);
  }
  const auto prompt_len = static_cast<std::int64_t>(longest);
  if (prompt_len >= limits.max_model_len) {
    throw invalid_request("this model's maximum context length is " +
                              std::to_string(limits.max_model_len) + " tokens; the prompt has " +
                              std::to_string(prompt_len),
                          chat ? "messages" : "prompt", "context_length_exceeded");
  }
  // Defaults: OpenAI's 16 for completions; for chat the generation config's max_new_tokens or
  // the rest of the context, whichever is smaller (as vLLM's get_max_tokens).
  const std::int32_t rest = limits.max_model_len - static_cast<std::int32_t>(prompt_len);
  const std::int32_t fallback =
      chat ? std::min(rest, limits.default_max_tokens.value_or(rest)) : 16;
  r.max_tokens = max_tokens_field(body, "max_tokens", fallback, !chat && r.echo);
  if (chat) r.max_tokens = max_tokens_field(body, "max_completion_tokens", r.max_tokens);
  // vLLM's override_max_tokens caps even an explicit max_tokens.
  if (limits.max_tokens_cap) r.max_tokens = std::min(r.max_tokens, *limits.max_tokens_cap);
  if (r.max_tokens == 0) {
    // vLLM's echo without generation: one token is generated and not shown.
    if (r.min_tokens > 0) {
      throw invalid_request(
          "'min_tokens' (" + std::to_string(r.min_tokens) + ") must not exceed max_tokens (0)",
          "min_tokens");
    }
    r.echo_only = true;
    r.max_tokens = 1;
  }
  if (prompt_len + r.max_tokens > limits.max_model_len) {
    throw invalid_request(
        "this model's maximum context length is " + std::to_string(limits.max_model_len) +
            " tokens; the request asks for " + std::to_string(prompt_len + r.max_tokens) + " (" +
            std::to_string(prompt_len) + " in the prompt, " + std::to_string(r.max_tokens) +
            " to generate)",
        "max_tokens", "context_length_exceeded");
  }
  if (r.min_tokens > r.max_tokens) {
    throw invalid_request("'min_tokens' (" + std::to_string(r.min_tokens) +
                              ") must not exceed max_tokens (" + std::to_string(r.max_tokens) + ")",
                          "min_tokens");
  }
  if (structured && r.min_tokens > 0) {
    // Once the grammar is complete only its end tokens are allowed, and min_tokens bans them: no
    // token would be left to sample (the output went on past the grammar, invalid).
    throw invalid_request(
        "'min_tokens' cannot be combined with a structured output (structured_outputs, "
        "response_format or a forced tool_choice): the grammar may end the output before "
        "min_tokens tokens, and min_tokens bans its end",
        "min_tokens");
  }
  return r;
}

namespace {

// OpenAI's tool_calls list; `indexed` (a stream's delta) gives each its index.
json tool_calls_json(const std::vector<ToolCall>& calls, bool indexed = false) {
  json list = json::array();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    json call = {{"id", calls[i].id},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (indexed) call["index"] = i;
    list.push_back(std::move(call));
  }
  return list;
}

}  // namespace

std::string completion_json(const ResponseMeta& meta, const std::vector<ChoiceText>& choices,
                            std::int32_t prompt_tokens, std::int32_t completion_tokens) {
  json list = json::array();
  for (std::size_t k = 0; k < choices.size(); ++k) {
    const ChoiceText& c = choices[k];
    json choice = {{"index", k}, {"finish_reason", c.finish_reason}, {"logprobs", nullptr}};
    if (c.logprobs) choice["logprobs"] = logprobs_json(meta.chat, *c.logprobs, 0);
    if (c.prompt_logprobs && !meta.chat) {
      choice["prompt_logprobs"] = prompt_logprobs_json(*c.prompt_logprobs);
    }
    if (!c.stop_reason.empty()) {
      choice["stop_reason"] = c.stop_reason;
    } else if (c.stop_token) {
      choice["stop_reason"] = *c.stop_token;
    }
    if (c.token_ids) choice["token_ids"] = *c.token_ids;
    if (c.prompt_token_ids && !meta.chat) choice["prompt_token_ids"] = *c.prompt_token_ids;
    if (meta.chat) {
      choice["message"] = {{"role", "assistant"},
                           {"content", c.content_null ? json(nullptr) : json(c.text)}};
      if (c.reasoning_field) {
        choice["message"]["reasoning_content"] = c.reasoning ? json(*c.reasoning) : json(nullptr);
      }
      if (!c.tool_calls.empty()) choice["message"]["tool_calls"] = tool_calls_json(c.tool_calls);
    } else {
      choice["text"] = c.text;
    }
    list.push_back(std::move(choice));
  }
  json j = {{"id", meta.id},
            {"object", meta.chat ? "chat.completion" : "text_completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", std::move(list)},
            {"usage", usage_json(prompt_tokens, completion_tokens)}};
  if (meta.chat && !choices.empty() && choices[0].prompt_logprobs) {
    j["prompt_logprobs"] = prompt_logprobs_json(*choices[0].prompt_logprobs);
  }
  if (meta.chat && !choices.empty() && choices[0].prompt_token_ids) {
    j["prompt_token_ids"] = *choices[0].prompt_token_ids;
  }
  return text_of(j);
}

std::string chunk_json(const ResponseMeta& meta, const ChunkFields& c) {
  json choice = {{"index", c.index}, {"logprobs", nullptr}};
  if (c.text_offset >= 0) choice["logprobs"] = logprobs_json(meta.chat, c.logprobs, c.text_offset);
  choice["finish_reason"] = c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason);
  if (!c.stop_reason.empty()) {
    choice["stop_reason"] = c.stop_reason;
  } else if (c.stop_token) {
    choice["stop_reason"] = *c.stop_token;
  }
  if (meta.chat) {
    json delta = json::object();
    if (!c.text.empty() || (c.tool_calls.empty() && c.reasoning.empty())) delta["content"] = c.text;
    if (!c.reasoning.empty()) delta["reasoning_content"] = c.reasoning;
    if (c.first) delta["role"] = "assistant";
    if (!c.tool_calls.empty()) delta["tool_calls"] = tool_calls_json(c.tool_calls, true);
    choice["delta"] = delta;
  } else {
    choice["text"] = c.text;
    if (c.prompt_token_ids) choice["prompt_token_ids"] = *c.prompt_token_ids;
  }
  if (c.token_ids) choice["token_ids"] = *c.token_ids;
  json j = {{"id", meta.id},
            {"object", meta.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", json::array({choice})}};
  if (meta.chat && c.prompt_token_ids) j["prompt_token_ids"] = *c.prompt_token_ids;
  if (c.completion_tokens >= 0) j["usage"] = usage_json(c.prompt_tokens, c.completion_tokens);
  return text_of(j);
}

std::string usage_chunk_json(const ResponseMeta& meta, std::int32_t prompt_tokens,
                             std::int32_t completion_tokens) {
  const json j = {{"id", meta.id},
                  {"object", meta.chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", meta.created},
                  {"model", meta.model},
                  {"choices", json::array()},
                  {"usage", usage_json(prompt_tokens, completion_tokens)}};
  return text_of(j);
}

std::vector<std::int32_t> parse_tokenize_request(std::string_view text, const ApiLimits& limits,
                                                 const Tokenizer& tokenizer, bool* token_strs) {
  const json body = parse_body(text, [](const std::string& key) {
    return key == "model" || key == "prompt" || key == "messages" || key == "add_special_tokens" ||
           key == "add_generation_prompt" || key == "continue_final_message" ||
           key == "return_token_strs" || key == "chat_template" || key == "chat_template_kwargs" ||
           key == "tools";
  });
  std::string model;
  named_model(body, limits, model);
  const bool strs = flag_field(body, "return_token_strs", false);
  if (token_strs != nullptr) *token_strs = strs;
  const bool has_prompt = body.contains("prompt"), has_messages = body.contains("messages");
  if (has_prompt == has_messages) {
    throw invalid_request("give 'prompt' (a string) or 'messages' (a chat), one of them",
                          has_prompt ? "messages" : "prompt");
  }
  if (has_messages) return chat_prompt(body, ordered_body(body, text), tokenizer, limits);
  for (const char* chat_only : {"add_generation_prompt", "continue_final_message", "chat_template",
                                "chat_template_kwargs", "tools"}) {
    if (body.contains(chat_only)) {
      throw invalid_request(std::string("'") + chat_only + "': only with 'messages'", chat_only);
    }
  }
  expect(body["prompt"].is_string(), "prompt", "a string");
  const std::string prompt = body["prompt"].get<std::string>();
  return flag_field(body, "add_special_tokens", true) ? tokenizer.encode_with_special_tokens(prompt)
                                                      : tokenizer.encode(prompt);
}

std::string tokenize_json(std::span<const std::int32_t> ids, std::int32_t max_model_len,
                          const Tokenizer* strings) {
  json strs = nullptr;
  if (strings != nullptr) {
    strs = json::array();
    for (const std::int32_t id : ids) {
      const std::optional<std::string> s = strings->token_string(id);
      strs.push_back(s ? json(*s) : json(nullptr));
    }
  }
  return text_of(json{{"count", ids.size()},
                      {"max_model_len", max_model_len},
                      {"tokens", std::vector<std::int32_t>(ids.begin(), ids.end())},
                      {"token_strs", std::move(strs)}});
}

std::vector<std::int32_t> parse_detokenize_request(std::string_view text, const ApiLimits& limits) {
  const json body =
      parse_body(text, [](const std::string& key) { return key == "model" || key == "tokens"; });
  std::string model;
  named_model(body, limits, model);
  if (!body.contains("tokens")) throw invalid_request("'tokens' is required", "tokens");
  expect(body["tokens"].is_array(), "tokens", "an array of token ids");
  return token_array(body["tokens"], "tokens", limits);
}

std::string detokenize_json(const std::string& text) { return text_of(json{{"prompt", text}}); }

std::string models_json(const std::string& model, std::int64_t created, std::int32_t max_model_len,
                        const std::vector<LoraModule>& lora_modules) {
  json data = json::array({{{"id", model},
                            {"object", "model"},
                            {"created", created},
                            {"owned_by", "servelab"},
                            {"root", model},
                            {"parent", nullptr},
                            {"max_model_len", max_model_len}}});
  for (const LoraModule& m : lora_modules) {
    data.push_back(
        {{"id", m.name},
         {"object", "model"},
         {"created", created},
         {"owned_by", "servelab"},
         {"root", "adapter " + std::to_string(m.id) + " (rank " + std::to_string(m.rank) + ")"},
         {"parent", model}});
  }
  const json j = {{"object", "list"}, {"data", std::move(data)}};
  return text_of(j);
}

}  // namespace servelab
