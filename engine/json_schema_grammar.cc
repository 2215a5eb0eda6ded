#include "engine/json_schema_grammar.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/regex_grammar.h"

namespace servelab {
namespace {

using Json = nlohmann::ordered_json;
using Symbol = Grammar::Symbol;

// Longest repeat counts a schema may ask for (each count is a rule).
constexpr std::int64_t kMaxCount = 10000;
// Deepest nesting of subschemas compiled in one path (a $ref cycle is a rule, not nesting).
constexpr int kMaxNesting = 128;

const std::set<std::string, std::less<>>& annotations() {
  static const std::set<std::string, std::less<>> s = {
      "title",         "description", "default",    "examples", "$schema",
      "$id",           "$comment",    "deprecated", "readOnly", "writeOnly",
      "discriminator", "$defs",       "definitions"};
  return s;
}

std::string pointer_escape(std::string_view key) {
  std::string out;
  for (const char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

class Compiler {
 public:
  Compiler(Grammar& g, const Json& root, const JsonGrammarOptions& o) : g_(g), root_(root), o_(o) {
    ByteSet ws;
    for (const char c : {' ', '\t', '\n', '\r'}) ws.set(static_cast<unsigned char>(c));
    ws_ = o.any_whitespace ? std::vector<Symbol>{g.star(g.bytes(ws))} : std::vector<Symbol>{};
  }

  Symbol schema(const Json& s, const std::string& path, int depth) {
    if (depth > kMaxNesting) fail(path, "subschemas nested deeper than 128");
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      return never();
    }
    if (!s.is_object()) fail(path, "expected a schema (an object or a boolean)");
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!known(it.key())) {
        fail(path + "/" + pointer_escape(it.key()),
             "the keyword \"" + it.key() + "\" is not supported in structured outputs");
      }
    }
    if (s.contains("$ref")) {
      check_alone(s, path, "$ref");
      return ref(s["$ref"], path + "/$ref", depth);
    }
    if (s.contains("allOf")) {
      check_alone(s, path, "allOf");
      const Json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        fail(path + "/allOf", "expected an array of exactly one schema (no merging of schemas)");
      }
      return schema(all[0], path + "/allOf/0", depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      check_alone(s, path, key);
      const Json& any = s[key];
      if (!any.is_array() || any.empty()) fail(path + "/" + key, "expected a non-empty array");
      std::vector<std::vector<Symbol>> alts;
      for (std::size_t i = 0; i < any.size(); ++i) {
        alts.push_back({schema(any[i], path + "/" + key + "/" + std::to_string(i), depth + 1)});
      }
      return g_.rule(std::move(alts));
    }
    if (s.contains("const") || s.contains("enum")) return enumeration(s, path);
    std::vector<std::string> types;
    if (s.contains("type")) {
      types = type_names(s["type"], path);
    } else if (s.contains("properties") || s.contains("additionalProperties") ||
               s.contains("required")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems")) {
      types = {"array"};
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") ||
               s.contains("format")) {
      types = {"string"};
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum")) {
      types = {"number"};
    } else {
      return any_value();
    }
    std::vector<std::vector<Symbol>> alts;
    for (const std::string& t : types) {
      if (t == "object") {
        alts.push_back({object(s, path, depth)});
      } else if (t == "array") {
        alts.push_back({array(s, path, depth)});
      } else if (t == "string") {
        alts.push_back({string(s, path)});
      } else if (t == "integer") {
        alts.push_back({bounded_integer(s, path)});
      } else if (t == "number") {
        for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
          if (s.contains(key)) {
            fail(path + "/" + key,
                 std::string("\"") + key +
                     "\" on a number is not supported in structured outputs (only on integers)");
          }
        }
        alts.push_back({number()});
      } else if (t == "boolean") {
        alts.push_back({g_.rule({g_.literal("true"), g_.literal("false")})});
      } else if (t == "null") {
        alts.push_back(g_.literal("null"));
      } else {
        fail(path + "/type", "unknown type \"" + t +
                                 "\" (expected object, array, string, integer, number, boolean "
                                 "or null)");
      }
    }
    return alts.size() == 1 && alts[0].size() == 1 ? alts[0][0] : g_.rule(std::move(alts));
  }

