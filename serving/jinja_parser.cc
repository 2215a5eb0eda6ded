// Lexer and parser of the Jinja subset (serving/jinja.h), in Hugging Face's environment:
// trim_blocks (the newline after a block or comment tag is dropped) and lstrip_blocks (spaces
// and tabs before a block or comment tag alone on its line are dropped), `-` and `+` whitespace
// control, {% raw %}. Expression precedence follows Jinja2's parser: conditional, or, and, not,
// comparisons, + -, ~, * / // %, **, unary - +, then postfix (. [] ()), filters and tests.
#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include "core/config_error.h"
#include "serving/jinja_ast.h"
#include "serving/unicode_space.h"
#include "serving/utf8.h"

namespace servelab::jinja {

namespace {

struct Tok {
  enum class Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEnd
  };
  Type type = Type::kEnd;
  std::string text;
  int line = 0;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Python's str.lstrip() and rstrip() (Unicode whitespace), as Jinja's `-` strips.
std::string_view lstripped(std::string_view s) {
  std::size_t b = 0;
  for (std::size_t n; (n = unicode_space::at(s, b)) > 0;) b += n;
  return s.substr(b);
}
std::string_view rstripped(std::string_view s) {
  std::size_t e = s.size();
  for (std::size_t n; (n = unicode_space::before(s, e)) > 0;) e -= n;
  return s.substr(0, e);
}

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& origin) : src_(src), origin_(origin) {}

  std::vector<Tok> run() {
    bool strip_next = false;  // the previous tag ended with '-'
    bool trim_next = false;   // the previous tag was a block or comment (trim_blocks)
    while (pos_ <= src_.size()) {
      const std::size_t start = find_tag(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      const int text_line = line_;
      count_lines(pos_, start);
      if (strip_next) {
        text.erase(0, text.size() - lstripped(text).size());
      } else if (trim_next) {
        if (text.starts_with("\r\n")) {
          text.erase(0, 2);
        } else if (text.starts_with("\n")) {
          text.erase(0, 1);
        }
      }
      strip_next = trim_next = false;
      if (start == src_.size()) {
        push_text(std::move(text), text_line);
        break;
      }
      const char kind = src_[start + 1];
      const char control = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (control == '-') {
        text.resize(rstripped(text).size());
      } else if (control != '+' && kind != '{') {
        // lstrip_blocks: only spaces and tabs between the line's start and the tag.
        std::size_t b = start;
        while (b > 0 && (src_[b - 1] == ' ' || src_[b - 1] == '\t')) --b;
        if (b == 0 || src_[b - 1] == '\n') {
          const std::size_t n = std::min(start - b, text.size());
          text.erase(text.size() - n);
        }
      }
      push_text(std::move(text), text_line);
      pos_ = start + 2 + ((control == '-' || control == '+') ? 1 : 0);
      if (kind == '#') {
        const std::size_t end = src_.find("#}", pos_);
        if (end == std::string::npos) fail(line_, "a comment opened here is never closed (#})");
        strip_next = end > pos_ && src_[end - 1] == '-';
        trim_next = !strip_next && !(end > pos_ && src_[end - 1] == '+');
        count_lines(pos_, end);
        pos_ = end + 2;
        continue;
      }
      if (kind == '%' && raw_tag()) {
        strip_next = false;
        trim_next = true;
        continue;
      }
      const bool block = kind == '%';
      toks_.push_back({block ? Tok::Type::kBlockBegin : Tok::Type::kVarBegin, "", line_});
      const char end_trim = lex_tag(block);
      strip_next = end_trim == '-';
      trim_next = block && end_trim != '+' && end_trim != '-';
    }
    toks_.push_back({Tok::Type::kEnd, "", line_});
    return std::move(toks_);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw ConfigError(origin_ + ":" + std::to_string(line) + ": " + what);
  }

  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  void count_lines(std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to && i < src_.size(); ++i) line_ += src_[i] == '\n';
  }

