// Structured outputs: the byte grammar and its recognizer (engine/grammar.h), JSON schemas
// compiled into it (engine/json_schema_grammar.h), the token masks over a real vocabulary
// (engine/token_trie.h, engine/grammar_constraint.h) and the forced tool choice's schema and
// parser (engine/forced_tool_parser.h).
#include "engine/structured_output.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/ebnf_grammar.h"
#include "engine/forced_tool_parser.h"
#include "engine/grammar.h"
#include "engine/grammar_cache.h"
#include "engine/grammar_constraint.h"
#include "engine/json_schema_grammar.h"
#include "engine/token_trie.h"
#include "serving/home.h"
#include "serving/tokenizer.h"

namespace servelab {
namespace {

using ojson = nlohmann::ordered_json;

GrammarMatcher schema_matcher(const char* schema, bool any_whitespace = true) {
  Grammar g;
  g.set_start(compile_json_schema(g, ojson::parse(schema), {any_whitespace}));
  return GrammarMatcher(g);
}

std::string schema_error(const char* schema) {
  try {
    Grammar g;
    compile_json_schema(g, ojson::parse(schema));
  } catch (const JsonSchemaError& e) {
    return e.what();
  }
  return "";
}

TEST(Grammar, RecognizesItsLanguageAndKeepsRepetitionsFlat) {
  Grammar g;  // S := "a" S "b" | "" (not regular), then "!"
  const Grammar::Symbol s = g.new_rule();
  g.add(s, {g.byte('a'), s, g.byte('b')});
  g.add(s, {});
  g.set_start(g.rule({{s, g.byte('!')}}));
  const GrammarMatcher m(g);
  EXPECT_TRUE(m.matches("!"));
  EXPECT_TRUE(m.matches("aaabbb!"));
  EXPECT_FALSE(m.matches("aabbb!"));
  EXPECT_FALSE(m.matches("aab!"));
  EXPECT_FALSE(m.matches("ab"));
  // x*: a million bytes keep one parse of constant depth.
  Grammar h;
  h.set_start(h.star(h.range('0', '9')));
  const GrammarMatcher n(h);
  GrammarState st = n.initial();
  for (int i = 0; i < 100000; ++i) st = n.advance(st, static_cast<unsigned char>('0' + i % 10));
  EXPECT_TRUE(st.accepting);
  EXPECT_LE(st.stacks.size(), 4u);
  EXPECT_EQ(st, n.advance(n.initial(), "7"));  // the same state whatever the path
  EXPECT_TRUE(n.advance(st, 'x').dead());
}

TEST(Grammar, RepeatCountsAndNullableLoopsTerminate) {
  Grammar g;
  g.set_start(g.repeat(g.byte('a'), 2, 4));
  const GrammarMatcher m(g);
  EXPECT_FALSE(m.matches("a"));
  EXPECT_TRUE(m.matches("aa"));
  EXPECT_TRUE(m.matches("aaaa"));
  EXPECT_FALSE(m.matches("aaaaa"));
  Grammar h;  // (a?)*: nullable inside a star must not loop forever
  h.set_start(h.star(h.optional(h.byte('a'))));
  const GrammarMatcher n(h);
  EXPECT_TRUE(n.matches(""));
  EXPECT_TRUE(n.matches("aaa"));
  Grammar e;
  e.set_start(e.new_rule());  // no alternative: a compiler's mistake, refused
  EXPECT_THROW(GrammarMatcher{e}, std::invalid_argument);
}

GrammarMatcher ebnf_matcher(const char* text) {
  Grammar g;
  g.set_start(compile_ebnf(g, text));
  return GrammarMatcher(g);
}

std::string ebnf_error(const char* text) {
  try {
    ebnf_matcher(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(EbnfGrammar, RulesStringsClassesAndQuantifiers) {
  const GrammarMatcher m = ebnf_matcher(R"(
    # a list of signed numbers, with a comment
    root   ::= "[" (num ("," ws num)*)? "]"
    num    ::= "-"? digit{1,3} ("." digit+)?
    digit  ::= [0-9]
    ws     ::= [ \t]*
  )");
  for (const char* ok : {"[]", "[1]", "[-12.5, 3,\t999]", "[0.25]"})
    EXPECT_TRUE(m.matches(ok)) << ok;
  for (const char* no : {"[1234]", "[1,]", "[ 1]", "[.5]", "[1.]", ""}) {
    EXPECT_FALSE(m.matches(no)) << no;
  }
  const GrammarMatcher s = ebnf_matcher(R"(root ::= "\"q\"\n" | "\u00e9" | "\x41" [^"\\])");
  EXPECT_TRUE(s.matches("\"q\"\n"));
  EXPECT_TRUE(s.matches("é"));
  EXPECT_TRUE(s.matches("A😀"));
  EXPECT_FALSE(s.matches("A\""));
  const GrammarMatcher rec = ebnf_matcher("root ::= \"(\" root* \")\"");  // balanced parentheses
  EXPECT_TRUE(rec.matches("(()(()))"));
  EXPECT_FALSE(rec.matches("(()"));
  // A nullable repetition in tail position is fine; real left recursion is refused.
  EXPECT_TRUE(ebnf_matcher("root ::= (\"a\"?)* \"b\"").matches("aab"));
  EXPECT_EQ(ebnf_error("root ::= list\nlist ::= list \",\" \"x\" | \"x\""),
            "grammar: the rule 'list' is left-recursive (it can reach itself again before any "
            "character with more to match after: write the repetition on the right)");
  EXPECT_EQ(ebnf_error("root ::= a\na ::= b? a \"x\" | \"y\"\nb ::= \"z\""),
            "grammar: the rule 'a' is left-recursive (it can reach itself again before any "
            "character with more to match after: write the repetition on the right)");
  EXPECT_EQ(ebnf_error("item ::= \"a\""),
            "grammar: line 1, column 13: no 'root' rule (where the output starts)");
  EXPECT_EQ(ebnf_error("root ::= x\n"),
            "grammar: line 1, column 10: the rule 'x' is used but never defined");
  EXPECT_EQ(ebnf_error("root ::= \"a\"\nroot ::= \"b\""),
            "grammar: line 2, column 1: the rule 'root' is defined twice");
  EXPECT_EQ(ebnf_error("root ::= \"a"),
            "grammar: line 1, column 12: a string without its closing '\"'");
  EXPECT_EQ(ebnf_error("root ::= \"a\"{3,2}"),
            "grammar: line 1, column 17: a count's maximum is below its minimum");
  EXPECT_EQ(ebnf_error("root ::= [a-"),
            "grammar: line 1, column 10: a character class without its closing ']'");
  EXPECT_EQ(ebnf_error("root = \"a\""),
            "grammar: line 1, column 6: expected '::=' after the rule name");
}

TEST(JsonSchemaGrammar, ObjectsListPropertiesInOrderWithRequiredOnes) {
  const GrammarMatcher m = schema_matcher(R"({
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                   "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name"]})");
  EXPECT_TRUE(m.matches(R"({"name":"Ada"})"));
  EXPECT_TRUE(m.matches(R"({"name": "Ada", "age": 36})"));
  EXPECT_TRUE(m.matches("{\n  \"name\": \"Ada\",\n  \"tags\": [\"x\", \"y\"]\n}"));
  EXPECT_TRUE(m.matches(R"({"name":"A","age":-3,"tags":[]})"));
  EXPECT_FALSE(m.matches(R"({"age": 36})"));                  // name is required
  EXPECT_FALSE(m.matches(R"({"age": 36, "name": "Ada"})"));   // schema order
  EXPECT_FALSE(m.matches(R"({"name": "Ada", "other": 1})"));  // no additional properties
  EXPECT_FALSE(m.matches(R"({"name": "Ada", "age": 3.5})"));  // an integer
  EXPECT_FALSE(m.matches(R"({"name": "Ada",})"));             // JSON
  EXPECT_FALSE(m.matches(R"( {"name": "Ada"})"));             // nothing before the value
  EXPECT_FALSE(m.matches(R"({"name": "Ada", "age": 036})"));  // no leading zeros
  // With additionalProperties, more members after the listed ones.
  const GrammarMatcher extra = schema_matcher(
      R"({"properties": {"a": {"type": "null"}}, "additionalProperties": {"type": "number"}})");
  EXPECT_TRUE(extra.matches(R"({})"));
  EXPECT_TRUE(extra.matches(R"({"a": null, "x": 1.5e3, "y": -0.25})"));
  EXPECT_TRUE(extra.matches(R"({"x": 1})"));
  EXPECT_FALSE(extra.matches(R"({"x": "s"})"));
}

TEST(JsonSchemaGrammar, ScalarsStringsArraysAndChoices) {
  EXPECT_TRUE(schema_matcher(R"({"type": "string"})").matches(R"("a\"b\\\n\u00e9 é 😀")"));
  EXPECT_FALSE(schema_matcher(R"({"type": "string"})").matches("\"a\nb\""));  // raw control char
  EXPECT_FALSE(schema_matcher(R"({"type": "string"})").matches("\"\xff\""));  // not UTF-8
  EXPECT_FALSE(schema_matcher(R"({"type": "string"})").matches(R"("\x")"));   // bad escape
  const GrammarMatcher len =
      schema_matcher(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(len.matches(R"("a")"));
  EXPECT_TRUE(len.matches(R"("é\n")"));  // characters, not bytes; an escape is one
  EXPECT_FALSE(len.matches(R"("abcd")"));
  const GrammarMatcher num = schema_matcher(R"({"type": "number"})");
  for (const char* ok : {"0", "-0", "12.50", "1e5", "-2.5E-3", "7"})
    EXPECT_TRUE(num.matches(ok)) << ok;
  for (const char* no : {"01", "1.", ".5", "+1", "1e", "--1", ""})
    EXPECT_FALSE(num.matches(no)) << no;
  const GrammarMatcher arr = schema_matcher(
      R"({"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2})");
  EXPECT_FALSE(arr.matches("[]"));
  EXPECT_TRUE(arr.matches("[true]"));
  EXPECT_TRUE(arr.matches("[ true , false ]"));
  EXPECT_FALSE(arr.matches("[true, false, true]"));
  const GrammarMatcher tuple = schema_matcher(
      R"({"prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false})");
  EXPECT_TRUE(tuple.matches(R"([1, "a"])"));
  EXPECT_TRUE(tuple.matches(R"([1])"));
  EXPECT_FALSE(tuple.matches(R"([1, "a", 2])"));
  EXPECT_FALSE(tuple.matches(R"(["a"])"));
  const GrammarMatcher choice =
      schema_matcher(R"({"anyOf": [{"enum": ["red", 3, null]}, {"const": {"k": [1, 2]}}]})");
  for (const char* ok : {R"("red")", "3", "null", R"({"k":[1,2]})"})
    EXPECT_TRUE(choice.matches(ok)) << ok;
  EXPECT_FALSE(choice.matches(R"("blue")"));
  const GrammarMatcher types = schema_matcher(R"({"type": ["integer", "null"]})");
  EXPECT_TRUE(types.matches("null"));
  EXPECT_TRUE(types.matches("-4"));
  EXPECT_FALSE(types.matches("true"));
  EXPECT_TRUE(schema_matcher("true").matches(R"([{"a": [1, "x", null]}, false])"));
  EXPECT_FALSE(schema_matcher("false").matches("null"));
}

// Integer bounds: every integer in [-2000, 2000] matches exactly when it lies within them, for
// random ranges (either side possibly open, exclusive or fractional); no "-0" or leading zeros.
TEST(JsonSchemaGrammar, IntegerBoundsAcceptExactlyTheirIntegers) {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 60; ++round) {
    const auto draw = [&] { return static_cast<std::int64_t>(rng() % 2401) - 1200; };
    std::int64_t a = draw(), b = draw();
    if (a > b) std::swap(a, b);
    ojson schema = {{"type", "integer"}};
    std::optional<std::int64_t> lo, hi;
    switch (round % 5) {
      case 0:
        lo = a;
        hi = b;
        schema["minimum"] = a;
        schema["maximum"] = b;
        break;
      case 1:
        lo = a;
        schema["minimum"] = a;
        break;
      case 2:
        hi = b;
        schema["maximum"] = b;
        break;
      case 3:
        lo = a + 1;
        hi = b - 1;
        schema["exclusiveMinimum"] = a;
        schema["exclusiveMaximum"] = b;
        break;
      default:
        lo = a + 1;
        hi = b;
        schema["minimum"] = a + 0.5;
        schema["maximum"] = b + 0.5;
        break;
    }
    if (lo && hi && *lo > *hi) continue;
    Grammar g;
    g.set_start(compile_json_schema(g, schema));
    const GrammarMatcher m(g);
    for (std::int64_t n = -2000; n <= 2000; ++n) {
      const bool in = (!lo || n >= *lo) && (!hi || n <= *hi);
      ASSERT_EQ(m.matches(std::to_string(n)), in) << schema.dump() << " " << n;
    }
    EXPECT_FALSE(m.matches("-0")) << schema.dump();
    EXPECT_FALSE(m.matches("00")) << schema.dump();
    if (!hi) EXPECT_TRUE(m.matches("123456789012")) << schema.dump();
    if (!lo) EXPECT_TRUE(m.matches("-123456789012")) << schema.dump();
  }
  EXPECT_EQ(schema_error(R"({"type": "integer", "minimum": 5, "maximum": 4})"),
            "(root): no integer lies between its bounds");
  EXPECT_EQ(schema_error(R"({"type": "number", "minimum": 0})"),
            "/minimum: \"minimum\" on a number is not supported in structured outputs (only on "
            "integers)");
}

TEST(JsonSchemaGrammar, StringFormats) {
  const auto m = [](const char* format) {
    return schema_matcher(
        ("{\"type\": \"string\", \"format\": \"" + std::string(format) + "\"}").c_str());
  };
  EXPECT_TRUE(m("date").matches(R"("2026-12-04")"));
  EXPECT_FALSE(m("date").matches(R"("2026-13-04")"));
  EXPECT_TRUE(m("date-time").matches(R"("2026-12-04T10:56:14.25Z")"));
  EXPECT_TRUE(m("date-time").matches(R"("2026-12-04T10:56:14+01:00")"));
  EXPECT_FALSE(m("date-time").matches(R"("2026-12-04 10:56:14Z")"));
  EXPECT_TRUE(m("time").matches(R"("23:59:60Z")"));
  EXPECT_TRUE(m("uuid").matches(R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(m("uuid").matches(R"("123e4567e89b12d3a456426614174000")"));
  EXPECT_TRUE(m("ipv4").matches(R"("192.168.0.255")"));
  EXPECT_FALSE(m("ipv4").matches(R"("192.168.0.256")"));
  EXPECT_TRUE(m("email").matches(R"("ada.lovelace+x@math.example.org")"));
  EXPECT_FALSE(m("email").matches(R"("ada@localhost")"));
  EXPECT_EQ(schema_error(R"({"type": "string", "format": "uri"})"),
            "/format: the format \"uri\" is not supported in structured outputs (date, time, "
            "date-time, uuid, ipv4, email)");
}

TEST(JsonSchemaGrammar, RefsMayRecurse) {
  const GrammarMatcher tree = schema_matcher(R"({
    "$defs": {"node": {"type": "object",
                       "properties": {"v": {"type": "integer"},
                                      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                       "required": ["v"]}},
    "$ref": "#/$defs/node"})");
  EXPECT_TRUE(
      tree.matches(R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})"));
  EXPECT_FALSE(tree.matches(R"({"v": 1, "kids": [{"kids": []}]})"));
}

// Parts that can never complete are left out: a property whose schema is false is never
// offered (JSON Schema: it must not appear), and a schema that admits no value at all (false, a
// $ref that only reaches itself) is refused rather than ending the output at once.
TEST(JsonSchemaGrammar, WhatCanNeverCompleteIsLeftOutOrRefused) {
  const GrammarMatcher m = schema_matcher(
      R"({"type": "object", "properties": {"a": false, "b": {"type": "integer"}}})", false);
  EXPECT_FALSE(m.matches_nothing());
  EXPECT_TRUE(m.matches(R"({"b": 1})"));
  EXPECT_TRUE(m.matches("{}"));
  EXPECT_TRUE(m.advance(m.initial(), R"({"a)").dead());
  EXPECT_FALSE(m.next_bytes(m.advance(m.initial(), R"({")"))['a']);
  for (const char* never :
       {"false", R"({"$ref": "#"})",
        R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                                "$ref": "#/$defs/a"})",
        R"({"type": "object", "properties": {"a": false}, "required": ["a"]})"}) {
    SCOPED_TRACE(never);
    EXPECT_TRUE(schema_matcher(never).matches_nothing());
    StructuredOutputSpec spec;
    spec.kind = StructuredOutputSpec::Kind::kJson;
    spec.schema = ojson::parse(never);
    try {
      compile_structured_output(spec);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("the grammar matches no text at all"), std::string::npos)
          << e.what();
    }
  }
}

TEST(JsonSchemaGrammar, WithoutAnyWhitespaceTheSeparatorsArePythons) {
  const GrammarMatcher m = schema_matcher(
      R"({"properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "integer"}}}, "required": ["a", "b"]})",
      false);
  EXPECT_TRUE(m.matches(R"({"a": 1, "b": [1, 2]})"));
  EXPECT_FALSE(m.matches(R"({"a":1,"b":[1,2]})"));
  EXPECT_FALSE(m.matches(R"({ "a": 1, "b": [1, 2]})"));
}

