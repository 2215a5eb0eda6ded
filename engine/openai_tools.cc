#include "engine/openai_tools.h"

#include <algorithm>
#include <utility>

#include "core/json_depth.h"
#include "engine/forced_tool_parser.h"

namespace servelab {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

void expect(bool ok, const std::string& param, const std::string& where, const std::string& what) {
  if (!ok) throw invalid_request("'" + where + "': expected " + what, param);
}

bool given(const ojson& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// One entry of `tools` -> {"type", "function": {"name", "description", "parameters", ...}}.
jinja::Value tool_value(const ojson& tool, std::size_t i, std::vector<std::string>& names) {
  const std::string where = "tools[" + std::to_string(i) + "]";
  expect(tool.is_object(), "tools", where,
         "an object {\"type\": \"function\", \"function\": {...}}");
  for (const auto& [key, value] : tool.items()) {
    if (key != "type" && key != "function") {
      throw invalid_request("unknown field '" + where + "." + key + "'", "tools");
    }
  }
  if (given(tool, "type")) {
    expect(tool["type"] == "function", "tools", where + ".type", "\"function\"");
  }
  expect(given(tool, "function") && tool["function"].is_object(), "tools", where + ".function",
         "an object with a 'name'");
  const ojson& f = tool["function"];
  const std::string fwhere = where + ".function";
  for (const auto& [key, value] : f.items()) {
    if (key != "name" && key != "description" && key != "parameters" && key != "strict") {
      throw invalid_request("unknown field '" + fwhere + "." + key + "'", "tools");
    }
  }
  expect(given(f, "name") && f["name"].is_string() && !f["name"].get<std::string>().empty(),
         "tools", fwhere + ".name", "a non-empty string");
  jinja::Dict function{{"name", jinja::Value::string(f["name"].get<std::string>())},
                       {"description", jinja::Value::none()},
                       {"parameters", jinja::Value::none()}};
  if (given(f, "description")) {
    expect(f["description"].is_string(), "tools", fwhere + ".description", "a string");
    function[1].second = jinja::Value::string(f["description"].get<std::string>());
  }
  if (given(f, "parameters")) {
    expect(f["parameters"].is_object(), "tools", fwhere + ".parameters",
           "an object (a JSON Schema)");
    function[2].second = jinja::Value::from_json(f["parameters"]);
  }
  if (f.contains("strict")) {
    expect(f["strict"].is_boolean() || f["strict"].is_null(), "tools", fwhere + ".strict",
           "true or false");
    function.emplace_back("strict", jinja::Value::from_json(f["strict"]));
  }
  names.push_back(f["name"].get<std::string>());
  return jinja::Value::dict(
      {{"type", jinja::Value::string("function")}, {"function", jinja::Value::dict(function)}});
}

}  // namespace

ChatTools parse_chat_tools(const json& body, const ojson& ordered, const ApiLimits& limits,
                           bool tokenize_only) {
  ChatTools out;
  std::vector<std::string> names;
  jinja::List tools;
  if (given(ordered, "tools")) {
    expect(ordered["tools"].is_array(), "tools", "tools", "an array of tools");
    for (std::size_t i = 0; i < ordered["tools"].size(); ++i) {
      tools.push_back(tool_value(ordered["tools"][i], i, names));
    }
  }
  const bool have_tools = !tools.empty();
  // OpenAI's default: "auto" with tools, "none" without.
  std::string choice = have_tools && !tokenize_only ? "auto" : "none";
  if (!tokenize_only && body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const json& tc = body["tool_choice"];
    if (tc.is_string()) {
      choice = tc.get<std::string>();
      expect(choice == "none" || choice == "auto" || choice == "required", "tool_choice",
             "tool_choice", "\"none\", \"auto\", \"required\" or {\"type\": \"function\", ...}");
    } else {
      expect(tc.is_object() && tc.contains("function") && tc["function"].is_object() &&
                 tc["function"].contains("name") && tc["function"]["name"].is_string(),
             "tool_choice", "tool_choice",
             "\"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
             "{\"name\": ...}}");
      // vLLM's named choice: `type` may be left out, and is "function" when given.
      if (tc.contains("type") && !tc["type"].is_null()) {
        expect(tc["type"] == "function", "tool_choice", "tool_choice.type", "\"function\"");
      }
      choice = "named";
    }
    if (choice != "none" && !have_tools) {
      throw invalid_request(
          "'tool_choice': needs 'tools' (when using tool_choice, tools must be set)",
          "tool_choice");
    }
    if (choice == "named") {
      const std::string name = tc["function"]["name"].get<std::string>();
      if (std::find(names.begin(), names.end(), name) == names.end()) {
        throw invalid_request("'tool_choice': no tool named '" + name + "' in 'tools'",
                              "tool_choice");
      }
    }
    if (choice == "required" || choice == "named") {
      // Forced: the output is held to the tools' schema (engine/forced_tool_parser.h).
      std::vector<ForcedTool> forced;
      for (const ojson& t : ordered["tools"]) {
        const ojson& f = t["function"];
        forced.push_back(
            {f["name"].get<std::string>(), given(f, "parameters") ? f["parameters"] : ojson()});
      }
      const std::string name = choice == "named" ? tc["function"]["name"].get<std::string>() : "";
      try {
        out.forced_schema = forced_tool_schema(forced, choice == "named" ? &name : nullptr);
      } catch (const ToolSchemaError& e) {
        throw invalid_request(std::string("'tools': ") + e.what(), "tools");
      }
      out.parser = make_forced_tool_parser(choice == "named" ? &name : nullptr);
      out.parse = true;
    }
  }
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null()) {
    expect(body["parallel_tool_calls"].is_boolean(), "parallel_tool_calls", "parallel_tool_calls",
           "true or false");
    out.parallel = body["parallel_tool_calls"].get<bool>();
  }
  if (choice == "auto") {
    if (limits.tool_parser == nullptr) {
      throw invalid_request(
          "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be "
          "set",
          "tool_choice");
    }
    out.parse = true;
    out.parser = limits.tool_parser;
  }
  if (have_tools &&
      (tokenize_only || !(choice == "none" && limits.exclude_tools_when_tool_choice_none))) {
    if (limits.chat_template == nullptr) throw needs_chat_template("tools");
    out.tools = jinja::Value::list(std::move(tools));
  }
  return out;
}

