// What a request's structured output asks for (vLLM's StructuredOutputsParams, from
// `structured_outputs`, `response_format` or a forced tool_choice: engine/openai_structured.h),
// compiled into the grammar its outputs are held to (engine/grammar_constraint.h).
//
// Kinds: a JSON schema (engine/json_schema_grammar.h), any JSON object or array (json_object),
// a regular expression over the whole output (engine/regex_grammar.h), one of a list of strings
// exactly (choice), or an EBNF grammar (engine/ebnf_grammar.h). compile_structured_output throws
// std::invalid_argument (the compilers' JsonSchemaError and RegexError among them) with a message
// naming what it cannot take, and std::length_error for a grammar too large (more than
// kMaxGrammarRules rules).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/grammar.h"

namespace servelab {

inline constexpr std::size_t kMaxGrammarRules = 200000;

struct StructuredOutputSpec {
  enum class Kind { kJson, kJsonObject, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kJson;
  nlohmann::ordered_json schema;    // kJson
  std::string regex;                // kRegex
  std::vector<std::string> choice;  // kChoice (non-empty)
  std::string grammar;              // kGrammar (engine/ebnf_grammar.h)
  // vLLM's disable_any_whitespace, negated: JSON may hold any whitespace between tokens.
  bool any_whitespace = true;
};

std::shared_ptr<const GrammarMatcher> compile_structured_output(const StructuredOutputSpec& spec);

}  // namespace servelab
