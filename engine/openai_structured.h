// The structured-output fields of a /v1/completions or /v1/chat/completions body, as vLLM takes
// them (docs/serving.md "Structured outputs"); part of engine/openai_api.cc's parsing. ApiError
// (400) for every problem, naming the field.
//
// - structured_outputs (vLLM's StructuredOutputsParams): exactly one of `json` (a JSON schema, as
//   an object or as its text), `regex`, `choice` (a non-empty array of strings), `grammar` (EBNF
//   in xgrammar's dialect: engine/ebnf_grammar.h), `json_object` (true);
//   `disable_any_whitespace` (default false); `disable_additional_properties` and
//   `disable_fallback` (accepted: additional properties are already off unless a schema allows
//   them, and there is one backend). `structural_tag` and `whitespace_pattern` are refused.
// - response_format (OpenAI's): {"type": "text"} (nothing), {"type": "json_object"}, or
//   {"type": "json_schema", "json_schema": {"name", "description", "schema", "strict"}} (the
//   schema required). Not both response_format (other than text) and structured_outputs.
// The schema's keys keep the request's order (`ordered`: the body parsed keeping it), which is
// the order of an object's properties in the output.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "engine/openai_api.h"
#include "engine/structured_output.h"

namespace servelab {

std::optional<StructuredOutputSpec> parse_structured_outputs(const nlohmann::json& body,
                                                             const nlohmann::ordered_json& ordered);

// Whether `body` has a field whose structure needs the ordered parse.
bool has_structured_outputs(const nlohmann::json& body);

}  // namespace servelab