  // enum / const: the values (each as compact JSON) that every sibling keyword admits too (a
  // value the others rule out is left out; none left: a rule that matches nothing).
  Symbol enumeration(const Json& s, const std::string& path) {
    for (const char* key : {"properties", "additionalProperties", "items", "prefixItems"}) {
      if (s.contains(key)) {
        fail(path + "/" + key, std::string("\"") + key +
                                   "\" beside \"enum\" or \"const\" is not supported (only type, "
                                   "minLength, maxLength, pattern, format, minimum, maximum, "
                                   "exclusiveMinimum, exclusiveMaximum, minItems, maxItems and "
                                   "required are checked on their values)");
      }
    }
    std::vector<Json> values;
    if (s.contains("enum")) {
      const Json& e = s["enum"];
      if (!e.is_array() || e.empty()) fail(path + "/enum", "expected a non-empty array");
      for (const Json& v : e) {
        if (!s.contains("const") || v == s["const"]) values.push_back(v);
      }
    } else {
      values.push_back(s["const"]);
    }
    std::vector<std::vector<Symbol>> alts;
    for (const Json& v : values) {
      if (admits(s, v, path)) alts.push_back(g_.literal(v.dump()));
    }
    if (alts.empty()) return never();
    return g_.rule(std::move(alts));
  }

  // The number of code points of a UTF-8 string (Python's len of the decoded string).
  static std::int64_t code_points(const std::string& text) {
    std::int64_t n = 0;
    for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  }

