// The parsed form of a Jinja template (serving/jinja.h): expressions and statement nodes, each
// with its template line for error messages. Built by parse_template (serving/jinja_parser.cc),
// run by render (serving/jinja_render.cc); internal to those two.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "serving/jinja_value.h"

namespace servelab::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Op {
    kLiteral,  // literal
    kName,     // name
    kList,     // [args...]
    kTuple,    // (args...): a list
    kDict,     // {kwargs...}: keys are args[2i], values args[2i+1]
    kAttr,     // args[0].name
    kIndex,    // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts absent)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..]); negate
    kNot,      // not args[0]
    kNeg,      // -args[0]
    kBinary,   // args[0] name args[1]: + - * / // % ** ~ == != < <= > >= in "not in"
    kAnd,
    kOr,
    kCond,  // args[0] if args[1] else args[2] (args[2] may be null: undefined)
  };
  Op op = Op::kLiteral;
  int line = 0;
  Value literal;
  std::string name;
  bool negate = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  // 1 + the deepest argument's depth: the parser refuses one past kMaxExprDepth, so that
  // everything that recurses over an expression (the renderer, the inspection, destruction)
  // is bounded.
  int depth = 1;
};

// The deepest expression a template may hold (a chain `a ~ b ~ c ...` is as deep as its terms).
inline constexpr int kMaxExprDepth = 200;

struct Node;
using Body = std::vector<Node>;

struct MacroDef {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default null where none
  Body body;
};

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conditions[i] -> bodies[i]; else_body
    kFor,       // for targets in expr [if filter]: bodies[0]; else_body
    kSet,       // set targets = expr (a tuple where `set a, b = 1, 2`); or set targets[0].attr =
                // expr (attr non-empty)
    kSetBlock,  // set targets[0]: bodies[0] rendered
    kMacro,     // macro
    kBreak,
    kContinue,
    kGeneration,   // Hugging Face's {% generation %}: bodies[0] rendered as is
    kFilterBlock,  // {% filter f | g(x) %}: bodies[0] rendered, then expr (filters applied to
                   // the name kBlockText, which holds that text)
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body else_body;
  std::shared_ptr<MacroDef> macro;
};

// The name a {% filter %} block's text is bound to while its filters run (no template can
// spell it: names are letters, digits and underscores).
inline constexpr const char* kBlockText = "\x01block";

// Parses `source`; ConfigError "ORIGIN:LINE: what" on a syntax error or a construct outside
// the subset.
Body parse_template(const std::string& source, const std::string& origin);

// Whether the template loops over a chat message's content (serving/jinja_inspect.cc).
bool iterates_message_content(const Body& body);

// Whether the renderer knows the filter or test `name` (serving/jinja_render.cc).
bool known_filter(const std::string& name);
bool known_test(const std::string& name);

}  // namespace servelab::jinja
