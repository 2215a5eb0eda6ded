// engine/regex_grammar.h: regular expressions compiled into a byte grammar, checked as full
// matches against what Python's re.fullmatch says for the same pattern and text (a str pattern:
// \d \w \s in their Unicode meanings), and against std::regex (ECMAScript) for random texts.
#include "engine/regex_grammar.h"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "engine/grammar.h"

namespace servelab {
namespace {

// A pattern and texts it must and must not fully match. Patterns written R"re(...)re" read the
// same in Python's re; those written R"ecma(...)ecma" use what this compiler adds (ECMAScript's
// named groups without P, UTF-16 pairs of \u escapes).
struct Case {
  std::string pattern;
  std::vector<std::string> yes;
  std::vector<std::string> no;
};

std::string printable(const std::string& s) {
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7F) {
      out.push_back(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", b);
      out += buf;
    }
  }
  return out;
}

void check(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE("pattern " + printable(c.pattern));
    Grammar g;
    g.set_start(compile_regex(g, c.pattern));
    const GrammarMatcher m(g);
    for (const std::string& s : c.yes)
      EXPECT_TRUE(m.matches(s)) << "text \"" << printable(s) << '"';
    for (const std::string& s : c.no)
      EXPECT_FALSE(m.matches(s)) << "text \"" << printable(s) << '"';
  }
}

bool full_match(std::string_view pattern, std::string_view text) {
  Grammar g;
  g.set_start(compile_regex(g, pattern));
  return GrammarMatcher(g).matches(text);
}

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (c >> 6)));
    s.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    s.push_back(static_cast<char>(0xE0 | (c >> 12)));
    s.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xF0 | (c >> 18)));
    s.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
  return s;
}

bool surrogate(char32_t c) { return c >= 0xD800 && c <= 0xDFFF; }

// The RegexError compile_regex throws for `pattern` ("" when it compiles).
std::string error_of(std::string_view pattern) {
  try {
    Grammar g;
    compile_regex(g, pattern);
  } catch (const RegexError& e) {
    return e.what();
  }
  return "";
}

TEST(RegexGrammar, Literals) {
  check({
      {R"re(abc)re", {"abc"}, {"", "ab", "abcd", "abd", "ABC"}},
      {R"re()re", {""}, {"a", " "}},
      {R"re(a b,c;d'e"f)re", {"a b,c;d'e\"f"}, {"a b,c;d'e\"", "ab,c;d'e\"f"}},
      {R"re(]})re", {"]}"}, {"]", "}"}},
      {R"re(a/b)re", {"a/b"}, {"ab"}},
  });
}

TEST(RegexGrammar, Dot) {
  check({
      {R"re(.)re",
       {"a", " ", "\t", "\r", "\x7f", "é", "中", "😀", std::string(1, '\0')},
       {"", "\n", "ab", "\x80", "\xc3"}},
      {R"re(a.c)re", {"abc", "a.c", "aéc"}, {"ac", "a\nc", "abbc"}},
      {R"re(.*)re", {"", "abc", "é中😀 x"}, {"a\nb", "\n"}},
  });
}

TEST(RegexGrammar, Escapes) {
  check({
      {R"re(\\\.\*\+\?\(\)\[\]\{\}\|\^\$\/\-)re", {"\\.*+?()[]{}|^$/-"}, {"\\.*+?()[]{}|^$/"}},
      {R"re(\!\"\#\%\&\'\,\:\;\<\=\>\@\_\`\~\ )re", {"!\"#%&',:;<=>@_`~ "}, {"!\"#%&',:;<=>@_`~"}},
      {R"re(\n\r\t\f\v)re", {"\n\r\t\f\v"}, {"nrtfv", "\n\r\t\f"}},
      {R"re(a\0b)re", {std::string("a\0b", 3)}, {"a0b", "ab"}},
      {R"re(\012\0101)re", {"\n\b1"}, {"\n\x41"}},  // \0 with up to two more octal digits
      {R"re(\x41\x7e\xe9\xff)re", {"A~éÿ"}, {"A~\xe9\xff", "A~e\xff"}},
      {R"re(\u00e9\u4E2D\uffff)re", {"é中\xef\xbf\xbf"}, {"e中\xef\xbf\xbf"}},
      {R"re(\U0001F600\U00000041)re", {"😀A"}, {"A"}},
      {R"re(\é\中)re", {"é中"}, {"\\é\\中"}},
  });
}

