// A Jinja2 subset for Hugging Face chat templates (tokenizer_config.json's "chat_template"),
// rendered as transformers renders them: an ImmutableSandboxedEnvironment with trim_blocks and
// lstrip_blocks, the loopcontrols extension, Hugging Face's tojson (no HTML escaping; indent),
// and the globals raise_exception(message) and strftime_now(format).
//
// The subset (what the templates of Llama 2/3, Mistral, Qwen2/2.5/3, Gemma, Phi, DeepSeek and
// Zephyr use): {{ }}, {% if/elif/else %}, {% for a[, b] in x [if c] %} with else, loop.* and
// loop.cycle, {% set %} (names, tuples, namespace attributes, blocks), {% macro %} with
// defaults and keyword arguments, {% filter %} blocks, {% break/continue %}, {% raw %},
// {% generation %}, comments, loop.changed,
// `-`/`+` whitespace control; literals, lists, tuples, dicts; . [] [a:b:c] (); str % args
// (%s %r %d %i %f %x, flags, width, precision, %(name)s); filters trim,
// length/count, tojson (transformers': ensure_ascii, indent as an int or a str, separators,
// sort_keys), string, upper, lower, capitalize, title, first, last, join, default/d,
// items, list, int, float, abs, round, reverse, sort, unique, replace, indent, safe,
// escape/e, select, reject, selectattr, rejectattr, map, sum, min, max, wordcount, dictsort,
// truncate, center, batch, attr, format (attribute= takes Jinja's dotted paths, "a.0"); tests
// defined, undefined, none, boolean, true, false, integer, float, number, string, mapping,
// iterable, sequence, callable, eq/equalto/==, ne/!=, lt/<, le/<=, gt/>, ge/>=, in, odd,
// even, divisibleby, sameas, lower, upper; str methods strip, lstrip, rstrip, split, rsplit,
// splitlines, startswith, endswith, upper, lower, title, capitalize, replace, find, rfind,
// count, join, format ({} {0} {name}, !r/!s; no format specs), is*; dict methods items, keys,
// values, get (x.items is the method even where the dict has a key "items"; x['items'] is the
// key); globals range (at most 100,000 items, the sandbox's limit), namespace, dict,
// raise_exception, strftime_now.
//
// Text is Python's: whitespace (strip, trim, split, splitlines, isspace, `-` control) is
// Unicode's (U+00A0, U+3000, U+2028, ...); upper, lower, title, capitalize and is* use
// Unicode's case mappings and categories for every script: the simple (one character to one)
// mappings, plus 'ß' -> 'SS'; Python's other full mappings ('ŉ', 'ﬁ', ...) and its final
// sigma ('Σ' lowered at a word's end to 'ς') are not followed.
//
// Contracts:
// - Template(source, origin) parses; a syntax error or a construct outside the subset
//   (include, extends, call blocks, recursive loops, chained comparisons, expressions or tags
//   nested deeper than 200, an expression chained deeper than 200 terms such as
//   `a ~ b ~ ...`, a filter or test the subset does not have) is a ConfigError
//   "ORIGIN:LINE: what". As in Jinja2, an unknown filter or test name inside an {% if %} or an
//   inline if fails only when rendered; a Jinja2 built-in the subset lacks (groupby, ...) is
//   refused anywhere. An unknown method (x.frob()) is a render error.
// - render(context) is deterministic given the context and RenderOptions::now. A runtime error
//   (an undefined variable's attribute, a type error, an unknown method) is a ConfigError
//   "ORIGIN:LINE: what"; raise_exception(message) throws Raised, whose what() is the message
//   (any other number of arguments is a ConfigError).
// - Macros are closures: a macro sees the loop and macro variables where it was defined (the
//   top level as it is when called), and a parameter's default sees the parameters before it.
// - The sandbox: no template can mutate its inputs (list.append and the like are refused),
//   macro recursion stops at depth 100, nesting (macro calls x tags x expressions) stops with a
//   ConfigError well before a thread's stack would (1 MiB of it at most), and RenderOptions
//   bounds the work and the sizes.
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
  // steps (loop iterations, macro calls, {{ }} outputs), no string (the output included)
  // or list longer than max_size bytes or items, and at most 16 x max_size bytes (1 GiB by
  // default) made or scanned by string and list operations in all (concatenation ~ and +, *,
  // comparisons, filters, methods, slices, loops at 16 bytes an item, and the output). A chat
  // template takes a few hundred steps and a few times its output's bytes.
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
