#include "engine/regex_grammar.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "serving/unicode_space.h"
#include "serving/utf8.h"

namespace servelab {
namespace {

using Symbol = Grammar::Symbol;

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kSurrogateLo = 0xD800;
constexpr char32_t kSurrogateHi = 0xDFFF;
// The deepest nesting of groups (keeps the parser's recursion, and the recognizer's stacks,
// bounded).
constexpr int kMaxNesting = 256;
// The largest count a repetition of a repetition merges into (each count is a rule).
constexpr long long kMaxMergedRepeat = 10 * kMaxRegexRepeat;

// A set of code points: sorted, disjoint, non-adjacent closed intervals.
using CodePoints = std::vector<std::pair<char32_t, char32_t>>;

CodePoints normalized(CodePoints v) {
  std::sort(v.begin(), v.end());
  CodePoints out;
  for (const auto& [lo, hi] : v) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

// Every scalar value (surrogates left out) of `v`; REQUIRES v normalized.
CodePoints scalars(const CodePoints& v) {
  CodePoints out;
  for (const auto& [lo, hi] : v) {
    if (hi < kSurrogateLo || lo > kSurrogateHi) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < kSurrogateLo) out.emplace_back(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) out.emplace_back(kSurrogateHi + 1, hi);
  }
  return out;
}

// The scalar values outside `v`; REQUIRES v normalized.
CodePoints complement(const CodePoints& v) {
  CodePoints out;
  char32_t next = 0;
  for (const auto& [lo, hi] : v) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return scalars(out);
}

// The code points whose Unicode general category is one of `categories` (utf8proc's), plus
// `extra`, as intervals.
CodePoints by_category(std::initializer_list<utf8proc_category_t> categories,
                       CodePoints extra = {}) {
  CodePoints out = std::move(extra);
  for (char32_t c = 0; c <= kMaxCodePoint; ++c) {
    const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (std::find(categories.begin(), categories.end(), cat) == categories.end()) continue;
    if (!out.empty() && out.back().second + 1 == c) {
      out.back().second = c;
    } else {
      out.emplace_back(c, c);
    }
  }
  return normalized(std::move(out));
}

// Python's re over str: \d is a Unicode decimal digit (category Nd).
const CodePoints& digits() {
  static const CodePoints s = by_category({UTF8PROC_CATEGORY_ND});
  return s;
}
// \w: str.isalnum() or '_' (categories L* and N*: Lu Ll Lt Lm Lo Nd Nl No).
const CodePoints& word() {
  static const CodePoints s = by_category(
      {UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT, UTF8PROC_CATEGORY_LM,
       UTF8PROC_CATEGORY_LO, UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NL, UTF8PROC_CATEGORY_NO},
      {{'_', '_'}});
  return s;
}
// \s: str.isspace() (serving/unicode_space.h's Python set: \t-\r, U+001C-001F, space, U+0085,
// U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000).
const CodePoints& space() {
  static const CodePoints s = [] {
    CodePoints v;
    for (char32_t c = 0; c < 0x10000; ++c) {
      if (c >= kSurrogateLo && c <= kSurrogateHi) continue;
      std::string b;
      utf8::append(b, static_cast<std::uint32_t>(c));
      if (unicode_space::at(b, 0, /*python=*/true) == b.size()) v.emplace_back(c, c);
    }
    return normalized(std::move(v));
  }();
  return s;
}

int utf8_length(char32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

std::array<unsigned char, 4> utf8(char32_t c) {
  std::array<unsigned char, 4> b{};
  switch (utf8_length(c)) {
    case 1:
      b[0] = static_cast<unsigned char>(c);
      break;
    case 2:
      b[0] = static_cast<unsigned char>(0xC0 | (c >> 6));
      b[1] = static_cast<unsigned char>(0x80 | (c & 0x3F));
      break;
    case 3:
      b[0] = static_cast<unsigned char>(0xE0 | (c >> 12));
      b[1] = static_cast<unsigned char>(0x80 | ((c >> 6) & 0x3F));
      b[2] = static_cast<unsigned char>(0x80 | (c & 0x3F));
      break;
    default:
      b[0] = static_cast<unsigned char>(0xF0 | (c >> 18));
      b[1] = static_cast<unsigned char>(0x80 | ((c >> 12) & 0x3F));
      b[2] = static_cast<unsigned char>(0x80 | ((c >> 6) & 0x3F));
      b[3] = static_cast<unsigned char>(0x80 | (c & 0x3F));
      break;
  }
  return b;
}

// A sequence of byte ranges, one per byte of an encoded code point.
using ByteRanges = std::vector<std::pair<unsigned char, unsigned char>>;

// Splits the scalar values lo..hi (no surrogates among them) into byte-range sequences, each
// the product of its ranges: first by encoded length, then wherever a lower byte does not span
// its whole range 80..BF under a common higher prefix.
template <typename Emit>
void split_utf8(char32_t lo, char32_t hi, Emit& emit) {
  for (const char32_t limit : {char32_t{0x7F}, char32_t{0x7FF}, char32_t{0xFFFF}}) {
    if (lo <= limit && hi > limit) {
      split_utf8(lo, limit, emit);
      split_utf8(limit + 1, hi, emit);
      return;
    }
  }
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;  // the low i continuation bytes' bits
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      split_utf8(lo, lo | m, emit);
      split_utf8((lo | m) + 1, hi, emit);
      return;
    }
    if ((hi & m) != m) {
      split_utf8(lo, (hi & ~m) - 1, emit);
      split_utf8(hi & ~m, hi, emit);
      return;
    }
  }
  const std::array<unsigned char, 4> a = utf8(lo);
  const std::array<unsigned char, 4> b = utf8(hi);
  ByteRanges seq;
  for (int i = 0; i < n; ++i)
    seq.emplace_back(a[static_cast<std::size_t>(i)], b[static_cast<std::size_t>(i)]);
  emit(std::move(seq));
}

// The parsed pattern.
struct Node {
  enum class Kind { kEmpty, kChars, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  CodePoints chars;            // kChars: one code point of these (none: matches nothing)
  std::vector<Node> children;  // kSeq, kAlt: the parts; kRepeat: the one repeated
  int min = 0;                 // kRepeat
  int max = 0;                 // kRepeat; -1: unbounded

