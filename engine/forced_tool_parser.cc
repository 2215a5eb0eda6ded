#include "engine/forced_tool_parser.h"

#include "core/json_depth.h"
#include "serving/jinja_value.h"

namespace servelab {
namespace {

using ojson = nlohmann::ordered_json;

// A tool without parameters (absent, null or {}, as vLLM's get_tool_schema reads them) takes an
// empty object.
ojson parameters_or_empty(const ojson& p) {
  if (!p.is_null() && !(p.is_object() && p.empty())) return p;
  return ojson{{"type", "object"}, {"properties", ojson::object()}};
}

class ForcedToolParser final : public ToolParser {
 public:
  explicit ForcedToolParser(std::optional<std::string> named) : named_(std::move(named)) {}
  std::string name() const override {
    return named_ ? "named tool_choice" : "required tool_choice";
  }
  bool keeps_special_tokens() const override { return false; }
  bool forced() const override { return true; }
  std::string finish_reason_with_calls(const std::string& output_reason) const override {
    return !named_ && output_reason == "stop" ? "tool_calls" : output_reason;
  }
  void check_tokenizer(const Tokenizer&) const override {}

  ExtractedToolCalls extract(std::string_view text) const override {
    if (named_) return {{ToolCall{"", *named_, std::string(text)}}, std::string()};
    if (json_too_deep(text)) return {{}, std::string(text)};
    const ojson j = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    ExtractedToolCalls out;
    if (j.is_discarded() || !j.is_array() || j.empty()) return {{}, std::string(text)};
    for (const ojson& item : j) {
      const auto name = item.is_object() ? item.find("name") : item.end();
      const auto params = item.is_object() ? item.find("parameters") : item.end();
      if (name == item.end() || !name->is_string() || params == item.end()) {
        return {{}, std::string(text)};
      }
      std::optional<std::string> args = jinja::Value::from_json(*params).to_json();
      if (!args) return {{}, std::string(text)};
      out.calls.push_back(ToolCall{"", name->get<std::string>(), std::move(*args)});
    }
    out.content = std::string();
    return out;
  }

  // Everything the model writes is the call section.
  Prefix content_prefix(std::string_view, std::size_t from) const override { return {from, true}; }

 private:
  std::optional<std::string> named_;
};

}  // namespace

ojson forced_tool_schema(const std::vector<ForcedTool>& tools, const std::string* named) {
  if (named != nullptr) {
    for (const ForcedTool& t : tools) {
      if (t.name == *named) return parameters_or_empty(t.parameters);
    }
    throw ToolSchemaError("no tool named '" + *named + "'");
  }
  ojson any = ojson::array();
  ojson defs = ojson::object();
  for (const ForcedTool& t : tools) {
    ojson params = parameters_or_empty(t.parameters);
    if (params.is_object() && params.contains("$defs")) {
      const ojson& d = params["$defs"];
      if (d.is_object()) {
        for (auto it = d.begin(); it != d.end(); ++it) {
          if (defs.contains(it.key()) && defs[it.key()] != it.value()) {
            throw ToolSchemaError("tool definition '" + it.key() +
                                  "' has multiple schemas, which is not supported");
          }
          defs[it.key()] = it.value();
        }
        params.erase("$defs");
      }
    }
    any.push_back(ojson{{"type", "object"},
                        {"properties",
                         {{"name", {{"type", "string"}, {"enum", ojson::array({t.name})}}},
                          {"parameters", std::move(params)}}},
                        {"required", ojson::array({"name", "parameters"})}});
  }
  ojson schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", std::move(any)}}}};
  if (!defs.empty()) schema["$defs"] = std::move(defs);
  return schema;
}

std::shared_ptr<const ToolParser> make_forced_tool_parser(const std::string* named) {
  return std::make_shared<const ForcedToolParser>(named != nullptr ? std::optional(*named)
                                                                   : std::nullopt);
}

}  // namespace servelab
