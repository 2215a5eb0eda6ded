#include "serving/jinja_value.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace servelab::jinja {

Value Value::undefined(std::string why) {
  Value v;
  v.s_ = std::move(why);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::integer(std::int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}

Value Value::big_integer(std::uint64_t u) {
  Value v = number(static_cast<double>(u));
  v.s_ = std::to_string(u);
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  return v;
}

Value Value::list(List items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.namespace_ = is_tuple;
  for (const Value& e : items) v.depth_ = std::max(v.depth_, e.depth_);
  ++v.depth_;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::dict(Dict items, bool is_namespace) {
  Value v;
  v.kind_ = Kind::kDict;
  v.namespace_ = is_namespace;
  for (const auto& kv : items) v.depth_ = std::max(v.depth_, kv.second.depth_);
  ++v.depth_;
  v.dict_ = std::make_shared<Dict>(std::move(items));
  return v;
}

Value Value::macro(const MacroDef* def, Dict closure) {
  Value v;
  v.kind_ = Kind::kMacro;
  v.macro_ = def;
  v.dict_ = std::make_shared<Dict>(std::move(closure));
  return v;
}

namespace {

template <typename Json>
Value value_of_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value::none();
    case Json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value::integer(j.template get<std::int64_t>());
    case Json::value_t::number_unsigned: {
      const auto u = j.template get<std::uint64_t>();
      return u <= INT64_MAX ? Value::integer(static_cast<std::int64_t>(u)) : Value::big_integer(u);
    }
    case Json::value_t::number_float:
      return Value::number(j.template get<double>());
    case Json::value_t::string:
      return Value::string(j.template get<std::string>());
    case Json::value_t::array: {
      List items;
      for (const Json& e : j) items.push_back(value_of_json(e));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      Dict items;
      for (const auto& [k, e] : j.items()) items.emplace_back(k, value_of_json(e));
      return Value::dict(std::move(items));
    }
    default:
      return Value();
  }
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) { return value_of_json(j); }

Value Value::from_json(const nlohmann::ordered_json& j) { return value_of_json(j); }

std::int64_t Value::as_int() const {
  if (kind_ == Kind::kBool) return b_ ? 1 : 0;
  if (kind_ == Kind::kFloat) {  // truncated, saturating (NaN: 0)
    if (std::isnan(f_)) return 0;
    if (f_ >= 9.2233720368547758e18) return std::numeric_limits<std::int64_t>::max();
    if (f_ <= -9.2233720368547758e18) return std::numeric_limits<std::int64_t>::min();
    return static_cast<std::int64_t>(f_);
  }
  return i_;
}

double Value::as_float() const {
  if (kind_ == Kind::kFloat) return f_;
  return static_cast<double>(as_int());
}

Value Value::member(const std::string& key) const {
  if (kind_ != Kind::kDict) return Value();
  for (const auto& [k, v] : *dict_) {
    if (k == key) return v;
  }
  return Value();
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !s_.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->empty();
    case Kind::kMacro:
      return true;
  }
  return false;
}

bool Value::equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (kind_ == Kind::kFloat || o.kind_ == Kind::kFloat) return as_float() == o.as_float();
    return as_int() == o.as_int();
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return s_ == o.s_;
    case Kind::kList:
      if (namespace_ != o.namespace_ || list_->size() != o.list_->size()) return false;
      for (std::size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].equals((*o.list_)[i])) return false;
      }
      return true;
    case Kind::kDict:
      if (dict_ == o.dict_) return true;
      if (namespace_ || o.namespace_ || dict_->size() != o.dict_->size()) return false;
      for (const auto& [k, v] : *dict_) {
        bool found = false;
        for (const auto& [ok, ov] : *o.dict_) {
          if (ok == k) {
            if (!v.equals(ov)) return false;
            found = true;
            break;
          }
        }
        if (!found) return false;
      }
      return true;
    case Kind::kMacro:
      return macro_ == o.macro_;
    default:
      return false;
  }
}

std::string python_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0.0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);  // [-]d[.ddd]e[+-]XX, the shortest round trip
  const std::size_t e = sci.find('e');
  const int exp10 = std::stoi(sci.substr(e + 1));
  const bool negative = sci[0] == '-';
  std::string digits;
  for (std::size_t i = negative ? 1 : 0; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  std::string out = negative ? "-" : "";
  if (exp10 < -4 || exp10 >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out.append(1, '.').append(digits, 1);
    char ex[16];
    std::snprintf(ex, sizeof ex, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out + ex;
  }
  if (exp10 < 0) {
    return out.append("0.").append(static_cast<std::size_t>(-exp10 - 1), '0').append(digits);
  }
  const std::size_t whole = static_cast<std::size_t>(exp10) + 1;
  if (digits.size() <= whole) return out + digits + std::string(whole - digits.size(), '0') + ".0";
  return out + digits.substr(0, whole) + "." + digits.substr(whole);
}

namespace {

// Python's str.isprintable() of one code point: not a control, format, surrogate, private-use,
// unassigned or separator character (U+0020 excepted).
bool printable(utf8proc_int32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return false;
    default:
      return true;
  }
}

// Python's repr() of a str: quotes, \\ \n \r \t, and other non-printable characters as \xhh,
// \uhhhh or \Uhhhhhhhh (an invalid byte as \xhh).
std::string python_quote(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == q || c == '\\') {
      out += '\\';
      out += c;
      ++i;
      continue;
    }
    if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : (c == '\r' ? "\\r" : "\\t");
      ++i;
      continue;
    }
    utf8proc_int32_t cp = -1;
    utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {
      cp = static_cast<unsigned char>(c);
      n = 1;
    } else if (printable(cp)) {
      out.append(s, i, static_cast<std::size_t>(n));
      i += static_cast<std::size_t>(n);
      continue;
    }
    char hex[16];
    if (cp < 0x100) {
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(cp));
    } else if (cp < 0x10000) {
      std::snprintf(hex, sizeof hex, "\\u%04x", static_cast<unsigned>(cp));
    } else {
      std::snprintf(hex, sizeof hex, "\\U%08x", static_cast<unsigned>(cp));
    }
    out += hex;
    i += static_cast<std::size_t>(n);
  }
  return out + q;
}

