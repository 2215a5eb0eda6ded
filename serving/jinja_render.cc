// Rendering of the Jinja subset (serving/jinja.h): statements, expressions with Python's
// semantics, and the filters, tests, methods and globals the subset names.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>

#include "serving/jinja.h"
#include "serving/jinja_ast.h"

namespace servelab::jinja {

namespace {

constexpr std::int64_t kMaxRange = 100000;  // Jinja's sandbox MAX_RANGE
constexpr int kMaxDepth = 100;              // macro calls, and the nesting of lists and dicts

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

bool py_space(unsigned char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto drop = [&](char c) {
    if (chars.is_string()) return chars.as_string().find(c) != std::string::npos;
    return py_space(static_cast<unsigned char>(c));
  };
  std::size_t b = 0;
  std::size_t e = s.size();
  if (left) {
    while (b < e && drop(s[b])) ++b;
  }
  if (right) {
    while (e > b && drop(s[e - 1])) --e;
  }
  return s.substr(b, e - b);
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return s;
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_case(s, false);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
  return out;
}

// Python's str.title(): a letter after a non-letter goes upper, every other letter lower.
std::string title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (alpha) c = ascii_case(std::string(1, c), start)[0];
    start = !alpha;
  }
  return out;
}

// Jinja's title filter: each piece between runs of "-", whitespace, "(", "{", "[" and "<"
// gets its first character upper and the rest lower.
std::string title_filter(const std::string& s) {
  std::string out;
  bool start = true;
  for (const char c : s) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                     py_space(static_cast<unsigned char>(c));
    out += sep ? c : ascii_case(std::string(1, c), start)[0];
    start = sep;
  }
  return out;
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
  if (!sep.is_string()) {  // runs of whitespace; no empty parts
    std::size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && py_space(static_cast<unsigned char>(s[i]))) ++i;
      if (i == s.size()) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
        std::string rest = s.substr(i);
        while (!rest.empty() && py_space(static_cast<unsigned char>(rest.back()))) rest.pop_back();
        out.push_back(rest);
        return out;
      }
      std::size_t e = i;
      while (e < s.size() && !py_space(static_cast<unsigned char>(s[e]))) ++e;
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
      : origin_(origin), options_(options) {
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
    switch (n.kind) {
      case Node::Kind::kText:
        out += n.text;
        return Flow::kNormal;
      case Node::Kind::kOutput:
        step(n.line);
        out += eval(*n.expr).str();
        if (out.size() > options_.max_size) {
          fail(n.line, "the output grew past " + std::to_string(options_.max_size) + " bytes");
        }
        return Flow::kNormal;
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
      case Node::Kind::kMacro:
        assign(n.macro->name, Value::macro(n.macro.get()));
        return Flow::kNormal;
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
    const auto len = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < len; ++i) {
      const auto at = static_cast<std::size_t>(i);
      Dict loop{{"index", Value::integer(i + 1)},      {"index0", Value::integer(i)},
                {"revindex", Value::integer(len - i)}, {"revindex0", Value::integer(len - i - 1)},
                {"first", Value::boolean(i == 0)},     {"last", Value::boolean(i + 1 == len)},
                {"length", Value::integer(len)},       {"depth", Value::integer(1)},
                {"depth0", Value::integer(0)}};
      if (i > 0) loop.emplace_back("previtem", items[at - 1]);
      if (i + 1 < len) loop.emplace_back("nextitem", items[at + 1]);
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
      case Expr::Op::kIndex:
        return index(eval(*e.args[0]), eval(*e.args[1]), e.line);
      case Expr::Op::kSlice:
        return slice(e);
      case Expr::Op::kCall:
        return bounded(call(e), e.line);
      case Expr::Op::kFilter:
        return bounded(filter(e.name, eval(*e.args[0]), eval_args(e, 1), e.line), e.line);
      case Expr::Op::kTest: {
        const bool r = test(e.name, eval(*e.args[0]), eval_args(e, 1), e.line);
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
      case Expr::Op::kBinary:
        return bounded(binary(e.name, eval(*e.args[0]), eval(*e.args[1]), e.line), e.line);
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
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value::string(a.as_string() + b.as_string());
      if (a.is_list() && b.is_list()) {
        List items = a.as_list();
        items.insert(items.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(items));
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
      return Value::list(std::move(items));
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
      const Value member = obj.is_dict() ? obj.member(callee.name) : Value();
      if (member.kind() == Value::Kind::kMacro) return call_macro(*member.as_macro(), e);
      return method(obj, callee.name, eval_args(e, 1), e.line);
    }
    const Value f = callee.op == Expr::Op::kName ? lookup(callee.name) : eval(callee);
    if (f.kind() == Value::Kind::kMacro) return call_macro(*f.as_macro(), e);
    if (callee.op == Expr::Op::kName && f.undefined()) {
      return global(callee.name, eval_args(e, 1), e.line);
    }
    fail(e.line, "'" + f.type_name() + "' object is not callable");
  }

  Value call_macro(const MacroDef& m, const Expr& e) {
    if (depth_ >= kMaxDepth) fail(e.line, "macro calls nested deeper than 100");
    step(e.line);
    const Args a = eval_args(e, 1);
    if (a.pos.size() > m.params.size()) {
      fail(e.line, "macro '" + m.name + "' takes " + std::to_string(m.params.size()) +
                       " arguments, got " + std::to_string(a.pos.size()));
    }
    Frame locals;
    for (std::size_t i = 0; i < m.params.size(); ++i) {
      const auto& [name, fallback] = m.params[i];
      Value v = a.get(i, name.c_str(), Value::undefined("'" + name + "' is undefined"));
      if (v.undefined() && fallback) v = eval(*fallback);
      locals[name] = std::move(v);
    }
    for (const auto& kv : a.kw) {
      const std::string& key = kv.first;
      if (std::none_of(m.params.begin(), m.params.end(),
                       [&](const auto& p) { return p.first == key; })) {
        fail(e.line, "macro '" + m.name + "' takes no keyword argument '" + key + "'");
      }
    }
    std::vector<Frame> saved;
    saved.swap(frames_);
    frames_.push_back(saved.front());
    frames_.push_back(std::move(locals));
    const int loops = loops_;
    loops_ = 0;
    ++depth_;
    std::string out;
    try {
      exec(m.body, out);
    } catch (...) {
      frames_.swap(saved);
      throw;
    }
    --depth_;
    loops_ = loops;
    frames_.swap(saved);
    return Value::string(std::move(out));
  }

  Value global(const std::string& name, const Args& a, int line) {
    if (name == "raise_exception") throw Raised(a.get(0, "message").str());
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
      char buf[256];
      const std::size_t n = std::strftime(buf, sizeof buf, a.get(0, "format").str().c_str(), &tm);
      return Value::string(std::string(buf, n));
    }
    fail(line, "'" + name + "' is undefined");
  }

  Value method(const Value& obj, const std::string& name, const Args& a, int line) {
    if (obj.is_string()) {
      const std::string& s = obj.as_string();
      if (name == "strip") return Value::string(strip(s, a.get(0, "chars"), true, true));
      if (name == "lstrip") return Value::string(strip(s, a.get(0, "chars"), true, false));
      if (name == "rstrip") return Value::string(strip(s, a.get(0, "chars"), false, true));
      if (name == "upper" || name == "lower") return Value::string(ascii_case(s, name == "upper"));
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
      if (name == "splitlines") {
        std::vector<std::string> parts = split(s, Value::string("\n"), -1);
        if (!parts.empty() && parts.back().empty()) parts.pop_back();
        for (std::string& p : parts) {
          if (!p.empty() && p.back() == '\r') p.pop_back();
        }
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
      if (name.starts_with("is") && name.size() > 2) {
        if (s.empty()) return Value::boolean(false);
        std::function<bool(char)> ok;
        if (name == "isdigit") ok = [](char c) { return c >= '0' && c <= '9'; };
        if (name == "isspace") ok = [](char c) { return py_space(static_cast<unsigned char>(c)); };
        if (name == "isalpha") ok = [](char c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; };
        if (name == "isalnum") {
          ok = [](char c) {
            return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
          };
        }
        if (name == "islower" || name == "isupper") {
          const bool up = name == "isupper";
          const bool cased = std::any_of(s.begin(), s.end(),
                                         [](char c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; });
          return Value::boolean(cased && ascii_case(s, up) == s);
        }
        if (ok) return Value::boolean(std::all_of(s.begin(), s.end(), ok));
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
  Value attribute_of(const Value& v, const Value& attribute, int line) {
    if (attribute.is_number()) return index(v, attribute, line);
    Value cur = v;
    for (const std::string& part : split(attribute.str(), Value::string("."), -1)) {
      if (cur.undefined()) return cur;
      cur = index(cur, Value::string(part), line);
    }
    return cur;
  }

  int compare_for_sort(const Value& a, const Value& b, bool case_sensitive, int line) {
    if (a.is_string() && b.is_string()) {
      const std::string x = case_sensitive ? a.as_string() : ascii_case(a.as_string(), false);
      const std::string y = case_sensitive ? b.as_string() : ascii_case(b.as_string(), false);
      return x.compare(y);
    }
    if (a.is_number() && b.is_number()) {
      return a.as_float() < b.as_float() ? -1 : (a.as_float() > b.as_float() ? 1 : 0);
    }
    fail(line, "'<' not supported between instances of '" + a.type_name() + "' and '" +
                   b.type_name() + "'");
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
    if (name == "tojson") {
      const Value indent = a.get(0, "indent");
      if (indent.is_number()) {
        check_size((static_cast<double>(std::max<std::int64_t>(0, indent.as_int())) + 1.0) *
                       (v.depth() + 1.0) * static_cast<double>(approx_bytes(v, options_.max_size)),
                   line);
      }
      const std::optional<std::string> j =
          v.to_json(indent.is_number() ? static_cast<int>(indent.as_int()) : -1);
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
    if (name == "unique") {
      List out;
      for (const Value& item : iterate(v, line)) {
        if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return o.equals(item); })) {
          out.push_back(item);
        }
      }
      return Value::list(std::move(out));
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
    if (name == "sum" || name == "min" || name == "max") {
      const Value attribute = a.get(name == "sum" ? 0 : 1, "attribute");
      List items = iterate(v, line);
      if (!attribute.undefined()) {
        for (Value& item : items) item = attribute_of(item, attribute, line);
      }
      if (name == "sum") {
        Value total = a.get(1, "start", Value::integer(0));
        for (const Value& item : items) total = binary("+", total, item, line);
        return total;
      }
      if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
      Value best = items[0];
      for (const Value& item : items) {
        const int c = compare_for_sort(item, best, false, line);
        if (name == "min" ? c < 0 : c > 0) best = item;
      }
      return best;
    }
    if (name == "trim") return Value::string(strip(v.str(), a.get(0, "chars"), true, true));
    if (name == "upper" || name == "lower")
      return Value::string(ascii_case(v.str(), name == "upper"));
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
      const double scale =
          std::pow(10.0, static_cast<double>(a.get(0, "precision", Value::integer(0)).as_int()));
      const std::string method = a.get(1, "method", Value::string("common")).str();
      const double x = v.as_float() * scale;
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
  int loops_ = 0;
  int depth_ = 0;
  std::int64_t steps_ = 0;
};

}  // namespace

Template::Template(const std::string& source, std::string origin)
    : origin_(std::move(origin)),
      body_(std::make_shared<const Body>(parse_template(source, origin_))) {}

bool Template::iterates_message_content() const { return jinja::iterates_message_content(*body_); }

std::string Template::render(const Dict& context, const RenderOptions& options) const {
  Renderer r(origin_, options, context);
  std::string out;
  r.exec(*body_, out);
  return out;
}

}  // namespace servelab::jinja
