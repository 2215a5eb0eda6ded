// Regular expressions compiled into a byte grammar (engine/grammar.h): vLLM's
// structured_outputs.regex, and the `pattern` of a JSON-schema string
// (engine/json_schema_grammar.h).
//
// The rule compile_regex adds matches exactly the UTF-8 texts the whole pattern matches (a full
// match, as vLLM / xgrammar apply a regex to the whole output: Python's re.fullmatch). The
// pattern is UTF-8; it is read as Python's `re` (and ECMAScript, where they agree) reads it, over
// Unicode code points: a character class or `.` matches one whole UTF-8 encoded Unicode scalar
// value (U+0000..U+D7FF, U+E000..U+10FFFF, 1 to 4 bytes), never a lone byte >= 0x80 or an
// encoded surrogate.
//
// Supported:
//   - literal characters (UTF-8 in the pattern is a literal code point; `]` and `}` outside a
//     class are literals, as is a `{` that does not begin a valid quantifier);
//   - `.`: any code point but `\n`;
//   - escapes: `\` before any punctuation, space or non-ASCII character is that character;
//     `\n \r \t \f \v`; `\0` with up to two more octal digits; `\xHH`; `\uHHHH` (a high
//     surrogate `\uD800-\uDBFF` directly followed by a low one `\uDC00-\uDFFF` is the one code
//     point of that UTF-16 pair, as ECMAScript reads JSON-schema patterns); `\UHHHHHHHH`;
//     `\d \w \s` in Python's meanings over str (Unicode): `\d` a decimal digit (category Nd),
//     `\w` str.isalnum() or `_` (categories L* and N*, from utf8proc's tables), `\s`
//     str.isspace() (serving/unicode_space.h's Python set, U+001C-001F and U+00A0 among them),
//     and `\D \W \S` as every other code point (the same in a JSON-schema `pattern`, which
//     ECMAScript would read as ASCII);
//   - classes `[...]` and `[^...]`: code points, ranges by code point (`[à-ÿ]`,
//     `[\u0100-\u017f]`; the surrogates inside a range are left out), the escapes above (and
//     `\b` as backspace), `\d \w \s \D \W \S`; `]` is literal first (after any `^`) or escaped,
//     `-` at either end; a negated class matches every code point outside it, `\n` included;
//   - groups `(...)`, `(?:...)`, `(?P<name>...)` and `(?<name>...)` (names are checked, then the
//     group is a plain one), alternation `|` with empty branches (`a|` matches "" too);
//   - quantifiers `* + ?`, `{n}`, `{n,}`, `{n,m}`, `{,m}` (0..m), `{,}` (0..), and their lazy
//     forms (`*?`, `{n,m}?`...), the same as the greedy ones for a full match; counts at most
//     1000;
//   - `^` at the start and `$` at the end of the pattern or of one of its top-level alternatives,
//     accepted and ignored (the match is a full one anyway).
//
// Everything else is a RegexError whose what() is "regex: offset N: what was expected", N the
// 0-based byte offset in the pattern: syntax errors (unbalanced or missing parentheses, an
// unterminated class, a bad range, a quantifier with nothing to repeat or after another, a
// count above 1000 or min > max, groups nested more than 256 deep, a bad or incomplete escape,
// invalid UTF-8, a lone surrogate outside a range) and the constructs this compiler does not
// support: `^` / `$` elsewhere, `\b \B \A \Z \z \G`, lookahead and lookbehind, backreferences
// (`\1`, `\k<name>`, `(?P=name)`), octal escapes other than `\0..`, possessive quantifiers
// (`*+`...), atomic and conditional groups, inline flags (`(?i)`...), comments `(?#...)`,
// `\p{...}`, `\N{...}`, `\c`, and escaped ASCII letters without a meaning above.
//
// A pattern that can match nothing (`[^\s\S]`) compiles to a rule whose only alternative waits on
// a terminal of no byte: never accepting, and no byte allowed. The grammar is free of left
// recursion, builds a class as a trie of its UTF-8 bytes (a few dozen parses alive for `\w`'s
// hundreds of ranges), and stays as unambiguous as the pattern is, except that a repetition of a
// repetition whose minimum is 0 or 1 is one repetition (`(a{0,100}){0,100}` is `a{0,10000}`,
// when the product is at most 10000). A pattern still more ambiguous than the recognizer keeps
// (kMaxGrammarParses parses, e.g. `(a{0,100}b?){0,100}` on a long run of `a`) has some of its
// parses dropped there (engine/grammar.h GrammarMatcher::advance).
#pragma once

#include <stdexcept>
#include <string_view>

#include "engine/grammar.h"

namespace servelab {

// A pattern compile_regex cannot read; what() names the offset and what was expected, e.g.
// "regex: offset 4: unbalanced ')'".
struct RegexError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The most a quantifier's count may be.
inline constexpr int kMaxRegexRepeat = 1000;

// Adds to `g` a rule matching exactly the UTF-8 texts `pattern` fully matches, and returns it
// (does not set the start). Throws RegexError as above.
Grammar::Symbol compile_regex(Grammar& g, std::string_view pattern);

}  // namespace servelab
