// Tool-call parsers (engine/tool_parser.h) on the outputs vLLM's parsers of the same names read,
// and their streaming (engine/tool_call_stream.h): a streamed choice, cut anywhere, sends the
// content and calls that the whole text parses to, and sends content before a call section
// without waiting for the end.
#include "engine/tool_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "engine/tool_call_stream.h"
#include "serving/home.h"
#include "serving/tokenizer.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

struct Call {
  std::string name, arguments;
  bool operator==(const Call&) const = default;
};

std::vector<Call> calls_of(const ExtractedToolCalls& e) {
  std::vector<Call> out;
  for (const ToolCall& c : e.calls) out.push_back({c.name, c.arguments});
  return out;
}

ExtractedToolCalls parse(const std::string& parser, const std::string& text) {
  return make_tool_parser(parser)->extract(text);
}

// No calls: the whole text is the content.
void expect_content_only(const std::string& parser, const std::string& text,
                         const std::string& content) {
  const ExtractedToolCalls e = parse(parser, text);
  EXPECT_TRUE(e.calls.empty()) << parser << ": " << text;
  EXPECT_EQ(e.content, content) << parser << ": " << text;
}

TEST(ToolParser, HermesReadsEveryTaggedCall) {
  const ExtractedToolCalls one =
      parse("hermes",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
            "</tool_call>");
  EXPECT_EQ(calls_of(one), (std::vector<Call>{{"get_weather", R"({"city": "Paris"})"}}));
  EXPECT_EQ(one.content, std::nullopt);  // nothing before the first call: null
  // Content before the first call; a second call; the last one unterminated (vLLM's regex takes
  // the rest of the text).
  const ExtractedToolCalls two =
      parse("hermes",
            "Let me look.\n<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n"
            "<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": [1, 2.5, true, null]}}");
  EXPECT_EQ(calls_of(two),
            (std::vector<Call>{{"a", "{}"}, {"b", R"({"x": [1, 2.5, true, null]})"}}));
  EXPECT_EQ(two.content, "Let me look.\n");
  // Any one call unreadable: all of it is content, as vLLM falls back.
  expect_content_only("hermes", "<tool_call>{\"name\": \"a\"}</tool_call>",
                      "<tool_call>{\"name\": \"a\"}</tool_call>");  // no arguments
  expect_content_only("hermes", "x<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
                      "x<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>");
  expect_content_only(
      "hermes", "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{oops",
      "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{oops");
  expect_content_only("hermes", "<tool_call></tool_call>", "<tool_call></tool_call>");
  expect_content_only("hermes", "no calls here", "no calls here");
  expect_content_only("hermes", "", "");
}

// arguments are re-written as Python's json.dumps(ensure_ascii=False) writes them: ", " and
// ": ", the model's key order, non-ASCII as is, floats as Python's repr, any JSON value.
TEST(ToolParser, ArgumentsAreWrittenAsPythonsJsonDumps) {
  const auto args = [](const std::string& json_text) {
    const ExtractedToolCalls e = parse(
        "hermes", "<tool_call>{\"name\": \"f\", \"arguments\": " + json_text + "}</tool_call>");
    EXPECT_EQ(e.calls.size(), 1u) << json_text;
    return e.calls.empty() ? std::string() : e.calls[0].arguments;
  };
  EXPECT_EQ(args(R"({"z":1,"a":{"y":2,"b":3}})"), R"({"z": 1, "a": {"y": 2, "b": 3}})");
  EXPECT_EQ(args(R"({"s":"caf\u00e9 \"q\" \\ \n"})"), "{\"s\": \"caf\u00e9 \\\"q\\\" \\\\ \\n\"}");
  EXPECT_EQ(args(R"({"f":1.0,"g":1e5,"h":1e-7,"i":-0.0})"),
            R"({"f": 1.0, "g": 100000.0, "h": 1e-07, "i": -0.0})");
  EXPECT_EQ(args("[1,\"two\"]"), R"([1, "two"])");
  EXPECT_EQ(args("\"text\""), R"("text")");
  EXPECT_EQ(args("null"), "null");
}