TEST(RegexGrammar, ShorthandClasses) {
  check({
      // Python's str patterns: \d is a decimal digit (Nd: Arabic-Indic, Devanagari, fullwidth),
      // \w str.isalnum() or '_' (letters and numbers of every script: Ⅻ is Nl, ² No), \s
      // str.isspace() (U+001C-001F, NBSP, the U+2000 spaces, ideographic space...).
      {R"re(\d+)re", {"0", "0123456789", "١٢٣", "४", "９"}, {"", "a", "²", "Ⅻ", "1a", "一"}},
      {R"re(\D)re", {"a", " ", "é", "😀", "\n", "²", "一"}, {"0", "9", "", "ab", "١", "９"}},
      {R"re(\w+)re",
       {"azAZ09_", "x", "é", "中文", "Ωß", "١²Ⅻ", "ǅ", "ー"},
       {"", "-", "a b", "€", "😀", "\xc2\xa0", "·"}},
      {R"re(\W)re",
       {"-", " ", "€", "😀", "\n", "\xc2\xa0", "、"},
       {"a", "Z", "5", "_", "é", "中", "١", "ß"}},
      {R"re(\s+)re",
       {" \t\n\r\f\v", "\x1c\x1d\x1e\x1f", "\xc2\xa0\xc2\x85\xe3\x80\x80\xe2\x80\xa8"},
       {"", "a", "\xe2\x80\x8b", "\xef\xbb\xbf"}},  // not U+200B or U+FEFF
      {R"re(\S)re", {"a", "é", "😀", "\xe2\x80\x8b"}, {" ", "\t", "\n", "\v", "\xc2\xa0", "\x1f"}},
      // \W{2}: two non-word code points, never a letter of any script.
      {R"re(\W{2})re", {"--", "€ ", "😀!"}, {"뗫a", "é-", "-é", "aa", "\xeb\x97"}},
  });
}

TEST(RegexGrammar, CharacterClasses) {
  check({
      {R"re([abc]+)re", {"a", "cab"}, {"", "d", "abd"}},
      {R"re([a-cx-z0-9])re", {"a", "b", "c", "x", "z", "5"}, {"d", "w", "A", "-"}},
      {R"re([]a])re", {"]", "a"}, {"", "b", "[", "]a"}},  // ']' first is literal
      {R"re([^]a])re", {"b", "["}, {"]", "a"}},
      {R"re([a\]b])re", {"]", "a", "b"}, {"\\"}},
      {R"re([-a])re", {"-", "a"}, {"b"}},
      {R"re([a-])re", {"-", "a"}, {"b"}},
      {R"re([^-a])re", {"b", "\n"}, {"-", "a"}},
      {R"re([a-c-e])re", {"a", "b", "c", "-", "e"}, {"d"}},
      {R"re([\d\s_])re", {"5", " ", "\n", "_"}, {"a", "-"}},
      {R"re([\w.]+)re", {"a.b_1", "é.中"}, {"a-b", "€"}},
      {R"re([\W\d])re", {"-", "5", "€", "١"}, {"a", "_", "é"}},
      {R"re([\S\s])re", {"a", " ", "\n", "😀"}, {"", "ab"}},
      {R"re([\-\\\^])re", {"-", "\\", "^"}, {"a"}},
      {R"re([\b])re", {"\b"}, {"b", "\\"}},  // backspace inside a class
      {R"re([\x41-\x43\n])re", {"A", "C", "\n"}, {"D", "x"}},
      {R"re([.*+?(){}|$])re", {".", "*", "+", "?", "(", ")", "{", "}", "|", "$"}, {"a", "\\"}},
      {R"re([[])re", {"["}, {"]"}},
  });
}

TEST(RegexGrammar, NegatedClasses) {
  check({
      {R"re([^a])re", {"b", "\n", "é", "中", "😀", "\xf4\x8f\xbf\xbf"}, {"a", "", "bb"}},
      {R"re([^"\\]*)re", {"", "abc", "é中😀\n'"}, {"\"", "a\\b", "ab\""}},
      {R"re([^\d])re", {"a", "é", "²"}, {"5", "١"}},
      {R"re([^\W])re", {"a", "_", "9", "é"}, {"-", "€"}},
      {R"re([^\n])re", {"a", "\r"}, {"\n"}},
      {R"re([^é中])re", {"e", "\xc3\xaa", "\xe4\xb8\xac", "😀"}, {"é", "中"}},
  });
}

