// Fuzz target: structured outputs' compilers and recognizer (engine/structured_output.h,
// engine/json_schema_grammar.h, engine/regex_grammar.h, engine/grammar.h) on arbitrary specs and
// texts.
//
// Input: byte 0 picks the kind (bits 0-1: JSON schema, regex, choices as a JSON array of
// strings, JSON object or array; bit 3: an EBNF grammar instead; bit 2: no whitespace), the
// bytes up to the first NUL are the spec, the rest the text. Compiling may
// refuse the spec (std::invalid_argument: JsonSchemaError, RegexError, EbnfError, a
// left-recursive grammar; std::length_error for a
// grammar too large) and the recognizer a state too ambiguous (std::length_error); anything else
// (another exception, a crash, a sanitizer report, a timeout) is a finding. Invariants checked:
// feeding the text byte by byte and whole gives the same state; the bytes a state says come next
// are exactly those that do not kill it; a text a JSON kind accepts is JSON (nlohmann's parser
// takes it); a choice accepts exactly its strings.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "engine/structured_output.h"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "structured_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using servelab::StructuredOutputSpec;
  if (size == 0) return 0;
  const std::string all(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t nul = all.find('\0');
  const std::string spec_text = all.substr(0, nul);
  const std::string text = nul == std::string::npos ? std::string() : all.substr(nul + 1);
  StructuredOutputSpec spec;
  spec.kind = (data[0] & 8) != 0 ? StructuredOutputSpec::Kind::kGrammar
                                 : static_cast<StructuredOutputSpec::Kind>(data[0] % 4);
  spec.any_whitespace = (data[0] & 4) == 0;
  if (spec.kind == StructuredOutputSpec::Kind::kJson ||
      spec.kind == StructuredOutputSpec::Kind::kChoice) {
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(spec_text, nullptr, false);
    if (j.is_discarded()) return 0;
    if (spec.kind == StructuredOutputSpec::Kind::kJson) {
      spec.schema = j;
    } else {
      if (!j.is_array() || j.empty()) return 0;
      for (const auto& c : j) {
        if (!c.is_string()) return 0;
        spec.choice.push_back(c.get<std::string>());
      }
    }
  } else if (spec.kind == StructuredOutputSpec::Kind::kGrammar) {
    spec.grammar = spec_text;
  } else {
    spec.regex = spec_text;
  }
  std::shared_ptr<const servelab::GrammarMatcher> m;
  try {
    m = servelab::compile_structured_output(spec);
  } catch (const std::invalid_argument&) {
    return 0;
  } catch (const std::length_error&) {
    return 0;
  }
  try {
    servelab::GrammarState s = m->initial();
    for (const char c : text) {
      const auto b = static_cast<unsigned char>(c);
      const bool expected = m->next_bytes(s).test(b);
      s = m->advance(s, b);
      if (expected == s.dead()) finding("next_bytes disagrees with advance");
      if (s.dead()) break;
    }
    if (!(m->advance(m->initial(), text) == s)) finding("whole and byte-by-byte states differ");
    if (s.accepting) {
      if (spec.kind == StructuredOutputSpec::Kind::kJson ||
          spec.kind == StructuredOutputSpec::Kind::kJsonObject) {
        if (!nlohmann::json::accept(text))
          finding("a JSON grammar accepted a text that is not JSON");
      }
      if (spec.kind == StructuredOutputSpec::Kind::kChoice &&
          std::find(spec.choice.begin(), spec.choice.end(), text) == spec.choice.end()) {
        finding("a choice accepted a text that is not one of its strings");
      }
    } else if (spec.kind == StructuredOutputSpec::Kind::kChoice &&
               std::find(spec.choice.begin(), spec.choice.end(), text) != spec.choice.end()) {
      finding("a choice refused one of its strings");
    }
  } catch (const std::length_error&) {
  }
  return 0;
}
