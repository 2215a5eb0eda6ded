// The tool calls of a chat request whose tool_choice forces them (vLLM's semantics): "required"
// or a named function. The output is held to a JSON schema built from the tools
// (forced_tool_schema, through structured outputs: engine/structured_output.h), and read back by
// a ToolParser made for the request (make_forced_tool_parser), which the server runs as it runs
// an auto parser (engine/tool_call_stream.h when streaming):
//   - "required": the schema is an array of at least one {"name": one of the tools' names,
//     "parameters": that tool's parameters}; each item becomes a call whose arguments are its
//     parameters as Python's json.dumps(ensure_ascii=False) writes them; text that is not such
//     an array (an output cut by max_tokens) stays content, with no calls;
//   - a named function: the schema is the function's parameters; the whole text is the one
//     call's arguments.
// A tool without parameters (absent, null or {}) takes an empty object, as vLLM's
// get_tool_schema gives it. As in vLLM the message's content is then "" (not null), and the
// finish_reason is "tool_calls" for "required" calls of an output that stopped, the output's own
// ("stop" or "length") for a named function's (finish_reason_with_calls).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tool_parser.h"

namespace servelab {

// One tool as a request gave it: its name and `parameters` (null when it has none).
struct ForcedTool {
  std::string name;
  nlohmann::ordered_json parameters;
};

// The JSON schema of tool_choice "required" over `tools` (each tool's parameters' $defs lifted
// to the top, as vLLM lifts them; ToolSchemaError when two tools define one name differently),
// or, with `named`, of that tool's arguments.
struct ToolSchemaError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
nlohmann::ordered_json forced_tool_schema(const std::vector<ForcedTool>& tools,
                                          const std::string* named);

// The parser of such a request's output ("required" when `named` is null).
std::shared_ptr<const ToolParser> make_forced_tool_parser(const std::string* named);

}  // namespace servelab
