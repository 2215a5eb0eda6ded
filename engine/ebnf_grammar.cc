#include "engine/ebnf_grammar.h"

#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "engine/regex_grammar.h"
#include "serving/utf8.h"

namespace servelab {
namespace {

using Symbol = Grammar::Symbol;

constexpr std::int64_t kMaxCount = 1000;
// Parenthesised groups nest at most this deep (the parser recurses once per level; the regex
// compiler has the same bound).
constexpr int kMaxNesting = 256;

class Parser {
 public:
  Parser(Grammar& g, std::string_view text) : g_(g), t_(text) {}

  Symbol run() {
    skip();
    if (at_end()) fail("expected a rule (name ::= expression)");
    while (!at_end()) {
      const std::size_t where = pos_;
      const std::string name = read_name();
      skip();
      if (!t_.substr(pos_).starts_with("::=")) fail("expected '::=' after the rule name");
      pos_ += 3;
      if (defined_.contains(name)) {
        pos_ = where;
        fail("the rule '" + name + "' is defined twice");
      }
      defined_[name] = true;
      const Symbol r = rule_of(name);
      std::vector<std::vector<Symbol>> alts = alternatives(/*top=*/true);
      for (std::vector<Symbol>& a : alts) g_.add(r, std::move(a));
    }
    for (const auto& [name, first_use] : used_) {
      if (!defined_.contains(name)) {
        pos_ = first_use;
        fail("the rule '" + name + "' is used but never defined");
      }
    }
    if (!defined_.contains("root")) fail("no 'root' rule (where the output starts)");
    return rules_.at("root");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < pos_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw EbnfError("grammar: line " + std::to_string(line) + ", column " + std::to_string(col) +
                    ": " + what);
  }
  bool at_end() const { return pos_ >= t_.size(); }
  char peek() const { return at_end() ? '\0' : t_[pos_]; }
  void skip() {
    while (!at_end()) {
      if (std::isspace(static_cast<unsigned char>(peek()))) {
        ++pos_;
      } else if (peek() == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  static bool name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  }
  std::string read_name() {
    if (at_end() || !name_char(peek()) || std::isdigit(static_cast<unsigned char>(peek()))) {
      fail("expected a rule name");
    }
    const std::size_t start = pos_;
    while (!at_end() && name_char(peek())) ++pos_;
    return std::string(t_.substr(start, pos_ - start));
  }
  // Whether a new rule begins here (a name, then '::=').
  bool rule_begins() const {
    std::size_t p = pos_;
    if (p >= t_.size() || !name_char(t_[p]) || std::isdigit(static_cast<unsigned char>(t_[p]))) {
      return false;
    }
    while (p < t_.size() && name_char(t_[p])) ++p;
    while (p < t_.size() && (t_[p] == ' ' || t_[p] == '\t' || t_[p] == '\n' || t_[p] == '\r')) {
      ++p;
    }
    return t_.substr(p).starts_with("::=");
  }
  Symbol rule_of(const std::string& name) {
    const auto it = rules_.find(name);
    if (it != rules_.end()) return it->second;
    const Symbol r = g_.new_rule();
    g_.set_name(r, name);
    return rules_[name] = r;
  }

  std::vector<std::vector<Symbol>> alternatives(bool top) {
    std::vector<std::vector<Symbol>> alts;
    alts.push_back(sequence(top));
    while (peek() == '|') {
      ++pos_;
      alts.push_back(sequence(top));
    }
    return alts;
  }

  std::vector<Symbol> sequence(bool top) {
    std::vector<Symbol> seq;
    while (true) {
      skip();
      if (at_end() || peek() == '|' || peek() == ')' || (top && rule_begins())) break;
      Symbol item = primary();
      skip();
      item = quantified(item);
      seq.push_back(item);
    }
    return seq;
  }

  Symbol primary() {
    const char c = peek();
    if (c == '"') return string_literal();
    if (c == '[') return char_class();
    if (c == '(') {
      if (depth_ == kMaxNesting) {
        fail("groups nested more than " + std::to_string(kMaxNesting) + " deep");
      }
      ++pos_;
      ++depth_;
      std::vector<std::vector<Symbol>> alts = alternatives(/*top=*/false);
      --depth_;
      skip();
      if (peek() != ')') fail("expected ')'");
      ++pos_;
      return g_.rule(std::move(alts));
    }
    if (name_char(c) && !std::isdigit(static_cast<unsigned char>(c))) {
      const std::size_t where = pos_;
      const std::string name = read_name();
      used_.emplace(name, where);
      return rule_of(name);
    }
    fail(std::string("unexpected '") + c + "' (expected a string, a class, a rule name or '(')");
  }

  Symbol quantified(Symbol item) {
    while (true) {
      const char c = peek();
      if (c == '*') {
        item = g_.star(item);
      } else if (c == '+') {
        item = g_.plus(item);
      } else if (c == '?') {
        item = g_.optional(item);
      } else if (c == '{') {
        ++pos_;
        const std::int64_t m = number();
        std::int64_t n = m;
        skip();
        if (peek() == ',') {
          ++pos_;
          skip();
          n = peek() == '}' ? -1 : number();
        }
        skip();
        if (peek() != '}') fail("expected '}' closing the count");
        if (n >= 0 && n < m) fail("a count's maximum is below its minimum");
        item = g_.repeat(item, m, n);
      } else {
        return item;
      }
      ++pos_;
      skip();
    }
  }

  std::int64_t number() {
    skip();
    if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a count");
    std::int64_t v = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      v = v * 10 + (peek() - '0');
      if (v > kMaxCount) fail("a count above 1000");
      ++pos_;
    }
    return v;
  }

  std::uint32_t hex(int digits) {
    std::uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      if (!std::isxdigit(static_cast<unsigned char>(c))) fail("expected a hex digit");
      v = v * 16 + static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(c))
                                                  ? c - '0'
                                                  : std::tolower(c) - 'a' + 10);
      ++pos_;
    }
    return v;
  }