  static Node chars_of(CodePoints set) {
    Node n;
    n.kind = Kind::kChars;
    n.chars = std::move(set);
    return n;
  }
  bool never() const { return kind == Kind::kChars && chars.empty(); }
};

struct Quantifier {
  int min = 0;
  int max = -1;
  std::size_t end = 0;  // the offset just past it
};

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  Node parse() {
    Node root = alternation(0);
    if (pos_ < p_.size()) fail(pos_, "unbalanced ')'");  // the only thing that stops a branch
    return root;
  }

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& what) const {
    throw RegexError("regex: offset " + std::to_string(at) + ": " + what);
  }

  bool at(char c) const { return pos_ < p_.size() && p_[pos_] == c; }
  bool at(std::size_t i, char c) const { return i < p_.size() && p_[i] == c; }
  unsigned char byte_at(std::size_t i) const { return static_cast<unsigned char>(p_[i]); }

  // The code point at pos_ (UTF-8), moving past it.
  char32_t code_point() {
    const std::size_t start = pos_;
    const unsigned char b0 = byte_at(pos_);
    if (b0 < 0x80) {
      ++pos_;
      return b0;
    }
    int n = 0;
    char32_t c = 0;
    char32_t min = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      n = 2, c = b0 & 0x1F, min = 0x80;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      n = 3, c = b0 & 0x0F, min = 0x800;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      n = 4, c = b0 & 0x07, min = 0x10000;
    } else {
      fail(start, "invalid UTF-8 in the pattern");
    }
    for (int i = 1; i < n; ++i) {
      const std::size_t j = start + static_cast<std::size_t>(i);
      if (j >= p_.size() || (byte_at(j) & 0xC0) != 0x80) {
        fail(start, "invalid UTF-8 in the pattern");
      }
      c = (c << 6) | (byte_at(j) & 0x3F);
    }
    if (c < min || c > kMaxCodePoint || (c >= kSurrogateLo && c <= kSurrogateHi)) {
      fail(start, "invalid UTF-8 in the pattern");
    }
    pos_ = start + static_cast<std::size_t>(n);
    return c;
  }

  // Branches separated by '|', up to a ')' or the end.
  Node alternation(int depth) {
    std::vector<Node> branches;
    branches.push_back(sequence(depth));
    while (at('|')) {
      ++pos_;
      branches.push_back(sequence(depth));
    }
    if (branches.size() == 1) return std::move(branches[0]);
    Node n;
    n.kind = Node::Kind::kAlt;
    n.children = std::move(branches);
    return n;
  }

  Node sequence(int depth) {
    std::vector<Node> items;
    while (pos_ < p_.size() && !at('|') && !at(')')) {
      const std::size_t start = pos_;
      const char c = p_[pos_];
      if (c == '^') {
        if (depth == 0 && items.empty()) {
          ++pos_;
          continue;
        }
        fail(start,
             "'^' is supported only at the start of the pattern or of a top-level '|' branch");
      }
      if (c == '$') {
        std::size_t end = pos_ + 1;
        while (at(end, '$')) ++end;  // `$$` is `$`
        if (depth == 0 && (end == p_.size() || at(end, '|'))) {
          pos_ = end;
          continue;
        }
        fail(start, "'$' is supported only at the end of the pattern or of a top-level '|' branch");
      }
      if (quantifier(pos_)) fail(start, "nothing to repeat");
      Node atom_node = atom(depth);
      if (const std::optional<Quantifier> q = quantifier(pos_)) {
        pos_ = q->end;
        if (at('?')) {
          ++pos_;  // lazy: the same full matches
        } else if (at('+')) {
          fail(pos_, "possessive quantifiers are not supported");
        }
        if (quantifier(pos_)) fail(pos_, "multiple repeat");
        atom_node = repeated(std::move(atom_node), q->min, q->max);
      }
      items.push_back(std::move(atom_node));
    }
    if (items.size() == 1) return std::move(items[0]);
    Node n;
    n.kind = items.empty() ? Node::Kind::kEmpty : Node::Kind::kSeq;
    n.children = std::move(items);
    return n;
  }

  static Node repeated(Node x, int min, int max) {
    // (x{a,b}){c,d} with a <= 1 is x{c*a, d*b}: the counts k*a..k*b of c..d repetitions leave no
    // gap. One repetition has the same texts with far fewer parses alive at once ((a{0,100})
    // {0,100} as nested repetitions holds a parse per split of a run of `a`), as long as the
    // product stays small enough to write out (kMaxMergedRepeat).
    if (x.kind == Node::Kind::kRepeat && x.min <= 1 && x.max != 0 && max != 0) {
      const long long lo = static_cast<long long>(x.min) * min;
      const long long hi =
          (x.max < 0 || max < 0) ? -1 : static_cast<long long>(x.max) * static_cast<long long>(max);
      if (hi <= kMaxMergedRepeat && lo <= kMaxMergedRepeat) {
        x.min = static_cast<int>(lo);
        x.max = static_cast<int>(hi);
        return x;
      }
    }
    Node n;
    n.kind = Node::Kind::kRepeat;
    n.children.push_back(std::move(x));
    n.min = min;
    n.max = max;
    return n;
  }

  // A count's digits from `i` (none: -1), moving `i` past them.
  int count(std::size_t& i, std::size_t brace) const {
    if (i >= p_.size() || p_[i] < '0' || p_[i] > '9') return -1;
    long long v = 0;
    while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
      v = v * 10 + (p_[i] - '0');
      if (v > kMaxRegexRepeat) {
        fail(brace, "repeat count above " + std::to_string(kMaxRegexRepeat));
      }
      ++i;
    }
    return static_cast<int>(v);
  }

  // The quantifier at `i`, if one begins there (`{` without a valid count is not one).
  std::optional<Quantifier> quantifier(std::size_t i) const {
    if (i >= p_.size()) return std::nullopt;
    switch (p_[i]) {
      case '*':
        return Quantifier{0, -1, i + 1};
      case '+':
        return Quantifier{1, -1, i + 1};
      case '?':
        return Quantifier{0, 1, i + 1};
      case '{':
        break;
      default:
        return std::nullopt;
    }
    // Python's reading: '{' digits? (',' digits?)? '}', {n} needing its digits.
    const std::size_t brace = i;
    std::size_t j = i + 1;
    // Counts are checked only once the quantifier is known complete.
    std::size_t k = j;
    while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9') ++k;
    const bool has_lo = k > j;
    bool comma = false;
    std::size_t e = k;
    if (at(e, ',')) {
      comma = true;
      ++e;
      while (e < p_.size() && p_[e] >= '0' && p_[e] <= '9') ++e;
    }
    if (!at(e, '}') || (!comma && !has_lo)) return std::nullopt;
    Quantifier q;
    q.end = e + 1;
    const int lo = count(j, brace);
    q.min = lo < 0 ? 0 : lo;
    if (!comma) {
      q.max = q.min;
    } else {
      ++j;  // the comma
      q.max = count(j, brace);
      if (q.max >= 0 && q.max < q.min) fail(brace, "min repeat greater than max repeat");
    }
    return q;
  }

  Node atom(int depth) {
    const std::size_t start = pos_;
    const char c = p_[pos_];
    switch (c) {
      case '(':
        return group(depth);
      case '[':
        return Node::chars_of(char_class());
      case '.':
        ++pos_;
        return Node::chars_of(complement({{'\n', '\n'}}));
      case '\\': {
        Escape e = escape(false);
        if (e.is_set) return Node::chars_of(std::move(e.set));
        if (e.c >= kSurrogateLo && e.c <= kSurrogateHi) {
          fail(start, "a lone surrogate cannot appear in UTF-8 text");
        }
        return Node::chars_of({{e.c, e.c}});
      }
      default: {
        const char32_t cp = code_point();
        return Node::chars_of({{cp, cp}});
      }
    }
  }

  Node group(int depth) {
    const std::size_t open = pos_;
    ++pos_;
    if (at('?')) {
      ++pos_;
      if (pos_ >= p_.size()) fail(pos_, "unexpected end of pattern after '(?'");
      const char k = p_[pos_];
      if (k == ':') {
        ++pos_;
      } else if (k == 'P') {
        if (at(pos_ + 1, '=')) fail(open, "backreferences are not supported");
        if (!at(pos_ + 1, '<')) fail(open, "unknown group extension '(?P'");
        pos_ += 2;
        group_name(open);
      } else if (k == '<' && (at(pos_ + 1, '=') || at(pos_ + 1, '!'))) {
        fail(open, "lookbehind is not supported");
      } else if (k == '<') {
        ++pos_;
        group_name(open);
      } else if (k == '=' || k == '!') {
        fail(open, "lookahead is not supported");
      } else if (k == '>') {
        fail(open, "atomic groups are not supported");
      } else if (k == '#') {
        fail(open, "comments are not supported");
      } else if (k == '(') {
        fail(open, "conditional groups are not supported");
      } else if ((k >= 'a' && k <= 'z') || (k >= 'A' && k <= 'Z') || k == '-') {
        fail(open, "inline flags are not supported");
      } else {
        fail(open, "unknown group extension after '(?'");
      }
    }
    if (depth + 1 > kMaxNesting) {
      fail(open, "groups nested more than " + std::to_string(kMaxNesting) + " deep");
    }
    Node inner = alternation(depth + 1);
    if (!at(')')) fail(open, "missing ')' (unterminated group)");
    ++pos_;
    return inner;
  }

  // A group's name up to '>' (pos_ just past the '<'), checked for the identifier it must be and
  // for being new.
  void group_name(std::size_t open) {
    const std::size_t start = pos_;
    while (pos_ < p_.size() && p_[pos_] != '>') {
      const unsigned char b = byte_at(pos_);
      const bool letter = (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b == '_' || b >= 0x80;
      const bool digit = b >= '0' && b <= '9';
      if (!letter && !(digit && pos_ > start)) fail(pos_, "bad character in group name");
      ++pos_;
    }
    if (pos_ >= p_.size()) fail(open, "unterminated group name");
    if (pos_ == start) fail(pos_, "missing group name");
    const std::string name(p_.substr(start, pos_ - start));
    if (std::find(names_.begin(), names_.end(), name) != names_.end()) {
      fail(start, "redefinition of group name '" + name + "'");
    }
    names_.push_back(name);
    ++pos_;  // '>'
  }

  struct Escape {
    bool is_set = false;
    CodePoints set;  // is_set
    char32_t c = 0;  // !is_set (may be a surrogate from \u)
  };

  // `n` hex digits after pos_ (the escape's letter), moving past them.
  char32_t hex(std::size_t backslash, int n) {
    char32_t v = 0;
    for (int i = 1; i <= n; ++i) {
      const std::size_t j = pos_ + static_cast<std::size_t>(i);
      const char h = j < p_.size() ? p_[j] : '\0';
      int d = -1;
      if (h >= '0' && h <= '9') d = h - '0';
      if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      if (d < 0) {
        fail(backslash, "incomplete escape '\\" + std::string(1, p_[pos_]) + "' (expected " +
                            std::to_string(n) + " hex digits)");
      }
      v = v * 16 + static_cast<char32_t>(d);
    }
    pos_ += static_cast<std::size_t>(n) + 1;
    return v;
  }

  Escape escape(bool in_class) {
    const std::size_t backslash = pos_;
    ++pos_;
    if (pos_ >= p_.size())
      fail(backslash, "a trailing '\\' (bad escape at the end of the pattern)");
    const unsigned char k = byte_at(pos_);
    Escape e;
    const auto one = [&](char32_t c) {
      ++pos_;
      e.c = c;
      return e;
    };
    const auto set = [&](const CodePoints& s, bool negate) {
      ++pos_;
      e.is_set = true;
      e.set = negate ? complement(s) : s;
      return e;
    };
    switch (k) {
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 't':
        return one('\t');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case 'd':
        return set(digits(), false);
      case 'D':
        return set(digits(), true);
      case 'w':
        return set(word(), false);
      case 'W':
        return set(word(), true);
      case 's':
        return set(space(), false);
      case 'S':
        return set(space(), true);
      case '0': {  // \0 and up to two more octal digits
        ++pos_;
        char32_t v = 0;
        for (int i = 0; i < 2 && pos_ < p_.size() && p_[pos_] >= '0' && p_[pos_] <= '7'; ++i) {
          v = v * 8 + static_cast<char32_t>(p_[pos_] - '0');
          ++pos_;
        }
        e.c = v;
        return e;
      }
      case 'x':
        e.c = hex(backslash, 2);
        return e;
      case 'u': {
        e.c = hex(backslash, 4);
        // A UTF-16 pair written as two escapes (ECMAScript's reading) is one code point.
        if (e.c >= 0xD800 && e.c <= 0xDBFF && at('\\') && at(pos_ + 1, 'u')) {
          const std::size_t save = pos_;
          ++pos_;
          const char32_t low = hex(pos_ - 1, 4);
          if (low >= 0xDC00 && low <= 0xDFFF) {
            e.c = 0x10000 + ((e.c - 0xD800) << 10) + (low - 0xDC00);
          } else {
            pos_ = save;
          }
        }
        return e;
      }
      case 'U':
        e.c = hex(backslash, 8);
        if (e.c > kMaxCodePoint) fail(backslash, "code point above U+10FFFF");
        return e;
      case 'b':
        if (in_class) return one('\b');
        fail(backslash, "word boundaries (\\b) are not supported");
      case 'B':
        fail(backslash, "word boundaries (\\B) are not supported");
      case 'A':
      case 'Z':
      case 'z':
      case 'G':
        fail(backslash, std::string("anchors (\\") + static_cast<char>(k) + ") are not supported");
      case 'k':
        fail(backslash, "backreferences are not supported");
      case 'p':
      case 'P':
        fail(backslash, "Unicode property escapes are not supported");
      default:
        break;
    }
    if (k >= '1' && k <= '9') {
      fail(backslash,
           in_class ? "octal escapes are not supported" : "backreferences are not supported");
    }
    if ((k >= 'a' && k <= 'z') || (k >= 'A' && k <= 'Z')) {
      fail(backslash, std::string("unsupported escape '\\") + static_cast<char>(k) + "'");
    }
    e.c = code_point();  // any other character stands for itself
    return e;
  }

  // A class from its '[' (pos_) to its ']', as the scalar values it matches.
  CodePoints char_class() {
    const std::size_t open = pos_;
    ++pos_;
    const bool negate = at('^');
    if (negate) ++pos_;
    CodePoints set;
    bool first = true;
    while (true) {
      if (pos_ >= p_.size()) fail(open, "unterminated character class");
      if (at(']') && !first) {
        ++pos_;
        break;
      }
      first = false;
      const std::size_t item = pos_;
      const Escape a = class_item();
      const bool range = at('-') && pos_ + 1 < p_.size() && !at(pos_ + 1, ']');
      if (!range) {
        if (a.is_set) {
          set.insert(set.end(), a.set.begin(), a.set.end());
        } else {
          if (a.c >= kSurrogateLo && a.c <= kSurrogateHi) {
            fail(item, "a lone surrogate cannot appear in UTF-8 text");
          }
          set.emplace_back(a.c, a.c);
        }
        continue;
      }
      ++pos_;  // '-'
      const Escape b = class_item();
      if (a.is_set || b.is_set) fail(item, "bad character range (a class escape as an end)");
      if (b.c < a.c) fail(item, "bad character range (the end is below the start)");
      set.emplace_back(a.c, b.c);
    }
    set = scalars(normalized(std::move(set)));
    return negate ? complement(set) : set;
  }

  Escape class_item() {
    if (at('\\')) return escape(true);
    Escape e;
    e.c = code_point();
    return e;
  }

  std::string_view p_;
  std::size_t pos_ = 0;
  std::vector<std::string> names_;
};