TEST(ToolParser, Llama3JsonReadsObjectsFromTheStart) {
  const ExtractedToolCalls plain =
      parse("llama3_json", R"({"name": "search", "parameters": {"q": "vllm"}})");
  EXPECT_EQ(calls_of(plain), (std::vector<Call>{{"search", R"({"q": "vllm"})"}}));
  EXPECT_EQ(plain.content, std::nullopt);
  const ExtractedToolCalls tagged = parse(
      "llama3_json",
      R"(<|python_tag|>{"name": "a", "arguments": {"k": 1}}; {"name": "b", "parameters": {}})");
  EXPECT_EQ(calls_of(tagged), (std::vector<Call>{{"a", R"({"k": 1})"}, {"b", "{}"}}));
  // "arguments" wins over "parameters"; braces inside strings do not end the object.
  const ExtractedToolCalls braces =
      parse("llama3_json", R"({"name": "c", "arguments": {"s": "}{"}, "parameters": {}})");
  EXPECT_EQ(calls_of(braces), (std::vector<Call>{{"c", R"({"s": "}{"})"}}));
  expect_content_only("llama3_json", "Sure! {\"name\": \"a\", \"parameters\": {}}",
                      "Sure! {\"name\": \"a\", \"parameters\": {}}");
  expect_content_only("llama3_json", "{\"name\": \"a\"}", "{\"name\": \"a\"}");
  expect_content_only("llama3_json", "{\"name\": \"a\", \"parameters\": {}};{\"name\": \"b\"}",
                      "{\"name\": \"a\", \"parameters\": {}};{\"name\": \"b\"}");
  expect_content_only("llama3_json", "{unclosed", "{unclosed");
}

TEST(ToolParser, MistralReadsTheArrayAfterItsToken) {
  const ExtractedToolCalls calls = parse(
      "mistral",
      R"([TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}])");
  EXPECT_EQ(calls_of(calls), (std::vector<Call>{{"a", R"({"x": 1})"}, {"b", "{}"}}));
  EXPECT_EQ(calls.content, std::nullopt);
  // Content before the token; junk after the array (the fallback: first "[{" to last "}]").
  const ExtractedToolCalls junk =
      parse("mistral", R"(Checking. [TOOL_CALLS] [{"name": "a", "arguments": {}}] thanks)");
  EXPECT_EQ(calls_of(junk), (std::vector<Call>{{"a", "{}"}}));
  EXPECT_EQ(junk.content, "Checking. ");
  // Unreadable: the content is the text without the token, stripped (vLLM's tool_content).
  expect_content_only("mistral", " hi [TOOL_CALLS] nope ", "hi  nope");
  // Python's strip: Unicode whitespace too (it kept U+3000 and U+00A0).
  expect_content_only("mistral", "\u3000hi [TOOL_CALLS] nope\u00a0", "hi  nope");
  expect_content_only("mistral", "[TOOL_CALLS]{\"name\": \"a\", \"arguments\": {}}",
                      "{\"name\": \"a\", \"arguments\": {}}");  // an object, not an array
  expect_content_only("mistral", "plain", "plain");
}

TEST(ToolParser, IdsAreStableHashesInEachParsersFormat) {
  const auto hermes = make_tool_parser("hermes");
  const std::string id = hermes->call_id("chatcmpl-7", 0, 0);
  EXPECT_EQ(id, hermes->call_id("chatcmpl-7", 0, 0));
  ASSERT_EQ(id.size(), std::string("chatcmpl-tool-").size() + 32);
  EXPECT_EQ(id.rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 14), std::string::npos) << id;
  EXPECT_NE(id, hermes->call_id("chatcmpl-7", 0, 1));
  EXPECT_NE(id, hermes->call_id("chatcmpl-7", 1, 0));
  EXPECT_NE(id, hermes->call_id("chatcmpl-8", 0, 0));
  const std::string mistral = make_tool_parser("mistral")->call_id("chatcmpl-7", 0, 0);
  ASSERT_EQ(mistral.size(), 9u);
  for (const char c : mistral) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << c;
  // parse_tool_calls numbers the calls and keeps the first alone without parallel calls.
  const std::string text =
      "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", "
      "\"arguments\": {}}</tool_call>";
  const ExtractedToolCalls both = parse_tool_calls(*hermes, text, "chatcmpl-7", 2, true);
  ASSERT_EQ(both.calls.size(), 2u);
  EXPECT_EQ(both.calls[1].id, hermes->call_id("chatcmpl-7", 2, 1));
  const ExtractedToolCalls first = parse_tool_calls(*hermes, text, "chatcmpl-7", 2, false);
  ASSERT_EQ(first.calls.size(), 1u);
  EXPECT_EQ(first.calls[0].name, "a");
}

TEST(ToolParser, UnknownNamesAndMissingTokensAreConfigErrors) {
  try {
    make_tool_parser("pythonic");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--tool-call-parser pythonic: unknown parser (hermes, llama3_json, "
                 "mistral)");
  }
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(servelab_home() / "data/tokenizers/bytes/tokenizer.json");
  EXPECT_THROW(make_tool_parser("hermes")->check_tokenizer(*bytes), ConfigError);
  EXPECT_THROW(make_tool_parser("mistral")->check_tokenizer(*bytes), ConfigError);
  EXPECT_NO_THROW(make_tool_parser("llama3_json")->check_tokenizer(*bytes));
  nlohmann::json doc = nlohmann::json::parse(
      test_util::read_file(servelab_home() / "data/tokenizers/bytes/tokenizer.json"));
  doc["added_tokens"] = {{{"id", 1}, {"content", "<tool_call>"}, {"special", false}},
                         {{"id", 2}, {"content", "</tool_call>"}, {"special", false}}};
  const std::filesystem::path dir = test_util::temp_dir("tool_parser_tokens");
  test_util::write_file(dir / "tokenizer.json", doc.dump());
  EXPECT_NO_THROW(
      make_tool_parser("hermes")->check_tokenizer(*load_tokenizer(dir / "tokenizer.json")));
}