TEST(RegexGrammar, Utf8LiteralsAndClasses) {
  check({
      {R"re(é+)re", {"é", "ééé"}, {"", "e", "\xc3", "é\xa9"}},
      {R"re(中文|😀)re", {"中文", "😀"}, {"中", "文", "中文😀"}},
      {R"re([à-ÿ]+)re", {"à", "ÿ", "éèê"}, {"ß", "Ā", "a"}},  // U+00E0..U+00FF
      {R"re([a-zà-ÿ]*)re", {"", "caféé"}, {"Café"}},
      {R"re([\u0100-\u017f])re", {"Ā", "ſ", "ł"}, {"ÿ", "ƀ"}},
      {R"re([😀-🙏]{2})re", {"😀🙏", "😂😂"}, {"😀", "🙐🙐", "😀a"}},
      {R"re([α-ω]+ [а-я]+)re", {"αβγ где"}, {"αβγ gde"}},
      {R"re([\u0080-\u07ff])re", {"\xc2\x80", "\xdf\xbf", "é"}, {"\x7f", "\xe0\xa0\x80"}},
      {R"re([\u0800-\uffff])re",
       {"\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80", "\xef\xbf\xbf", "中"},
       {"\xdf\xbf", "\xed\xa0\x80", "\xed\xbf\xbf", "\xf0\x90\x80\x80"}},
      {R"re([\U00010000-\U0010ffff])re",
       {"\xf0\x90\x80\x80", "\xf3\xbf\xbf\xbf", "\xf4\x8f\xbf\xbf", "😀"},
       {"\xef\xbf\xbf", "\xf4\x90\x80\x80"}},
      {R"re([\ud7ff-\ue000])re", {"\xed\x9f\xbf", "\xee\x80\x80"}, {"\xed\xa0\x80"}},
      {R"re([\x00-\x7f]+)re", {"abc\n", std::string(1, '\0')}, {"é", "\x80"}},
  });
}

// Bytes that are no UTF-8 encoding of a scalar value: never matched by `.`, a negated class or a
// negated escape.
TEST(RegexGrammar, InvalidUtf8NeverMatches) {
  const std::vector<std::string> invalid = {
      "\x80",  // a lone continuation byte
      "\xbf",  //
      "\xc3",  // a lead byte without its continuation
      "\xc3"
      "a",                 //
      "\xc0\x80",          // overlong
      "\xc1\xbf",          //
      "\xe0\x80\x80",      // overlong
      "\xed\xa0\x80",      // an encoded surrogate (U+D800)
      "\xed\xbf\xbf",      // U+DFFF
      "\xf0\x80\x80\x80",  // overlong
      "\xf4\x90\x80\x80",  // above U+10FFFF
      "\xf5\x80\x80\x80",  //
      "\xfe",              //
      "\xff",              //
  };
  for (const char* pattern : {".", "[^a]", "\\W", "\\D", "\\S", "[^\\x00-\\x7f]", ".*", "[^\"]+"}) {
    Grammar g;
    g.set_start(compile_regex(g, pattern));
    const GrammarMatcher m(g);
    for (const std::string& s : invalid) {
      EXPECT_FALSE(m.matches(s)) << pattern << " on " << printable(s);
      EXPECT_FALSE(m.matches("a" + s)) << pattern << " on a" << printable(s);
    }
  }
}

TEST(RegexGrammar, GroupsAndAlternation) {
  check({
      {R"re(a(bc)d)re", {"abcd"}, {"abd", "abcbcd"}},
      {R"re((?:ab)+)re", {"ab", "abab"}, {"", "aba"}},
      {R"re(((a)(b(c)))*)re", {"", "abc", "abcabc"}, {"ab", "abcab"}},
      {R"re((a|b(c|d(e|f)))g)re", {"ag", "bcg", "bdeg", "bdfg"}, {"bg", "bdg", "abg"}},
      {R"re((?P<year>\d{4})-(?P<month>\d\d))re", {"2024-05"}, {"24-05", "2024-5"}},
      {R"re(cat|dog|)re", {"cat", "dog", ""}, {"catdog", "ca"}},
      {R"re(a|)re", {"a", ""}, {"aa"}},
      {R"re(|a)re", {"a", ""}, {"aa"}},
      {R"re(a||b)re", {"a", "b", ""}, {"ab"}},
      {R"re((|a)b)re", {"b", "ab"}, {"aab", "a"}},
      {R"re(()x())re", {"x"}, {"", "xx"}},
      {R"re(|)re", {""}, {"a"}},
      {R"re(x(?:a|b|)*y)re", {"xy", "xaby", "xbbbay"}, {"xcy", "x"}},
  });
}

