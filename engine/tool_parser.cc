#include "engine/tool_parser.h"

#include <array>
#include <nlohmann/json.hpp>

#include "core/config_error.h"
#include "core/json_depth.h"
#include "engine/marker_tail.h"
#include "serving/jinja_value.h"
#include "serving/unicode_space.h"

namespace servelab {
namespace {

using ojson = nlohmann::ordered_json;

// Python's str.strip(): Unicode whitespace (serving/unicode_space.h) at both ends.
std::string_view strip(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (const std::size_t n = unicode_space::at(s, b)) b += n;
  while (e > b) {
    const std::size_t n = unicode_space::before(s, e);
    if (n == 0 || n > e - b) break;
    e -= n;
  }
  return s.substr(b, e - b);
}

// Python's json.loads: the whole text one JSON value (whitespace around it allowed).
// Text nested deeper than kMaxJsonDepth is not read (as not JSON).
std::optional<ojson> loads(std::string_view text) {
  if (json_too_deep(text)) return std::nullopt;
  ojson j = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// One call object -> a ToolCall, reading the arguments from the first of `keys` present; nullopt
// where Python would raise (not an object, no string "name", no arguments).
std::optional<ToolCall> call_of(const ojson& obj, std::initializer_list<const char*> keys) {
  if (!obj.is_object()) return std::nullopt;
  const auto name = obj.find("name");
  if (name == obj.end() || !name->is_string()) return std::nullopt;
  for (const char* key : keys) {
    const auto args = obj.find(key);
    if (args == obj.end()) continue;
    std::optional<std::string> text = jinja::Value::from_json(*args).to_json();
    if (!text) return std::nullopt;
    return ToolCall{"", name->get<std::string>(), std::move(*text)};
  }
  return std::nullopt;
}

// The prefix of `text` before `marker`, or before a tail of it that may begin the marker. Bytes
// before `from` are known not to start it.
ToolParser::Prefix before_marker(std::string_view text, std::size_t from, std::string_view marker) {
  const std::size_t at = text.find(marker, from);
  if (at != std::string_view::npos) return {at, true};
  return {text.size() - partial_marker_tail(text, from, marker), false};
}

ExtractedToolCalls content_only(std::string_view text) { return {{}, std::string(text)}; }

std::optional<std::string> non_empty(std::string_view s) {
  if (s.empty()) return std::nullopt;
  return std::string(s);
}

void require_token(const Tokenizer& tokenizer, std::string_view parser, std::string_view token) {
  if (!tokenizer.token_id(token)) {
    throw ConfigError("--tool-call-parser " + std::string(parser) + ": the tokenizer has no " +
                      std::string(token) +
                      " token (the parser reads the calls of models that have one)");
  }
}

std::uint64_t fnv1a(std::string_view s, std::uint64_t h) {
  for (const unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Two 64-bit hashes of (response, choice, index), the second seeded from the first.
std::array<std::uint64_t, 2> call_hash(std::string_view response_id, std::int32_t choice,
                                       std::int32_t index) {
  const std::string key =
      std::string(response_id) + "/" + std::to_string(choice) + "/" + std::to_string(index);
  const std::uint64_t a = mix(fnv1a(key, 0xcbf29ce484222325ULL));
  return {a, mix(fnv1a(key, a))};
}

class Hermes final : public ToolParser {
 public:
  std::string name() const override { return "hermes"; }
  bool keeps_special_tokens() const override { return true; }
  void check_tokenizer(const Tokenizer& tokenizer) const override {
    require_token(tokenizer, name(), kStart);
    require_token(tokenizer, name(), kEnd);
  }
  // vLLM's regex <tool_call>(.*?)</tool_call>|<tool_call>(.*) over the text, each match
  // json.loads-ed.
  ExtractedToolCalls extract(std::string_view text) const override {
    const std::size_t first = text.find(kStart);
    if (first == std::string_view::npos) return content_only(text);
    ExtractedToolCalls out;
    std::size_t at = first;
    while (at != std::string_view::npos) {
      const std::size_t body = at + kStart.size();
      const std::size_t end = text.find(kEnd, body);
      const std::string_view inner =
          end == std::string_view::npos ? text.substr(body) : text.substr(body, end - body);
      const std::optional<ojson> obj = loads(inner);
      std::optional<ToolCall> call;
      if (obj) call = call_of(*obj, {"arguments"});
      if (!call) return content_only(text);
      out.calls.push_back(std::move(*call));
      if (end == std::string_view::npos) break;
      at = text.find(kStart, end + kEnd.size());
    }
    out.content = non_empty(text.substr(0, first));
    return out;
  }
  Prefix content_prefix(std::string_view text, std::size_t from) const override {
    return before_marker(text, from, kStart);
  }

 private:
  static constexpr std::string_view kStart = "<tool_call>";
  static constexpr std::string_view kEnd = "</tool_call>";
};

class Llama3Json final : public ToolParser {
 public:
  std::string name() const override { return "llama3_json"; }
  bool keeps_special_tokens() const override { return false; }
  // vLLM's: raw_decode of an object at a time from the start (after <|python_tag|>), skipping
  // two characters after each.
  ExtractedToolCalls extract(std::string_view text) const override {
    if (!text.starts_with(kBot) && !text.starts_with('{')) return content_only(text);
    ExtractedToolCalls out;
    std::size_t at = text.starts_with(kBot) ? kBot.size() : 0;
    while (at < text.size()) {
      const std::string_view rest = text.substr(at);
      if (!rest.starts_with('{')) return content_only(text);
      const std::size_t end = json_container_end(rest);
      if (end == std::string_view::npos) return content_only(text);
      const std::optional<ojson> obj = loads(rest.substr(0, end));
      std::optional<ToolCall> call;
      if (obj) call = call_of(*obj, {"arguments", "parameters"});
      if (!call) return content_only(text);
      out.calls.push_back(std::move(*call));
      at += end + 2;  // vLLM's len("; ")
    }
    if (out.calls.empty()) return content_only(text);  // <|python_tag|> alone
    return out;
  }
  Prefix content_prefix(std::string_view text, std::size_t from) const override {
    if (from > 0) return {text.size(), true};  // decided: content
    if (text.empty()) return {0, false};
    if (text.starts_with('{') || text.starts_with(kBot)) return {0, true};
    if (kBot.starts_with(text)) return {0, false};
    return {text.size(), true};
  }

 private:
  static constexpr std::string_view kBot = "<|python_tag|>";
};

class Mistral final : public ToolParser {
 public:
  std::string name() const override { return "mistral"; }
  bool keeps_special_tokens() const override { return true; }
  void check_tokenizer(const Tokenizer& tokenizer) const override {
    require_token(tokenizer, name(), kBot);
  }
  ExtractedToolCalls extract(std::string_view text) const override {
    const std::size_t first = text.find(kBot);
    if (first == std::string_view::npos) return content_only(text);
    std::string rest;  // the text without its [TOOL_CALLS] tokens, stripped
    for (std::size_t at = 0; at != std::string_view::npos;) {
      const std::size_t next = text.find(kBot, at);
      rest += text.substr(at, next == std::string_view::npos ? next : next - at);
      at = next == std::string_view::npos ? next : next + kBot.size();
    }
    const std::string tool_content(strip(rest));
    std::optional<ojson> arr = loads(tool_content);
    if (!arr) {  // vLLM's fallback regex \[{.*}\]: the first "[{" to the last "}]"
      const std::size_t open = tool_content.find("[{");
      const std::size_t close = tool_content.rfind("}]");
      if (open != std::string::npos && close != std::string::npos && close >= open) {
        arr = loads(std::string_view(tool_content).substr(open, close + 2 - open));
      }
    }
    if (!arr || !arr->is_array()) return content_only(tool_content);
    ExtractedToolCalls out;
    for (const ojson& obj : *arr) {
      std::optional<ToolCall> call = call_of(obj, {"arguments"});
      if (!call) return content_only(tool_content);
      out.calls.push_back(std::move(*call));
    }
    out.content = non_empty(text.substr(0, first));
    return out;
  }
  Prefix content_prefix(std::string_view text, std::size_t from) const override {
    return before_marker(text, from, kBot);
  }
  std::string call_id(std::string_view response_id, std::int32_t choice,
                      std::int32_t index) const override {
    static constexpr std::string_view kAlphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::uint64_t h = call_hash(response_id, choice, index)[0];
    std::string id;
    for (int i = 0; i < 9; ++i) {
      id += kAlphabet[h % kAlphabet.size()];
      h /= kAlphabet.size();
    }
    return id;
  }

 private:
  static constexpr std::string_view kBot = "[TOOL_CALLS]";
};

}  // namespace

void ToolParser::check_tokenizer(const Tokenizer& /*tokenizer*/) const {}

std::string ToolParser::call_id(std::string_view response_id, std::int32_t choice,
                                std::int32_t index) const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "chatcmpl-tool-";
  for (const std::uint64_t word : call_hash(response_id, choice, index)) {
    for (int shift = 60; shift >= 0; shift -= 4) id += kHex[(word >> shift) & 0xf];
  }
  return id;
}

std::vector<std::string> tool_parser_names() { return {"hermes", "llama3_json", "mistral"}; }

std::unique_ptr<const ToolParser> make_tool_parser(const std::string& name) {
  if (name == "hermes") return std::make_unique<const Hermes>();
  if (name == "llama3_json") return std::make_unique<const Llama3Json>();
  if (name == "mistral") return std::make_unique<const Mistral>();
  std::string names;
  for (const std::string& n : tool_parser_names()) names += (names.empty() ? "" : ", ") + n;
  throw ConfigError("--tool-call-parser " + name + ": unknown parser (" + names + ")");
}

ExtractedToolCalls parse_tool_calls(const ToolParser& parser, std::string_view text,
                                    std::string_view response_id, std::int32_t choice,
                                    bool parallel_tool_calls) {
  ExtractedToolCalls out = parser.extract(text);
  if (!parallel_tool_calls && out.calls.size() > 1) out.calls.resize(1);
  for (std::size_t i = 0; i < out.calls.size(); ++i) {
    out.calls[i].id = parser.call_id(response_id, choice, static_cast<std::int32_t>(i));
  }
  return out;
}

}  // namespace servelab
