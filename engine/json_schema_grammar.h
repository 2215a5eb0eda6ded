// JSON schemas (and free-form JSON) compiled into a byte grammar (engine/grammar.h): the
// structured outputs of `engine serve` (response_format json_schema / json_object,
// structured_outputs.json, tool_choice "required" or named; engine/structured_output.h).
//
// The text a schema's grammar accepts is one JSON value valid under the schema, written the way
// xgrammar (vLLM's default backend) writes it:
//   - objects list the schema's `properties` in the schema's order, every `required` one present,
//     the others optional; further members only where `additionalProperties` is true or a schema
//     (a missing additionalProperties allows none: xgrammar's strict mode, vLLM's default);
//   - arrays: `items` (a schema or false), `prefixItems`, `minItems`, `maxItems`;
//   - strings: any JSON string (UTF-8, escapes; a \u escape of a UTF-16 high surrogate only
//     directly followed by a low one's, never a lone surrogate), `minLength` / `maxLength` in
//     characters (code points, as Python's json.loads reads them: an escape is one character,
//     a surrogate pair's two escapes one), `pattern` (engine/regex_grammar.h): the string's
//     characters match it and are written without escapes (a pattern's '"', '\' and control
//     characters are never generated, so the text stays JSON and its value is what matched);
//   - strings' `format`: date, time, date-time (RFC 3339, ASCII digits; a date's day within its
//     month, February 29 in Gregorian leap years only), uuid, ipv4, email (a conservative subset
//     of RFC 5322: dot-atoms @ a dotted domain), each as a regex of its texts;
//   - counts (minItems, maxItems, minLength, maxLength): non-negative integers, an integral
//     number such as 3.0 included (JSON Schema's integers), at most 10000;
//   - numbers: JSON numbers; integers without fraction or exponent, with `minimum`, `maximum`,
//     `exclusiveMinimum`, `exclusiveMaximum` (magnitudes up to 1e15; a fractional bound rounds
//     inward) as the decimal texts of exactly the integers between (no "-0", no leading zeros);
//     bounds on a number (not an integer) are refused;
//   - `enum` and `const` (each value as compact JSON), keeping only the values their sibling
//     keywords admit: type, minLength / maxLength (in code points), pattern and format (read as
//     above: a full match), minimum / maximum / exclusiveMinimum / exclusiveMaximum (on any
//     number), minItems / maxItems and required; properties, additionalProperties, items and
//     prefixItems beside them are refused; no value left is a schema that admits nothing;
//   - `anyOf` / `oneOf` (any of them), `allOf` with one schema, `$ref` to "#", "#/$defs/..." or
//     any JSON pointer into the schema (a URI fragment: percent-decoded first, "#/$defs/a%20b";
//     an array index without leading zeros below the array's size; recursion allowed),
//     `type` as a name or a list; true / {} is any JSON value, false nothing;
//   - whitespace: any JSON whitespace between tokens (vLLM's default, any_whitespace), or with
//     any_whitespace false none but ", " and ": " between members (Python's json.dumps).
// Annotations are ignored (title, description, default, examples, $schema, $id, $comment,
// deprecated, readOnly, writeOnly, discriminator). Every other keyword (uniqueItems,
// multipleOf, minProperties, if/then/else, patternProperties, ...) and format (other than those
// above) is a JsonSchemaError naming where it is, so that no output is ever held to less than
// its schema asks.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "engine/grammar.h"

namespace servelab {

// What a schema cannot be compiled for; what() is "PATH: what was expected", PATH a JSON pointer
// into the schema, or "(root)" for its root (a $ref's target is named by its own pointer).
struct JsonSchemaError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct JsonGrammarOptions {
  bool any_whitespace = true;  // vLLM's default (structured_outputs.disable_any_whitespace false)
};

// A rule of `g` matching the JSON texts valid under `schema` (does not set the start).
Grammar::Symbol compile_json_schema(Grammar& g, const nlohmann::ordered_json& schema,
                                    const JsonGrammarOptions& options = {});

// A rule matching any JSON object or array (vLLM's json_object, xgrammar's built-in JSON
// grammar).
Grammar::Symbol compile_json_object_or_array(Grammar& g, const JsonGrammarOptions& options = {});

}  // namespace servelab