ApiError needs_chat_template(const std::string& field) {
  return invalid_request(
      "'" + field +
          "': the server renders chats with a built-in format, not a template (start "
          "engine serve with --chat-template, or a tokenizer whose tokenizer_config.json "
          "has one)",
      field);
}

std::optional<jinja::Value> message_tool_calls(const ojson& m, std::size_t index) {
  if (!given(m, "tool_calls")) return std::nullopt;
  const std::string where = "messages[" + std::to_string(index) + "].tool_calls";
  const ojson& calls = m["tool_calls"];
  expect(calls.is_array(), "messages", where, "an array of tool calls");
  if (calls.empty()) return std::nullopt;  // vLLM drops an empty list
  jinja::List out;
  for (std::size_t j = 0; j < calls.size(); ++j) {
    const std::string at = where + "[" + std::to_string(j) + "]";
    const ojson& call = calls[j];
    expect(call.is_object() && given(call, "function") && call["function"].is_object(), "messages",
           at, "{\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
    for (const auto& [key, value] : call.items()) {
      if (key != "id" && key != "type" && key != "function") {
        throw invalid_request("unknown field '" + at + "." + key + "'", "messages");
      }
    }
    if (given(call, "id")) expect(call["id"].is_string(), "messages", at + ".id", "a string");
    if (given(call, "type")) {
      expect(call["type"] == "function", "messages", at + ".type", "\"function\"");
    }
    ojson copy = call;
    ojson& f = copy["function"];
    for (const auto& [key, value] : f.items()) {
      if (key != "name" && key != "arguments") {
        throw invalid_request("unknown field '" + at + ".function." + key + "'", "messages");
      }
    }
    expect(given(f, "name") && f["name"].is_string(), "messages", at + ".function.name",
           "a string");
    // vLLM: the arguments string parsed into an object for the template ({} when empty).
    ojson args = ojson::object();
    if (given(f, "arguments")) {
      expect(f["arguments"].is_string(), "messages", at + ".function.arguments",
             "a string of JSON");
      const std::string& text = f["arguments"].get_ref<const std::string&>();
      if (!text.empty()) {
        if (!json_too_deep(text)) args = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
        if (json_too_deep(text) || args.is_discarded()) {
          throw invalid_request("'" + at + ".function.arguments': not JSON (or nested more than " +
                                    std::to_string(kMaxJsonDepth) + " levels deep)",
                                "messages");
        }
      }
    }
    f["arguments"] = std::move(args);
    out.push_back(jinja::Value::from_json(copy));
  }
  return jinja::Value::list(std::move(out));
}

}  // namespace servelab
