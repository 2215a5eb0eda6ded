// The tool-calling fields of a chat request (docs/serving.md "Tool calling"), as vLLM takes them:
// `tools`, `tool_choice`, `parallel_tool_calls`, and the messages' `tool_calls` (assistant) and
// `tool_call_id` (tool). Part of engine/openai_api.cc's parsing; ApiError (400) for every problem,
// naming the field.
//
// - tools: an array of {"type": "function", "function": {"name", "description", "parameters",
//   "strict"}} (name a non-empty string; description a string; parameters an object; strict a
//   boolean; type may be left out). The template sees each as vLLM's model_dump() gives it:
//   {"type", "function": {"name", "description", "parameters"[, "strict"]}}, null for what the
//   request left out, `parameters` with its keys in the request's order.
// - tool_choice: "none", "auto" (the default when tools are given), "required", or {"type":
//   "function", "function": {"name"}} naming one of the tools. "auto" needs the server's
//   --enable-auto-tool-choice and --tool-call-parser (vLLM's message otherwise). "required" and
//   a named function force the calls, as vLLM does, through structured outputs: the output is
//   held to a schema built from the tools and read back as calls (engine/forced_tool_parser.h).
//   tool_choice other than "none" without tools is refused.
// - With tool_choice "none" the tools still reach the template unless the server was started
//   with --exclude-tools-when-tool-choice-none (vLLM's default and option).
// - parallel_tool_calls (default true): false keeps a choice's first call only.
// - A message's tool_calls: an array of {"id", "type": "function", "function": {"name",
//   "arguments"}} (arguments a JSON string); the template sees them with `arguments` parsed into
//   an object ({} when empty), as vLLM passes them, and an empty array as none.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/openai_api.h"
#include "serving/jinja_value.h"

namespace servelab {

struct ChatTools {
  // What the template's `tools` variable is: none, or the tools as vLLM dumps them.
  jinja::Value tools = jinja::Value::none();
  // Whether the server parses the choices' text for tool calls (tools given, tool_choice "auto",
  // "required" or named), and with which parser (the server's, or the forced choice's).
  bool parse = false;
  std::shared_ptr<const ToolParser> parser = {};
  // A forced tool_choice's JSON schema (engine/forced_tool_parser.h), which the output is held to.
  std::optional<nlohmann::ordered_json> forced_schema = {};
  bool parallel = true;
};

// `body` (the request; `ordered` the same text parsed keeping key order) -> its tools. Throws
// ApiError as the file comment says. `tokenize_only` (vLLM's /tokenize, which takes tools but no
// tool_choice): the tools reach the template and nothing else is asked.
ChatTools parse_chat_tools(const nlohmann::json& body, const nlohmann::ordered_json& ordered,
                           const ApiLimits& limits, bool tokenize_only = false);

// The 400 for a field (`chat_template_kwargs`, `tools`) that only a chat template can take, on a
// server that renders chats with a built-in format.
ApiError needs_chat_template(const std::string& field);

// Message `index`'s tool_calls (an assistant message; `m` its ordered JSON) as the template sees
// them; nullopt for none (absent, null or empty). Throws ApiError naming messages[index].
std::optional<jinja::Value> message_tool_calls(const nlohmann::ordered_json& m, std::size_t index);

}  // namespace servelab
