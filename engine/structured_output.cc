#include "engine/structured_output.h"

#include <stdexcept>

#include "engine/ebnf_grammar.h"
#include "engine/json_schema_grammar.h"
#include "engine/regex_grammar.h"

namespace servelab {

std::shared_ptr<const GrammarMatcher> compile_structured_output(const StructuredOutputSpec& spec) {
  Grammar g;
  const JsonGrammarOptions json{spec.any_whitespace};
  switch (spec.kind) {
    case StructuredOutputSpec::Kind::kJson:
      g.set_start(compile_json_schema(g, spec.schema, json));
      break;
    case StructuredOutputSpec::Kind::kJsonObject:
      g.set_start(compile_json_object_or_array(g, json));
      break;
    case StructuredOutputSpec::Kind::kRegex:
      g.set_start(compile_regex(g, spec.regex));
      break;
    case StructuredOutputSpec::Kind::kGrammar:
      g.set_start(compile_ebnf(g, spec.grammar));
      break;
    case StructuredOutputSpec::Kind::kChoice: {
      std::vector<std::vector<Grammar::Symbol>> alts;
      for (const std::string& c : spec.choice) alts.push_back(g.literal(c));
      g.set_start(g.rule(std::move(alts)));
      break;
    }
  }
  if (g.num_rules() > kMaxGrammarRules) {
    throw std::length_error("the grammar has " + std::to_string(g.num_rules()) +
                            " rules, more than " + std::to_string(kMaxGrammarRules));
  }
  auto matcher = std::make_shared<const GrammarMatcher>(g);
  // An output held to it could only end at once, empty, as if complete.
  if (matcher->matches_nothing()) {
    throw std::invalid_argument(
        "the grammar matches no text at all (every way through it needs a part nothing can "
        "complete: a schema of false, a $ref that only reaches itself, an empty set of "
        "characters)");
  }
  return matcher;
}

}  // namespace servelab
