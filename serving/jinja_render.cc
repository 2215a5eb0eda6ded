// Rendering of the Jinja subset (serving/jinja.h): statements, expressions with Python's
// semantics, and the filters, tests, methods and globals the subset names.
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "serving/jinja.h"
#include "serving/jinja_ast.h"
#include "serving/unicode_space.h"

namespace servelab::jinja {

namespace {

constexpr std::int64_t kMaxRange = 100000;  // Jinja's sandbox MAX_RANGE
constexpr int kMaxDepth = 100;              // macro calls, and the nesting of lists and dicts
// The stack a render may use below its start (tags, expressions and macro calls recurse): far
// under an 8 MiB thread stack, with room for a sanitizer build's larger frames and for what
// the deepest frame calls.
constexpr std::uintptr_t kStackBudget = std::uintptr_t{1} << 20;
// RenderOptions::max_size times this: the bytes all string and list operations may produce.
constexpr std::uint64_t kWorkPerSize = 16;

// An estimate of a value's bytes (strings, plus a few per item), at least `cap` once past it
// (it stops counting there).
std::size_t approx_bytes(const Value& v, std::size_t cap) {
  if (v.is_string()) return v.as_string().size() + 2;
  std::size_t n = 8;
  if (v.is_list()) {
    for (const Value& e : v.as_list()) {
      n += approx_bytes(e, cap) + 2;
      if (n > cap) return n;
    }
  } else if (v.is_dict()) {
    for (const auto& [k, e] : v.as_dict()) {
      n += k.size() + approx_bytes(e, cap) + 4;
      if (n > cap) return n;
    }
  }
  return n;
}

bool holds_namespace(const Value& v) {
  if (v.is_namespace()) return true;
  if (v.is_list()) return std::any_of(v.as_list().begin(), v.as_list().end(), holds_namespace);
  if (v.is_dict()) {
    return std::any_of(v.as_dict().begin(), v.as_dict().end(),
                       [](const auto& kv) { return holds_namespace(kv.second); });
  }
  return false;
}

using Frame = std::unordered_map<std::string, Value>;

// Python's str.isspace() of one character: the whitespace character's byte length at s[i], or 0.
std::size_t space_at(std::string_view s, std::size_t i) { return unicode_space::at(s, i); }

// The code point at s[i] and its byte length; an invalid byte is (-1, 1).
std::pair<std::int32_t, std::size_t> decode(std::string_view s, std::size_t i) {
  utf8proc_int32_t cp = -1;
  const utf8proc_ssize_t n =
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                       static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
  if (n <= 0) return {-1, 1};
  return {cp, static_cast<std::size_t>(n)};
}

void append_cp(std::string& out, std::int32_t cp) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

bool is_cased(std::int32_t cp) {
  if (cp < 0) return false;
  const utf8proc_category_t c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}
bool is_letter(std::int32_t cp) {
  if (cp < 0) return false;
  const utf8proc_category_t c = utf8proc_category(cp);
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}
bool is_digit_cp(std::int32_t cp) {
  return cp >= 0 && utf8proc_category(cp) == UTF8PROC_CATEGORY_ND;
}

enum class Case { kUpper, kLower, kTitle };
std::int32_t to_case(std::int32_t cp, Case c) {
  if (cp < 0) return cp;
  return c == Case::kUpper ? utf8proc_toupper(cp)
                           : (c == Case::kLower ? utf8proc_tolower(cp) : utf8proc_totitle(cp));
}

// Each character of `s` in the case `pick(index of the character, code point)` says (invalid
// bytes kept).
template <class Pick>
std::string map_chars(const std::string& s, Pick pick) {
  std::string out;
  out.reserve(s.size());
  std::size_t k = 0;
  for (std::size_t i = 0; i < s.size(); ++k) {
    const auto [cp, n] = decode(s, i);
    if (cp < 0) {
      out += s[i];
    } else {
      const Case c = pick(k, cp);
      if (cp == 0xDF && c != Case::kLower) {  // 'ß': Python's full mappings, "SS" and "Ss"
        out += c == Case::kUpper ? "SS" : "Ss";
      } else {
        append_cp(out, to_case(cp, c));
      }
    }
    i += n;
  }
  return out;
}

// Python's str.upper() and lower() with Unicode's simple case mappings (one character to one:
// 'ß'.upper() stays 'ß', where Python gives 'SS').
std::string change_case(const std::string& s, bool upper) {
  return map_chars(s,
                   [&](std::size_t, std::int32_t) { return upper ? Case::kUpper : Case::kLower; });
}

// Python's str.capitalize(): the first character title case, the rest lower.
std::string capitalize(const std::string& s) {
  return map_chars(
      s, [](std::size_t k, std::int32_t) { return k == 0 ? Case::kTitle : Case::kLower; });
}

// Python's str.title(): a cased character after an uncased one goes title case, every other
// cased character lower.
std::string title(const std::string& s) {
  bool previous_cased = false;
  return map_chars(s, [&](std::size_t, std::int32_t cp) {
    const Case c = previous_cased ? Case::kLower : Case::kTitle;
    previous_cased = is_cased(cp);
    return c;
  });
}

// Jinja's title filter: each piece between runs of "-", whitespace, "(", "{", "[" and "<"
// gets its first character upper and the rest lower.
std::string title_filter(const std::string& s) {
  std::string out;
  bool start = true;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t sp = space_at(s, i);
    const char c = s[i];
    if (sp > 0 || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      const std::size_t n = sp > 0 ? sp : 1;
      out.append(s, i, n);
      i += n;
      start = true;
      continue;
    }
    const auto [cp, n] = decode(s, i);
    if (cp < 0) {
      out += c;
    } else {
      if (cp == 0xDF && start) {
        out += "SS";  // Python's full mapping
      } else {
        append_cp(out, to_case(cp, start ? Case::kUpper : Case::kLower));
      }
    }
    i += n;
    start = false;
  }
  return out;
}

// Python's str.strip/lstrip/rstrip: whitespace (Unicode's, as str.isspace), or the characters
// (code points) of `chars` when it is a string.
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<std::string> set;
  if (chars.is_string()) {
    const std::vector<std::size_t> cps = code_point_offsets(chars.as_string());
    for (std::size_t i = 0; i + 1 < cps.size(); ++i) {
      set.push_back(chars.as_string().substr(cps[i], cps[i + 1] - cps[i]));
    }
  }
  auto at = [&](std::size_t i) -> std::size_t {
    if (!chars.is_string()) return space_at(s, i);
    for (const std::string& c : set) {
      if (s.compare(i, c.size(), c) == 0) return c.size();
    }
    return 0;
  };
  auto before = [&](std::size_t e) -> std::size_t {
    if (!chars.is_string()) return unicode_space::before(s, e);
    for (const std::string& c : set) {
      if (c.size() <= e && s.compare(e - c.size(), c.size(), c) == 0) return c.size();
    }
    return 0;
  };
  std::size_t b = 0;
  std::size_t e = s.size();
  if (left) {
    for (std::size_t n; b < e && (n = at(b)) > 0;) b += n;
  }
  if (right) {
    for (std::size_t n; e > b && (n = before(e)) > 0;) e -= n;
  }
  return s.substr(b, e - b);
}