  void push_text(std::string text, int line) {
    if (!text.empty()) toks_.push_back({Tok::Type::kText, std::move(text), line});
  }

  // At "raw %}" (after "{%" and its control): the text up to {% endraw %} as one text token.
  bool raw_tag() {
    std::size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_start(src_[p + 3]))) {
      return false;
    }
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    const bool strip_after_open = src_.compare(p, 3, "-%}") == 0;
    if (!strip_after_open && src_.compare(p, 2, "%}") != 0) fail(line_, "expected %} after raw");
    p += strip_after_open ? 3 : 2;
    std::size_t q = p;
    for (;; ++q) {
      q = src_.find("{%", q);
      if (q == std::string::npos) fail(line_, "{% raw %} opened here is never closed");
      std::size_t r = q + 2;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) ++r;
      while (r < src_.size() && is_space(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && is_space(src_[r])) ++r;
      const bool strip_end = src_.compare(r, 3, "-%}") == 0;
      if (!strip_end && src_.compare(r, 2, "%}") != 0) continue;
      std::string body = src_.substr(p, q - p);
      if (strip_after_open) body.erase(0, body.size() - lstripped(body).size());
      if (src_[q + 2] == '-') body.resize(rstripped(body).size());
      const int body_line = line_;
      count_lines(pos_, r);
      push_text(std::move(body), body_line);
      pos_ = r + (strip_end ? 3 : 2);
      return true;
    }
  }

  // Tokens up to the tag's end; returns the control character before the end ('-', '+' or 0).
  char lex_tag(bool block) {
    const std::string_view close = block ? "%}" : "}}";
    int depth = 0;  // open (, [ and {: a "}}" inside a dict literal does not end the tag
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) {
        line_ += src_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= src_.size()) {
        fail(line_, std::string("a tag is never closed (expected ") + std::string(close) + ")");
      }
      if (depth == 0) {
        for (const char control : {'-', '+'}) {
          if (src_[pos_] == control && src_.compare(pos_ + 1, 2, close) == 0 &&
              (control == '-' || block)) {
            toks_.push_back({block ? Tok::Type::kBlockEnd : Tok::Type::kVarEnd, "", line_});
            pos_ += 3;
            return control;
          }
        }
        if (src_.compare(pos_, 2, close) == 0) {
          toks_.push_back({block ? Tok::Type::kBlockEnd : Tok::Type::kVarEnd, "", line_});
          pos_ += 2;
          return '\0';
        }
      }
      const char c = src_[pos_];
      if (is_name_start(c)) {
        std::size_t e = pos_;
        while (e < src_.size() && (is_name_start(src_[e]) || is_digit(src_[e]))) ++e;
        toks_.push_back({Tok::Type::kName, src_.substr(pos_, e - pos_), line_});
        pos_ = e;
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const std::string_view two : kTwo) {
          if (src_.compare(pos_, 2, two) == 0) op = std::string(two);
        }
        if (op.size() == 1 &&
            std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
          fail(line_, std::string("unexpected character '") + c + "' in a tag");
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        toks_.push_back({Tok::Type::kOp, op, line_});
        pos_ += op.size();
      }
    }
  }

  void lex_number() {
    std::size_t e = pos_;
    bool is_float = false;
    while (e < src_.size() && (is_digit(src_[e]) || src_[e] == '_')) ++e;
    if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      is_float = true;
      ++e;
      while (e < src_.size() && (is_digit(src_[e]) || src_[e] == '_')) ++e;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      std::size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && is_digit(src_[x])) {
        is_float = true;
        e = x;
        while (e < src_.size() && is_digit(src_[e])) ++e;
      }
    }
    std::string text;
    for (std::size_t i = pos_; i < e; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    toks_.push_back({is_float ? Tok::Type::kFloat : Tok::Type::kInt, text, line_});
    pos_ = e;
  }

  // A Python string literal's escapes: \n \t \r \\ \' \" \b \f \v \0 \xHH \uHHHH \UHHHHHHHH;
  // any other backslash stays, as in Python.
  void lex_string(char quote) {
    const int start_line = line_;
    std::string out;
    std::size_t p = pos_ + 1;
    for (;; ++p) {
      if (p >= src_.size()) fail(start_line, "a string opened here is never closed");
      const char c = src_[p];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || p + 1 >= src_.size()) {
        out += c;
        continue;
      }
      const char e = src_[++p];
      auto hex = [&](int n) {
        if (p + n >= src_.size()) fail(line_, "a truncated escape in a string");
        const unsigned cp =
            static_cast<unsigned>(std::strtoul(src_.substr(p + 1, n).c_str(), nullptr, 16));
        p += n;
        utf8::append(out, cp);
      };
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          ++line_;
          break;  // a line continuation
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        default:
          out += '\\';
          out += e;
      }
    }
    toks_.push_back({Tok::Type::kString, std::move(out), start_line});
    pos_ = p + 1;
  }

  const std::string& src_;
  const std::string& origin_;
  std::size_t pos_ = 0;
  int line_ = 1;
  std::vector<Tok> toks_;
};