  Symbol string_literal() {
    ++pos_;  // the opening quote
    std::string bytes;
    while (true) {
      if (at_end() || peek() == '\n') fail("a string without its closing '\"'");
      const char c = peek();
      ++pos_;
      if (c == '"') break;
      if (c != '\\') {
        bytes += c;
        continue;
      }
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"':
          bytes += '"';
          break;
        case '\\':
          bytes += '\\';
          break;
        case 'n':
          bytes += '\n';
          break;
        case 'r':
          bytes += '\r';
          break;
        case 't':
          bytes += '\t';
          break;
        case 'x':  // the code point U+00HH (as llama.cpp's GBNF and xgrammar read it), in UTF-8
          utf8::append(bytes, hex(2));
          break;
        case 'u': {
          const std::uint32_t cp = hex(4);
          if (cp >= 0xD800 && cp <= 0xDFFF) fail("a surrogate code point cannot appear in UTF-8");
          utf8::append(bytes, cp);
          break;
        }
        case 'U': {
          const std::uint32_t cp = hex(8);
          if (cp > 0x10FFFF) fail("a code point above U+10FFFF");
          if (cp >= 0xD800 && cp <= 0xDFFF) fail("a surrogate code point cannot appear in UTF-8");
          utf8::append(bytes, cp);
          break;
        }
        default:
          --pos_;
          fail(std::string("unknown escape '\\") + e + "'");
      }
    }
    return g_.literal_rule(bytes);
  }

  Symbol char_class() {
    const std::size_t start = pos_;
    ++pos_;
    if (peek() == '^') ++pos_;
    if (peek() == ']') ++pos_;  // a literal ']' first
    while (!at_end() && peek() != ']') {
      if (peek() == '\n') break;
      if (peek() == '\\') ++pos_;
      ++pos_;
    }
    if (at_end() || peek() != ']') {
      pos_ = start;
      fail("a character class without its closing ']'");
    }
    ++pos_;
    try {
      return compile_regex(g_, t_.substr(start, pos_ - start));
    } catch (const RegexError& e) {
      pos_ = start;
      fail(std::string("in this character class, ") + e.what());
    }
  }

  Grammar& g_;
  std::string_view t_;
  std::size_t pos_ = 0;
  int depth_ = 0;  // groups open at pos_
  std::map<std::string, Symbol> rules_;
  std::map<std::string, bool> defined_;
  std::map<std::string, std::size_t> used_;  // name -> first use
};

}  // namespace

Grammar::Symbol compile_ebnf(Grammar& g, std::string_view text) { return Parser(g, text).run(); }

}  // namespace servelab