TEST(JsonSchemaGrammar, WhatItCannotHoldAnOutputToIsAnErrorNamingWhere) {
  EXPECT_EQ(schema_error(R"({"properties": {"n": {"type": "array", "uniqueItems": true}}})"),
            "/properties/n/uniqueItems: the keyword \"uniqueItems\" is not supported in structured "
            "outputs");
  EXPECT_EQ(schema_error(R"({"type": "thing"})"),
            "/type: unknown type \"thing\" (expected object, array, string, integer, number, "
            "boolean or null)");
  EXPECT_EQ(schema_error(R"({"$ref": "#/$defs/missing"})"),
            "/$ref: \"#/$defs/missing\" names nothing in the schema");
  EXPECT_EQ(schema_error(R"({"$ref": "https://example.com/s.json"})"),
            "/$ref: \"https://example.com/s.json\": only references into this schema (\"#...\") "
            "are supported");
  EXPECT_EQ(schema_error(R"({"required": ["x"]})"),
            "/required: \"x\" is required but not among the properties (its schema is unknown)");
  EXPECT_EQ(schema_error(R"({"anyOf": [{"type": "string"}], "type": "string"})"),
            "/type: \"type\" beside \"anyOf\" is not supported (the schemas are not merged)");
  EXPECT_EQ(schema_error(R"({"type": "array", "minItems": 3, "maxItems": 2})"),
            "/maxItems: below minItems");
  EXPECT_EQ(schema_error(R"({"type": "string", "maxLength": 100000})"),
            "/maxLength: at most 10000 is supported");
  // Annotations are not keywords.
  EXPECT_EQ(schema_error(R"({"title": "T", "description": "d", "default": 1, "type": "integer"})"),
            "");
}

// Random JSON texts, valid and broken, against the json_object grammar and nlohmann's parser:
// the grammar accepts exactly the JSON objects and arrays (no whitespace around them).
TEST(JsonSchemaGrammar, JsonObjectAcceptsExactlyJsonObjectsAndArrays) {
  Grammar g;
  g.set_start(compile_json_object_or_array(g));
  const GrammarMatcher m(g);
  std::mt19937_64 rng(7);
  const auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const std::vector<std::string> atoms = {"1",    "-2.5e3", "\"s\"", "\"\\u00e9\\n\"", "true",
                                          "null", "false",  "0",     "\"é\""};
  std::function<std::string(int)> value = [&](int depth) -> std::string {
    const std::size_t k = depth > 3 ? 2 : pick(4);
    const char* ws[] = {"", " ", "\n  ", ""};
    if (k == 0) {
      std::string s = "{";
      const std::size_t n = pick(3);
      for (std::size_t i = 0; i < n; ++i) {
        s += std::string(i ? "," : "") + ws[pick(4)] + "\"k" + std::to_string(i) + "\"" +
             ws[pick(4)] + ":" + ws[pick(4)] + value(depth + 1) + ws[pick(4)];
      }
      return s + "}";
    }
    if (k == 1) {
      std::string s = "[";
      const std::size_t n = pick(3);
      for (std::size_t i = 0; i < n; ++i) {
        s += std::string(i ? "," : "") + ws[pick(4)] + value(depth + 1) + ws[pick(4)];
      }
      return s + "]";
    }
    return atoms[pick(atoms.size())];
  };
  const std::string noise = "{}[],:\" 1e.-tn\\";
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string s = value(0);
    for (std::size_t e = pick(3); e > 0 && !s.empty(); --e) {  // up to two random edits
      const std::size_t at = pick(s.size());
      if (pick(2) == 0) {
        s.erase(at, 1);
      } else {
        s.insert(at, 1, noise[pick(noise.size())]);
      }
    }
    const bool trimmed =
        !s.empty() && s.find_first_of(" \n") != 0 && s.find_last_not_of(" \n") == s.size() - 1;
    const nlohmann::json parsed = nlohmann::json::parse(s, nullptr, false);
    const bool expected =
        trimmed && !parsed.is_discarded() && (parsed.is_object() || parsed.is_array());
    ASSERT_EQ(m.matches(s), expected) << s;
    accepted += expected;
  }
  EXPECT_GT(accepted, 500);
  EXPECT_LT(accepted, 2900);
}

// Audit fixes: $ref fragments are percent-decoded JSON pointers and a long array index names
// nothing (it threw std::out_of_range from std::stoull: an HTTP 500); an error at the root names
// it; counts may be integral floats.
TEST(JsonSchemaGrammar, RefsCountsAndRootErrorsAsJsonSchemaReadsThem) {
  EXPECT_EQ(schema_error(R"({"$defs": {"a": [{"type": "integer"}]},
                            "$ref": "#/$defs/a/99999999999999999999999"})"),
            "/$ref: \"#/$defs/a/99999999999999999999999\" names nothing in the schema");
  EXPECT_EQ(schema_error(R"({"$defs": {"a": [{"type": "integer"}]}, "$ref": "#/$defs/a/01"})"),
            "/$ref: \"#/$defs/a/01\" names nothing in the schema");
  EXPECT_TRUE(schema_matcher(R"({"$defs": {"a": [{"type": "integer"}]}, "$ref": "#/$defs/a/0"})")
                  .matches("12"));
  const GrammarMatcher spaced = schema_matcher(
      R"({"$defs": {"a b": {"type": "integer"}, "c/d%": {"type": "boolean"}},
          "type": "array", "prefixItems": [{"$ref": "#/$defs/a%20b"}, {"$ref": "#/$defs/c~1d%25"}],
          "items": false})");
  EXPECT_TRUE(spaced.matches("[1, true]"));
  EXPECT_FALSE(spaced.matches("[true, 1]"));
  EXPECT_EQ(schema_error(R"({"$ref": "#/$defs/a%2"})"),
            "/$ref: \"#/$defs/a%2\": a '%' not followed by two hex digits (percent-encoding)");
  EXPECT_EQ(schema_error(R"({"type": "integer", "minimum": 3, "maximum": 2.5})"),
            "(root): no integer lies between its bounds");
  EXPECT_EQ(schema_error(R"({"$defs": {"x": {"type": "integer", "minimum": 3, "maximum": 2}},
                            "$ref": "#/$defs/x"})"),
            "/$defs/x: no integer lies between its bounds");
  const GrammarMatcher three =
      schema_matcher(R"({"type": "array", "items": {"type": "integer"}, "maxItems": 3.0})");
  EXPECT_TRUE(three.matches("[1, 2, 3]"));
  EXPECT_FALSE(three.matches("[1, 2, 3, 4]"));
  EXPECT_TRUE(schema_matcher(R"({"type": "string", "minLength": 2.0})").matches(R"("ab")"));
  EXPECT_EQ(schema_error(R"({"type": "array", "maxItems": 2.5})"),
            "/maxItems: expected a non-negative integer");
  EXPECT_EQ(schema_error(R"({"type": "array", "maxItems": -1.0})"),
            "/maxItems: expected a non-negative integer");
  EXPECT_EQ(schema_error(R"({"type": "array", "maxItems": 18446744073709551615})"),
            "/maxItems: at most 10000 is supported");
  EXPECT_EQ(schema_error(R"({"type": "string", "maxLength": 1e300})"),
            "/maxLength: at most 10000 is supported");
}

// A pattern reads \w \d \s as Python's re does over str (Unicode), as a regex does; formats
// write ASCII digits.
TEST(JsonSchemaGrammar, PatternsAndFormatsReadShorthandClassesAsUnicode) {
  const GrammarMatcher word = schema_matcher(R"({"type": "string", "pattern": "^\\w+ \\d$"})");
  EXPECT_TRUE(word.matches(R"("café ٣")"));
  EXPECT_TRUE(word.matches(R"("中文 7")"));
  EXPECT_FALSE(word.matches(R"("a-b 7")"));
  const GrammarMatcher date = schema_matcher(R"({"type": "string", "format": "date"})");
  EXPECT_FALSE(date.matches(R"("٢٠٢٤-01-01")"));
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kRegex;
  spec.regex = R"(\W{2})";
  const auto m = compile_structured_output(spec);
  for (const char* no : {"뗫a", "é-", "-é", "ab", "٣!"}) EXPECT_FALSE(m->matches(no)) << no;
  for (const char* ok : {"--", "€ ", "😀!"}) EXPECT_TRUE(m->matches(ok)) << ok;
}

// enum and const keep only the values their sibling keywords admit (they were dropped: a string
// schema could give 1); siblings that cannot be checked are refused.
TEST(JsonSchemaGrammar, EnumAndConstHonourTheirSiblings) {
  const GrammarMatcher typed = schema_matcher(R"({"type": "string", "enum": ["a", 1]})");
  EXPECT_TRUE(typed.matches(R"("a")"));
  EXPECT_FALSE(typed.matches("1"));
  const GrammarMatcher len = schema_matcher(R"({"enum": ["abc", "a", 7], "maxLength": 2})");
  EXPECT_FALSE(len.matches(R"("abc")"));
  EXPECT_TRUE(len.matches(R"("a")"));
  EXPECT_TRUE(len.matches("7"));  // maxLength holds strings only
  const GrammarMatcher chars = schema_matcher(R"({"enum": ["😀", "ab"], "maxLength": 1})");
  EXPECT_TRUE(chars.matches(R"("😀")"));  // one character, four bytes
  EXPECT_FALSE(chars.matches(R"("ab")"));
  const GrammarMatcher pat =
      schema_matcher(R"({"enum": ["ab12", "abc", "x"], "pattern": "^[a-z]+\\d+$"})");
  EXPECT_TRUE(pat.matches(R"("ab12")"));
  EXPECT_FALSE(pat.matches(R"("abc")"));
  const GrammarMatcher fmt =
      schema_matcher(R"({"enum": ["2024-02-29", "2023-02-29", "x"], "format": "date"})");
  EXPECT_TRUE(fmt.matches(R"("2024-02-29")"));
  EXPECT_FALSE(fmt.matches(R"("2023-02-29")"));
  EXPECT_FALSE(fmt.matches(R"("x")"));
  const GrammarMatcher nums =
      schema_matcher(R"({"enum": [1, 5, 10, 2.5, "s"], "minimum": 2, "exclusiveMaximum": 10})");
  for (const char* ok : {"5", "2.5", R"("s")"}) EXPECT_TRUE(nums.matches(ok)) << ok;
  for (const char* no : {"1", "10"}) EXPECT_FALSE(nums.matches(no)) << no;
  const GrammarMatcher ints = schema_matcher(R"({"type": "integer", "enum": [1.0, 2.5, 3]})");
  EXPECT_TRUE(ints.matches("1.0"));
  EXPECT_TRUE(ints.matches("3"));
  EXPECT_FALSE(ints.matches("2.5"));
  const GrammarMatcher arrays = schema_matcher(
      R"({"enum": [[1], [1, 2, 3], {"a": 1}, {"b": 1}], "maxItems": 2, "required": ["a"]})");
  for (const char* ok : {"[1]", R"({"a":1})"}) EXPECT_TRUE(arrays.matches(ok)) << ok;
  for (const char* no : {"[1,2,3]", R"({"b":1})"}) EXPECT_FALSE(arrays.matches(no)) << no;
  const GrammarMatcher both = schema_matcher(R"({"enum": ["a", "b"], "const": "b"})");
  EXPECT_TRUE(both.matches(R"("b")"));
  EXPECT_FALSE(both.matches(R"("a")"));
  EXPECT_TRUE(schema_matcher(R"({"title": "t", "description": "d", "default": "a",
                                 "examples": ["a"], "const": "a"})")
                  .matches(R"("a")"));
  // Nothing left: the schema admits no text, refused as such.
  for (const char* none :
       {R"({"type": "string", "const": 5})", R"({"enum": ["abc"], "maxLength": 2})"}) {
    SCOPED_TRACE(none);
    EXPECT_TRUE(schema_matcher(none).matches_nothing());
    StructuredOutputSpec spec;
    spec.schema = ojson::parse(none);
    EXPECT_THROW(compile_structured_output(spec), std::invalid_argument);
  }
  EXPECT_EQ(schema_error(R"({"enum": [{"a": 1}], "properties": {"a": {"type": "string"}}})"),
            "/properties: \"properties\" beside \"enum\" or \"const\" is not supported (only "
            "type, minLength, maxLength, pattern, format, minimum, maximum, exclusiveMinimum, "
            "exclusiveMaximum, minItems, maxItems and required are checked on their values)");
  EXPECT_EQ(schema_error(R"({"const": [1], "items": {"type": "string"}})").substr(0, 40),
            "/items: \"items\" beside \"enum\" or \"const\"");
}

