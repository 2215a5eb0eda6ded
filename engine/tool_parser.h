// Tool calls in a model's output, as vLLM's tool-call parsers find them (`engine serve
// --enable-auto-tool-choice --tool-call-parser NAME`; docs/serving.md "Tool calling"): the
// model writes its calls as text in its own format, and the server returns them as OpenAI's
// `tool_calls` instead of content.
//
// The parsers (vLLM's of the same names):
// - hermes (Hermes 2 Pro, Qwen 2.5, Qwen 3): each call `<tool_call>{"name": ..., "arguments":
//   {...}}</tool_call>` (the last may be unterminated); the content is the text before the first
//   <tool_call>, null when empty. The tokenizer must have <tool_call> and </tool_call> tokens.
// - llama3_json (Llama 3.1 - 3.3): an output that starts with <|python_tag|> or "{" is one or
//   more JSON objects {"name": ..., "parameters" (or "arguments"): {...}} separated by "; "
//   (after each object two characters are skipped, as vLLM skips them); the content is null.
// - mistral (Mistral and Mixtral instruct): `[TOOL_CALLS][{"name": ..., "arguments": {...}},
//   ...]`, the array after the token (or, when the rest is not JSON, its first "[{" to its last
//   "}]"); the content is the text before [TOOL_CALLS], null when empty. The tokenizer must have
//   the [TOOL_CALLS] token.
// When a parser finds its format but cannot read it (not JSON, a call without a string "name" or
// without arguments), the output is content, as in vLLM: tools_called false, the whole text (for
// mistral the text without its [TOOL_CALLS] token, whitespace-stripped). `arguments` are
// re-serialised as Python's json.dumps(ensure_ascii=False) writes them (", " and ": ", keys in
// the model's order), so they are the strings vLLM returns.
// Not parsed: pythonic calls, other models' formats; JSON's NaN and Infinity (Python accepts
// them; here such a call is content).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serving/tokenizer.h"

namespace servelab {

// One function call of a choice, as OpenAI's tool_calls show it ({"id", "type": "function",
// "function": {"name", "arguments"}}).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

// What a parser found in a choice's whole text: no calls (content is then the text), or the
// calls and the content beside them (nullopt: null).
struct ExtractedToolCalls {
  std::vector<ToolCall> calls;
  std::optional<std::string> content;
};

class ToolParser {
 public:
  virtual ~ToolParser() = default;
  virtual std::string name() const = 0;
  // vLLM's adjust_request: whether a request whose calls are parsed keeps the special tokens in
  // its text (the parser's markers are special tokens in the models it reads).
  virtual bool keeps_special_tokens() const = 0;
  // ConfigError naming what is missing when `tokenizer` lacks the parser's marker tokens (vLLM
  // refuses to start then).
  virtual void check_tokenizer(const Tokenizer& tokenizer) const;
  // Whether the request forced its calls (tool_choice "required" or named: engine/
  // forced_tool_parser.h).
  virtual bool forced() const { return false; }
  // The finish_reason of a choice in which this parser found calls, its output having ended
  // with `output_reason` ("stop" or "length"), as vLLM writes it: "tool_calls" for an auto
  // parser's calls and for "required" ones whose output stopped, the output's own for a named
  // tool_choice's.
  virtual std::string finish_reason_with_calls(const std::string& output_reason) const {
    (void)output_reason;
    return "tool_calls";
  }
  // The calls in a choice's whole text (their ids empty).
  virtual ExtractedToolCalls extract(std::string_view text) const = 0;
  // For streaming: the length of the prefix of `text` that is content whatever follows, and
  // whether that is final (the rest is a tool-call section, whatever follows). Every byte before
  // `from` is known to be content (a length returned before). Never below `from`.
  struct Prefix {
    std::size_t length = 0;
    bool final = false;
  };
  virtual Prefix content_prefix(std::string_view text, std::size_t from) const = 0;
  // The id of call `index` of choice `choice` of response `response_id`: "chatcmpl-tool-" and 32
  // hex digits (mistral: 9 letters and digits, the length Mistral's templates check), a hash of
  // the three, so a run's ids are the same in every run (vLLM draws them at random).
  virtual std::string call_id(std::string_view response_id, std::int32_t choice,
                              std::int32_t index) const;
};

// The parser named `name` (hermes, llama3_json, mistral); ConfigError listing the names for
// another.
std::unique_ptr<const ToolParser> make_tool_parser(const std::string& name);
// The names make_tool_parser takes, in order.
std::vector<std::string> tool_parser_names();

// A choice's tool calls with their ids, and with parallel_tool_calls false only the first (as
// vLLM keeps it).
ExtractedToolCalls parse_tool_calls(const ToolParser& parser, std::string_view text,
                                    std::string_view response_id, std::int32_t choice,
                                    bool parallel_tool_calls);

}  // namespace servelab