// What a stream sends: its pushes' content, then finish()'s content and calls.
struct Streamed {
  std::string content;
  std::vector<ToolCall> calls;
};

Streamed stream(const ToolParser& parser, const std::string& text,
                const std::vector<std::size_t>& cuts) {
  ToolCallStream s(parser, "chatcmpl-3", 1, true);
  Streamed out;
  std::size_t at = 0;
  for (const std::size_t cut : cuts) {
    out.content += s.push(std::string_view(text).substr(at, cut - at));
    at = cut;
  }
  out.content += s.push(std::string_view(text).substr(at));
  ToolCallStream::End end = s.finish();
  out.content += end.content;
  out.calls = std::move(end.calls);
  return out;
}

TEST(ToolCallStream, AnyCutSendsWhatTheWholeTextParsesTo) {
  const std::vector<std::pair<std::string, std::string>> outputs = {
      {"hermes",
       "Let me look.\n<tool_call>{\"name\":\"a\",\"arguments\":{\"q\":\"<tool\"}}"
       "</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {}}"},
      {"hermes", "a <tool_ b <tool_call> not json </tool_call>"},
      {"hermes", "<tool<tool_call>{\"name\":\"a\",\"arguments\":[]}</tool_call>"},
      {"hermes", "plain text with < and <t and <tool_cal"},
      {"llama3_json", "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"k\": \"v\"}}"},
      {"llama3_json", "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": 1}"},
      {"llama3_json", "<|python_ta"},
      {"llama3_json", "An answer {\"name\": \"a\", \"parameters\": {}}"},
      {"mistral", "Sure [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}]"},
      {"mistral", "hi [TOOL_CALLS] nope"},
      {"mistral", "[TOOL_CALL"},
  };
  std::mt19937 rng(7);
  for (const auto& [name, text] : outputs) {
    const auto parser = make_tool_parser(name);
    const ExtractedToolCalls whole = parse_tool_calls(*parser, text, "chatcmpl-3", 1, true);
    const std::string want = whole.content.value_or("");
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<std::size_t> cuts;
      for (std::size_t i = 1; i < text.size(); ++i) {
        if (trial == 0 || rng() % 4 == 0) cuts.push_back(i);  // trial 0: byte by byte
      }
      const Streamed got = stream(*parser, text, cuts);
      ASSERT_EQ(got.content, want) << name << ": " << text << " (trial " << trial << ")";
      ASSERT_EQ(got.calls.size(), whole.calls.size()) << name << ": " << text;
      for (std::size_t i = 0; i < got.calls.size(); ++i) {
        EXPECT_EQ(got.calls[i].id, whole.calls[i].id);
        EXPECT_EQ(got.calls[i].name, whole.calls[i].name);
        EXPECT_EQ(got.calls[i].arguments, whole.calls[i].arguments);
      }
    }
  }
}

// Content goes out as soon as it cannot begin a call: the text before "<tool_call>" at once, a
// tail that may begin it ("<tool") only when the next text shows it does not.
TEST(ToolCallStream, ContentBeforeACallIsNotHeldBack) {
  const auto hermes = make_tool_parser("hermes");
  ToolCallStream s(*hermes, "chatcmpl-1", 0, true);
  EXPECT_EQ(s.push("Hello"), "Hello");
  EXPECT_EQ(s.push(" <tool"), " ");
  EXPECT_EQ(s.push("box> and"), "<toolbox> and");
  EXPECT_EQ(s.push(" <tool_call>{\"name\": \"f\", "), " ");
  EXPECT_EQ(s.push("\"arguments\": {}}</tool_call> trailing"), "");
  const ToolCallStream::End end = s.finish();
  EXPECT_EQ(end.content, "");
  ASSERT_EQ(end.calls.size(), 1u);
  EXPECT_EQ(end.calls[0].name, "f");
  const auto llama = make_tool_parser("llama3_json");
  ToolCallStream l(*llama, "chatcmpl-1", 0, true);
  EXPECT_EQ(l.push("<|py"), "");
  EXPECT_EQ(l.push("x"), "<|pyx");
  EXPECT_EQ(l.push(" more"), " more");
}

}  // namespace
}  // namespace servelab