// EBNF string escapes \xHH name a code point (written in UTF-8), as a class's [\xe9] does.
TEST(EbnfGrammar, HexEscapesInStringsAreCodePoints) {
  const GrammarMatcher m = ebnf_matcher(R"(root ::= "\xe9" [\xe9] "\x41")");
  EXPECT_TRUE(m.matches("ééA"));
  EXPECT_FALSE(
      m.matches("\xe9\xe9"
                "A"));
  EXPECT_FALSE(
      m.matches("\xe9"
                "éA"));
  EXPECT_EQ(ebnf_error(R"(root ::= "\ud800")"),
            "grammar: line 1, column 17: a surrogate code point cannot appear in UTF-8");
}

// A \u escape pair (a UTF-16 surrogate pair) is one character, as Python's json.loads reads
// it; a lone surrogate escape is never written (strict parsers refuse it).
TEST(JsonSchemaGrammar, SurrogatePairEscapesAreOneCharacter) {
  const GrammarMatcher two = schema_matcher(R"({"type": "string", "minLength": 2})");
  EXPECT_FALSE(two.matches(R"("\ud83d\ude00")"));
  EXPECT_TRUE(two.matches(R"("\ud83d\ude00x")"));
  const GrammarMatcher one = schema_matcher(R"({"type": "string", "maxLength": 1})");
  EXPECT_TRUE(one.matches(R"("\ud83d\ude00")"));
  EXPECT_TRUE(one.matches(R"("\uD83D\uDE00")"));
  EXPECT_TRUE(one.matches(R"("😀")"));
  const GrammarMatcher any = schema_matcher(R"({"type": "string"})");
  for (const char* ok : {R"("\u00e9\uD7FF\ue000\uFFFF")", R"("\udbff\udfff")"})
    EXPECT_TRUE(any.matches(ok)) << ok;
  for (const char* no : {R"("\ud800")", R"("\ud83d\ud83d")", R"("\ude00")", R"("\ude00\ud83d")",
                         R"("\ud83dx")", R"("\ud83d\n")"}) {
    EXPECT_FALSE(any.matches(no)) << no;
  }
  // Free JSON's keys and strings too.
  const GrammarMatcher free = schema_matcher("true");
  EXPECT_FALSE(free.matches(R"({"\ud800": 1})"));
  EXPECT_TRUE(free.matches(R"({"\ud83d\ude00": "\ud83d\ude00"})"));
}