// Python's str.replace; nullopt once the result passes `max` bytes.
std::optional<std::string> replace_all(const std::string& s, const std::string& from,
                                       const std::string& to, std::int64_t count, std::size_t max) {
  std::string out;
  std::size_t pos = 0;
  std::int64_t n = 0;
  if (from.empty()) {  // Python inserts `to` between every character
    const std::vector<std::size_t> cps = code_point_offsets(s);
    for (std::size_t i = 0; i + 1 < cps.size(); ++i) {
      if (count < 0 || n++ < count) out += to;
      out += s.substr(cps[i], cps[i + 1] - cps[i]);
      if (out.size() > max) return std::nullopt;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  for (;;) {
    const std::size_t at = s.find(from, pos);
    if (at == std::string::npos || (count >= 0 && n >= count)) break;
    out += s.substr(pos, at - pos) + to;
    if (out.size() > max) return std::nullopt;
    pos = at + from.size();
    ++n;
  }
  return out + s.substr(pos);
}

std::vector<std::string> split(const std::string& s, const Value& sep, std::int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep.is_string()) {  // runs of (Unicode) whitespace; no empty parts
    std::size_t i = 0;
    while (i < s.size()) {
      for (std::size_t n; (n = space_at(s, i)) > 0;) i += n;
      if (i == s.size()) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
        out.push_back(s.substr(i));  // as Python: the rest keeps its trailing whitespace
        return out;
      }
      std::size_t e = i;
      while (e < s.size() && space_at(s, e) == 0) ++e;
      out.push_back(s.substr(i, e - i));
      i = e;
    }
    return out;
  }
  const std::string& d = sep.as_string();
  std::size_t pos = 0;
  for (;;) {
    const std::size_t at = s.find(d, pos);
    if (at == std::string::npos ||
        (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit)) {
      break;
    }
    out.push_back(s.substr(pos, at - pos));
    pos = at + d.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

Value strings(const std::vector<std::string>& parts) {
  List items;
  for (const std::string& p : parts) items.push_back(Value::string(p));
  return Value::list(std::move(items));
}

// Python's a // b and a % b (b != 0, and not -1 with a the minimum).
std::pair<std::int64_t, std::int64_t> py_divmod(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b, r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) {
    r += b;
    --q;
  }
  return {q, r};
}

// Python's float divmod (CPython's algorithm): a // b and a % b, b != 0.
std::pair<double, double> py_float_divmod(double a, double b) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0.0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv = 0.0;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  return {floordiv, mod};
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Arguments of a call, a filter or a test, evaluated: positional then keyword.
struct Args {
  List pos;
  std::vector<std::pair<std::string, Value>> kw;

  // The argument at position `i` or named `name`; `fallback` when neither was given.
  Value get(std::size_t i, const char* name, Value fallback = Value()) const {
    for (const auto& [k, v] : kw) {
      if (k == name) return v;
    }
    return i < pos.size() ? pos[i] : fallback;
  }
  // A keyword-only argument.
  Value named(const char* name, Value fallback = Value()) const {
    return get(pos.size(), name, std::move(fallback));
  }
};

class Renderer {
 public:
  Renderer(const std::string& origin, const RenderOptions& options, const Dict& context)
      : origin_(origin),
        options_(options),
        stack_base_(reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0))),
        max_work_(kWorkPerSize * static_cast<std::uint64_t>(options.max_size)) {
    frames_.emplace_back();
    for (const auto& [k, v] : context) frames_.back()[k] = v;
  }

  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec(const Body& body, std::string& out) {
    for (const Node& n : body) {
      const Flow f = exec(n, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw ConfigError(origin_ + ":" + std::to_string(line) + ": " + what);
  }

  Value lookup(const std::string& name) const {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
      const auto it = f->find(name);
      if (it != f->end()) return it->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(const std::string& name, Value v) { frames_.back()[name] = std::move(v); }

  void require_defined(const Value& v, int line) const {
    if (v.undefined()) fail(line, v.why().empty() ? "an undefined value was used" : v.why());
  }

  List iterate(const Value& v, int line) const {
    switch (v.kind()) {
      case Value::Kind::kUndefined:
        return {};
      case Value::Kind::kList:
        return v.as_list();
      case Value::Kind::kDict: {
        List keys;
        for (const auto& [k, e] : v.as_dict()) keys.push_back(Value::string(k));
        return keys;
      }
      case Value::Kind::kString: {
        List chars;
        const std::vector<std::size_t> cps = code_point_offsets(v.as_string());
        for (std::size_t i = 0; i + 1 < cps.size(); ++i) {
          chars.push_back(Value::string(v.as_string().substr(cps[i], cps[i + 1] - cps[i])));
        }
        return chars;
      }
      default:
        fail(line, "'" + v.type_name() + "' object is not iterable");
    }
  }

  // Refuses nesting past kStackBudget (a deeply nested template fails cleanly instead of
  // overflowing the thread's stack).
  void guard_stack(int line) const {
    const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
    const std::uintptr_t used = stack_base_ > here ? stack_base_ - here : here - stack_base_;
    if (used > kStackBudget) {
      fail(line, "the template nests too deeply (tags, expressions and macro calls)");
    }
  }

  // The work bound (RenderOptions): `bytes` more produced or scanned by a string or list
  // operation.
  void work(std::uint64_t bytes, int line) {
    work_ += bytes;
    if (work_ > max_work_) {
      fail(line, "the template built more than " + std::to_string(max_work_) +
                     " bytes of strings and lists (concatenation, filters, output)");
    }
  }
  // A value's share of that work: a string's bytes, 16 a list's or dict's item (not deep).
  void work(const Value& v, int line) {
    if (v.is_string()) {
      work(v.as_string().size(), line);
    } else if (v.is_list()) {
      work(16 * v.as_list().size(), line);
    } else if (v.is_dict()) {
      work(16 * v.as_dict().size(), line);
    }
  }

  void step(int line) {
    if (++steps_ > options_.max_steps) {
      fail(line, "the template ran more than " + std::to_string(options_.max_steps) +
                     " steps (loop iterations, macro calls, outputs)");
    }
  }

  // Values past the size or nesting bound are refused where they are made.
  Value bounded(Value v, int line) const {
    if (v.depth() > kMaxDepth) fail(line, "lists or dicts nested deeper than 100");
    if (approx_bytes(v, options_.max_size) > options_.max_size) too_big(line);
    return v;
  }
  [[noreturn]] void too_big(int line) const {
    fail(line, "a value larger than " + std::to_string(options_.max_size) + " bytes");
  }
  std::string replaced(const std::string& s, const Value& from, const Value& to, std::int64_t count,
                       int line) const {
    std::optional<std::string> r = replace_all(s, from.str(), to.str(), count, options_.max_size);
    if (!r) too_big(line);
    return std::move(*r);
  }

  // Each item's str() (or its `attribute`'s), `sep` between.
  std::string joined(const List& items, const std::string& sep, const Value& attribute, int line) {
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += sep;
      out += (attribute.undefined() ? items[i] : attribute_of(items[i], attribute, line)).str();
      if (out.size() > options_.max_size) too_big(line);
    }
    return out;
  }

  [[noreturn]] Value overflow(int line) const {
    fail(line, "integer overflow (the subset's integers are 64-bit)");
  }

  // Before a result of about `bytes` is built.
  void check_size(double bytes, int line) const {
    if (bytes > static_cast<double>(options_.max_size)) too_big(line);
  }

  Flow exec(const Node& n, std::string& out) {
    guard_stack(n.line);
    switch (n.kind) {
      case Node::Kind::kText:
        work(n.text.size(), n.line);
        out += n.text;
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        step(n.line);
        const std::string text = eval(*n.expr).str();
        work(text.size(), n.line);
        out += text;
        if (out.size() > options_.max_size) {
          fail(n.line, "the output grew past " + std::to_string(options_.max_size) + " bytes");
        }
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (std::size_t i = 0; i < n.conditions.size(); ++i) {
          if (eval(*n.conditions[i]).truthy()) return exec(n.bodies[i], out);
        }
        return exec(n.else_body, out);
      case Node::Kind::kFor:
        return exec_for(n, out);
      case Node::Kind::kSet: {
        Value v = eval(*n.expr);
        if (!n.attr.empty()) {
          if (holds_namespace(v)) {
            fail(n.line, "a namespace attribute cannot hold a namespace (" + n.targets[0] + "." +
                             n.attr + ")");
          }
          const Value target = lookup(n.targets[0]);
          if (!target.is_namespace()) {
            fail(n.line, "cannot assign attribute on non-namespace object '" + n.targets[0] + "'");
          }
          Dict& d = target.mutable_namespace();
          for (auto& [k, e] : d) {
            if (k == n.attr) {
              e = std::move(v);
              return Flow::kNormal;
            }
          }
          d.emplace_back(n.attr, std::move(v));
          return Flow::kNormal;
        }
        unpack(n.targets, v, n.line);
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string text;
        exec(n.bodies[0], text);
        assign(n.targets[0], Value::string(std::move(text)));
        return Flow::kNormal;
      }
      case Node::Kind::kMacro: {
        // Jinja's macros are closures: the loop and macro scopes around the definition (not
        // the template's top level, which a macro reads as it is when called).
        Dict closure;
        for (std::size_t f = frames_.size() - 1; f >= 1; --f) {
          for (const auto& [k, v] : frames_[f]) {
            if (std::none_of(closure.begin(), closure.end(),
                             [&](const auto& kv) { return kv.first == k; })) {
              closure.emplace_back(k, v);
            }
          }
        }
        assign(n.macro->name, Value::macro(n.macro.get(), std::move(closure)));
        return Flow::kNormal;
      }
      case Node::Kind::kBreak:
        if (loops_ == 0) fail(n.line, "break outside a loop");
        return Flow::kBreak;
      case Node::Kind::kContinue:
        if (loops_ == 0) fail(n.line, "continue outside a loop");
        return Flow::kContinue;
      case Node::Kind::kGeneration:
        return exec(n.bodies[0], out);
      case Node::Kind::kFilterBlock: {
        std::string text;
        const Flow f = exec(n.bodies[0], text);
        frames_.emplace_back();
        assign(kBlockText, Value::string(std::move(text)));
        out += eval(*n.expr).str();
        frames_.pop_back();
        return f;
      }
    }
    return Flow::kNormal;
  }

  void unpack(const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) {
      assign(targets[0], v);
      return;
    }
    const List items = iterate(v, line);
    if (items.size() != targets.size()) {
      fail(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                     std::to_string(targets.size()) + " names");
    }
    for (std::size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
  }

  // Each iteration runs in a fresh scope, as in Jinja: what the body sets is gone at the next
  // iteration and after the loop (a namespace carries state across).
  Flow exec_for(const Node& n, std::string& out) {
    List items = iterate(eval(*n.expr), n.line);
    if (n.filter) {
      List kept;
      for (Value& v : items) {
        frames_.emplace_back();
        unpack(n.targets, v, n.line);
        const bool keep = eval(*n.filter).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(std::move(v));
      }
      items = std::move(kept);
    }
    ++loops_;
    work(16 * items.size(), n.line);
    const auto len = static_cast<std::int64_t>(items.size());
    // loop.changed's last value, shared by the iterations (a namespace is shared by its copies).
    const Value changed = Value::dict({}, true);
    for (std::int64_t i = 0; i < len; ++i) {
      const auto at = static_cast<std::size_t>(i);
      Dict loop{{"index", Value::integer(i + 1)},      {"index0", Value::integer(i)},
                {"revindex", Value::integer(len - i)}, {"revindex0", Value::integer(len - i - 1)},
                {"first", Value::boolean(i == 0)},     {"last", Value::boolean(i + 1 == len)},
                {"length", Value::integer(len)},       {"depth", Value::integer(1)},
                {"depth0", Value::integer(0)}};
      if (i > 0) loop.emplace_back("previtem", items[at - 1]);
      if (i + 1 < len) loop.emplace_back("nextitem", items[at + 1]);
      loop.emplace_back("changed", changed);
      step(n.line);
      frames_.emplace_back();
      assign("loop", Value::dict(std::move(loop)));
      unpack(n.targets, items[at], n.line);
      const Flow f = exec(n.bodies[0], out);
      frames_.pop_back();
      if (f == Flow::kBreak) break;
    }
    --loops_;
    if (items.empty()) return exec(n.else_body, out);
    return Flow::kNormal;
  }

  Args eval_args(const Expr& e, std::size_t first) {
    Args a;
    for (std::size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v));
    return a;
  }

  Value eval(const Expr& e) {
    guard_stack(e.line);
    switch (e.op) {
      case Expr::Op::kLiteral:
        return e.literal;
      case Expr::Op::kName:
        return lookup(e.name);
      case Expr::Op::kList:
      case Expr::Op::kTuple: {
        List items;
        for (const ExprPtr& a : e.args) items.push_back(eval(*a));
        return bounded(Value::list(std::move(items), e.op == Expr::Op::kTuple), e.line);
      }
      case Expr::Op::kDict: {
        Dict items;
        for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i]);
          if (!k.is_string()) fail(e.line, "dict keys must be strings in this subset");
          Value v = eval(*e.args[i + 1]);
          auto it = std::find_if(items.begin(), items.end(),
                                 [&](const auto& kv) { return kv.first == k.as_string(); });
          if (it != items.end()) {
            it->second = std::move(v);
          } else {
            items.emplace_back(k.as_string(), std::move(v));
          }
        }
        return bounded(Value::dict(std::move(items)), e.line);
      }
      case Expr::Op::kAttr: {
        const Value obj = eval(*e.args[0]);
        require_defined(obj, e.line);
        if (obj.is_dict() && !obj.is_namespace() &&
            (e.name == "items" || e.name == "keys" || e.name == "values" || e.name == "get")) {
          // Jinja's sandbox looks an attribute up first (x['items'] is the key): the method,
          // which only a call can use (a macro value without a body stands for it).
          return Value::macro(nullptr);
        }
        if (obj.is_dict()) {
          Value v = obj.member(e.name);
          if (v.undefined()) {
            return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + e.name +
                                    "'");
          }
          return v;
        }
        return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + e.name +
                                "'");
      }
      case Expr::Op::kIndex: {
        const Value obj = eval(*e.args[0]);
        if (obj.is_string()) work(obj, e.line);  // code points are counted
        return index(obj, eval(*e.args[1]), e.line);
      }
      case Expr::Op::kSlice: {
        Value r = slice(e);
        work(r, e.line);
        return r;
      }
      case Expr::Op::kCall: {
        Value r = bounded(call(e), e.line);
        work(r, e.line);
        return r;
      }
      case Expr::Op::kFilter: {
        const Value v = eval(*e.args[0]);
        work(v, e.line);
        Value r = bounded(filter(e.name, v, eval_args(e, 1), e.line), e.line);
        work(r, e.line);
        return r;
      }
      case Expr::Op::kTest: {
        const Value v = eval(*e.args[0]);
        work(v, e.line);
        const bool r = test(e.name, v, eval_args(e, 1), e.line);
        return Value::boolean(e.negate ? !r : r);
      }
      case Expr::Op::kNot:
        return Value::boolean(!eval(*e.args[0]).truthy());
      case Expr::Op::kNeg: {
        const Value v = eval(*e.args[0]);
        if (v.kind() == Value::Kind::kFloat) return Value::number(-v.as_float());
        std::int64_t r = 0;
        if (v.is_number()) {
          return __builtin_sub_overflow(std::int64_t{0}, v.as_int(), &r) ? overflow(e.line)
                                                                         : Value::integer(r);
        }
        fail(e.line, "bad operand type for unary -: '" + v.type_name() + "'");
      }
      case Expr::Op::kAnd: {
        Value a = eval(*e.args[0]);
        return a.truthy() ? eval(*e.args[1]) : a;
      }
      case Expr::Op::kOr: {
        Value a = eval(*e.args[0]);
        return a.truthy() ? a : eval(*e.args[1]);
      }
      case Expr::Op::kCond:
        if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value();
      case Expr::Op::kBinary: {
        const Value a = eval(*e.args[0]);
        const Value b = eval(*e.args[1]);
        work(a, e.line);  // what the operator reads (a comparison scans its operands)
        work(b, e.line);
        Value r = bounded(binary(e.name, a, b, e.line), e.line);
        work(r, e.line);
        return r;
      }
    }
    return Value();
  }

  Value index(const Value& obj, const Value& key, int line) {
    require_defined(obj, line);
    if (obj.is_dict()) {
      if (key.is_string()) {
        Value v = obj.member(key.as_string());
        if (!v.undefined()) return v;
      }
      return Value::undefined("'" + obj.type_name() + " object' has no attribute " + key.repr());
    }
    if ((obj.is_list() || obj.is_string()) && key.is_number() &&
        key.kind() != Value::Kind::kFloat) {
      std::int64_t i = key.as_int();
      if (obj.is_list()) {
        const auto n = static_cast<std::int64_t>(obj.as_list().size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.as_list()[static_cast<std::size_t>(i)];
      } else {
        const std::vector<std::size_t> cps = code_point_offsets(obj.as_string());
        const auto n = static_cast<std::int64_t>(cps.size()) - 1;
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          const auto at = static_cast<std::size_t>(i);
          return Value::string(obj.as_string().substr(cps[at], cps[at + 1] - cps[at]));
        }
      }
      return Value::undefined(obj.type_name() + " index out of range");
    }
    return Value::undefined("'" + obj.type_name() + " object' has no attribute " + key.repr());
  }

  Value slice(const Expr& e) {
    const Value obj = eval(*e.args[0]);
    require_defined(obj, e.line);
    auto part = [&](std::size_t k) -> std::optional<std::int64_t> {
      if (!e.args[k]) return std::nullopt;
      const Value v = eval(*e.args[k]);
      if (v.is_none()) return std::nullopt;
      if (!v.is_number() || v.kind() == Value::Kind::kFloat) {
        fail(e.line, "slice indices must be integers or None");
      }
      return v.as_int();
    };
    const std::optional<std::int64_t> start = part(1), stop = part(2), step_part = part(3);
    const std::int64_t step = step_part.value_or(1);
    if (step == 0) fail(e.line, "slice step cannot be zero");
    std::vector<std::size_t> cps;
    std::int64_t n = 0;
    if (obj.is_list()) {
      n = static_cast<std::int64_t>(obj.as_list().size());
    } else if (obj.is_string()) {
      cps = code_point_offsets(obj.as_string());
      n = static_cast<std::int64_t>(cps.size()) - 1;
    } else {
      fail(e.line, "'" + obj.type_name() + "' object is not subscriptable");
    }
    auto clamp = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
      if (!v) return fallback;
      std::int64_t x = *v < 0 ? *v + n : *v;
      if (step > 0) return std::clamp<std::int64_t>(x, 0, n);
      return std::clamp<std::int64_t>(x, -1, n - 1);
    };
    const std::int64_t b = clamp(start, step > 0 ? 0 : n - 1);
    const std::int64_t s = clamp(stop, step > 0 ? n : -1);
    List items;
    std::string text;
    for (std::int64_t i = b; step > 0 ? i < s : i > s;) {
      const auto at = static_cast<std::size_t>(i);
      if (obj.is_list()) {
        items.push_back(obj.as_list()[at]);
      } else {
        text += obj.as_string().substr(cps[at], cps[at + 1] - cps[at]);
      }
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    return obj.is_list() ? Value::list(std::move(items)) : Value::string(std::move(text));
  }

  Value binary(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "~") return Value::string(a.str() + b.str());
    if (op == "==") return Value::boolean(a.equals(b));
    if (op == "!=") return Value::boolean(!a.equals(b));
    if (op == "in" || op == "not in") {
      const bool in = contains(b, a, line);
      return Value::boolean(op == "in" ? in : !in);
    }
    auto unsupported = [&]() {
      fail(line, "unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                     b.type_name() + "'");
    };
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      const int c = order(a, b, op, line);
      if (op == "<") return Value::boolean(c < 0);
      if (op == "<=") return Value::boolean(c <= 0);
      if (op == ">") return Value::boolean(c > 0);
      return Value::boolean(c >= 0);
    }
    if (a.undefined()) require_defined(a, line);
    if (b.undefined()) require_defined(b, line);
    if (op == "%" && a.is_string()) return Value::string(percent_format(a.as_string(), b, line));
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value::string(a.as_string() + b.as_string());
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {  // no list + tuple
        List items = a.as_list();
        items.insert(items.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(items), a.is_tuple());
      }
    }
    if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
      const Value& seq = (a.is_string() || a.is_list()) ? a : b;
      const Value& count = (a.is_string() || a.is_list()) ? b : a;
      if (!count.is_number() || count.kind() == Value::Kind::kFloat) unsupported();
      const std::int64_t n = std::max<std::int64_t>(0, count.as_int());
      check_size(static_cast<double>(approx_bytes(seq, options_.max_size)) * static_cast<double>(n),
                 line);
      if (seq.is_string()) {
        std::string s;
        for (std::int64_t i = 0; i < n; ++i) s += seq.as_string();
        return Value::string(std::move(s));
      }
      List items;
      for (std::int64_t i = 0; i < n; ++i) {
        items.insert(items.end(), seq.as_list().begin(), seq.as_list().end());
      }
      return Value::list(std::move(items), seq.is_tuple());
    }
    if (!a.is_number() || !b.is_number()) unsupported();
    const bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
    if (op == "/") {
      if (b.as_float() == 0.0) fail(line, "division by zero");
      return Value::number(a.as_float() / b.as_float());
    }
    if (ints) {
      const std::int64_t x = a.as_int(), y = b.as_int();
      std::int64_t r = 0;
      if (op == "+") return __builtin_add_overflow(x, y, &r) ? overflow(line) : Value::integer(r);
      if (op == "-") return __builtin_sub_overflow(x, y, &r) ? overflow(line) : Value::integer(r);
      if (op == "*") return __builtin_mul_overflow(x, y, &r) ? overflow(line) : Value::integer(r);
      if (op == "//" || op == "%") {
        if (y == 0) fail(line, "integer division or modulo by zero");
        if (y == -1) {  // x // -1 is -x; x % -1 is 0
          if (op == "%") return Value::integer(0);
          return __builtin_sub_overflow(std::int64_t{0}, x, &r) ? overflow(line)
                                                                : Value::integer(r);
        }
        const auto [q, rem] = py_divmod(x, y);
        return Value::integer(op == "//" ? q : rem);
      }
      if (op == "**" && y >= 0) {  // by squaring
        std::int64_t result = 1, base = x, e = y;
        while (e > 0) {
          if ((e & 1) && __builtin_mul_overflow(result, base, &result)) overflow(line);
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) overflow(line);
        }
        return Value::integer(result);
      }
    }
    const double x = a.as_float(), y = b.as_float();
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "**") {
      if (x == 0.0 && y < 0.0) fail(line, "0.0 cannot be raised to a negative power");
      return Value::number(std::pow(x, y));
    }
    if (op == "//" || op == "%") {
      if (y == 0.0) fail(line, "float division or modulo by zero");
      const auto [q, rem] = py_float_divmod(x, y);
      return Value::number(op == "//" ? q : rem);
    }
    fail(line, "unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                   b.type_name() + "'");
  }

  // Python's ordering of numbers, strings, and lists (item by item, then by length).
  int order(const Value& a, const Value& b, const std::string& op, int line) const {
    if (a.is_number() && b.is_number()) {
      return a.as_float() < b.as_float() ? -1 : (a.as_float() > b.as_float() ? 1 : 0);
    }
    if (a.is_string() && b.is_string()) {
      const int c = a.as_string().compare(b.as_string());
      return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      const List& x = a.as_list();
      const List& y = b.as_list();
      for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
        if (x[i].equals(y[i])) continue;
        return order(x[i], y[i], op, line);
      }
      return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
    }
    fail(line, "'" + op + "' not supported between instances of '" + a.type_name() + "' and '" +
                   b.type_name() + "'");
  }

  bool contains(const Value& container, const Value& item, int line) const {
    switch (container.kind()) {
      case Value::Kind::kUndefined:
        return false;
      case Value::Kind::kString:
        if (!item.is_string()) {
          fail(line, "'in <string>' requires string as left operand, not " + item.type_name());
        }
        return container.as_string().find(item.as_string()) != std::string::npos;
      case Value::Kind::kList:
        return std::any_of(container.as_list().begin(), container.as_list().end(),
                           [&](const Value& v) { return v.equals(item); });
      case Value::Kind::kDict:
        if (item.is_list() || item.is_dict()) {
          fail(line, "unhashable type: '" + item.type_name() + "'");
        }
        return item.is_string() && !container.member(item.as_string()).undefined();
      default:
        fail(line, "argument of type '" + container.type_name() + "' is not iterable");
    }
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.op == Expr::Op::kAttr) {
      const Value obj = eval(*callee.args[0]);
      require_defined(obj, e.line);
      work(obj, e.line);  // a method reads its string or list
      const Value member = obj.is_dict() ? obj.member(callee.name) : Value();
      if (member.kind() == Value::Kind::kMacro) return call_macro(member, e);
      return method(obj, callee.name, eval_args(e, 1), e.line);
    }
    const Value f = callee.op == Expr::Op::kName ? lookup(callee.name) : eval(callee);
    if (f.kind() == Value::Kind::kMacro && f.as_macro() == nullptr) {
      fail(e.line, "a dict method can only be called as x.name(...)");
    }
    if (f.kind() == Value::Kind::kMacro) return call_macro(f, e);
    if (callee.op == Expr::Op::kName && f.undefined()) {
      return global(callee.name, eval_args(e, 1), e.line);
    }
    fail(e.line, "'" + f.type_name() + "' object is not callable");
  }

  Value call_macro(const Value& macro, const Expr& e) {
    const MacroDef& m = *macro.as_macro();
    if (depth_ >= kMaxDepth) fail(e.line, "macro calls nested deeper than 100");
    step(e.line);
    const Args a = eval_args(e, 1);
    if (a.pos.size() > m.params.size()) {
      fail(e.line, "macro '" + m.name + "' takes " + std::to_string(m.params.size()) +
                       " arguments, got " + std::to_string(a.pos.size()));
    }
    for (const auto& kv : a.kw) {
      const std::string& key = kv.first;
      if (std::none_of(m.params.begin(), m.params.end(),
                       [&](const auto& p) { return p.first == key; })) {
        fail(e.line, "macro '" + m.name + "' takes no keyword argument '" + key + "'");
      }
    }
    // The macro's scope: the template's top level, the scopes it was defined in, then its
    // parameters (a default sees the parameters before it, as in Jinja).
    std::vector<Frame> saved;
    saved.swap(frames_);
    frames_.push_back(saved.front());
    frames_.emplace_back();
    for (const auto& [k, v] : macro.macro_closure()) frames_.back()[k] = v;
    frames_.emplace_back();
    const int loops = loops_;
    loops_ = 0;
    ++depth_;
    std::string out;
    try {
      for (std::size_t i = 0; i < m.params.size(); ++i) {
        const auto& [name, fallback] = m.params[i];
        Value v = a.get(i, name.c_str(), Value::undefined("'" + name + "' is undefined"));
        if (v.undefined() && fallback) v = eval(*fallback);
        frames_.back()[name] = std::move(v);
      }
      exec(m.body, out);
    } catch (...) {
      --depth_;
      loops_ = loops;
      frames_.swap(saved);
      throw;
    }
    --depth_;
    loops_ = loops;
    frames_.swap(saved);
    return Value::string(std::move(out));
  }

  Value global(const std::string& name, const Args& a, int line) {
    if (name == "raise_exception") {
      if (a.pos.size() + a.kw.size() != 1 || (a.kw.size() == 1 && a.kw[0].first != "message")) {
        fail(line, "raise_exception() takes exactly one argument (the message), got " +
                       std::to_string(a.pos.size() + a.kw.size()));
      }
      throw Raised(a.get(0, "message").str());
    }
    if (name == "range") {
      std::int64_t start = 0, stop = 0, step = 1;
      for (const Value& v : a.pos) {
        if (!v.is_number() || v.kind() == Value::Kind::kFloat) {
          fail(line, "range() takes integers, got '" + v.type_name() + "'");
        }
      }
      if (a.pos.size() == 1) {
        stop = a.pos[0].as_int();
      } else if (a.pos.size() == 2 || a.pos.size() == 3) {
        start = a.pos[0].as_int();
        stop = a.pos[1].as_int();
        if (a.pos.size() == 3) step = a.pos[2].as_int();
      } else {
        fail(line, "range() takes 1 to 3 arguments");
      }
      if (step == 0) fail(line, "range() arg 3 must not be zero");
      List items;
      for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (static_cast<std::int64_t>(items.size()) >= kMaxRange) {
          fail(line, "range too big (the sandbox allows 100000 items)");
        }
        items.push_back(Value::integer(i));
        if (__builtin_add_overflow(i, step, &i)) break;
      }
      return Value::list(std::move(items));
    }
    if (name == "namespace" || name == "dict") {
      Dict items;
      for (const Value& p : a.pos) {
        if (!p.is_dict()) fail(line, name + "() takes a dict or keyword arguments");
        for (const auto& kv : p.as_dict()) items.push_back(kv);
      }
      for (const auto& kv : a.kw) items.push_back(kv);
      return Value::dict(std::move(items), name == "namespace");
    }
    if (name == "strftime_now") {
      const std::time_t t = options_.now.value_or(std::time(nullptr));
      std::tm tm{};
      localtime_r(&t, &tm);
      const std::string format = a.get(0, "format").str();
      // strftime's 0 is an empty result or a buffer too small: grown up to a bound far past
      // what any conversion writes (max_size at most).
      const std::size_t limit =
          std::min(options_.max_size, std::max<std::size_t>(256, format.size() * 128));
      for (std::size_t size = 256;; size *= 2) {
        std::string buf(std::min(size, limit), '\0');
        const std::size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
        if (n > 0 || format.empty() || size >= limit) {
          buf.resize(n);
          return Value::string(std::move(buf));
        }
      }
    }
    fail(line, "'" + name + "' is undefined");
  }

  Value method(const Value& obj, const std::string& name, const Args& a, int line) {
    if (obj.is_string()) {
      const std::string& s = obj.as_string();
      if (name == "strip") return Value::string(strip(s, a.get(0, "chars"), true, true));
      if (name == "lstrip") return Value::string(strip(s, a.get(0, "chars"), true, false));
      if (name == "rstrip") return Value::string(strip(s, a.get(0, "chars"), false, true));
      if (name == "upper" || name == "lower") return Value::string(change_case(s, name == "upper"));
      if (name == "capitalize") return Value::string(capitalize(s));
      if (name == "title") return Value::string(title(s));
      if ((name == "split" || name == "rsplit") && a.get(0, "sep").is_string() &&
          a.get(0, "sep").as_string().empty()) {
        fail(line, "empty separator");
      }
      if (name == "split") {
        return strings(
            split(s, a.get(0, "sep"), a.get(1, "maxsplit", Value::integer(-1)).as_int()));
      }
      if (name == "rsplit") {
        const Value sep = a.get(0, "sep");
        const std::int64_t maxsplit = a.get(1, "maxsplit", Value::integer(-1)).as_int();
        if (maxsplit < 0 || !sep.is_string()) return strings(split(s, sep, maxsplit));
        std::vector<std::string> parts = split(s, sep, -1);
        while (static_cast<std::int64_t>(parts.size()) > maxsplit + 1) {
          parts[0] += sep.as_string() + parts[1];
          parts.erase(parts.begin() + 1);
        }
        return strings(parts);
      }
      if (name == "splitlines") {  // Python's line breaks (\r\n, \v, U+2028, ...)
        const bool keepends = a.get(0, "keepends", Value::boolean(false)).truthy();
        std::vector<std::string> parts;
        std::size_t begin = 0;
        for (std::size_t i = 0; i < s.size();) {
          const std::size_t n = unicode_space::line_break_at(s, i);
          if (n == 0) {
            ++i;
            continue;
          }
          parts.push_back(s.substr(begin, (keepends ? i + n : i) - begin));
          i += n;
          begin = i;
        }
        if (begin < s.size()) parts.push_back(s.substr(begin));
        return strings(parts);
      }
      if (name == "startswith" || name == "endswith") {
        const Value prefix = a.get(0, "prefix");
        List options = prefix.is_list() ? prefix.as_list() : List{prefix};
        for (const Value& p : options) {
          if (!p.is_string()) fail(line, name + " takes a string or a tuple of strings");
          if (name == "startswith" ? s.starts_with(p.as_string()) : s.ends_with(p.as_string())) {
            return Value::boolean(true);
          }
        }
        return Value::boolean(false);
      }
      if (name == "replace") {
        return Value::string(replaced(s, a.get(0, "old"), a.get(1, "new"),
                                      a.get(2, "count", Value::integer(-1)).as_int(), line));
      }
      if (name == "find" || name == "rfind") {
        const std::string sub = a.get(0, "sub").str();
        const std::size_t at = name == "find" ? s.find(sub) : s.rfind(sub);
        if (at == std::string::npos) return Value::integer(-1);
        return Value::integer(
            static_cast<std::int64_t>(code_point_offsets(s.substr(0, at)).size()) - 1);
      }
      if (name == "count") {
        const std::string sub = a.get(0, "sub").str();
        if (sub.empty()) {
          return Value::integer(static_cast<std::int64_t>(code_point_offsets(s).size()));
        }
        std::int64_t n = 0;
        for (std::size_t at = s.find(sub); at != std::string::npos;
             at = s.find(sub, at + sub.size()))
          ++n;
        return Value::integer(n);
      }
      if (name == "join") {
        return Value::string(joined(iterate(a.get(0, "iterable"), line), s, Value(), line));
      }
      if (name == "format") return Value::string(brace_format(s, a, line));
      if (name.starts_with("is") && name.size() > 2) {
        if (s.empty()) return Value::boolean(false);
        if (name == "isspace") {
          for (std::size_t i = 0, n; i < s.size(); i += n) {
            if ((n = space_at(s, i)) == 0) return Value::boolean(false);
          }
          return Value::boolean(true);
        }
        std::function<bool(std::int32_t)> ok;
        if (name == "isdigit") ok = is_digit_cp;
        if (name == "isalpha") ok = is_letter;
        if (name == "isalnum") {
          ok = [](std::int32_t cp) { return is_letter(cp) || is_digit_cp(cp); };
        }
        if (name == "islower" || name == "isupper") {
          const bool up = name == "isupper";
          bool cased = false;
          for (std::size_t i = 0; i < s.size();) {
            const auto [cp, n] = decode(s, i);
            cased = cased || is_cased(cp);
            i += n;
          }
          return Value::boolean(cased && change_case(s, up) == s);
        }
        if (ok) {
          for (std::size_t i = 0; i < s.size();) {
            const auto [cp, n] = decode(s, i);
            if (!ok(cp)) return Value::boolean(false);
            i += n;
          }
          return Value::boolean(true);
        }
      }
    }
    if (obj.is_dict() && !obj.is_namespace()) {
      if (name == "items") {
        List items;
        for (const auto& [k, v] : obj.as_dict())
          items.push_back(Value::list({Value::string(k), v}, true));
        return Value::list(std::move(items));
      }
      if (name == "keys") return Value::list(iterate(obj, line));
      if (name == "values") {
        List items;
        for (const auto& kv : obj.as_dict()) items.push_back(kv.second);
        return Value::list(std::move(items));
      }
      if (name == "get") {
        const Value v = index(obj, a.get(0, "key"), line);
        return v.undefined() ? a.get(1, "default", Value::none()) : v;
      }
      if (name == "changed" && obj.member("changed").is_namespace() &&
          obj.member("index0").is_number()) {  // loop.changed(*values)
        const Value now = Value::list(a.pos);
        Dict& last = obj.member("changed").mutable_namespace();
        if (!last.empty() && last[0].second.equals(now)) return Value::boolean(false);
        last.assign({{"last", now}});
        return Value::boolean(true);
      }
      if (name == "cycle" && obj.member("index0").is_number()) {  // loop.cycle
        if (a.pos.empty()) fail(line, "loop.cycle() needs at least one value");
        return a.pos[static_cast<std::size_t>(obj.member("index0").as_int()) % a.pos.size()];
      }
    }
    if (obj.is_list()) {
      if (name == "index" || name == "count") {
        const Value x = a.get(0, "x");
        std::int64_t n = 0;
        for (std::size_t i = 0; i < obj.as_list().size(); ++i) {
          if (!obj.as_list()[i].equals(x)) continue;
          if (name == "index") return Value::integer(static_cast<std::int64_t>(i));
          ++n;
        }
        if (name == "index") fail(line, x.repr() + " is not in list");
        return Value::integer(n);
      }
      if (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
          name == "remove" || name == "clear" || name == "sort" || name == "reverse") {
        fail(line, "access to attribute '" + name +
                       "' of 'list' object is unsafe (the sandbox does not modify its inputs)");
      }
    }
    fail(line, "'" + obj.type_name() + "' object has no attribute '" + name + "'");
  }

  // `attribute` of a filter: a dotted path ("a.b") or an integer index.
  // Jinja's make_attrgetter: a part of only digits is an index ("a.0" is item["a"][0]).
  Value attribute_of(const Value& v, const Value& attribute, int line) {
    if (attribute.is_number()) return index(v, attribute, line);
    Value cur = v;
    for (const std::string& part : split(attribute.str(), Value::string("."), -1)) {
      if (cur.undefined()) return cur;
      const bool digits =
          !part.empty() && part.size() < 19 &&
          std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      cur = index(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part), line);
    }
    return cur;
  }

  // Jinja's ignore_case: a string lower-cased, anything else as it is.
  static Value folded(const Value& v, bool case_sensitive) {
    if (case_sensitive || !v.is_string()) return v;
    return Value::string(change_case(v.as_string(), false));
  }

  int compare_for_sort(const Value& a, const Value& b, bool case_sensitive, int line) {
    if (a.is_string() && b.is_string()) {
      const std::string x = case_sensitive ? a.as_string() : change_case(a.as_string(), false);
      const std::string y = case_sensitive ? b.as_string() : change_case(b.as_string(), false);
      return x.compare(y);
    }
    if (a.is_number() && b.is_number()) {
      return a.as_float() < b.as_float() ? -1 : (a.as_float() > b.as_float() ? 1 : 0);
    }
    fail(line, "'<' not supported between instances of '" + a.type_name() + "' and '" +
                   b.type_name() + "'");
  }

  // Python's `fmt % args` for the conversions %s %r %d %i %f %x %% (flags - 0 +, a width and
  // a precision; %(name)s with a dict): `args` a tuple, a dict or a single value.
  std::string percent_format(const std::string& fmt, const Value& args, int line) {
    const bool by_name = args.is_dict() && !args.is_namespace();
    const List single{args};
    const List& pos = args.is_tuple() ? args.as_list() : single;
    std::size_t next = 0;
    std::string out;
    for (std::size_t i = 0; i < fmt.size(); ++i) {
      if (fmt[i] != '%') {
        out += fmt[i];
        continue;
      }
      if (++i >= fmt.size()) fail(line, "incomplete format");
      if (fmt[i] == '%') {
        out += '%';
        continue;
      }
      Value arg;
      bool have = false;
      if (fmt[i] == '(') {
        const std::size_t close = fmt.find(')', i);
        if (close == std::string::npos) fail(line, "incomplete format key");
        if (!by_name) fail(line, "format requires a mapping");
        arg = args.member(fmt.substr(i + 1, close - i - 1));
        if (arg.undefined()) fail(line, "KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
        have = true;
        i = close + 1;
      }
      std::string flags;
      while (i < fmt.size() && std::string_view("-+ 0#").find(fmt[i]) != std::string_view::npos) {
        flags += fmt[i++];
      }
      std::string width, precision;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') width += fmt[i++];
      if (i < fmt.size() && fmt[i] == '.') {
        precision = ".";
        for (++i; i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9';) precision += fmt[i++];
      }
      if (i >= fmt.size()) fail(line, "incomplete format");
      if (width.size() > 6 || precision.size() > 4)
        fail(line, "a format width or precision too large");
      const char conv = fmt[i];
      if (!have) {
        if (by_name && !args.is_tuple()) {
          arg = args;  // Python formats the dict itself
        } else {
          if (next >= pos.size()) fail(line, "not enough arguments for format string");
          arg = pos[next++];
        }
      }
      std::string text;
      if (conv == 's' || conv == 'r' || conv == 'a') {
        text = conv == 's' ? arg.str() : arg.repr();
        if (precision.size() > 1) {
          const std::vector<std::size_t> cps = code_point_offsets(text);
          const std::size_t keep =
              std::min<std::size_t>(std::stoul(precision.substr(1)), cps.size() - 1);
          text.resize(cps[keep]);
        }
      } else if (conv == 'd' || conv == 'i' || conv == 'f' || conv == 'F' || conv == 'x' ||
                 conv == 'X' || conv == 'e' || conv == 'g') {
        if (!arg.is_number()) {
          fail(line, std::string("%") + conv + " format: a real number is required, not " +
                         arg.type_name());
        }
        const std::string spec = "%" + flags + width + precision;
        std::vector<char> buf(512 + (width.empty() ? 0 : std::stoul(width)) +
                              (precision.size() > 1 ? std::stoul(precision.substr(1)) : 0));
        if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X') {
          const std::string c = conv == 'i' ? "d" : std::string(1, conv);
          std::snprintf(buf.data(), buf.size(), (spec + "ll" + c).c_str(),
                        static_cast<long long>(arg.as_int()));
        } else {
          std::snprintf(buf.data(), buf.size(), (spec + conv).c_str(), arg.as_float());
        }
        text = buf.data();
        out += text;
        continue;
      } else {
        fail(line, std::string("unsupported format character '") + conv + "'");
      }
      const std::size_t w = width.empty() ? 0 : std::stoul(width);
      const std::size_t n = code_point_offsets(text).size() - 1;
      if (n < w) {
        const std::string pad(w - n, ' ');
        text = flags.find('-') != std::string::npos ? text + pad : pad + text;
      }
      out += text;
      if (out.size() > options_.max_size) too_big(line);
    }
    if (!by_name && args.is_tuple() && next < pos.size()) {
      fail(line, "not all arguments converted during string formatting");
    }
    if (!by_name && !args.is_tuple() && next == 0) {
      fail(line, "not all arguments converted during string formatting");
    }
    return out;
  }

  // Python's str.format: {} {0} {name} with an optional !s / !r conversion; {{ and }} are
  // braces. Format specs ({:>10}) are outside the subset.
  std::string brace_format(const std::string& fmt, const Args& a, int line) {
    std::string out;
    std::size_t auto_index = 0;
    for (std::size_t i = 0; i < fmt.size(); ++i) {
      const char c = fmt[i];
      if (c == '}') {
        if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
          out += '}';
          ++i;
          continue;
        }
        fail(line, "Single '}' encountered in format string");
      }
      if (c != '{') {
        out += c;
        continue;
      }
      if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
        out += '{';
        ++i;
        continue;
      }
      const std::size_t close = fmt.find('}', i);
      if (close == std::string::npos) fail(line, "Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, close - i - 1);
      i = close;
      char conversion = 's';
      if (field.find(':') != std::string::npos) {
        fail(line, "str.format specs ({:...}) are not supported");
      }
      if (const std::size_t bang = field.find('!'); bang != std::string::npos) {
        if (bang + 2 != field.size() || (field[bang + 1] != 'r' && field[bang + 1] != 's')) {
          fail(line, "str.format: unsupported conversion in {" + field + "}");
        }
        conversion = field[bang + 1];
        field.resize(bang);
      }
      Value arg;
      if (field.empty() ||
          std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        const std::size_t at = field.empty() ? auto_index++ : std::stoul(field.substr(0, 9));
        if (at >= a.pos.size()) {
          fail(line, "IndexError: Replacement index " + std::to_string(at) +
                         " out of range for positional args tuple");
        }
        arg = a.pos[at];
      } else {
        bool found = false;
        for (const auto& [k, v] : a.kw) {
          if (k == field) {
            arg = v;
            found = true;
          }
        }
        if (!found) fail(line, "KeyError: '" + field + "'");
      }
      out += conversion == 'r' ? arg.repr() : arg.str();
      if (out.size() > options_.max_size) too_big(line);
    }
    return out;
  }

  // Refuses keyword arguments outside `names` (and more positional ones than it has).
  void only_args(const Args& a, std::initializer_list<const char*> names, const std::string& what,
                 int line) const {
    if (a.pos.size() > names.size()) {
      fail(line, what + "() takes at most " + std::to_string(names.size()) + " arguments");
    }
    for (const auto& [k, v] : a.kw) {
      if (std::none_of(names.begin(), names.end(), [&](const char* n) { return k == n; })) {
        fail(line, what + "() got an unexpected keyword argument '" + k + "'");
      }
    }
  }

  Value filter(const std::string& name, const Value& v, const Args& a, int line) {
    if (name == "default" || name == "d") {
      const bool boolean = a.get(1, "boolean", Value::boolean(false)).truthy();
      if (v.undefined() || (boolean && !v.truthy()))
        return a.get(0, "default_value", Value::string(""));
      return v;
    }
    if (name == "safe") return v;
    if (name == "string") return Value::string(v.str());
    if (name == "tojson") {  // transformers': json.dumps(v, ensure_ascii=False, indent=None,
                             // separators=None, sort_keys=False), in that order
      only_args(a, {"ensure_ascii", "indent", "separators", "sort_keys"}, name, line);
      Value::JsonFormat format;
      format.ensure_ascii = a.get(0, "ensure_ascii", Value::boolean(false)).truthy();
      const Value indent = a.get(1, "indent");
      if (indent.is_string()) {
        format.indent = indent.as_string();
      } else if (indent.is_number() && indent.kind() != Value::Kind::kFloat) {
        check_size((static_cast<double>(std::max<std::int64_t>(0, indent.as_int())) + 1.0) *
                       (v.depth() + 1.0) * static_cast<double>(approx_bytes(v, options_.max_size)),
                   line);
        format.indent =
            std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, indent.as_int())), ' ');
      } else if (!indent.undefined() && !indent.is_none()) {
        fail(line, "tojson: indent must be an int or a str, got '" + indent.type_name() + "'");
      }
      if (format.indent) {
        check_size(static_cast<double>(format.indent->size() + 1) * (v.depth() + 1.0) *
                       static_cast<double>(approx_bytes(v, options_.max_size)),
                   line);
      }
      const Value separators = a.get(2, "separators");
      if (separators.is_list()) {
        const List& sep = separators.as_list();
        if (sep.size() != 2 || !sep[0].is_string() || !sep[1].is_string()) {
          fail(line, "tojson: separators must be two strings (item_separator, key_separator)");
        }
        check_size(static_cast<double>(sep[0].as_string().size() + sep[1].as_string().size() + 1) *
                       static_cast<double>(approx_bytes(v, options_.max_size)),
                   line);
        format.separators.emplace(sep[0].as_string(), sep[1].as_string());
      } else if (!separators.undefined() && !separators.is_none()) {
        fail(line, "tojson: separators must be a tuple of two strings");
      }
      format.sort_keys = a.get(3, "sort_keys", Value::boolean(false)).truthy();
      const std::optional<std::string> j = v.to_json(format);
      if (!j) fail(line, "Object of type " + v.type_name() + " is not JSON serializable");
      return Value::string(*j);
    }
    if (name == "length" || name == "count") {
      if (v.is_string())
        return Value::integer(static_cast<std::int64_t>(code_point_offsets(v.as_string()).size()) -
                              1);
      if (v.is_list()) return Value::integer(static_cast<std::int64_t>(v.as_list().size()));
      if (v.is_dict()) return Value::integer(static_cast<std::int64_t>(v.as_dict().size()));
      if (v.undefined()) return Value::integer(0);
      fail(line, "object of type '" + v.type_name() + "' has no len()");
    }
    if (name == "first" || name == "last") {
      const List items = iterate(v, line);
      if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "join") {
      return Value::string(joined(iterate(v, line), a.get(0, "d", Value::string("")).str(),
                                  a.get(1, "attribute"), line));
    }
    if (name == "list") return Value::list(iterate(v, line));
    if (name == "reverse") {
      if (v.is_string()) {
        List chars = iterate(v, line);
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->as_string();
        return Value::string(std::move(out));
      }
      List items = iterate(v, line);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    }
    if (name == "items") {
      if (v.undefined()) return Value::list({});
      if (!v.is_dict()) fail(line, "the items filter takes a mapping, got '" + v.type_name() + "'");
      return method(v, "items", {}, line);
    }
    if (name == "sort") {
      const bool reverse = a.get(0, "reverse", Value::boolean(false)).truthy();
      const bool case_sensitive = a.get(1, "case_sensitive", Value::boolean(false)).truthy();
      const Value attribute = a.get(2, "attribute");
      List items = iterate(v, line);
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        const Value kx = attribute.undefined() ? x : attribute_of(x, attribute, line);
        const Value ky = attribute.undefined() ? y : attribute_of(y, attribute, line);
        const int c = compare_for_sort(kx, ky, case_sensitive, line);
        return reverse ? c > 0 : c < 0;
      });
      return Value::list(std::move(items));
    }
    if (name == "unique") {  // unique(case_sensitive=False, attribute=None): the first of each
      const bool case_sensitive = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
      const Value attribute = a.get(1, "attribute");
      List out;
      List seen;
      for (const Value& item : iterate(v, line)) {
        const Value key = folded(attribute.undefined() ? item : attribute_of(item, attribute, line),
                                 case_sensitive);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& o) { return o.equals(key); })) {
          seen.push_back(key);
          out.push_back(item);
        }
      }
      return Value::list(std::move(out));
    }
    if (name == "dictsort") {  // dictsort(case_sensitive=False, by='key', reverse=False)
      if (!v.is_dict()) fail(line, "dictsort takes a mapping, got '" + v.type_name() + "'");
      const bool case_sensitive = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
      const std::string by = a.get(1, "by", Value::string("key")).str();
      if (by != "key" && by != "value") fail(line, "You can only sort by either 'key' or 'value'");
      const bool reverse = a.get(2, "reverse", Value::boolean(false)).truthy();
      List items;
      for (const auto& [k, e] : v.as_dict())
        items.push_back(Value::list({Value::string(k), e}, true));
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        const std::size_t at = by == "key" ? 0 : 1;
        const int c = order(folded(x.as_list()[at], case_sensitive),
                            folded(y.as_list()[at], case_sensitive), "<", line);
        return reverse ? c > 0 : c < 0;
      });
      return Value::list(std::move(items));
    }
    if (name == "truncate") {  // truncate(length=255, killwords=False, end='...', leeway=5)
      const std::string s = v.str();
      const std::int64_t length = a.get(0, "length", Value::integer(255)).as_int();
      const bool killwords = a.get(1, "killwords", Value::boolean(false)).truthy();
      const std::string end = a.get(2, "end", Value::string("...")).str();
      const Value leeway_arg = a.get(3, "leeway");
      const std::int64_t leeway = leeway_arg.is_number() ? leeway_arg.as_int() : 5;
      const std::vector<std::size_t> cps = code_point_offsets(s);
      const auto n = static_cast<std::int64_t>(cps.size()) - 1;
      const auto end_n = static_cast<std::int64_t>(code_point_offsets(end).size()) - 1;
      if (length < end_n) {
        fail(line,
             "expected length >= " + std::to_string(end_n) + ", got " + std::to_string(length));
      }
      if (leeway < 0) fail(line, "expected leeway >= 0, got " + std::to_string(leeway));
      if (n <= length + leeway) return Value::string(s);
      std::string head = s.substr(0, cps[static_cast<std::size_t>(length - end_n)]);
      if (!killwords) {
        const std::size_t space = head.rfind(' ');
        if (space != std::string::npos) head.resize(space);
      }
      return Value::string(head + end);
    }
    if (name == "center") {  // Python's str.center(width)
      const std::string s = v.str();
      const std::int64_t width = a.get(0, "width", Value::integer(80)).as_int();
      const auto n = static_cast<std::int64_t>(code_point_offsets(s).size()) - 1;
      if (width <= n) return Value::string(s);
      check_size(static_cast<double>(width), line);
      const std::int64_t margin = width - n;
      const std::int64_t left = margin / 2 + (margin & width & 1);
      return Value::string(std::string(static_cast<std::size_t>(left), ' ') + s +
                           std::string(static_cast<std::size_t>(margin - left), ' '));
    }
    if (name == "batch") {  // batch(linecount, fill_with=None): lists of linecount items
      const std::int64_t count = a.get(0, "linecount").as_int();
      if (count <= 0) fail(line, "batch: linecount must be positive");
      const Value fill = a.get(1, "fill_with");
      List out, cur;
      for (const Value& item : iterate(v, line)) {
        cur.push_back(item);
        if (static_cast<std::int64_t>(cur.size()) == count) {
          out.push_back(Value::list(std::move(cur)));
          cur.clear();
        }
      }
      if (!cur.empty()) {
        if (!fill.undefined() && !fill.is_none()) {
          while (static_cast<std::int64_t>(cur.size()) < count) cur.push_back(fill);
        }
        out.push_back(Value::list(std::move(cur)));
      }
      return Value::list(std::move(out));
    }
    if (name == "attr") {  // getattr(v, name): a namespace's attribute or a dict's method only
      const std::string attr = a.get(0, "name").str();
      if (v.is_namespace()) return v.member(attr);
      if (v.is_dict() && (attr == "items" || attr == "keys" || attr == "values" || attr == "get")) {
        return Value::macro(nullptr);
      }
      return Value::undefined("'" + v.type_name() + " object' has no attribute '" + attr + "'");
    }
    if (name == "format") {  // value % args (or % kwargs)
      if (!a.kw.empty() && !a.pos.empty()) {
        fail(line, "can't handle positional and keyword arguments at the same time");
      }
      if (!a.kw.empty()) return Value::string(percent_format(v.str(), Value::dict(a.kw), line));
      return Value::string(
          percent_format(v.str(), a.pos.size() == 1 ? a.pos[0] : Value::list(a.pos, true), line));
    }
    // Jinja's select, reject, selectattr, rejectattr and map yield nothing for a false value.
    if ((name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr" ||
         name == "map") &&
        !v.truthy()) {
      return Value::list({});
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      const bool by_attr = name.ends_with("attr");
      const bool keep = name.starts_with("select");
      const std::size_t t = by_attr ? 1 : 0;
      Args test_args;
      for (std::size_t i = t + 1; i < a.pos.size(); ++i) test_args.pos.push_back(a.pos[i]);
      List out;
      for (const Value& item : iterate(v, line)) {
        const Value subject = by_attr ? attribute_of(item, a.get(0, "attribute"), line) : item;
        const bool r =
            a.pos.size() > t ? test(a.pos[t].str(), subject, test_args, line) : subject.truthy();
        if (r == keep) out.push_back(item);
      }
      return Value::list(std::move(out));
    }
    if (name == "map") {
      List out;
      const Value attribute = a.named("attribute");
      for (const Value& item : iterate(v, line)) {
        if (!attribute.undefined()) {
          Value x = attribute_of(item, attribute, line);
          out.push_back(x.undefined() ? a.named("default") : x);
        } else {
          if (a.pos.empty()) fail(line, "map() needs a filter name or attribute=");
          Args rest;
          rest.pos.assign(a.pos.begin() + 1, a.pos.end());
          rest.kw = a.kw;
          out.push_back(filter(a.pos[0].str(), item, rest, line));
        }
      }
      return Value::list(std::move(out));
    }
    if (name == "sum") {  // sum(attribute=None, start=0)
      const Value attribute = a.get(0, "attribute");
      Value total = a.get(1, "start", Value::integer(0));
      for (const Value& item : iterate(v, line)) {
        total = binary("+", total,
                       attribute.undefined() ? item : attribute_of(item, attribute, line), line);
      }
      return total;
    }
    if (name == "min" || name == "max") {  // (case_sensitive=False, attribute=None): the item
      const bool case_sensitive = a.get(0, "case_sensitive", Value::boolean(false)).truthy();
      const Value attribute = a.get(1, "attribute");
      const List items = iterate(v, line);
      if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
      auto key = [&](const Value& item) {
        return folded(attribute.undefined() ? item : attribute_of(item, attribute, line),
                      case_sensitive);
      };
      std::size_t best = 0;
      Value best_key = key(items[0]);
      for (std::size_t i = 1; i < items.size(); ++i) {
        const Value k = key(items[i]);
        const int c = order(k, best_key, "<", line);
        if (name == "min" ? c < 0 : c > 0) {
          best = i;
          best_key = k;
        }
      }
      return items[best];
    }
    if (name == "trim") return Value::string(strip(v.str(), a.get(0, "chars"), true, true));
    if (name == "upper" || name == "lower")
      return Value::string(change_case(v.str(), name == "upper"));
    if (name == "capitalize") return Value::string(capitalize(v.str()));
    if (name == "title") return Value::string(title_filter(v.str()));
    if (name == "escape" || name == "e") return Value::string(html_escape(v.str()));
    if (name == "wordcount") {  // Jinja counts \w+ runs (non-ASCII bytes taken as letters)
      const std::string text = v.str();
      std::int64_t words = 0;
      bool in_word = false;
      for (const char c : text) {
        const bool w = (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z') || c == '_' ||
                       static_cast<unsigned char>(c) >= 0x80;
        words += w && !in_word;
        in_word = w;
      }
      return Value::integer(words);
    }
    if (name == "replace") {
      const Value count = a.get(2, "count");
      return Value::string(replaced(v.str(), a.get(0, "old"), a.get(1, "new"),
                                    count.is_number() ? count.as_int() : -1, line));
    }
    if (name == "indent") {  // Jinja's: lines after the first, blank ones only with blank=true
      if (!v.is_string()) {
        fail(line, "unsupported operand type(s) for +=: '" + v.type_name() + "' and 'str'");
      }
      const Value width = a.get(0, "width", Value::integer(4));
      const std::string text = v.str();
      const auto lines_n = static_cast<double>(std::count(text.begin(), text.end(), '\n') + 1);
      check_size(static_cast<double>(text.size()) +
                     lines_n * (width.is_string() ? static_cast<double>(width.as_string().size())
                                                  : static_cast<double>(width.as_int())),
                 line);
      const std::string pad =
          width.is_string()
              ? width.as_string()
              : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, width.as_int())),
                            ' ');
      const bool first = a.get(1, "first", Value::boolean(false)).truthy();
      const bool blank = a.get(2, "blank", Value::boolean(false)).truthy();
      std::vector<std::string> lines = split(text + "\n", Value::string("\n"), -1);
      lines.pop_back();
      std::string out = lines[0];
      for (std::size_t i = 1; i < lines.size(); ++i) {
        out += "\n" + ((blank || !lines[i].empty()) ? pad : "") + lines[i];
      }
      return Value::string(first ? pad + out : out);
    }
    if ((name == "int" || name == "float") && v.undefined()) require_defined(v, line);
    if (name == "int") {
      if (v.is_number()) return Value::integer(v.as_int());
      if (v.is_string()) {
        try {
          std::size_t used = 0;
          const std::string t = strip(v.as_string(), Value(), true, true);
          const long long x = std::stoll(t, &used);
          if (used == t.size()) return Value::integer(x);
          return Value::integer(Value::number(std::stod(t)).as_int());
        } catch (const std::exception&) {
        }
      }
      return a.get(0, "default", Value::integer(0));
    }
    if (name == "float") {
      if (v.is_number()) return Value::number(v.as_float());
      if (v.is_string()) {
        try {
          return Value::number(std::stod(v.as_string()));
        } catch (const std::exception&) {
        }
      }
      return a.get(0, "default", Value::number(0.0));
    }
    if (name == "abs") {
      if (v.kind() == Value::Kind::kFloat) return Value::number(std::fabs(v.as_float()));
      if (v.is_number()) {
        const std::int64_t x = v.as_int();
        if (x == std::numeric_limits<std::int64_t>::min()) overflow(line);
        return Value::integer(x < 0 ? -x : x);
      }
      fail(line, "bad operand type for abs(): '" + v.type_name() + "'");
    }
    if (name == "round") {
      if (!v.is_number()) fail(line, "round takes a number, got '" + v.type_name() + "'");
      const std::int64_t precision = a.get(0, "precision", Value::integer(0)).as_int();
      if (v.kind() != Value::Kind::kFloat &&
          a.get(1, "method", Value::string("common")).str() == "common") {
        // Python's round(int, n) is an int: itself for n >= 0, else to a multiple of 10^-n,
        // halves to even.
        if (precision >= 0) return Value::integer(v.as_int());
        if (precision < -18) return Value::integer(0);
        std::int64_t unit = 1;
        for (std::int64_t i = 0; i < -precision; ++i) unit *= 10;
        const auto [q, rem] = py_divmod(v.as_int(), unit);
        const std::int64_t up = (2 * static_cast<__int128>(rem) > unit ||
                                 (2 * static_cast<__int128>(rem) == unit && (q & 1) != 0))
                                    ? 1
                                    : 0;
        std::int64_t r = 0;
        if (__builtin_mul_overflow(q + up, unit, &r)) overflow(line);
        return Value::integer(r);
      }
      const std::string method = a.get(1, "method", Value::string("common")).str();
      if (method != "common" && method != "ceil" && method != "floor") {
        fail(line, "method must be common, ceil or floor");
      }
      const double f = v.as_float();
      if (!std::isfinite(f)) return Value::number(f);
      // Python's round(x, n): x itself where n passes a double's digits, zero where -n does.
      if (precision > 330) {
        if (method == "common") return Value::number(f);
        fail(line, "OverflowError: int too large to convert to float");
      }
      if (precision < -330) {
        if (method == "common") return Value::number(std::copysign(0.0, f));
        fail(line, "OverflowError: int too large to convert to float");
      }
      const double scale = std::pow(10.0, static_cast<double>(precision));
      const double x = f * scale;
      if (!std::isfinite(x) || scale == 0.0) {
        if (method == "common") return Value::number(scale == 0.0 ? std::copysign(0.0, f) : f);
        fail(line, "OverflowError: int too large to convert to float");
      }
      // Python's round() (what "common" calls): halves to even.
      const double r = method == "ceil"    ? std::ceil(x)
                       : method == "floor" ? std::floor(x)
                                           : std::nearbyint(x);
      return Value::number(r / scale);
    }
    fail(line, "unknown filter '" + name + "'");
  }

  bool test(const std::string& name, const Value& v, const Args& a, int line) {
    const Kind k = v.kind();
    if (name == "defined") return !v.undefined();
    if (name == "undefined") return v.undefined();
    if (name == "none") return k == Kind::kNone;
    if (name == "boolean") return k == Kind::kBool;
    if (name == "true") return k == Kind::kBool && v.as_bool();
    if (name == "false") return k == Kind::kBool && !v.as_bool();
    if (name == "integer") return k == Kind::kInt;
    if (name == "float") return k == Kind::kFloat;
    if (name == "number") return v.is_number();
    if (name == "string") return k == Kind::kString;
    if (name == "mapping") return k == Kind::kDict;
    if (name == "iterable" || name == "sequence") {  // undefined iterates as empty
      return k == Kind::kString || k == Kind::kList || k == Kind::kDict || k == Kind::kUndefined;
    }
    if (name == "callable") return k == Kind::kMacro;
    if (name == "lower" || name == "upper") {  // str(value).islower() / isupper()
      return method(Value::string(v.str()), name == "lower" ? "islower" : "isupper", {}, line)
          .truthy();
    }
    if (name == "odd" || name == "even" || name == "divisibleby") {  // value % n, as Python
      if (!v.is_number()) fail(line, "the " + name + " test takes a number");
      const Value d = name == "divisibleby" ? a.get(0, "num") : Value::integer(2);
      const Value r = binary("%", v, d, line);
      return name == "odd" ? r.equals(Value::integer(1)) : r.equals(Value::integer(0));
    }
    if (name == "sameas") {
      const Value o = a.get(0, "other");
      if (k != o.kind()) return false;
      return v.equals(o);
    }
    if (name == "in") return contains(a.get(0, "seq"), v, line);
    static const std::unordered_map<std::string, std::string> kCompare = {
        {"eq", "=="}, {"equalto", "=="},    {"==", "=="}, {"ne", "!="}, {"!=", "!="},
        {"lt", "<"},  {"lessthan", "<"},    {"<", "<"},   {"le", "<="}, {"<=", "<="},
        {"gt", ">"},  {"greaterthan", ">"}, {">", ">"},   {"ge", ">="}, {">=", ">="}};
    const auto c = kCompare.find(name);
    if (c != kCompare.end()) return binary(c->second, v, a.get(0, "other"), line).truthy();
    fail(line, "unknown test '" + name + "'");
  }

  using Kind = Value::Kind;

  const std::string& origin_;
  const RenderOptions& options_;
  std::vector<Frame> frames_;
  std::uintptr_t stack_base_;
  std::uint64_t max_work_;
  std::uint64_t work_ = 0;
  int loops_ = 0;
  int depth_ = 0;
  std::int64_t steps_ = 0;
};