  // Whether value `v` satisfies the keywords of `s` beside enum / const (type, string lengths,
  // pattern and format as the compiler reads them, numeric bounds, item counts, required).
  bool admits(const Json& s, const Json& v, const std::string& path) {
    if (s.contains("type")) {
      const std::vector<std::string> types = type_names(s["type"], path);
      bool any = false;
      for (const std::string& name : types) {
        bool is = false;
        if (name == "object") {
          is = v.is_object();
        } else if (name == "array") {
          is = v.is_array();
        } else if (name == "string") {
          is = v.is_string();
        } else if (name == "integer") {  // JSON Schema's: a number without a fractional part
          is = v.is_number_integer() ||
               (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
        } else if (name == "number") {
          is = v.is_number();
        } else if (name == "boolean") {
          is = v.is_boolean();
        } else if (name == "null") {
          is = v.is_null();
        } else {
          fail(path + "/type", "unknown type \"" + name +
                                   "\" (expected object, array, string, integer, number, boolean "
                                   "or null)");
        }
        any = any || is;
      }
      if (!any) return false;
    }
    const std::int64_t min_length = count(s, "minLength", path, 0);
    const std::int64_t max_length = count(s, "maxLength", path, -1);
    const std::int64_t min_items = count(s, "minItems", path, 0);
    const std::int64_t max_items = count(s, "maxItems", path, -1);
    std::vector<std::pair<const char*, std::string>> regexes;  // (keyword, regex)
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) fail(path + "/pattern", "expected a regular expression");
      regexes.emplace_back("pattern", s["pattern"].get<std::string>());
    }
    if (s.contains("format")) {
      const Json& f = s["format"];
      const char* regex = f.is_string() ? format_regex(f.get<std::string>()) : nullptr;
      if (regex == nullptr) {
        fail(path + "/format", "the format " + f.dump() +
                                   " is not supported in structured outputs (date, time, "
                                   "date-time, uuid, ipv4, email)");
      }
      regexes.emplace_back("format", regex);
    }
    std::vector<std::pair<const char*, double>> bounds;
    for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_number()) fail(path + "/" + key, "expected a number");
      bounds.emplace_back(key, s[key].get<double>());
    }
    std::vector<std::string> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array()) fail(path + "/required", "expected an array of property names");
      for (const Json& k : r) {
        if (!k.is_string()) fail(path + "/required", "expected an array of property names");
        required.push_back(k.get<std::string>());
      }
    }
    if (v.is_string()) {
      const std::string text = v.get<std::string>();
      const std::int64_t n = code_points(text);
      if (n < min_length || (max_length >= 0 && n > max_length)) return false;
      for (const auto& [key, regex] : regexes) {
        Grammar g;
        try {
          g.set_start(compile_regex(g, regex));
        } catch (const RegexError& e) {
          fail(path + "/" + key, e.what());
        }
        if (!GrammarMatcher(g).matches(text)) return false;
      }
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      for (const auto& [key, b] : bounds) {
        const std::string_view k = key;
        if ((k == "minimum" && x < b) || (k == "maximum" && x > b) ||
            (k == "exclusiveMinimum" && x <= b) || (k == "exclusiveMaximum" && x >= b)) {
          return false;
        }
      }
    }
    if (v.is_array()) {
      const auto n = static_cast<std::int64_t>(v.size());
      if (n < min_items || (max_items >= 0 && n > max_items)) return false;
    }
    if (v.is_object()) {
      for (const std::string& k : required) {
        if (!v.contains(k)) return false;
      }
    }
    return true;
  }

  Symbol any_value() {
    if (any_ >= 0) return any_;
    any_ = g_.new_rule();
    const Symbol key = plain_string();
    const Symbol member = seq(cat({{key}, ws(), std::vector<Symbol>{colon(), any_}}));
    any_object_ = delimited('{', member, '}');
    any_array_ = delimited('[', any_, ']');
    g_.add(any_, {any_object_});
    g_.add(any_, {any_array_});
    g_.add(any_, {key});
    g_.add(any_, {number()});
    g_.add(any_, g_.literal("true"));
    g_.add(any_, g_.literal("false"));
    g_.add(any_, g_.literal("null"));
    return any_;
  }

  // open ws (item ws (, item ws)*)? close: a free JSON object's members or array's items.
  Symbol delimited(char open, Symbol item, char close) {
    const Symbol o = g_.byte(static_cast<unsigned char>(open));
    const Symbol c = g_.byte(static_cast<unsigned char>(close));
    const Symbol more = g_.star(seq(cat({comma(), {item}, ws()})));
    return g_.rule({cat({{o}, ws(), {c}}), cat({{o}, ws(), {item}, ws(), {more, c}})});
  }

  Symbol object_or_array() {
    any_value();
    return g_.rule({{any_object_}, {any_array_}});
  }

 private:
  // The schema's root is named "(root)" (its JSON pointer is empty).
  // The names of a schema's `type`: one name or a non-empty list of them.
  static std::vector<std::string> type_names(const Json& t, const std::string& path) {
    std::vector<std::string> types;
    if (t.is_string()) {
      types.push_back(t.get<std::string>());
    } else if (t.is_array() && !t.empty()) {
      for (const Json& one : t) {
        if (!one.is_string()) fail(path + "/type", "expected a type name or a list of them");
        types.push_back(one.get<std::string>());
      }
    } else {
      fail(path + "/type", "expected a type name or a non-empty list of them");
    }
    return types;
  }

  [[noreturn]] static void fail(const std::string& path, const std::string& what) {
    throw JsonSchemaError((path.empty() ? std::string("(root)") : path) + ": " + what);
  }

  static bool known(std::string_view k) {
    static const std::set<std::string, std::less<>> keys = {"type",
                                                            "properties",
                                                            "required",
                                                            "additionalProperties",
                                                            "items",
                                                            "prefixItems",
                                                            "minItems",
                                                            "maxItems",
                                                            "minLength",
                                                            "maxLength",
                                                            "pattern",
                                                            "enum",
                                                            "const",
                                                            "anyOf",
                                                            "oneOf",
                                                            "allOf",
                                                            "$ref",
                                                            "format",
                                                            "minimum",
                                                            "maximum",
                                                            "exclusiveMinimum",
                                                            "exclusiveMaximum"};
    return keys.contains(k) || annotations().contains(k);
  }

  // $ref, allOf, anyOf and oneOf stand for the whole schema here: another validation keyword
  // beside them would have to be merged in, which is refused rather than dropped.
  static void check_alone(const Json& s, const std::string& path, const char* which) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != which && !annotations().contains(it.key())) {
        fail(path + "/" + pointer_escape(it.key()),
             std::string("\"") + it.key() + "\" beside \"" + which +
                 "\" is not supported (the schemas are not merged)");
      }
    }
  }

  // The JSON pointer a "#..." reference's fragment names: percent-decoded first (RFC 6901
  // section 6: a pointer in a URI fragment is percent-encoded, "#/$defs/a%20b").
  static std::string fragment_pointer(const std::string& r, const std::string& path) {
    std::string out;
    for (std::size_t i = 1; i < r.size(); ++i) {
      if (r[i] != '%') {
        out += r[i];
        continue;
      }
      const auto hex = [&](std::size_t j) -> int {
        if (j >= r.size()) return -1;
        const char c = r[j];
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
      };
      const int hi = hex(i + 1), lo = hex(i + 2);
      if (hi < 0 || lo < 0) {
        fail(path, "\"" + r + "\": a '%' not followed by two hex digits (percent-encoding)");
      }
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    return out;
  }

  Symbol ref(const Json& target, const std::string& path, int depth) {
    if (!target.is_string()) fail(path, "expected a string");
    const std::string r = target.get<std::string>();
    if (r.empty() || r[0] != '#') {
      fail(path, "\"" + r + "\": only references into this schema (\"#...\") are supported");
    }
    const std::string pointer = fragment_pointer(r, path);
    if (const auto it = refs_.find(pointer); it != refs_.end()) return it->second;
    const Json* at = &root_;
    std::string_view rest = pointer;
    while (!rest.empty()) {
      if (rest[0] != '/') fail(path, "\"" + r + "\": expected a JSON pointer after '#'");
      rest.remove_prefix(1);
      const std::size_t end = rest.find('/');
      std::string token(rest.substr(0, end));
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
      std::string key;
      for (std::size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size() &&
            (token[i + 1] == '0' || token[i + 1] == '1')) {
          key += token[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          key += token[i];
        }
      }
      // An array index: digits without a leading zero, below the array's size (counted without
      // std::stoull, whose out_of_range a long index would throw).
      std::optional<std::size_t> index;
      if (at->is_array() && !key.empty() && key.size() <= 18 &&
          key.find_first_not_of("0123456789") == std::string::npos &&
          (key.size() == 1 || key[0] != '0')) {
        std::size_t v = 0;
        for (const char c : key) v = v * 10 + static_cast<std::size_t>(c - '0');
        if (v < at->size()) index = v;
      }
      if (at->is_object() && at->contains(key)) {
        at = &(*at)[key];
      } else if (index) {
        at = &(*at)[*index];
      } else {
        fail(path, "\"" + r + "\" names nothing in the schema");
      }
    }
    const Symbol rule = g_.new_rule();
    refs_[pointer] = rule;
    g_.add(rule, {schema(*at, pointer, depth + 1)});
    return rule;
  }

  std::vector<Symbol> ws() const { return ws_; }
  std::vector<Symbol> comma() {
    return o_.any_whitespace ? cat({{g_.byte(',')}, ws()}) : g_.literal(", ");
  }
  std::vector<Symbol> colon_seq() {
    return o_.any_whitespace ? cat({{g_.byte(':')}, ws()}) : g_.literal(": ");
  }
  Symbol colon() { return seq(colon_seq()); }

  static std::vector<Symbol> cat(std::initializer_list<std::vector<Symbol>> parts) {
    std::vector<Symbol> a;
    for (const std::vector<Symbol>& p : parts) a.insert(a.end(), p.begin(), p.end());
    return a;
  }
  Symbol seq(std::vector<Symbol> s) { return g_.rule({std::move(s)}); }
  Symbol never() { return g_.rule({{g_.bytes(ByteSet())}}); }

  Symbol object(const Json& s, const std::string& path, int depth) {
    struct Property {
      std::vector<Symbol> head;  // "key" ws : ws
      Symbol value;
      bool required;
    };
    std::set<std::string> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array()) fail(path + "/required", "expected an array of property names");
      for (const Json& k : r) {
        if (!k.is_string()) fail(path + "/required", "expected an array of property names");
        required.insert(k.get<std::string>());
      }
    }
    std::vector<Property> props;
    if (s.contains("properties")) {
      const Json& p = s["properties"];
      if (!p.is_object()) fail(path + "/properties", "expected an object of schemas");
      for (auto it = p.begin(); it != p.end(); ++it) {
        const std::string sub = path + "/properties/" + pointer_escape(it.key());
        props.push_back({cat({g_.literal(Json(it.key()).dump()), ws(), colon_seq()}),
                         schema(it.value(), sub, depth + 1), required.contains(it.key())});
      }
    }
    for (const std::string& k : required) {
      const bool listed =
          s.contains("properties") && s["properties"].is_object() && s["properties"].contains(k);
      if (!listed) {
        fail(path + "/required",
             "\"" + k + "\" is required but not among the properties (its schema is unknown)");
      }
    }
    std::optional<Symbol> extra;
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        extra = seq(cat(
            {{plain_string()},
             ws(),
             std::vector<Symbol>{colon(), schema(a, path + "/additionalProperties", depth + 1)}}));
      }
    }
    // Members in order: M(i, first) lists properties i.. (a non-first member after ", "), each
    // followed by whitespace, then the additional members, then '}'.
    std::map<std::pair<std::size_t, bool>, Symbol> made;
    const auto members = [&](auto&& self, std::size_t i, bool first) -> Symbol {
      if (const auto it = made.find({i, first}); it != made.end()) return it->second;
      Symbol r;
      if (i == props.size()) {
        std::vector<std::vector<Symbol>> alts = {{g_.byte('}')}};
        if (extra) {
          const Symbol more = g_.star(seq(cat({comma(), {*extra}, ws()})));
          alts.push_back(
              cat({first ? std::vector<Symbol>{} : comma(), {*extra}, ws(), {more, g_.byte('}')}}));
        }
        r = g_.rule(std::move(alts));
      } else {
        const Property& p = props[i];
        std::vector<std::vector<Symbol>> alts = {cat({first ? std::vector<Symbol>{} : comma(),
                                                      p.head,
                                                      {p.value},
                                                      ws(),
                                                      {self(self, i + 1, false)}})};
        if (!p.required) alts.push_back({self(self, i + 1, first)});
        r = g_.rule(std::move(alts));
      }
      made[{i, first}] = r;
      return r;
    };
    return seq(cat({{g_.byte('{')}, ws(), {members(members, 0, true)}}));
  }

  // A count keyword's value: a non-negative integer, which JSON Schema lets a number with a zero
  // fractional part be (3.0 is 3).
  std::int64_t count(const Json& s, const char* key, const std::string& path, std::int64_t dflt) {
    if (!s.contains(key)) return dflt;
    const Json& v = s[key];
    double d = -1;
    if (v.is_number_unsigned()) {
      d = static_cast<double>(v.get<std::uint64_t>());
    } else if (v.is_number()) {
      d = v.get<double>();
    }
    if (!(d >= 0) || std::floor(d) != d) {
      fail(path + "/" + key, "expected a non-negative integer");
    }
    if (d > static_cast<double>(kMaxCount)) fail(path + "/" + key, "at most 10000 is supported");
    return static_cast<std::int64_t>(d);
  }

  Symbol array(const Json& s, const std::string& path, int depth) {
    const std::int64_t min = count(s, "minItems", path, 0);
    const std::int64_t max = count(s, "maxItems", path, -1);
    if (max >= 0 && max < min) fail(path + "/maxItems", "below minItems");
    std::vector<Symbol> prefix;
    if (s.contains("prefixItems")) {
      const Json& p = s["prefixItems"];
      if (!p.is_array()) fail(path + "/prefixItems", "expected an array of schemas");
      for (std::size_t i = 0; i < p.size(); ++i) {
        prefix.push_back(schema(p[i], path + "/prefixItems/" + std::to_string(i), depth + 1));
      }
    }
    std::optional<Symbol> items;
    if (!s.contains("items")) {
      items = any_value();
    } else if (!(s["items"].is_boolean() && !s["items"].get<bool>())) {
      items = schema(s["items"], path + "/items", depth + 1);
    }
    // A(j): the array after j items (each followed by whitespace), '[' ws and A(0) the whole.
    // Beyond the prefix and minItems, with no maxItems, every A(j) is the same loop.
    const auto fixed = static_cast<std::int64_t>(prefix.size());
    const std::int64_t last = max >= 0 ? max : std::max(fixed, min);
    std::vector<Symbol> a(static_cast<std::size_t>(last + 1));
    for (std::int64_t j = last; j >= 0; --j) {
      std::vector<std::vector<Symbol>> alts;
      if (j >= min) alts.push_back({g_.byte(']')});
      const std::optional<Symbol> item =
          j < fixed ? std::optional(prefix[static_cast<std::size_t>(j)]) : items;
      const std::vector<Symbol> sep = j == 0 ? std::vector<Symbol>{} : comma();
      if (item && j < last) {
        alts.push_back(cat({sep, {*item}, ws(), {a[static_cast<std::size_t>(j + 1)]}}));
      } else if (item && j == last && max < 0) {
        // Unbounded: (, item ws)* then ']'.
        const Symbol more = g_.star(seq(cat({comma(), {*item}, ws()})));
        if (j == 0) {
          alts.push_back(cat({{*item}, ws(), {more, g_.byte(']')}}));
        } else {
          alts.push_back(cat({comma(), {*item}, ws(), {more, g_.byte(']')}}));
        }
      }
      if (alts.empty()) fail(path, "no array can satisfy minItems with these items");
      a[static_cast<std::size_t>(j)] = g_.rule(std::move(alts));
    }
    return seq(cat({{g_.byte('[')}, ws(), {a[0]}}));
  }

  // The bytes a JSON string holds as they are: not '"', '\\' or a control character.
  static ByteSet unescaped() {
    ByteSet b;
    for (unsigned c = 0x20; c < 0x100; ++c) b.set(c);
    b.reset('"');
    b.reset('\\');
    return b;
  }
  static ByteSet ascii() {
    ByteSet b;
    for (unsigned c = 0; c < 0x80; ++c) b.set(c);
    return b;
  }

  // One character of a JSON string's body: an unescaped code point (UTF-8, not '"', '\' or a
  // control character) or an escape.
  Symbol string_char() {
    if (char_ >= 0) return char_;
    const ByteSet plain = unescaped() & ascii();
    const Symbol cont = g_.range(0x80, 0xBF);
    ByteSet esc;
    for (const char c : std::string_view("\"\\/bfnrt")) esc.set(static_cast<unsigned char>(c));
    ByteSet hex;
    for (const char c : std::string_view("0123456789abcdefABCDEF"))
      hex.set(static_cast<unsigned char>(c));
    const Symbol h = g_.bytes(hex);
    // \uHHHH: a code point outside the surrogates, or a high surrogate's escape directly followed
    // by a low one's (one character, as Python's json.loads reads the pair); never a lone one.
    const auto hex_of = [](std::string_view digits) {
      ByteSet b;
      for (const char c : digits) {
        b.set(static_cast<unsigned char>(c));
        if (c >= 'A' && c <= 'F') b.set(static_cast<unsigned char>(c - 'A' + 'a'));
      }
      return b;
    };
    const Symbol d = g_.bytes(hex_of("D"));
    const Symbol not_d = g_.bytes(hex_of("0123456789ABCEF"));
    const Symbol below_8 = g_.bytes(hex_of("01234567"));
    const Symbol high = g_.bytes(hex_of("89AB"));
    const Symbol low = g_.bytes(hex_of("CDEF"));
    const Symbol u = g_.byte('u');
    const Symbol bs = g_.byte('\\');
    char_ = g_.rule({
        {g_.bytes(plain)},
        {g_.range(0xC2, 0xDF), cont},
        {g_.byte(0xE0), g_.range(0xA0, 0xBF), cont},
        {g_.range(0xE1, 0xEC), cont, cont},
        {g_.byte(0xED), g_.range(0x80, 0x9F), cont},
        {g_.range(0xEE, 0xEF), cont, cont},
        {g_.byte(0xF0), g_.range(0x90, 0xBF), cont, cont},
        {g_.range(0xF1, 0xF3), cont, cont, cont},
        {g_.byte(0xF4), g_.range(0x80, 0x8F), cont, cont},
        {bs, g_.bytes(esc)},
        {bs, u,
         g_.rule({{not_d, h, h, h}, {d, below_8, h, h}, {d, high, h, h, bs, u, d, low, h, h}})},
    });
    return char_;
  }

  Symbol plain_string() {
    if (plain_string_ < 0) {
      plain_string_ = seq({g_.byte('"'), g_.star(string_char()), g_.byte('"')});
    }
    return plain_string_;
  }

  Symbol string(const Json& s, const std::string& path) {
    const std::int64_t min = count(s, "minLength", path, 0);
    const std::int64_t max = count(s, "maxLength", path, -1);
    if (max >= 0 && max < min) fail(path + "/maxLength", "below minLength");
    if (s.contains("format")) {
      if (s.contains("pattern") || min != 0 || max >= 0) {
        fail(path + "/format", "format with pattern, minLength or maxLength is not supported");
      }
      const Json& f = s["format"];
      const char* regex = f.is_string() ? format_regex(f.get<std::string>()) : nullptr;
      if (regex == nullptr) {
        fail(path + "/format",
             "the format " + f.dump() +
                 " is not supported in structured outputs (date, time, date-time, uuid, ipv4, "
                 "email)");
      }
      return seq({g_.byte('"'), compile_regex(g_, regex), g_.byte('"')});
    }
    if (s.contains("pattern")) {
      if (min != 0 || max >= 0) {
        fail(path + "/pattern", "pattern with minLength or maxLength is not supported");
      }
      if (!s["pattern"].is_string()) fail(path + "/pattern", "expected a regular expression");
      try {
        // The pattern's texts written without escapes: no '"', '\' or control character.
        const Symbol body =
            g_.narrowed(compile_regex(g_, s["pattern"].get<std::string>()), unescaped());
        return seq({g_.byte('"'), body, g_.byte('"')});
      } catch (const RegexError& e) {
        fail(path + "/pattern", e.what());
      }
    }
    if (min == 0 && max < 0) return plain_string();
    return seq({g_.byte('"'), g_.repeat(string_char(), min, max), g_.byte('"')});
  }

  // A string format as the regex of its texts (RFC 3339 dates and times, RFC 4122 UUIDs,
  // dotted-quad IPv4; email: a conservative subset of RFC 5322 addresses, local@domain.tld).
  static const char* format_regex(const std::string& f) {
    static const std::map<std::string, std::string, std::less<>> formats = [] {
      // ASCII digits ([0-9]: \d is any Unicode decimal digit). A date's day is within its
      // month: 31, 30, or 28 days, and February 29 in leap years (divisible by 4 but not by 100,
      // or by 400: the year's last two digits a non-zero multiple of 4, or 00 after a multiple of
      // 4).
      const std::string leap_year =
          "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[048]|[2468][048]|[13579][26])00)";
      const std::string date =
          "([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|"
          "(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))|" +
          leap_year + "-02-29)";
      const std::string time =
          R"(([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))";
      const std::string octet = R"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))";
      return std::map<std::string, std::string, std::less<>>{
          {"date", date},
          {"time", time},
          {"date-time", date + "T" + time},
          {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
          {"ipv4", "(" + octet + R"(\.){3})" + octet},
          {"email", R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*)"
                    R"(@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)"
                    R"((\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+)"}};
    }();
    const auto it = formats.find(f);
    return it == formats.end() ? nullptr : it->second.c_str();
  }

  // The decimal texts (no sign, no leading zero) of the integers from lo to hi, both written
  // with the same number of digits.
  Symbol digits_between(const std::string& lo, const std::string& hi) {
    if (lo.empty()) return g_.rule({{}});
    if (lo[0] == hi[0]) {
      return seq(
          {g_.byte(static_cast<unsigned char>(lo[0])), digits_between(lo.substr(1), hi.substr(1))});
    }
    const std::size_t rest = lo.size() - 1;
    const auto any = [&] {
      return g_.repeat(g_.range('0', '9'), static_cast<std::int64_t>(rest),
                       static_cast<std::int64_t>(rest));
    };
    const bool low_full = lo.find_first_not_of('0', 1) == std::string::npos;
    const bool high_full = hi.find_first_not_of('9', 1) == std::string::npos;
    std::vector<std::vector<Symbol>> alts;
    const char first = low_full ? lo[0] : static_cast<char>(lo[0] + 1);
    const char last = high_full ? hi[0] : static_cast<char>(hi[0] - 1);
    if (!low_full) {
      alts.push_back({g_.byte(static_cast<unsigned char>(lo[0])),
                      digits_between(lo.substr(1), std::string(rest, '9'))});
    }
    if (first <= last) {
      alts.push_back(
          {g_.range(static_cast<unsigned char>(first), static_cast<unsigned char>(last)), any()});
    }
    if (!high_full) {
      alts.push_back({g_.byte(static_cast<unsigned char>(hi[0])),
                      digits_between(std::string(rest, '0'), hi.substr(1))});
    }
    return g_.rule(std::move(alts));
  }

  // The decimal texts of the integers in [a, b] (b < 0: unbounded), 0 <= a.
  Symbol magnitudes(std::int64_t a, std::int64_t b) {
    const std::string low = std::to_string(a);
    const std::size_t top = b < 0 ? low.size() : std::to_string(b).size();
    std::vector<std::vector<Symbol>> alts;
    std::int64_t power = 1;  // 10^(L - 1)
    for (std::size_t l = 1; l <= top; ++l, power *= 10) {
      if (l < low.size()) continue;
      const std::int64_t lo = l == low.size() ? a : power;
      const std::int64_t hi = b >= 0 && l == top ? b : power * 10 - 1;
      if (lo <= hi) alts.push_back({digits_between(std::to_string(lo), std::to_string(hi))});
    }
    if (b < 0) {  // every longer text: [1-9][0-9]{top}[0-9]*
      alts.push_back(
          {g_.range('1', '9'), g_.repeat(g_.range('0', '9'), static_cast<std::int64_t>(top), -1)});
    }
    return g_.rule(std::move(alts));
  }

  // An integer with the schema's minimum / maximum / exclusiveMinimum / exclusiveMaximum.
  Symbol bounded_integer(const Json& s, const std::string& path) {
    constexpr double kLimit = 1e15;  // exact in a double, and no overflow below
    std::optional<std::int64_t> lo, hi;
    const auto bound = [&](const char* key) -> std::optional<double> {
      if (!s.contains(key)) return std::nullopt;
      const Json& v = s[key];
      if (!v.is_number() || std::abs(v.get<double>()) > kLimit) {
        fail(path + "/" + key, "expected a number of magnitude at most 1e15");
      }
      return v.get<double>();
    };
    const auto raise = [&](std::int64_t v) { lo = lo ? std::max(*lo, v) : v; };
    const auto lower = [&](std::int64_t v) { hi = hi ? std::min(*hi, v) : v; };
    if (const auto m = bound("minimum")) raise(static_cast<std::int64_t>(std::ceil(*m)));
    if (const auto m = bound("exclusiveMinimum")) {
      raise(static_cast<std::int64_t>(std::floor(*m)) + 1);
    }
    if (const auto m = bound("maximum")) lower(static_cast<std::int64_t>(std::floor(*m)));
    if (const auto m = bound("exclusiveMaximum")) {
      lower(static_cast<std::int64_t>(std::ceil(*m)) - 1);
    }
    if (!lo && !hi) return integer();
    if (lo && hi && *lo > *hi) fail(path, "no integer lies between its bounds");
    std::vector<std::vector<Symbol>> alts;
    if (!hi || *hi >= 0)
      alts.push_back({magnitudes(lo ? std::max<std::int64_t>(*lo, 0) : 0, hi ? *hi : -1)});
    if (!lo || *lo < 0) {  // -m for m in [max(1, -hi), -lo]
      const std::int64_t from = hi && *hi < 0 ? -*hi : 1;
      alts.push_back({g_.byte('-'), magnitudes(from, lo ? -*lo : -1)});
    }
    return g_.rule(std::move(alts));
  }

  Symbol integer() {
    if (integer_ < 0) {
      const Symbol digits = g_.star(g_.range('0', '9'));
      integer_ =
          seq({g_.optional(g_.byte('-')), g_.rule({{g_.byte('0')}, {g_.range('1', '9'), digits}})});
    }
    return integer_;
  }

  Symbol number() {
    if (number_ < 0) {
      const Symbol digits = g_.plus(g_.range('0', '9'));
      ByteSet e, sign;
      e.set('e');
      e.set('E');
      sign.set('+');
      sign.set('-');
      number_ = seq({integer(), g_.optional(seq({g_.byte('.'), digits})),
                     g_.optional(seq({g_.bytes(e), g_.optional(g_.bytes(sign)), digits}))});
    }
    return number_;
  }

  Grammar& g_;
  const Json& root_;
  JsonGrammarOptions o_;
  std::vector<Symbol> ws_;
  std::map<std::string, Symbol> refs_;
  Symbol any_ = -1, any_object_ = -1, any_array_ = -1;
  Symbol char_ = -1, plain_string_ = -1, integer_ = -1, number_ = -1;
};

}  // namespace

Grammar::Symbol compile_json_schema(Grammar& g, const nlohmann::ordered_json& schema,
                                    const JsonGrammarOptions& options) {
  Compiler c(g, schema, options);
  return c.schema(schema, "", 0);
}

Grammar::Symbol compile_json_object_or_array(Grammar& g, const JsonGrammarOptions& options) {
  static const nlohmann::ordered_json empty = nlohmann::ordered_json::object();
  Compiler c(g, empty, options);
  return c.object_or_array();
}

}  // namespace servelab