TEST(RegexGrammar, EcmaScriptExtras) {
  check({
      {R"ecma((?<word>\w+) (?<num>\d+))ecma", {"abc 12"}, {"abc", "abc x"}},
      // A UTF-16 pair of \u escapes is one code point (a JSON schema's pattern written in JS).
      {R"ecma(\ud83d\ude00+)ecma", {"😀", "😀😀"}, {"", "\xed\xa0\xbd\xed\xb8\x80"}},
      {R"ecma([\ud83d\ude00-\ud83d\ude4f])ecma", {"😀", "🙏"}, {"🙐", "a"}},
      // A class range over the surrogates: they are left out, as no UTF-8 text holds them.
      {R"ecma([\ud800-\udfff])ecma", {}, {"\xed\xa0\x80", "a", ""}},
  });
}

TEST(RegexGrammar, Quantifiers) {
  check({
      {R"re(ab*c)re", {"ac", "abc", "abbbbc"}, {"abbd", "bc"}},
      {R"re(ab+c)re", {"abc", "abbc"}, {"ac"}},
      {R"re(ab?c)re", {"ac", "abc"}, {"abbc"}},
      {R"re(a{3})re", {"aaa"}, {"aa", "aaaa", ""}},
      {R"re(a{2,})re", {"aa", "aaaaaaa"}, {"a", ""}},
      {R"re(a{2,4})re", {"aa", "aaa", "aaaa"}, {"a", "aaaaa"}},
      {R"re(a{,2})re", {"", "a", "aa"}, {"aaa"}},
      {R"re(a{,})re", {"", "a", "aaaa"}, {"b"}},
      {R"re(a{0})re", {""}, {"a"}},
      {R"re(a{0,0}b)re", {"b"}, {"ab"}},
      {R"re(a{1}b{1,1})re", {"ab"}, {"a", "abb"}},
      {R"re((ab){2,3})re", {"abab", "ababab"}, {"ab", "abababab", "aba"}},
      {R"re((a|bc){2})re", {"aa", "abc", "bca", "bcbc"}, {"a", "bcb", "aaa"}},
      {R"re(é{2}中{1,2})re", {"éé中", "éé中中"}, {"é中", "éé中中中"}},
      {R"re([0-9]{3}-[0-9]{4})re", {"555-1234"}, {"55-1234", "5555-123"}},
      {R"re((a*)*b)re", {"b", "aaab"}, {"aaa"}},
      {R"re((a+)?b)re", {"b", "aab"}, {"a"}},
      {R"re((a?){3})re", {"", "a", "aa", "aaa"}, {"aaaa"}},
      {R"re((a{2}){2,3})re", {"aaaa", "aaaaaa"}, {"aaa", "aaaaa", "aaaaaaaa"}},
      {R"re(a{01,02})re", {"a", "aa"}, {"aaa"}},
  });
}

TEST(RegexGrammar, LazyQuantifiersMatchLikeGreedy) {
  check({
      {R"re(a*?b)re", {"b", "aab"}, {"aa"}},
      {R"re(a+?)re", {"a", "aaa"}, {""}},
      {R"re(a??b)re", {"b", "ab"}, {"aab"}},
      {R"re(a{2,3}?)re", {"aa", "aaa"}, {"a", "aaaa"}},
      {R"re(a{2,}?)re", {"aa", "aaaaa"}, {"a"}},
      {R"re(<.*?>)re", {"<a>", "<a><b>"}, {"<a"}},
  });
}

TEST(RegexGrammar, BraceWithoutQuantifierIsLiteral) {
  check({
      {R"re(a{)re", {"a{"}, {"a"}},
      {R"re(a{})re", {"a{}"}, {"a"}},
      {R"re(a{,)re", {"a{,"}, {"a"}},
      {R"re(a{1,2)re", {"a{1,2"}, {"a", "aa"}},
      {R"re(a{x})re", {"a{x}"}, {"a"}},
      {R"re(x{ 1})re", {"x{ 1}"}, {"x"}},
      {R"re({)re", {"{"}, {""}},
      {R"re({"a":\d})re", {"{\"a\":1}"}, {"{\"a\":}"}},
      {R"re(a{2}{)re", {"aa{"}, {"aa"}},
  });
}