// Jinja2's built-in filters and tests that the subset leaves out: refused at load.
const std::unordered_set<std::string>& jinja_only_filters() {
  static const std::unordered_set<std::string> names = {
      "filesizeformat", "forceescape", "groupby", "pprint",   "random", "slice",
      "striptags",      "urlencode",   "urlize",  "wordwrap", "xmlattr"};
  return names;
}
const std::unordered_set<std::string>& jinja_only_tests() {
  static const std::unordered_set<std::string> names = {"escaped", "filter", "test"};
  return names;
}

[[noreturn]] void refuse(const std::string& origin, int line, const std::string& what) {
  throw ConfigError(origin + ":" + std::to_string(line) + ": " + what);
}

// `soft`: inside an {% if %} or an inline if, where Jinja2 defers an unknown name's error to
// the render that reaches it (so `{% if 'x' is filter %}` guards can work); elsewhere it refuses
// the template when compiling it. A Jinja2 built-in outside the subset is refused anywhere.
void check_filter(const std::string& name, bool soft, const std::string& origin, int line) {
  if (jinja_only_filters().contains(name)) {
    refuse(origin, line, "the filter '" + name + "' is outside the subset (serving/jinja.h)");
  }
  if (!soft && !known_filter(name)) refuse(origin, line, "unknown filter '" + name + "'");
}
void check_test(const std::string& name, bool soft, const std::string& origin, int line) {
  if (jinja_only_tests().contains(name)) {
    refuse(origin, line, "the test '" + name + "' is outside the subset (serving/jinja.h)");
  }
  if (!soft && !known_test(name)) refuse(origin, line, "unknown test '" + name + "'");
}