// Rewrites a node that can match nothing into Node::never() (an empty kChars), keeping it
// elsewhere only at the root: a sequence with such a part matches nothing, an alternation
// drops such branches, x{0,m} of it matches only "".
Node simplified(Node n) {
  switch (n.kind) {
    case Node::Kind::kEmpty:
    case Node::Kind::kChars:
      return n;
    case Node::Kind::kSeq: {
      std::vector<Node> parts;
      for (Node& c : n.children) {
        Node s = simplified(std::move(c));
        if (s.never()) return s;
        if (s.kind != Node::Kind::kEmpty) parts.push_back(std::move(s));
      }
      if (parts.empty()) return Node{};
      if (parts.size() == 1) return std::move(parts[0]);
      n.children = std::move(parts);
      return n;
    }
    case Node::Kind::kAlt: {
      std::vector<Node> branches;
      for (Node& c : n.children) {
        Node s = simplified(std::move(c));
        if (s.never()) continue;
        if (s.kind == Node::Kind::kAlt) {  // ((a|b)|c): one rule
          for (Node& b : s.children) branches.push_back(std::move(b));
        } else {
          branches.push_back(std::move(s));
        }
      }
      if (branches.empty()) return Node::chars_of({});
      if (branches.size() == 1) return std::move(branches[0]);
      n.children = std::move(branches);
      return n;
    }
    case Node::Kind::kRepeat: {
      Node x = simplified(std::move(n.children[0]));
      if (x.never()) return n.min == 0 ? Node{} : x;
      if (x.kind == Node::Kind::kEmpty || n.max == 0) return Node{};
      if (n.min == 1 && n.max == 1) return x;
      n.children[0] = std::move(x);
      return n;
    }
  }
  return n;
}