TEST(RegexGrammar, AnchorsAtTheEndsAreIgnored) {
  check({
      {R"re(^abc$)re", {"abc"}, {"", "abcabc", "abc\n"}},
      {R"re(^a|b$)re", {"a", "b"}, {"ab", ""}},
      {R"re(^a$|^b$|c)re", {"a", "b", "c"}, {"ab"}},
      {R"re(^$)re", {""}, {"a", "\n"}},
      {R"re(^)re", {""}, {"a"}},
      {R"re($)re", {""}, {"a"}},
      {R"re(^^a$$)re", {"a"}, {"aa"}},
      {R"re(^(a|b)+$)re", {"abba"}, {"abc"}},
  });
}

// Each RegexError names the offset of what it refuses.
TEST(RegexGrammar, Errors) {
  const struct {
    std::string pattern;
    std::string message;  // what() from its start
  } cases[] = {
      {")", "regex: offset 0: unbalanced ')'"},
      {"ab)c", "regex: offset 2: unbalanced ')'"},
      {"(a))", "regex: offset 3: unbalanced ')'"},
      {"(ab", "regex: offset 0: missing ')'"},
      {"a(b(c)", "regex: offset 1: missing ')'"},
      {"[ab", "regex: offset 0: unterminated character class"},
      {"a[]", "regex: offset 1: unterminated character class"},
      {"[^]", "regex: offset 0: unterminated character class"},
      {"[a-", "regex: offset 0: unterminated character class"},
      {"x[z-a]", "regex: offset 2: bad character range"},
      {"[\\d-z]", "regex: offset 1: bad character range"},
      {"[a-\\w]", "regex: offset 1: bad character range"},
      {"*a", "regex: offset 0: nothing to repeat"},
      {"a|*", "regex: offset 2: nothing to repeat"},
      {"(?:+)", "regex: offset 3: nothing to repeat"},
      {"^*", "regex: offset 1: nothing to repeat"},
      {"{2}", "regex: offset 0: nothing to repeat"},
      {"a**", "regex: offset 2: multiple repeat"},
      {"a{2}{3}", "regex: offset 4: multiple repeat"},
      {"a*??", "regex: offset 3: multiple repeat"},
      {"a*+", "regex: offset 2: possessive quantifiers are not supported"},
      {"a{2}+", "regex: offset 4: possessive quantifiers are not supported"},
      {"a{1001}", "regex: offset 1: repeat count above 1000"},
      {"ab{2,5000}", "regex: offset 2: repeat count above 1000"},
      {"a{3,2}", "regex: offset 1: min repeat greater than max repeat"},
      {"a\\1", "regex: offset 1: backreferences are not supported"},
      {"(a)\\k<x>", "regex: offset 3: backreferences are not supported"},
      {"(?P<n>a)(?P=n)", "regex: offset 8: backreferences are not supported"},
      {"[\\1]", "regex: offset 1: octal escapes are not supported"},
      {"a(?=b)", "regex: offset 1: lookahead is not supported"},
      {"(?!b)", "regex: offset 0: lookahead is not supported"},
      {"x(?<=a)b", "regex: offset 1: lookbehind is not supported"},
      {"(?<!a)b", "regex: offset 0: lookbehind is not supported"},
      {"(?i)a", "regex: offset 0: inline flags are not supported"},
      {"a(?s:.)", "regex: offset 1: inline flags are not supported"},
      {"(?>a)", "regex: offset 0: atomic groups are not supported"},
      {"(?#c)a", "regex: offset 0: comments are not supported"},
      {"(a)(?(1)a|b)", "regex: offset 3: conditional groups are not supported"},
      {"(?", "regex: offset 2: unexpected end of pattern"},
      {"(?%a)", "regex: offset 0: unknown group extension"},
      {"a\\b", "regex: offset 1: word boundaries (\\b) are not supported"},
      {"\\Bx", "regex: offset 0: word boundaries (\\B) are not supported"},
      {"\\Aa", "regex: offset 0: anchors (\\A) are not supported"},
      {"a\\Z", "regex: offset 1: anchors (\\Z) are not supported"},
      {"a^", "regex: offset 1: '^' is supported only"},
      {"(^a)", "regex: offset 1: '^' is supported only"},
      {"a$b", "regex: offset 1: '$' is supported only"},
      {"(a$)", "regex: offset 2: '$' is supported only"},
      {"\\q", "regex: offset 0: unsupported escape '\\q'"},
      {"ab\\a", "regex: offset 2: unsupported escape '\\a'"},
      {"\\p{L}", "regex: offset 0: Unicode property escapes are not supported"},
      {"\\x4g", "regex: offset 0: incomplete escape '\\x'"},
      {"a\\u12", "regex: offset 1: incomplete escape '\\u'"},
      {"\\U0011ffff", "regex: offset 0: code point above U+10FFFF"},
      {"\\ud800", "regex: offset 0: a lone surrogate"},
      {"[a\\udc00]", "regex: offset 2: a lone surrogate"},
      {"ab\\", "regex: offset 2: a trailing '\\'"},
      {"(?P<1a>x)", "regex: offset 4: bad character in group name"},
      {"(?P<a-b>x)", "regex: offset 5: bad character in group name"},
      {"(?P<>x)", "regex: offset 4: missing group name"},
      {"(?P<n", "regex: offset 0: unterminated group name"},
      {"(?P<n>a)(?P<n>b)", "regex: offset 12: redefinition of group name 'n'"},
      {"(?P>n)", "regex: offset 0: unknown group extension"},
      {"a\xff", "regex: offset 1: invalid UTF-8 in the pattern"},
      {"\xc3", "regex: offset 0: invalid UTF-8 in the pattern"},
      {"ab\xed\xa0\x80", "regex: offset 2: invalid UTF-8 in the pattern"},
      {std::string(300, '(') + std::string(300, ')'), "regex: offset 256: groups nested more"},
  };
  for (const auto& c : cases) {
    const std::string what = error_of(c.pattern);
    EXPECT_EQ(what.substr(0, c.message.size()), c.message) << "pattern " << printable(c.pattern);
  }
  // Just inside the limits.
  EXPECT_EQ(error_of("a{1000}"), "");
  EXPECT_EQ(error_of(std::string(256, '(') + "a" + std::string(256, ')')), "");
  EXPECT_TRUE(full_match("a{0,1000}", std::string(1000, 'a')));
  EXPECT_FALSE(full_match("a{0,1000}", std::string(1001, 'a')));
  EXPECT_TRUE(full_match("(ab){1000}", [] {
    std::string s;
    for (int i = 0; i < 1000; ++i) s += "ab";
    return s;
  }()));
}