// format date: the day within its month, February 29 in leap years only.
TEST(JsonSchemaGrammar, DatesHaveTheirMonthsDays) {
  const GrammarMatcher date = schema_matcher(R"({"type": "string", "format": "date"})");
  for (const char* ok : {"2024-02-29", "2000-02-29", "1600-02-29", "0004-02-29", "2024-01-31",
                         "2024-04-30", "2023-02-28", "2024-12-31", "0000-02-29"}) {
    EXPECT_TRUE(date.matches("\"" + std::string(ok) + "\"")) << ok;
  }
  for (const char* no :
       {"2024-02-30", "2023-02-29", "1900-02-29", "2100-02-29", "2024-04-31", "2024-06-31",
        "2024-09-31", "2024-11-31", "2024-00-10", "2024-01-00", "2024-01-32"}) {
    EXPECT_FALSE(date.matches("\"" + std::string(no) + "\"")) << no;
  }
  const GrammarMatcher dt = schema_matcher(R"({"type": "string", "format": "date-time"})");
  EXPECT_FALSE(dt.matches(R"("2023-02-29T00:00:00Z")"));
  EXPECT_TRUE(dt.matches(R"("2024-02-29T00:00:00Z")"));
}

std::shared_ptr<const Tokenizer> gpt2() {
  static const std::shared_ptr<const Tokenizer> t =
      load_tokenizer(servelab_home() / "data/tokenizers/gpt2/tokenizer.json");
  return t;
}

