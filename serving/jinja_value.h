// The values a Jinja template computes with (serving/jinja.h), with Python's meaning, since the
// templates it runs (Hugging Face chat templates) were written against Python's Jinja2:
// undefined, none, bool, int, float, str, list and dict (insertion-ordered, string keys), plus
// two kinds Jinja adds: a namespace() (a dict whose attributes `{% set ns.x = ... %}` may set;
// shared, so every copy sees the assignment) and a macro (a pointer into the parsed template).
//
// Contracts:
// - str() is Python's str(): "None", "True", 1.5, "['a', 'b']", {'k': 1}; undefined is "".
// - truthy() is Python's bool(); equals() is ==, deep, with 1 == 1.0 == True.
// - to_json() is Python's json.dumps(x, ensure_ascii=False, indent=indent) (separators ", " and
//   ": " without indent, "," and ": " with): the tojson filter of Hugging Face's environment;
//   to_json(JsonFormat) takes json.dumps's other arguments (ensure_ascii, separators, sort_keys,
//   a string indent) as that filter passes them on.
//   ConfigError-free: it returns nullopt for undefined and macros, which JSON cannot hold.
// - Strings are UTF-8; length and indexing count code points, as Python's str does.
// Floats print as Python's repr for the values chat templates meet (shortest round trip, ".0"
// on integral values, exponent form from 1e16 and below 1e-4).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace servelab::jinja {

struct MacroDef;  // serving/jinja_ast.h
class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kMacro };

  Value() = default;  // undefined
  // Undefined, with what it came from for an error that uses it ("'dict object' has no
  // attribute 'x'", "'foo' is undefined").
  static Value undefined(std::string why);
  static Value none();
  static Value boolean(bool b);
  static Value integer(std::int64_t i);
  static Value number(double f);
  // A JSON integer past int64 (up to 2^64 - 1): computed with as a float, shown with its digits
  // (str, repr, tojson; type "int"), as Python's unbounded int would be.
  static Value big_integer(std::uint64_t u);
  static Value string(std::string s);
  static Value list(List items, bool is_tuple = false);  // a tuple prints as (a, b)
  static Value dict(Dict items, bool is_namespace = false);
  // `closure`: the variables of the scopes (loops, macro calls) the macro was defined in, which
  // its body sees as Jinja's closures do.
  static Value macro(const MacroDef* def, Dict closure = {});
  // JSON null/bool/number/string/array/object -> none/bool/int or float/str/list/dict.
  static Value from_json(const nlohmann::json& j);
  // The same keeping an object's keys in their text's order (as Python's json.loads does).
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kDict && namespace_; }
  bool is_tuple() const { return kind_ == Kind::kList && namespace_; }
  bool is_big_integer() const { return kind_ == Kind::kFloat && !s_.empty(); }

  bool as_bool() const { return b_; }
  std::int64_t as_int() const;  // bool and int (floats truncate, saturating)
  double as_float() const;      // bool, int, float
  const std::string& as_string() const { return s_; }
  const std::string& why() const { return s_; }  // where undefined(): its reason, or ""
  const List& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }
  Dict& mutable_namespace() const { return *dict_; }  // only where is_namespace()
  const MacroDef* as_macro() const { return macro_; }
  const Dict& macro_closure() const { return *dict_; }  // only where kind() == kMacro

  // Nesting: 0 for a scalar, 1 + the deepest item's for a list or dict (as built; a namespace's
  // later attributes do not count).
  int depth() const { return depth_; }

  // dict[key], undefined when absent (or when this is not a dict).
  Value member(const std::string& key) const;

  bool truthy() const;
  bool equals(const Value& o) const;
  std::string str() const;
  std::string repr() const;  // Python's repr(): strings quoted, undefined "Undefined"
  std::optional<std::string> to_json(int indent = -1) const;
  // Python's json.dumps(x, ensure_ascii=, indent=, separators=, sort_keys=).
  struct JsonFormat {
    bool ensure_ascii = false;          // non-ASCII as \uXXXX (surrogate pairs past U+FFFF)
    std::optional<std::string> indent;  // nullopt: one line; else each level's indentation
    std::optional<std::pair<std::string, std::string>> separators;  // (item, key); nullopt:
                                                                    // (", ", ": ") or, with an
                                                                    // indent, (",", ": ")
    bool sort_keys = false;
  };
  std::optional<std::string> to_json(const JsonFormat& format) const;
  // Python's type name, for error messages: "str", "int", "list", "dict", "NoneType", ...
  std::string type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool namespace_ = false;  // a namespace (dict) or a tuple (list)
  std::int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  const MacroDef* macro_ = nullptr;
  int depth_ = 0;
};

// Python's repr() of a float (see the file comment for the range it matches).
std::string python_float(double f);

// UTF-8 code points of `s` as byte offsets: the start of each, then s.size().
std::vector<std::size_t> code_point_offsets(const std::string& s);

}  // namespace servelab::jinja
