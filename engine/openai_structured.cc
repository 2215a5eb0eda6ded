#include "engine/openai_structured.h"

#include <string>

#include "core/json_depth.h"

namespace servelab {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

bool given(const ojson& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// A JSON schema given as an object (or boolean), or as its text (vLLM takes both).
ojson schema_value(const ojson& v, const std::string& where, const std::string& param) {
  if (v.is_object() || v.is_boolean()) return v;
  if (v.is_string()) {
    const std::string& text = v.get_ref<const std::string&>();
    // As a body is (core/json_depth.h): a deeper document would be copied and freed recursively.
    if (json_too_deep(text)) {
      throw invalid_request("'" + where + "': the schema's text is nested more than " +
                                std::to_string(kMaxJsonDepth) + " levels deep",
                            param);
    }
    ojson parsed = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded() && (parsed.is_object() || parsed.is_boolean())) return parsed;
  }
  throw invalid_request("'" + where + "': expected a JSON schema (an object, or its text)", param);
}

StructuredOutputSpec from_structured_outputs(const ojson& so) {
  const std::string param = "structured_outputs";
  if (!so.is_object()) throw invalid_request("'structured_outputs': expected an object", param);
  StructuredOutputSpec spec;
  int kinds = 0;
  for (auto it = so.begin(); it != so.end(); ++it) {
    const std::string& key = it.key();
    const ojson& v = it.value();
    const std::string where = "structured_outputs." + key;
    if (key == "json") {
      if (v.is_null()) continue;
      spec.kind = StructuredOutputSpec::Kind::kJson;
      spec.schema = schema_value(v, where, param);
      ++kinds;
    } else if (key == "regex") {
      if (v.is_null()) continue;
      if (!v.is_string()) throw invalid_request("'" + where + "': expected a string", param);
      spec.kind = StructuredOutputSpec::Kind::kRegex;
      spec.regex = v.get<std::string>();
      ++kinds;
    } else if (key == "choice") {
      if (v.is_null()) continue;
      if (!v.is_array() || v.empty()) {
        throw invalid_request("'" + where + "': expected a non-empty array of strings", param);
      }
      for (const ojson& c : v) {
        if (!c.is_string())
          throw invalid_request("'" + where + "': expected a non-empty array of strings", param);
        spec.choice.push_back(c.get<std::string>());
      }
      spec.kind = StructuredOutputSpec::Kind::kChoice;
      ++kinds;
    } else if (key == "json_object") {
      if (v.is_null()) continue;
      if (!v.is_boolean()) throw invalid_request("'" + where + "': expected true or false", param);
      if (!v.get<bool>()) continue;
      spec.kind = StructuredOutputSpec::Kind::kJsonObject;
      ++kinds;
    } else if (key == "disable_any_whitespace") {
      if (v.is_null()) continue;
      if (!v.is_boolean()) throw invalid_request("'" + where + "': expected true or false", param);
      spec.any_whitespace = !v.get<bool>();
    } else if (key == "disable_additional_properties" || key == "disable_fallback") {
      if (!v.is_null() && !v.is_boolean()) {
        throw invalid_request("'" + where + "': expected true or false", param);
      }
    } else if (key == "grammar") {
      if (v.is_null()) continue;
      if (!v.is_string()) throw invalid_request("'" + where + "': expected a string", param);
      spec.kind = StructuredOutputSpec::Kind::kGrammar;
      spec.grammar = v.get<std::string>();
      ++kinds;
    } else if (key == "structural_tag" || key == "whitespace_pattern") {
      if (v.is_null()) continue;
      throw invalid_request("'" + where +
                                "' is not supported (structured outputs take json, regex, choice, "
                                "grammar or json_object)",
                            param);
    } else {
      throw invalid_request("unknown field '" + where + "'", param);
    }
  }
  if (kinds != 1) {
    throw invalid_request(
        "'structured_outputs': expected exactly one of json, regex, choice, "
        "grammar, json_object (got " +
            std::to_string(kinds) + ")",
        param);
  }
  return spec;
}

std::optional<StructuredOutputSpec> from_response_format(const ojson& rf) {
  const std::string param = "response_format";
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) {
    throw invalid_request(
        "'response_format': expected {\"type\": \"text\", \"json_object\" or "
        "\"json_schema\", ...}",
        param);
  }
  const std::string type = rf["type"].get<std::string>();
  for (auto it = rf.begin(); it != rf.end(); ++it) {
    if (it.key() != "type" && !(type == "json_schema" && it.key() == "json_schema")) {
      throw invalid_request("unknown field 'response_format." + it.key() + "'", param);
    }
  }
  if (type == "text") return std::nullopt;
  StructuredOutputSpec spec;
  if (type == "json_object") {
    spec.kind = StructuredOutputSpec::Kind::kJsonObject;
    return spec;
  }
  if (type != "json_schema") {
    throw invalid_request(
        "'response_format.type': expected \"text\", \"json_object\" or \"json_schema\" (got "
        "\"" +
            type + "\")",
        param);
  }
  if (!given(rf, "json_schema") || !rf["json_schema"].is_object()) {
    throw invalid_request("'response_format.json_schema': expected an object with a 'schema'",
                          param);
  }
  const ojson& js = rf["json_schema"];
  for (auto it = js.begin(); it != js.end(); ++it) {
    const std::string& k = it.key();
    if (k != "name" && k != "description" && k != "schema" && k != "strict") {
      throw invalid_request("unknown field 'response_format.json_schema." + k + "'", param);
    }
  }
  if (given(js, "name") && !js["name"].is_string()) {
    throw invalid_request("'response_format.json_schema.name': expected a string", param);
  }
  if (given(js, "strict") && !js["strict"].is_boolean()) {
    throw invalid_request("'response_format.json_schema.strict': expected true or false", param);
  }
  if (!given(js, "schema")) {
    throw invalid_request("'response_format.json_schema.schema': required (the JSON schema)",
                          param);
  }
  spec.kind = StructuredOutputSpec::Kind::kJson;
  spec.schema = schema_value(js["schema"], "response_format.json_schema.schema", param);
  return spec;
}

}  // namespace

bool has_structured_outputs(const json& body) {
  return (body.contains("structured_outputs") && !body["structured_outputs"].is_null()) ||
         (body.contains("response_format") && !body["response_format"].is_null());
}

std::optional<StructuredOutputSpec> parse_structured_outputs(const json& body,
                                                             const ojson& ordered) {
  if (!has_structured_outputs(body)) return std::nullopt;
  std::optional<StructuredOutputSpec> from_rf;
  if (given(ordered, "response_format")) from_rf = from_response_format(ordered["response_format"]);
  if (given(ordered, "structured_outputs")) {
    if (from_rf) {
      throw invalid_request(
          "'response_format' and 'structured_outputs' both constrain the output: give one",
          "response_format");
    }
    return from_structured_outputs(ordered["structured_outputs"]);
  }
  return from_rf;
}

}  // namespace servelab