TEST(TokenTrie, HoldsEveryTokenByItsBytes) {
  const auto tok = gpt2();
  const TokenTrie trie(*tok, tok->vocab_size());
  EXPECT_EQ(trie.num_tokens(),
            static_cast<std::size_t>(tok->vocab_size()) - 1);  // no <|endoftext|>
  const std::int32_t hello = tok->encode(" hello")[0];
  ASSERT_NE(trie.bytes(hello), nullptr);
  EXPECT_EQ(*trie.bytes(hello), " hello");
  EXPECT_EQ(trie.bytes(50256), nullptr);  // special
  // Walking the trie by a token's bytes reaches a node listing it.
  const TokenTrie::Node* n = &trie.root();
  for (const char c : std::string(" hello")) {
    const auto edges = trie.edges(*n);
    const auto e = std::find_if(edges.begin(), edges.end(), [&](const TokenTrie::Edge& x) {
      return x.byte == static_cast<unsigned char>(c);
    });
    ASSERT_NE(e, edges.end());
    n = &trie.node(e->child);
  }
  const auto here = trie.tokens(*n);
  EXPECT_NE(std::find(here.begin(), here.end(), hello), here.end());
}

// The mask of a state is exactly the tokens whose bytes the grammar takes (checked token by
// token over the whole GPT-2 vocabulary), plus EOS where the text is complete.
TEST(GrammarConstraint, MasksAreTheTokensTheGrammarTakes) {
  const auto tok = gpt2();
  auto trie = std::make_shared<const TokenTrie>(*tok, tok->vocab_size());
  StructuredOutputSpec spec;
  spec.schema = ojson::parse(
      R"({"properties": {"city": {"type": "string"}, "n": {"type": "integer"}}, "required": ["city", "n"]})");
  const auto matcher = compile_structured_output(spec);
  const GrammarConstraint c(matcher, trie, {50256});
  for (const char* prefix : {"", "{", "{\"ci", "{\"city\": \"Par", "{\"city\": \"Paris\", \"n\": 1",
                             "{\"city\": \"Paris\", \"n\": 12}"}) {
    const GrammarState st = matcher->advance(matcher->initial(), prefix);
    ASSERT_FALSE(st.dead()) << prefix;
    const TokenMask mask = c.mask_of(st);
    int allowed = 0;
    for (std::int32_t t = 0; t < 50256; ++t) {
      const bool takes = !matcher->advance(st, *trie->bytes(t)).dead();
      ASSERT_EQ(token_allowed(mask, t), takes) << prefix << " token " << t;
      allowed += takes;
    }
    EXPECT_EQ(token_allowed(mask, 50256), st.accepting) << prefix;
    if (std::string(prefix).ends_with("}")) {
      EXPECT_EQ(allowed, 0);  // done: EOS alone
    } else {
      EXPECT_GT(allowed, 0) << prefix;
    }
  }
}