// A pattern that can match nothing compiles to a rule that accepts nothing and allows no byte.
TEST(RegexGrammar, EmptyClassMatchesNothing) {
  check({
      {R"re([^\s\S])re", {}, {"", "a", " "}},
      {R"re([^\x00-\U0010ffff])re", {}, {"", "a", "😀"}},
      {R"re(a|[^\d\D]b)re", {"a"}, {"b", ""}},
      {R"re(a[^\w\W]*)re", {"a"}, {"aa"}},
      {R"re((x[^\w\W])?y)re", {"y"}, {"xy"}},
  });
  Grammar g;
  g.set_start(compile_regex(g, "[^\\s\\S]"));
  const GrammarMatcher m(g);
  EXPECT_FALSE(m.initial().accepting);
  EXPECT_TRUE(m.next_bytes(m.initial()).none());
}

// A class's alternatives share their terminals: [^"\\] (every code point but two) is a handful
// of alternatives, not one per lead byte or code point.
TEST(RegexGrammar, ClassesStaySmall) {
  for (const char* pattern : {"[^\"\\\\]", ".", "[^a]*", "[\\x00-\\U0010ffff]"}) {
    Grammar g;
    const Grammar::Symbol s = compile_regex(g, pattern);
    std::size_t alternatives = 0;
    for (std::size_t r = 0; r < g.num_rules(); ++r) {
      alternatives += g.alternatives(static_cast<Grammar::Symbol>(r)).size();
    }
    EXPECT_LE(g.num_rules(), 3u) << pattern;
    EXPECT_LE(alternatives, 12u) << pattern;
    EXPECT_LE(g.num_terminals(), 13u) << pattern;  // the lead and continuation ranges
    g.set_start(s);
    EXPECT_TRUE(GrammarMatcher(g).matches("é")) << pattern;
  }
  // \w and \W (hundreds of ranges) are a trie of their UTF-8 bytes: before each byte, one parse
  // per group of next bytes with the same continuations (a few dozen), not one per range.
  for (const char* pattern : {"\\w", "\\W"}) {
    Grammar g;
    g.set_start(compile_regex(g, pattern));
    const GrammarMatcher m(g);
    const auto parses = [](const GrammarState& st) {
      std::size_t n = 0;
      for (std::size_t i = 0; i < st.stacks.size(); i += static_cast<std::size_t>(st.stacks[i]) + 1)
        ++n;
      return n;
    };
    EXPECT_LE(parses(m.initial()), 40u) << pattern;
    for (const char* lead : {"a", "\xc3", "\xe4", "\xe4\xb8", "\xf0", "\xf0\x9f"}) {
      const GrammarState st = m.advance(m.initial(), lead);
      EXPECT_LE(parses(st), 40u) << pattern << " after " << printable(lead);
    }
  }
  // A class used twice is built once.
  Grammar one, two;
  compile_regex(one, "[^\"\\\\]");
  compile_regex(two, "[^\"\\\\]x[^\"\\\\]");
  EXPECT_EQ(two.num_rules(), one.num_rules());
}