class Parser {
  static constexpr int kMaxNesting = 200;

 public:
  Parser(std::vector<Tok> toks, const std::string& origin)
      : toks_(std::move(toks)), origin_(origin) {}

  Body parse() {
    std::string found;
    Body body = parse_until({}, &found, 0, "");
    return body;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(peek().line, what); }
  [[noreturn]] void fail_at(int line, const std::string& what) const {
    throw ConfigError(origin_ + ":" + std::to_string(line) + ": " + what);
  }

  const Tok& peek(std::size_t ahead = 0) const {
    return toks_[std::min(i_ + ahead, toks_.size() - 1)];
  }
  Tok next() {
    Tok t = peek();
    if (i_ < toks_.size() - 1) ++i_;
    return t;
  }
  bool at_op(std::string_view op) const {
    return peek().type == Tok::Type::kOp && peek().text == op;
  }
  bool at_name(std::string_view name, std::size_t ahead = 0) const {
    return peek(ahead).type == Tok::Type::kName && peek(ahead).text == name;
  }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  static std::string describe(const Tok& t) {
    switch (t.type) {
      case Tok::Type::kEnd:
        return "the end of the template";
      case Tok::Type::kText:
        return "text";
      case Tok::Type::kVarBegin:
        return "'{{'";
      case Tok::Type::kVarEnd:
        return "'}}'";
      case Tok::Type::kBlockBegin:
        return "'{%'";
      case Tok::Type::kBlockEnd:
        return "'%}'";
      case Tok::Type::kString:
        return "a string";
      default:
        return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail("expected '" + std::string(op) + "', got " + describe(peek()));
  }
  std::string expect_name(const char* what) {
    if (peek().type != Tok::Type::kName)
      fail(std::string("expected ") + what + ", got " + describe(peek()));
    return next().text;
  }
  void expect_block_end(const std::string& tag) {
    if (peek().type != Tok::Type::kBlockEnd) {
      fail("expected '%}' to end the " + tag + " tag, got " + describe(peek()));
    }
    next();
  }

  // Nodes up to a block tag named in `ends` (its name consumed, put in *found); at the end of
  // the template when `ends` is empty.
  Body parse_until(std::initializer_list<std::string_view> ends, std::string* found, int open_line,
                   const std::string& opener) {
    Body body;
    for (;;) {
      const Tok& t = peek();
      switch (t.type) {
        case Tok::Type::kEnd:
          if (ends.size() != 0) {
            fail_at(open_line, "the " + opener + " tag opened here is never closed (expected {% " +
                                   std::string(*std::prev(ends.end())) + " %})");
          }
          return body;
        case Tok::Type::kText: {
          Node n;
          n.kind = Node::Kind::kText;
          n.line = t.line;
          n.text = next().text;
          body.push_back(std::move(n));
          break;
        }
        case Tok::Type::kVarBegin: {
          Node n;
          n.kind = Node::Kind::kOutput;
          n.line = next().line;
          n.expr = parse_expr();
          if (peek().type != Tok::Type::kVarEnd) fail("expected '}}', got " + describe(peek()));
          next();
          body.push_back(std::move(n));
          break;
        }
        case Tok::Type::kBlockBegin: {
          next();
          const int line = peek().line;
          const std::string name = expect_name("a tag name");
          for (const std::string_view e : ends) {
            if (name == e) {
              *found = name;
              return body;
            }
          }
          body.push_back(parse_statement(name, line));
          break;
        }
        default:
          fail("unexpected " + describe(t));
      }
    }
  }

  Node parse_statement(const std::string& name, int line) {
    const Nest nest(*this);
    Node n;
    n.line = line;
    std::string found;
    if (name == "if") {
      n.kind = Node::Kind::kIf;
      n.conditions.push_back(parse_expr());
      expect_block_end("if");
      for (;;) {
        n.bodies.push_back(parse_until({"elif", "else", "endif"}, &found, line, "if"));
        if (found == "elif") {
          n.conditions.push_back(parse_expr());
          expect_block_end("elif");
          continue;
        }
        expect_block_end(found);
        if (found == "else") {
          n.else_body = parse_until({"endif"}, &found, line, "if");
          expect_block_end("endif");
        }
        return n;
      }
    }
    if (name == "for") {
      n.kind = Node::Kind::kFor;
      do {
        n.targets.push_back(expect_name("a loop variable"));
      } while (skip_op(","));
      if (!skip_name("in")) fail("expected 'in' in the for tag, got " + describe(peek()));
      n.expr = parse_expr(false);
      if (skip_name("if")) n.filter = parse_expr(false);
      if (at_name("recursive")) fail("recursive loops are not supported");
      expect_block_end("for");
      n.bodies.push_back(parse_until({"else", "endfor"}, &found, line, "for"));
      expect_block_end(found);
      if (found == "else") {
        n.else_body = parse_until({"endfor"}, &found, line, "for");
        expect_block_end("endfor");
      }
      return n;
    }
    if (name == "set") {
      n.kind = Node::Kind::kSet;
      n.targets.push_back(expect_name("a variable name"));
      if (skip_op(".")) {
        n.attr = expect_name("an attribute name");
      } else {
        while (skip_op(",")) n.targets.push_back(expect_name("a variable name"));
      }
      if (skip_op("=")) {
        n.expr = parse_tuple_expr();
        expect_block_end("set");
        return n;
      }
      if (!n.attr.empty() || n.targets.size() != 1) fail("expected '=' in the set tag");
      expect_block_end("set");
      n.kind = Node::Kind::kSetBlock;
      n.bodies.push_back(parse_until({"endset"}, &found, line, "set"));
      expect_block_end("endset");
      return n;
    }
    if (name == "macro") {
      n.kind = Node::Kind::kMacro;
      n.macro = std::make_shared<MacroDef>();
      n.macro->name = expect_name("a macro name");
      expect_op("(");
      while (!at_op(")")) {
        std::string param = expect_name("a parameter name");
        ExprPtr fallback;
        if (skip_op("=")) fallback = parse_expr();
        n.macro->params.emplace_back(std::move(param), std::move(fallback));
        if (!skip_op(",")) break;
      }
      expect_op(")");
      expect_block_end("macro");
      n.macro->body = parse_until({"endmacro"}, &found, line, "macro");
      expect_block_end("endmacro");
      return n;
    }
    if (name == "break" || name == "continue") {
      n.kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      expect_block_end(name);
      return n;
    }
    if (name == "generation") {
      n.kind = Node::Kind::kGeneration;
      expect_block_end("generation");
      n.bodies.push_back(parse_until({"endgeneration"}, &found, line, "generation"));
      expect_block_end("endgeneration");
      return n;
    }
    if (name == "filter") {
      n.kind = Node::Kind::kFilterBlock;
      ExprPtr e = make(Expr::Op::kName, line, kBlockText);
      do {
        std::string filter = expect_name("a filter name");
        e = parse_call(std::move(e), Expr::Op::kFilter, std::move(filter));
      } while (skip_op("|"));
      n.expr = std::move(e);
      expect_block_end("filter");
      n.bodies.push_back(parse_until({"endfilter"}, &found, line, "filter"));
      expect_block_end("endfilter");
      return n;
    }
    fail_at(line, "unsupported tag '" + name +
                      "' (the subset has if, for, set, macro, filter, break, continue, raw, "
                      "generation)");
  }

  // `e` with its depth set from its arguments'; refused past kMaxExprDepth.
  ExprPtr sealed(ExprPtr e) {
    int d = 0;
    for (const ExprPtr& a : e->args) {
      if (a) d = std::max(d, a->depth);
    }
    for (const auto& kv : e->kwargs) d = std::max(d, kv.second->depth);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth) {
      fail_at(e->line, "an expression nested or chained deeper than " +
                           std::to_string(kMaxExprDepth) +
                           " (operators, filters, attributes, calls)");
    }
    return e;
  }