class Compiler {
 public:
  explicit Compiler(Grammar& g) : g_(g) {}

  Symbol root(const Node& n) {
    if (n.never()) {
      return g_.rule({{g_.bytes(ByteSet())}});  // waits on no byte
    }
    if (n.kind == Node::Kind::kAlt) return alternation(n);
    std::vector<Symbol> seq;
    append(n, seq);
    return g_.rule({std::move(seq)});
  }

 private:
  // Appends what matches `n` to an alternative.
  void append(const Node& n, std::vector<Symbol>& seq) {
    switch (n.kind) {
      case Node::Kind::kEmpty:
        return;
      case Node::Kind::kChars:
        append_chars(n.chars, seq);
        return;
      case Node::Kind::kSeq:
        for (const Node& c : n.children) append(c, seq);
        return;
      case Node::Kind::kAlt:
        seq.push_back(alternation(n));
        return;
      case Node::Kind::kRepeat: {
        const Symbol x = symbol(n.children[0]);
        for (int i = 0; i < n.min; ++i) seq.push_back(x);
        if (n.max < 0) {
          seq.push_back(g_.star(x));
        } else if (n.max > n.min) {
          // (x (x (x)?)?)?: the optional tail, each level a tail call of the one before.
          Symbol tail = g_.optional(x);
          for (int i = n.min + 1; i < n.max; ++i) tail = g_.rule({{x, tail}, {}});
          seq.push_back(tail);
        }
        return;
      }
    }
  }