// Every code point at the edges of the UTF-8 lengths, of the surrogates and of 64- and
// 4096-code-point blocks, plus a stride through the rest, against `.`, [^a] and \W.
TEST(RegexGrammar, EveryKindOfCodePoint) {
  std::vector<char32_t> probes;
  for (char32_t c = 0; c < 0x1000; ++c) probes.push_back(c);
  for (char32_t c = 0x1000; c <= 0x10FFFF; c += 61) probes.push_back(c);
  for (const char32_t edge :
       {0x7Fu, 0x7FFu, 0xFFFu, 0xD7FFu, 0xDFFFu, 0xFFFFu, 0x3FFFFu, 0xFFFFFu, 0x10FFFFu}) {
    for (char32_t c = edge > 2 ? edge - 2 : 0; c <= edge + 2 && c <= 0x10FFFF; ++c) {
      probes.push_back(c);
    }
  }
  Grammar g;
  const Grammar::Symbol dot = compile_regex(g, ".");
  const Grammar::Symbol not_a = compile_regex(g, "[^a]");
  const Grammar::Symbol non_word = compile_regex(g, "\\W");
  const auto matcher = [&](Grammar::Symbol s) {
    g.set_start(s);
    return GrammarMatcher(g);
  };
  const GrammarMatcher m_dot = matcher(dot), m_not_a = matcher(not_a),
                       m_non_word = matcher(non_word);
  for (const char32_t c : probes) {
    if (surrogate(c)) continue;
    const std::string s = utf8(c);
    const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    const bool word = c == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
                      (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
    ASSERT_EQ(m_dot.matches(s), c != '\n') << std::hex << static_cast<unsigned>(c);
    ASSERT_EQ(m_not_a.matches(s), c != 'a') << std::hex << static_cast<unsigned>(c);
    ASSERT_EQ(m_non_word.matches(s), !word) << std::hex << static_cast<unsigned>(c);
  }
}

// Random code-point ranges [lo-hi] and [^lo-hi], probed at and around their ends, the UTF-8
// length edges and the continuation-byte block edges near them.
TEST(RegexGrammar, RandomRangesSplitCorrectly) {
  std::mt19937 rng(20240611);
  const std::vector<char32_t> edges = {0,      0x7F,   0x80,   0x7FF,   0x800,   0xFFF,   0x1000,
                                       0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x3FFFF, 0x40000, 0x10FFFF};
  const auto random_cp = [&] {
    switch (rng() % 4) {
      case 0:
        return edges[rng() % edges.size()];
      case 1:
        return static_cast<char32_t>(rng() % 0x800);
      case 2:
        return static_cast<char32_t>(rng() % 0x10000);
      default:
        return static_cast<char32_t>(rng() % 0x110000);
    }
  };
  for (int round = 0; round < 150; ++round) {
    char32_t lo = random_cp(), hi = random_cp();
    if (lo > hi) std::swap(lo, hi);
    char pattern[64];
    std::snprintf(pattern, sizeof pattern, "[\\U%08X-\\U%08X]", static_cast<unsigned>(lo),
                  static_cast<unsigned>(hi));
    char negated[64];
    std::snprintf(negated, sizeof negated, "[^\\U%08X-\\U%08X]", static_cast<unsigned>(lo),
                  static_cast<unsigned>(hi));
    Grammar g;
    const Grammar::Symbol in = compile_regex(g, pattern);
    const Grammar::Symbol out = compile_regex(g, negated);
    g.set_start(in);
    const GrammarMatcher m_in(g);
    g.set_start(out);
    const GrammarMatcher m_out(g);
    std::vector<char32_t> probes = edges;
    for (const char32_t c : {lo, hi}) {
      for (const std::int64_t d : {-65, -64, -63, -2, -1, 0, 1, 2, 63, 64, 65}) {
        probes.push_back(static_cast<char32_t>(static_cast<std::int64_t>(c) + d));
      }
      probes.push_back(c & ~0x3Fu);
      probes.push_back(c | 0x3Fu);
      probes.push_back(c & ~0xFFFu);
      probes.push_back(c | 0xFFFu);
    }
    for (int i = 0; i < 20; ++i) probes.push_back(lo + rng() % (hi - lo + 1));
    for (int i = 0; i < 10; ++i) probes.push_back(random_cp());
    for (const char32_t c : probes) {
      if (c > 0x10FFFF || surrogate(c)) continue;
      const bool inside = lo <= c && c <= hi;
      ASSERT_EQ(m_in.matches(utf8(c)), inside)
          << pattern << " U+" << std::hex << static_cast<unsigned>(c);
      ASSERT_EQ(m_out.matches(utf8(c)), !inside)
          << negated << " U+" << std::hex << static_cast<unsigned>(c);
    }
  }
}

// Long texts stay cheap: the grammar's parses do not multiply with the text.
TEST(RegexGrammar, LongTexts) {
  std::string words;
  for (int i = 0; i < 2000; ++i) words += "word ";
  EXPECT_TRUE(full_match(R"((\w+\s?)*)", words));
  EXPECT_TRUE(full_match(R"([^"\\]*)", std::string(50000, 'x') + "é中😀"));
  EXPECT_FALSE(full_match(R"([^"\\]*)", std::string(50000, 'x') + "\""));
  EXPECT_TRUE(full_match(R"((a|ab)*(b|))", std::string(5000, 'a') + "b"));
  EXPECT_TRUE(full_match(R"(((a*)*)*b)", std::string(3000, 'a') + "b"));
  EXPECT_TRUE(full_match(R"((.*,)*.*)", [] {
    std::string s;
    for (int i = 0; i < 500; ++i) s += "ab,";
    return s;
  }()));
}