// Python's json.dumps of a str: ", \, \b \f \n \r \t escaped, other controls as \u00xx, and
// with ensure_ascii every non-ASCII character as \uxxxx (a surrogate pair past U+FFFF). Invalid
// UTF-8 becomes U+FFFD.
std::string json_quote(const std::string& raw, bool ensure_ascii) {
  const std::string s =
      nlohmann::json(raw).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (!ensure_ascii) return s;
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += s[i++];
      continue;
    }
    const std::size_t n = c >= 0xF0 ? 4 : (c >= 0xE0 ? 3 : 2);
    std::uint32_t cp = c & (n == 4 ? 0x07 : (n == 3 ? 0x0F : 0x1F));
    for (std::size_t k = 1; k < n && i + k < s.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    i += n;
    char buf[16];
    if (cp >= 0x10000) {
      cp -= 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    }
    out += buf;
  }
  return out;
}

struct JsonWriter {
  const Value::JsonFormat& f;
  std::string item_sep, key_sep;

  std::string newline(int level) const {
    std::string s;
    if (f.indent) {
      s += '\n';
      for (int i = 0; i < level; ++i) s += *f.indent;
    }
    return s;
  }

  bool append(const Value& v, int depth, std::string& out) const {
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return true;
      case Value::Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return true;
      case Value::Kind::kInt:
        out += std::to_string(v.as_int());
        return true;
      case Value::Kind::kFloat: {
        const double x = v.as_float();
        if (v.is_big_integer()) {
          out += v.repr();
        } else if (std::isnan(x)) {
          out += "NaN";
        } else if (std::isinf(x)) {
          out += x > 0 ? "Infinity" : "-Infinity";
        } else {
          out += python_float(x);
        }
        return true;
      }
      case Value::Kind::kString:
        out += json_quote(v.as_string(), f.ensure_ascii);
        return true;
      case Value::Kind::kList: {
        if (v.as_list().empty()) {
          out += "[]";
          return true;
        }
        out += "[";
        bool first = true;
        for (const Value& e : v.as_list()) {
          if (!first) out += item_sep;
          first = false;
          out += newline(depth + 1);
          if (!append(e, depth + 1, out)) return false;
        }
        out += newline(depth) + "]";
        return true;
      }
      case Value::Kind::kDict: {
        if (v.as_dict().empty()) {
          out += "{}";
          return true;
        }
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : v.as_dict()) items.push_back(&kv);
        if (f.sort_keys) {  // by code point: UTF-8's byte order
          std::stable_sort(items.begin(), items.end(),
                           [](const auto* a, const auto* b) { return a->first < b->first; });
        }
        out += "{";
        bool first = true;
        for (const auto* kv : items) {
          if (!first) out += item_sep;
          first = false;
          out += newline(depth + 1) + json_quote(kv->first, f.ensure_ascii) + key_sep;
          if (!append(kv->second, depth + 1, out)) return false;
        }
        out += newline(depth) + "}";
        return true;
      }
      default:
        return false;
    }
  }
};

}  // namespace

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return s_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return is_big_integer() ? s_ : python_float(f_);
    case Kind::kString:
      return python_quote(s_);
    case Kind::kList: {
      std::string out = namespace_ ? "(" : "[";
      for (std::size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        out += (*list_)[i].repr();
      }
      if (namespace_ && list_->size() == 1) out += ",";
      return out + (namespace_ ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = namespace_ ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : *dict_) {
        if (!first) out += ", ";
        first = false;
        out += python_quote(k) + ": " + v.repr();
      }
      return out + (namespace_ ? "}>" : "}");
    }
    case Kind::kMacro:
      return "<Macro>";
  }
  return "";
}

std::optional<std::string> Value::to_json(int indent) const {
  JsonFormat f;
  if (indent >= 0) f.indent = std::string(static_cast<std::size_t>(indent), ' ');
  return to_json(f);
}

std::optional<std::string> Value::to_json(const JsonFormat& format) const {
  JsonWriter w{format, format.indent ? "," : ", ", ": "};
  if (format.separators) {
    w.item_sep = format.separators->first;
    w.key_sep = format.separators->second;
  }
  std::string out;
  if (!w.append(*this, 0, out)) return std::nullopt;
  return out;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return is_big_integer() ? "int" : "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return namespace_ ? "tuple" : "list";
    case Kind::kDict:
      return namespace_ ? "Namespace" : "dict";
    case Kind::kMacro:
      return "Macro";
  }
  return "";
}

std::vector<std::size_t> code_point_offsets(const std::string& s) {
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) offsets.push_back(i);
  }
  offsets.push_back(s.size());
  return offsets;
}

}  // namespace servelab::jinja
