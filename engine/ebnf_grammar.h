// EBNF grammars (vLLM's structured_outputs.grammar, in xgrammar's GBNF-style dialect) compiled
// into a byte grammar (engine/grammar.h).
//
// A grammar is rules `name ::= expression`, one after another (a rule may span lines: the next
// one begins where a name is followed by `::=`); `root` is where the output starts. Expressions:
// alternatives `a | b`, sequences `a b`, groups `( ... )`, quantifiers `*`, `+`, `?`, `{m}`,
// `{m,}`, `{m,n}` (counts at most 1000), and the terminals: "strings" (UTF-8, with \" \\ \n \r \t
// \xHH \uHHHH \UHHHHHHHH escapes, each the code point it names written in UTF-8: "\xe9" is é, as
// in llama.cpp's GBNF and xgrammar, never a lone byte; a surrogate is an error) and character
// classes `[a-z]`, `[^"\\]` (read as engine/regex_grammar.h reads a class: code points, ranges,
// escapes, negation). Rule names are letters, digits, `_`, `-` and `.`, not starting with a digit.
// `#` starts a comment to the end of the line. An EbnfError (what(): "grammar: line L, column C:
// what was expected") for a syntax error, a rule defined twice, a name used but never defined, no
// `root`; a left-recursive grammar is refused by GrammarMatcher (std::invalid_argument naming the
// rule).
#pragma once

#include <stdexcept>
#include <string_view>

#include "engine/grammar.h"

namespace servelab {

struct EbnfError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Adds the grammar's rules to `g` and returns its root rule (does not set the start).
Grammar::Symbol compile_ebnf(Grammar& g, std::string_view text);

}  // namespace servelab