  ExprPtr make(Expr::Op op, int line, std::string name = "") {
    auto e = std::make_unique<Expr>();
    e->op = op;
    e->line = line;
    e->name = std::move(name);
    return e;
  }
  ExprPtr binary(Expr::Op op, const std::string& name, ExprPtr a, ExprPtr b) {
    ExprPtr e = make(op, a->line, name);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return sealed(std::move(e));
  }

  // An expression, or a tuple of them without parentheses (`1, 2`), as {% set %} takes.
  ExprPtr parse_tuple_expr() {
    ExprPtr first = parse_expr();
    if (!at_op(",")) return first;
    ExprPtr e = make(Expr::Op::kTuple, first->line);
    e->args.push_back(std::move(first));
    while (skip_op(",") && peek().type != Tok::Type::kBlockEnd) e->args.push_back(parse_expr());
    return sealed(std::move(e));
  }

  ExprPtr parse_expr(bool with_cond = true) {
    const Nest nest(*this);
    ExprPtr e = parse_or();
    while (with_cond && at_name("if")) {
      next();
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (skip_name("else")) other = parse_expr();
      ExprPtr c = make(Expr::Op::kCond, e->line);
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(other));
      e = sealed(std::move(c));
    }
    return e;
  }

  // One left-associative level: below (OP below)*, OP one of `ops` (keywords when `words`).
  template <class Below>
  ExprPtr left_assoc(Below below, Expr::Op op, std::initializer_list<std::string_view> ops,
                     bool words = false) {
    ExprPtr e = below();
    for (;;) {
      const auto at = std::find_if(ops.begin(), ops.end(), [&](std::string_view o) {
        return words ? at_name(o) : at_op(o);
      });
      if (at == ops.end()) return e;
      next();
      e = binary(op, std::string(*at), std::move(e), below());
    }
  }

  ExprPtr parse_or() {
    return left_assoc([this] { return parse_and(); }, Expr::Op::kOr, {"or"}, true);
  }
  ExprPtr parse_and() {
    return left_assoc([this] { return parse_not(); }, Expr::Op::kAnd, {"and"}, true);
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      const Nest nest(*this);
      const int line = next().line;
      ExprPtr e = make(Expr::Op::kNot, line);
      e->args.push_back(parse_not());
      return sealed(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    bool compared = false;
    for (;;) {
      std::string op;
      if (peek().type == Tok::Type::kOp &&
          (at_op("==") || at_op("!=") || at_op("<") || at_op("<=") || at_op(">") || at_op(">="))) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        return e;
      }
      if (compared) fail("chained comparisons (a < b < c) are not supported: use 'and'");
      compared = true;
      e = binary(Expr::Op::kBinary, op, std::move(e), parse_math1());
    }
  }

  ExprPtr parse_math1() {
    return left_assoc([this] { return parse_concat(); }, Expr::Op::kBinary, {"+", "-"});
  }
  ExprPtr parse_concat() {
    return left_assoc([this] { return parse_math2(); }, Expr::Op::kBinary, {"~"});
  }
  ExprPtr parse_math2() {
    return left_assoc([this] { return parse_pow(); }, Expr::Op::kBinary, {"*", "/", "//", "%"});
  }
  ExprPtr parse_pow() {
    return left_assoc([this] { return parse_unary(); }, Expr::Op::kBinary, {"**"});
  }

  ExprPtr parse_unary(bool with_filter = true) {
    const Nest nest(*this);
    ExprPtr e;
    if (at_op("-")) {
      const int line = next().line;
      e = make(Expr::Op::kNeg, line);
      e->args.push_back(parse_unary(false));
      e = sealed(std::move(e));
    } else if (at_op("+")) {
      next();
      e = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Tok t = next();
    switch (t.type) {
      case Tok::Type::kName: {
        ExprPtr e = make(Expr::Op::kLiteral, t.line);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value::boolean(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value::boolean(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::none();
        } else {
          e->op = Expr::Op::kName;
          e->name = t.text;
        }
        return e;
      }
      case Tok::Type::kString: {
        std::string s = t.text;
        while (peek().type == Tok::Type::kString) s += next().text;  // "a" "b" is "ab"
        ExprPtr e = make(Expr::Op::kLiteral, t.line);
        e->literal = Value::string(std::move(s));
        return e;
      }
      case Tok::Type::kInt: {
        ExprPtr e = make(Expr::Op::kLiteral, t.line);
        e->literal = Value::integer(std::strtoll(t.text.c_str(), nullptr, 10));
        return e;
      }
      case Tok::Type::kFloat: {
        ExprPtr e = make(Expr::Op::kLiteral, t.line);
        e->literal = Value::number(std::strtod(t.text.c_str(), nullptr));
        return e;
      }
      case Tok::Type::kOp:
        if (t.text == "(") {
          if (skip_op(")")) return make(Expr::Op::kTuple, t.line);
          ExprPtr first = parse_expr();
          if (skip_op(")")) return first;
          ExprPtr e = make(Expr::Op::kTuple, t.line);
          e->args.push_back(std::move(first));
          while (skip_op(",") && !at_op(")")) e->args.push_back(parse_expr());
          expect_op(")");
          return sealed(std::move(e));
        }
        if (t.text == "[") {
          ExprPtr e = make(Expr::Op::kList, t.line);
          while (!at_op("]")) {
            e->args.push_back(parse_expr());
            if (!skip_op(",")) break;
          }
          expect_op("]");
          return sealed(std::move(e));
        }
        if (t.text == "{") {
          ExprPtr e = make(Expr::Op::kDict, t.line);
          while (!at_op("}")) {
            e->args.push_back(parse_expr());
            expect_op(":");
            e->args.push_back(parse_expr());
            if (!skip_op(",")) break;
          }
          expect_op("}");
          return sealed(std::move(e));
        }
        [[fallthrough]];
      default:
        fail_at(t.line, "expected an expression, got " + describe(t));
    }
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (at_op(".")) {
        const int line = next().line;
        if (peek().type == Tok::Type::kInt) {  // foo.0 is foo[0]
          ExprPtr index = make(Expr::Op::kLiteral, line);
          index->literal = Value::integer(std::strtoll(next().text.c_str(), nullptr, 10));
          ExprPtr i = make(Expr::Op::kIndex, line);
          i->args.push_back(std::move(e));
          i->args.push_back(std::move(index));
          e = sealed(std::move(i));
          continue;
        }
        ExprPtr a = make(Expr::Op::kAttr, line, expect_name("an attribute name"));
        a->args.push_back(std::move(e));
        e = sealed(std::move(a));
      } else if (at_op("[")) {
        const int line = next().line;
        ExprPtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!at_op(":") && !at_op("]")) parts[k] = parse_expr();
          if (k < 2 && skip_op(":")) {
            slice = true;
            continue;
          }
          break;
        }
        expect_op("]");
        if (!slice && !parts[0]) fail_at(line, "expected an index inside []");
        ExprPtr s = make(slice ? Expr::Op::kSlice : Expr::Op::kIndex, line);
        s->args.push_back(std::move(e));
        s->args.push_back(std::move(parts[0]));
        if (slice) {
          s->args.push_back(std::move(parts[1]));
          s->args.push_back(std::move(parts[2]));
        }
        e = sealed(std::move(s));
      } else if (at_op("(")) {
        e = parse_call(std::move(e), Expr::Op::kCall, "");
      } else {
        return e;
      }
    }
  }

  // callee(args...) as `op` (a call, a filter or a test) with `name`; at '('.
  ExprPtr parse_call(ExprPtr callee, Expr::Op op, std::string name) {
    ExprPtr e = make(op, callee->line, std::move(name));
    e->args.push_back(std::move(callee));
    if (!skip_op("(")) return sealed(std::move(e));
    while (!at_op(")")) {
      if (peek().type == Tok::Type::kName && peek(1).type == Tok::Type::kOp &&
          peek(1).text == "=") {
        std::string key = next().text;
        next();
        e->kwargs.emplace_back(std::move(key), parse_expr());
      } else {
        if (!e->kwargs.empty()) fail("a positional argument after a keyword argument");
        e->args.push_back(parse_expr());
      }
      if (!skip_op(",")) break;
    }
    expect_op(")");
    return sealed(std::move(e));
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    for (;;) {
      if (skip_op("|")) {
        std::string name = expect_name("a filter name");
        e = parse_call(std::move(e), Expr::Op::kFilter, std::move(name));
      } else if (at_name("is")) {
        next();
        const bool negate = skip_name("not");
        std::string name;
        if (peek().type == Tok::Type::kName) {
          name = next().text;
        } else if (at_op("==") || at_op("!=") || at_op("<") || at_op(">") || at_op("<=") ||
                   at_op(">=")) {
          name = next().text;
        } else {
          fail("expected a test name after 'is', got " + describe(peek()));
        }
        const bool bare_arg =
            (peek().type == Tok::Type::kName || peek().type == Tok::Type::kString ||
             peek().type == Tok::Type::kInt || peek().type == Tok::Type::kFloat || at_op("[") ||
             at_op("{")) &&
            !at_name("else") && !at_name("or") && !at_name("and") && !at_name("if") &&
            !at_name("is") && !at_name("in") && !at_name("not");
        if (at_op("(")) {
          e = parse_call(std::move(e), Expr::Op::kTest, std::move(name));
        } else {
          ExprPtr t = make(Expr::Op::kTest, e->line, std::move(name));
          t->args.push_back(std::move(e));
          if (bare_arg) t->args.push_back(parse_postfix(parse_primary()));
          e = sealed(std::move(t));
        }
        e->negate = negate;
      } else if (at_op("(")) {
        e = parse_call(std::move(e), Expr::Op::kCall, "");
      } else {
        return e;
      }
    }
  }

  // Expressions and tags nested deeper than kMaxNesting are refused (the parser and the
  // renderer recurse over them).
  struct Nest {
    explicit Nest(Parser& p) : parser(p) {
      if (++parser.nesting_ > kMaxNesting) {
        parser.fail("expressions or tags nested deeper than " + std::to_string(kMaxNesting));
      }
    }
    ~Nest() { --parser.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
    Parser& parser;
  };

  std::vector<Tok> toks_;
  const std::string& origin_;
  std::size_t i_ = 0;
  int nesting_ = 0;
};

}  // namespace

Body parse_template(const std::string& source, const std::string& origin) {
  // Jinja's keep_trailing_newline=False: one newline at the end of the source is dropped.
  std::string text = source;
  if (text.ends_with("\r\n")) {
    text.resize(text.size() - 2);
  } else if (text.ends_with("\n")) {
    text.pop_back();
  }
  return Parser(Lexer(text, origin).run(), origin).parse();
}

}  // namespace servelab::jinja
