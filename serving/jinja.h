// A Jinja2 subset for Hugging Face chat templates (tokenizer_config.json's "chat_template"),
// rendered as transformers renders them: an ImmutableSandboxedEnvironment with trim_blocks and
// lstrip_blocks, the loopcontrols extension, Hugging Face's tojson (no HTML escaping; indent),
// and the globals raise_exception(message) and strftime_now(format).
//
// The subset (what the templates of Llama 2/3, Mistral, Qwen2/2.5/3, Gemma, Phi, DeepSeek and
// Zephyr use): {{ }}, {% if/elif/else %}, {% for a[, b] in x [if c] %} with else, loop.* and
// loop.cycle, {% set %} (names, tuples, namespace attributes, blocks), {% macro %} with
// defaults and keyword arguments, {% filter %} blocks, {% break/continue %}, {% raw %},
// {% generation %}, comments,
// `-`/`+` whitespace control; literals, lists, tuples, dicts; . [] [a:b:c] (); filters trim,
// length/count, tojson, string, upper, lower, capitalize, title, first, last, join, default/d,
// items, list, int, float, abs, round, reverse, sort, unique, replace, indent, safe,
// escape/e, select, reject, selectattr, rejectattr, map, sum, min, max, wordcount; tests
// defined, undefined, none, boolean, true, false, integer, float, number, string, mapping,
// iterable, sequence, callable, eq/equalto/==, ne/!=, lt/<, le/<=, gt/>, ge/>=, in, odd,
// even, divisibleby, sameas, lower, upper; str methods strip, lstrip, rstrip, split, rsplit,
// splitlines, startswith, endswith, upper, lower, title, capitalize, replace, find, rfind,
// count, join, is*; dict methods items, keys, values, get; globals range (at most 100,000
// items, the sandbox's limit), namespace, dict, raise_exception, strftime_now.
//
// Contracts:
// - Template(source, origin) parses; a syntax error or a construct outside the subset
//   (include, extends, call blocks, recursive loops, chained comparisons) is a
//   ConfigError "ORIGIN:LINE: what".
// - render(context) is deterministic given the context and RenderOptions::now. A runtime error
//   (an undefined variable's attribute, a type error, an unknown filter) is a ConfigError
//   "ORIGIN:LINE: what"; raise_exception(message) throws Raised, whose what() is the message.
// - The sandbox: no template can mutate its inputs (list.append and the like are refused),
//   macro recursion stops at depth 100, and RenderOptions bounds the work and the sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include "core/config_error.h"
#include "serving/jinja_value.h"

namespace servelab::jinja {

struct Node;

// raise_exception(message) in a template: what() is the message.
struct Raised : ConfigError {
  using ConfigError::ConfigError;
};

struct RenderOptions {
  // strftime_now's clock (local time); nullopt: now.
  std::optional<std::time_t> now;
  // A runaway template ends with a ConfigError instead of holding the server: at most this many
  // steps (loop iterations, macro calls, {{ }} outputs), and no string (the output included)
  // or list longer than max_size bytes or items. A chat template takes a few hundred steps.
  std::int64_t max_steps = 10'000'000;
  std::size_t max_size = std::size_t{64} << 20;
};

class Template {
 public:
  Template(const std::string& source, std::string origin);
  // `context`: the template's variables (a dict's members).
  std::string render(const Dict& context, const RenderOptions& options = {}) const;
  const std::string& origin() const { return origin_; }
  // Whether a {% for %} iterates a chat message's `content` (vLLM's test for a template that
  // takes OpenAI's content parts: serving/jinja_inspect.cc says how messages are traced).
  bool iterates_message_content() const;

 private:
  std::string origin_;
  std::shared_ptr<const std::vector<Node>> body_;
};

}  // namespace servelab::jinja