// Sampling random allowed tokens until EOS always gives a text the schema accepts; the masks
// asked in any order (a preempted sequence, a verify row's drafts) are those of a fresh walk.
TEST(GrammarConstraint, RandomWalksEndInValidJson) {
  const auto tok = gpt2();
  auto trie = std::make_shared<const TokenTrie>(*tok, tok->vocab_size());
  StructuredOutputSpec spec;
  spec.schema = ojson::parse(R"({"type": "object", "properties": {
      "ok": {"type": "boolean"}, "xs": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 3}},
      "required": ["ok", "xs"]})");
  spec.any_whitespace = false;
  const auto matcher = compile_structured_output(spec);
  const auto c =
      std::make_shared<GrammarConstraint>(matcher, trie, std::vector<std::int32_t>{50256});
  std::mt19937_64 rng(11);
  for (RequestId seq = 0; seq < 20; ++seq) {
    std::vector<std::int32_t> out;
    while (true) {
      const auto mask = c->allowed(seq, out, {});
      std::vector<std::int32_t> ok;
      for (std::int32_t t = 0; t <= 50256; ++t) {
        if (token_allowed(*mask, t)) ok.push_back(t);
      }
      ASSERT_FALSE(ok.empty());
      const std::int32_t t = ok[rng() % ok.size()];
      if (t == 50256) break;
      out.push_back(t);
      ASSERT_LT(out.size(), 200u);
    }
    const std::string text = tok->decode(out);
    EXPECT_TRUE(matcher->matches(text)) << text;
    const nlohmann::json j = nlohmann::json::parse(text);
    EXPECT_TRUE(j["ok"].is_boolean());
    EXPECT_LE(j["xs"].size(), 3u);
    // The same outputs asked as earlier + later, and after a longer prefix (a fresh start).
    for (std::size_t cut = 0; cut <= out.size(); ++cut) {
      const std::span<const std::int32_t> all(out);
      EXPECT_EQ(*c->allowed(1000 + seq, all.first(cut), all.subspan(cut)),
                c->mask_of(matcher->advance(matcher->initial(), text)));
    }
  }
  // Outputs that left the grammar: EOS alone.
  const std::vector<std::int32_t> wrong = tok->encode("[1]");
  const auto mask = c->allowed(99, wrong, {});
  EXPECT_TRUE(token_allowed(*mask, 50256));
  EXPECT_FALSE(token_allowed(*mask, tok->encode("{")[0]));
}