// Several patterns in one grammar (a JSON schema's strings each have one).
TEST(RegexGrammar, SeveralPatternsInOneGrammar) {
  Grammar g;
  const Grammar::Symbol a = compile_regex(g, "[a-z]+");
  const Grammar::Symbol b = compile_regex(g, "[0-9]{2}");
  g.set_start(g.rule({{a, g.byte('='), b}}));
  const GrammarMatcher m(g);
  EXPECT_TRUE(m.matches("abc=42"));
  EXPECT_FALSE(m.matches("abc=4"));
  EXPECT_FALSE(m.matches("=42"));
}

// Random texts over a small alphabet against ASCII patterns on which ECMAScript and Python agree,
// the verdict from std::regex_match.
TEST(RegexGrammar, AgreesWithStdRegex) {
  const char* patterns[] = {
      "(a|b)*abb",
      "a{2,3}b?c*",
      "[^a]*a",
      "(ab|a)(bc|c)*",
      "a*?b+?c??",
      "((a|b)c)*|b{2}",
      "[a-c]+1{1,}",
      "(?:ab)+|c",
      "a|",
      "(a|)(b|)c?",
      "[^bc]{0,2}(b|c){1}",
      "\\w+\\s?\\d*",
      "\\W|\\S\\S",
      "[\\w\\s]{2,4}",
      "(a*)*b",
      "(a|ab)(c|bcd)(d*)",
      ".a.",
      "[-a]+|[b-]",
      "(?:a(?:b(?:c)?)?)+",
      "\\D\\d?",
      "x?|[^x\\n]+",
      "(a|b|c|1| |\\n|-|_){3,5}",
      "([ab]{1,2}c?){2}",
      "(\\s|-)*1",
  };
  const std::string alphabet = "abc1 \n-_";
  std::mt19937 rng(7);
  int positives = 0;
  for (const char* pattern : patterns) {
    SCOPED_TRACE(pattern);
    Grammar g;
    g.set_start(compile_regex(g, pattern));
    const GrammarMatcher m(g);
    const std::regex re(pattern, std::regex::ECMAScript);
    for (int i = 0; i < 300; ++i) {
      std::string s;
      const int n = static_cast<int>(rng() % 9);
      for (int k = 0; k < n; ++k) s.push_back(alphabet[rng() % alphabet.size()]);
      const bool expected = std::regex_match(s, re);
      positives += expected;
      ASSERT_EQ(m.matches(s), expected) << "text \"" << printable(s) << '"';
    }
  }
  EXPECT_GT(positives, 500);  // the texts are not mostly refused
}

}  // namespace
}  // namespace servelab
