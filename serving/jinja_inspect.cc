// What a parsed template does with its chat messages (Template::iterates_message_content), found
// the way vLLM finds it: the names bound to `messages` (directly, or through {% set %} of it,
// a slice, a filter or a test of it), the loop variables of {% for %} over those names, then
// whether any {% for %} iterates such a variable's `content` (`m['content']`, `m.content`, or a
// slice, filter or test of it). A template that does expects OpenAI's list of content parts.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "serving/jinja.h"
#include "serving/jinja_ast.h"

namespace servelab::jinja {

namespace {

// `e` is the name `var` (key empty) or its `key` (var[key] or var.key), possibly sliced,
// filtered or tested.
bool accesses(const Expr& e, const std::string& var, const std::string& key) {
  if ((e.op == Expr::Op::kFilter || e.op == Expr::Op::kTest || e.op == Expr::Op::kSlice) &&
      !e.args.empty()) {
    return accesses(*e.args[0], var, key);
  }
  if (key.empty()) return e.op == Expr::Op::kName && e.name == var;
  const bool on_var = !e.args.empty() && e.args[0]->op == Expr::Op::kName && e.args[0]->name == var;
  if (e.op == Expr::Op::kAttr) return on_var && e.name == key;
  if (e.op == Expr::Op::kIndex) {
    return on_var && e.args.size() > 1 && e.args[1]->op == Expr::Op::kLiteral &&
           e.args[1]->literal.is_string() && e.args[1]->literal.as_string() == key;
  }
  return false;
}

// Every node, depth first (macro bodies included).
void walk(const Body& body, const std::function<void(const Node&)>& visit) {
  for (const Node& n : body) {
    visit(n);
    for (const Body& b : n.bodies) walk(b, visit);
    walk(n.else_body, visit);
    if (n.macro) walk(n.macro->body, visit);
  }
}

}  // namespace

bool iterates_message_content(const Body& body) {
  // Names bound to the messages: `messages`, then what a {% set %} binds to one of them.
  std::vector<std::string> lists{"messages"};
  for (std::size_t i = 0; i < lists.size(); ++i) {
    walk(body, [&](const Node& n) {
      if (n.kind == Node::Kind::kSet && n.attr.empty() && n.targets.size() == 1 && n.expr &&
          accesses(*n.expr, lists[i], "") &&
          std::find(lists.begin(), lists.end(), n.targets[0]) == lists.end()) {
        lists.push_back(n.targets[0]);
      }
    });
  }
  // The loop variables over them: each a message.
  std::vector<std::string> messages;
  walk(body, [&](const Node& n) {
    if (n.kind != Node::Kind::kFor || n.targets.size() != 1) return;
    for (const std::string& l : lists) {
      if (accesses(*n.expr, l, "")) messages.push_back(n.targets[0]);
    }
  });
  bool found = false;
  walk(body, [&](const Node& n) {
    if (n.kind != Node::Kind::kFor) return;
    for (const std::string& m : messages) found = found || accesses(*n.expr, m, "content");
  });
  return found;
}

}  // namespace servelab::jinja