  Symbol alternation(const Node& n) {
    std::vector<std::vector<Symbol>> alts;
    for (const Node& b : n.children) {
      alts.emplace_back();
      append(b, alts.back());
    }
    return g_.rule(std::move(alts));
  }

  // One symbol matching `n`.
  Symbol symbol(const Node& n) {
    std::vector<Symbol> seq;
    append(n, seq);
    if (seq.size() == 1) return seq[0];
    return g_.rule({std::move(seq)});
  }

  void append_chars(const CodePoints& set, std::vector<Symbol>& seq) {
    if (set.size() == 1 && set[0].first == set[0].second) {  // one code point: its bytes
      const char32_t c = set[0].first;
      const std::array<unsigned char, 4> b = utf8(c);
      for (int i = 0; i < utf8_length(c); ++i)
        seq.push_back(g_.byte(b[static_cast<std::size_t>(i)]));
      return;
    }
    const auto found = classes_.find(set);
    if (found != classes_.end()) {
      seq.insert(seq.end(), found->second.begin(), found->second.end());
      return;
    }
    // The set's UTF-8 byte-range sequences as a trie: one alternative per group of lead bytes
    // with the same continuations, those continuations one shared rule built the same way, so
    // that before each byte a parse per group of next bytes is alive (a few dozen for \w's
    // hundreds of ranges), never one per range.
    std::vector<ByteRanges> seqs;
    auto emit = [&](ByteRanges r) { seqs.push_back(std::move(r)); };
    for (const auto& [lo, hi] : set) split_utf8(lo, hi, emit);
    const Symbol r = trie(std::move(seqs));
    std::vector<Symbol> out = {r};
    if (g_.alternatives(r).size() == 1) out = g_.alternatives(r)[0];
    seq.insert(seq.end(), out.begin(), out.end());
    classes_.emplace(set, std::move(out));
  }