// A grammar too ambiguous for the recognizer (more than kMaxGrammarParses parses at once) keeps
// that many parses: never an exception in the executor, and never the end tokens where the text
// is not complete (they used to be allowed there as at a dead end: an output cut short).
TEST(GrammarConstraint, TooManyParsesNeverEndsAnOutputEarly) {
  const std::shared_ptr<const Tokenizer> tok =
      load_tokenizer(servelab_home() / "data/tokenizers/bytes/tokenizer.json");
  const auto trie = std::make_shared<const TokenTrie>(*tok, 256);
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kRegex;
  // (a{0,100}){0,100} is one repetition a{0,10000}: this needs 50 to 10050 a's, and works.
  spec.regex = "(a{0,100}){0,100}a{50}";
  auto matcher = compile_structured_output(spec);
  EXPECT_FALSE(matcher->matches(std::string(49, 'a')));
  EXPECT_TRUE(matcher->matches(std::string(50, 'a')));
  EXPECT_TRUE(matcher->matches(std::string(3000, 'a')));
  EXPECT_FALSE(matcher->matches(std::string(10051, 'a')));
  const GrammarConstraint c(matcher, trie, {7});
  for (const std::size_t n : {0, 39, 40, 49}) {
    const std::vector<std::int32_t> as(n, 'a');
    const auto mask = c.allowed(0, as, {});
    EXPECT_FALSE(token_allowed(*mask, 7)) << n;
    EXPECT_TRUE(token_allowed(*mask, 'a')) << n;
  }
  EXPECT_TRUE(token_allowed(*c.allowed(1, std::vector<std::int32_t>(50, 'a'), {}), 7));
  // Nested repetitions that do not merge: past kMaxGrammarParses parses a state keeps that many.
  spec.regex = "(a{0,100}b?){0,100}c";
  matcher = compile_structured_output(spec);
  GrammarState st;
  ASSERT_NO_THROW(st = matcher->advance(matcher->initial(), std::string(400, 'a')));
  ASSERT_FALSE(st.dead());
  EXPECT_FALSE(st.accepting);
  const GrammarConstraint d(matcher, trie, {7});
  // Random walks: whatever they write, an end token is allowed only once the text is complete.
  std::mt19937_64 rng(5);
  for (RequestId seq = 0; seq < 3; ++seq) {
    std::vector<std::int32_t> out(400, 'a');
    bool ended = false;
    for (int step = 0; step < 150 && !ended; ++step) {
      const auto mask = d.allowed(seq, out, {});
      std::vector<std::int32_t> ok;
      for (std::int32_t t = 0; t < 256; ++t) {
        if (token_allowed(*mask, t)) ok.push_back(t);
      }
      ASSERT_FALSE(ok.empty());
      const std::string text(out.begin(), out.end());
      const bool complete = !text.empty() && text.back() == 'c';
      EXPECT_EQ(token_allowed(*mask, 7), complete) << text.size();
      for (const std::int32_t t : ok) {
        EXPECT_TRUE(t == 7 || t == 'a' || t == 'b' || (t == 'c' && !complete)) << t;
      }
      // Lean towards 'a' so that the walk stays long and ambiguous.
      const std::int32_t t = std::find(ok.begin(), ok.end(), 'a') != ok.end() && rng() % 4 != 0
                                 ? 'a'
                                 : ok[rng() % ok.size()];
      if (t == 7)
        ended = true;
      else
        out.push_back(t);
    }
  }
}

// With a reasoning end token ('#' here), a sequence is free until it writes one; the grammar
// holds the outputs after its first occurrence, whether that is among the outputs so far or in
// a verify row's drafts.
TEST(GrammarConstraint, AReasoningModelIsHeldOnlyAfterItsThinking) {
  const std::shared_ptr<const Tokenizer> tok =
      load_tokenizer(servelab_home() / "data/tokenizers/bytes/tokenizer.json");
  StructuredOutputSpec spec;
  spec.schema = ojson::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
  const auto matcher = compile_structured_output(spec);
  const auto trie = std::make_shared<const TokenTrie>(*tok, 256);
  const GrammarConstraint c(matcher, trie, {0}, '#');
  const auto ids = [](std::string_view s) { return std::vector<std::int32_t>(s.begin(), s.end()); };
  const auto after = [&](std::string_view text) {
    return c.mask_of(matcher->advance(matcher->initial(), text));
  };
  EXPECT_EQ(c.allowed(0, {}, {}), nullptr);
  EXPECT_EQ(c.allowed(0, ids("}} not json"), {}), nullptr);
  EXPECT_EQ(*c.allowed(0, ids("}} not json#"), {}), after(""));
  EXPECT_EQ(*c.allowed(0, ids("}} not json#{ "), {}), after("{ "));
  EXPECT_EQ(*c.allowed(0, ids("}} not json#{ "), ids("\"a\"")), after("{ \"a\""));
  // A later '#' is grammar text (refused there: EOS alone), not a second start.
  EXPECT_EQ(*c.allowed(0, ids("}} not json#{ #"), {}), after("{ #"));
  EXPECT_EQ(*c.allowed(1, ids("thinking"), ids("...#{")), after("{"));
  EXPECT_EQ(c.allowed(1, ids("thinking"), ids("...")), nullptr);
  EXPECT_EQ(*c.allowed(1, ids("thinking...#{\"a"), {}), after("{\"a"));
}