// A literal string argument `i` of a filter that names a filter or test (map('upper'),
// select('odd')): Jinja looks it up only when the filter runs, so only a Jinja built-in the
// subset leaves out is refused here.
void check_named_arg(const Expr& e, std::size_t i, bool is_filter, const std::string& origin) {
  if (i >= e.args.size() || e.args[i]->op != Expr::Op::kLiteral ||
      !e.args[i]->literal.is_string()) {
    return;
  }
  const std::string& name = e.args[i]->literal.as_string();
  is_filter ? check_filter(name, true, origin, e.line) : check_test(name, true, origin, e.line);
}

// Every filter and test a template names is one the renderer knows, refused as Jinja2 refuses
// it when compiling (see check_filter). Recursion is bounded by the parser's limits.
void check_names(const Expr& e, bool soft, const std::string& origin) {
  soft = soft || e.op == Expr::Op::kCond;
  if (e.op == Expr::Op::kFilter) {
    check_filter(e.name, soft, origin, e.line);
    const bool kw_attribute = std::any_of(e.kwargs.begin(), e.kwargs.end(),
                                          [](const auto& kv) { return kv.first == "attribute"; });
    if (e.name == "map" && !kw_attribute) check_named_arg(e, 1, true, origin);
    if (e.name == "select" || e.name == "reject") check_named_arg(e, 1, false, origin);
    if (e.name == "selectattr" || e.name == "rejectattr") check_named_arg(e, 2, false, origin);
  }
  if (e.op == Expr::Op::kTest) check_test(e.name, soft, origin, e.line);
  for (const ExprPtr& a : e.args) {
    if (a) check_names(*a, soft, origin);
  }
  for (const auto& kv : e.kwargs) check_names(*kv.second, soft, origin);
}