  // A rule matching exactly the byte strings of `seqs` (each a product of byte ranges, all of
  // one length under a given lead byte, as UTF-8 is prefix-free), its alternatives' first bytes
  // disjoint.
  Symbol trie(std::vector<ByteRanges> seqs) {
    std::sort(seqs.begin(), seqs.end());
    seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
    if (const auto it = tries_.find(seqs); it != tries_.end()) return it->second;
    // Per lead byte, the continuations after it; lead bytes with the same ones share a terminal.
    std::map<std::vector<ByteRanges>, ByteSet> by_rest;
    for (unsigned b = 0; b < 256; ++b) {
      std::vector<ByteRanges> rest;
      for (const ByteRanges& r : seqs) {
        if (r[0].first <= b && b <= r[0].second) rest.emplace_back(r.begin() + 1, r.end());
      }
      if (rest.empty()) continue;
      std::sort(rest.begin(), rest.end());
      rest.erase(std::unique(rest.begin(), rest.end()), rest.end());
      by_rest[std::move(rest)].set(b);
    }
    std::vector<std::vector<Symbol>> alts;
    for (auto& [rest, leads] : by_rest) {
      std::vector<Symbol> alt = {g_.bytes(leads)};
      const bool more =
          std::any_of(rest.begin(), rest.end(), [](const ByteRanges& r) { return !r.empty(); });
      if (more) {
        std::vector<ByteRanges> next;
        for (const ByteRanges& r : rest) {
          if (!r.empty()) next.push_back(r);
        }
        // One continuation range sequence: its terminals inline.
        if (next.size() == 1) {
          for (const auto& [lo, hi] : next[0]) alt.push_back(g_.range(lo, hi));
        } else {
          alt.push_back(trie(std::move(next)));
        }
      }
      alts.push_back(std::move(alt));
    }
    const Symbol r = g_.rule(std::move(alts));
    tries_.emplace(std::move(seqs), r);
    return r;
  }

  Grammar& g_;
  std::map<CodePoints, std::vector<Symbol>> classes_;  // a class's symbols, built once
  std::map<std::vector<ByteRanges>, Symbol> tries_;    // trie()'s rules, built once
};

}  // namespace

Symbol compile_regex(Grammar& g, std::string_view pattern) {
  const Node root = simplified(Parser(pattern).parse());
  return Compiler(g).root(root);
}

}  // namespace servelab