// Requests of one spec share an automaton (masks and transitions), not their sequences' states;
// the cache keys by everything that changes the masks and drops the least recently asked.
TEST(GrammarCache, RequestsOfOneSpecShareAnAutomaton) {
  const std::shared_ptr<const Tokenizer> tok =
      load_tokenizer(servelab_home() / "data/tokenizers/bytes/tokenizer.json");
  const auto trie = std::make_shared<const TokenTrie>(*tok, 256);
  GrammarCache cache(2);
  StructuredOutputSpec a;
  a.schema = ojson::parse(R"({"type": "object", "properties": {"x": {"type": "integer"}}})");
  StructuredOutputSpec b = a;
  b.any_whitespace = false;
  const auto first = cache.get(a, {0}, trie);
  EXPECT_EQ(cache.get(a, {0}, trie), first);
  EXPECT_NE(cache.get(a, {0, 7}, trie), first);  // other end tokens: other masks
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.get(a, {0}, trie), first);  // asked again: (a, {0, 7}) is now the oldest
  EXPECT_NE(cache.get(b, {0}, trie), first);  // evicts (a, {0, 7})
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.get(a, {0}, trie), first);
  EXPECT_NE(cache.get(a, {0, 7}, trie), nullptr);  // compiled again, evicting b
  EXPECT_EQ(cache.get(a, {0}, trie), first);
  const auto ids = [](std::string_view s) { return std::vector<std::int32_t>(s.begin(), s.end()); };
  const GrammarConstraint one(first), two(first);
  const auto mid = one.allowed(0, ids("{\"x\": 1"), {});
  const auto start = two.allowed(0, {}, {});
  EXPECT_NE(*mid, *start);
  EXPECT_EQ(*two.allowed(0, {}, {}), *start);
  EXPECT_EQ(*one.allowed(0, ids("{\"x\": 1"), {}), *mid);
  EXPECT_EQ(two.allowed(5, ids("{\"x\": 1"), {}), mid);  // the cached mask itself
  EXPECT_THROW(
      cache.get(StructuredOutputSpec{StructuredOutputSpec::Kind::kRegex, {}, "a(", {}}, {0}, trie),
      std::invalid_argument);
}

TEST(ForcedToolChoice, RequiredSchemaAndParser) {
  const std::vector<ForcedTool> tools = {
      {"get_weather",
       ojson::parse(
           R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})")},
      {"now", nullptr},
      {"empty", ojson::object()}};
  const ojson schema = forced_tool_schema(tools, nullptr);
  Grammar g;
  g.set_start(compile_json_schema(g, schema));
  const GrammarMatcher m(g);
  EXPECT_TRUE(m.matches(R"([{"name": "get_weather", "parameters": {"city": "Oslo"}}])"));
  EXPECT_TRUE(
      m.matches(R"([{"name": "now", "parameters": {}}, {"name": "now", "parameters": {}}])"));
  EXPECT_FALSE(m.matches(R"([])"));
  EXPECT_FALSE(m.matches(R"([{"name": "now", "parameters": {"city": "Oslo"}}])"));
  EXPECT_FALSE(m.matches(R"([{"name": "other", "parameters": {}}])"));
  // Parameters {} are an empty object's, as absent ones (vLLM's get_tool_schema): schema {}
  // allowed any JSON value.
  EXPECT_TRUE(m.matches(R"([{"name": "empty", "parameters": {}}])"));
  EXPECT_FALSE(m.matches(R"([{"name": "empty", "parameters": ""}])"));
  EXPECT_FALSE(m.matches(R"([{"name": "empty", "parameters": {"a": 1}}])"));
  const auto parser = make_forced_tool_parser(nullptr);
  EXPECT_TRUE(parser->forced());
  // vLLM's finish_reason: "tool_calls" for "required" calls of an output that stopped, the
  // output's own for a named function's and for a cut output.
  EXPECT_EQ(parser->finish_reason_with_calls("stop"), "tool_calls");
  EXPECT_EQ(parser->finish_reason_with_calls("length"), "length");
  const ExtractedToolCalls calls = parser->extract(
      R"([{"name":"get_weather","parameters":{"city":"Zürich"}},{"name":"now","parameters":{}}])");
  ASSERT_EQ(calls.calls.size(), 2u);
  EXPECT_EQ(calls.calls[0].name, "get_weather");
  EXPECT_EQ(calls.calls[0].arguments, R"({"city": "Zürich"})");  // json.dumps(ensure_ascii=False)
  EXPECT_EQ(calls.calls[1].arguments, "{}");
  EXPECT_EQ(calls.content, "");
  EXPECT_TRUE(parser->extract(R"([{"name": "now", "param)").calls.empty());  // cut: content
  const std::string name = "get_weather";
  EXPECT_EQ(forced_tool_schema(tools, &name), tools[0].parameters);
  const ExtractedToolCalls named = make_forced_tool_parser(&name)->extract(R"({"city": "Oslo"})");
  ASSERT_EQ(named.calls.size(), 1u);
  EXPECT_EQ(named.calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(make_forced_tool_parser(&name)->finish_reason_with_calls("stop"), "stop");
  // $defs of the tools' parameters move to the top, where their references point.
  const std::vector<ForcedTool> with_defs = {
      {"a",
       ojson::parse(
           R"({"$defs": {"P": {"type": "integer"}}, "properties": {"p": {"$ref": "#/$defs/P"}}})")},
      {"b", ojson::parse(R"({"$defs": {"P": {"type": "string"}}})")}};
  EXPECT_THROW(forced_tool_schema(with_defs, nullptr), ToolSchemaError);
  const ojson lifted = forced_tool_schema({with_defs[0]}, nullptr);
  EXPECT_EQ(lifted["$defs"]["P"]["type"], "integer");
  Grammar h;
  h.set_start(compile_json_schema(h, lifted));
  EXPECT_TRUE(GrammarMatcher(h).matches(R"([{"name": "a", "parameters": {"p": 3}}])"));
}

}  // namespace
}  // namespace servelab