void check_names(const Body& body, bool soft, const std::string& origin) {
  for (const Node& n : body) {
    const bool is_if = n.kind == Node::Kind::kIf;
    const bool inner = n.kind == Node::Kind::kFor || n.kind == Node::Kind::kSetBlock ||
                       n.kind == Node::Kind::kFilterBlock || n.kind == Node::Kind::kGeneration;
    if (n.expr) check_names(*n.expr, soft, origin);
    if (n.filter) check_names(*n.filter, false, origin);
    for (const ExprPtr& c : n.conditions) check_names(*c, true, origin);
    for (const Body& b : n.bodies) check_names(b, is_if || (soft && !inner), origin);
    check_names(n.else_body, is_if || (soft && !inner), origin);
    if (n.macro) {
      for (const auto& p : n.macro->params) {
        if (p.second) check_names(*p.second, false, origin);
      }
      check_names(n.macro->body, false, origin);
    }
  }
}

}  // namespace

bool known_filter(const std::string& name) {
  static const std::unordered_set<std::string> names = {
      "abs",        "attr",   "batch",      "capitalize", "center",  "count",  "d",      "default",
      "dictsort",   "e",      "escape",     "first",      "float",   "format", "indent", "int",
      "items",      "join",   "last",       "length",     "list",    "lower",  "map",    "max",
      "min",        "reject", "rejectattr", "replace",    "reverse", "round",  "safe",   "select",
      "selectattr", "sort",   "string",     "sum",        "title",   "tojson", "trim",   "truncate",
      "unique",     "upper",  "wordcount"};
  return names.contains(name);
}

bool known_test(const std::string& name) {
  static const std::unordered_set<std::string> names = {
      "defined",     "undefined", "none",        "boolean",  "true",    "false",
      "integer",     "float",     "number",      "string",   "mapping", "iterable",
      "sequence",    "callable",  "lower",       "upper",    "odd",     "even",
      "divisibleby", "sameas",    "in",          "eq",       "equalto", "==",
      "ne",          "!=",        "lt",          "lessthan", "<",       "le",
      "<=",          "gt",        "greaterthan", ">",        "ge",      ">="};
  return names.contains(name);
}

Template::Template(const std::string& source, std::string origin)
    : origin_(std::move(origin)),
      body_(std::make_shared<const Body>(parse_template(source, origin_))) {
  check_names(*body_, false, origin_);
}

bool Template::iterates_message_content() const { return jinja::iterates_message_content(*body_); }

std::string Template::render(const Dict& context, const RenderOptions& options) const {
  Renderer r(origin_, options, context);
  std::string out;
  r.exec(*body_, out);
  return out;
}

}  // namespace servelab::jinja
