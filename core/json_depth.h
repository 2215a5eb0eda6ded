// Nesting depth of JSON text, checked before it is parsed. nlohmann::json parses iteratively but
// dumps, copies and compares recursively, so a value nested some 100,000 levels deep (a 200 KB
// line) overflows the stack when an error message quotes it. Every reader of JSON that a user or
// a client supplies (trace rows, session files, HTTP bodies, checkpoints' and tokenizers'
// headers) refuses text nested deeper than kMaxJsonDepth with its own message, before parsing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace servelab {

// Deeper than any JSON ServeLab reads (its own formats nest at most 6 levels; a tokenizer.json
// about 8), far below what the stack can take.
inline constexpr std::size_t kMaxJsonDepth = 256;

// Walks `text` bracket by bracket, outside string literals (backslash escapes honoured): calls
// on_depth(depth, i) after each '[' or '{' (the new depth) and each ']' or '}' (the depth left,
// never below 0) at byte i; stops early when it returns true. Linear, no allocation; it does not
// validate the text (the parser does).
template <typename OnDepth>
void scan_json_brackets(std::string_view text, OnDepth on_depth) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (on_depth(++depth, i)) return;
    } else if ((c == ']' || c == '}') && depth > 0) {
      if (on_depth(--depth, i)) return;
    }
  }
}

// The deepest nesting of arrays and objects in `text` (0 for a scalar).
inline std::size_t json_nesting_depth(std::string_view text) {
  std::size_t deepest = 0;
  scan_json_brackets(text, [&](std::size_t depth, std::size_t) {
    deepest = std::max(deepest, depth);
    return false;
  });
  return deepest;
}

// One past the bracket that closes the array or object opening `text` (whose first byte is '['
// or '{'); npos when it does not close.
inline std::size_t json_container_end(std::string_view text) {
  std::size_t end = std::string_view::npos;
  scan_json_brackets(text, [&](std::size_t depth, std::size_t i) {
    if (depth == 0) end = i + 1;
    return depth == 0;
  });
  return end;
}

// True when `text` is nested deeper than kMaxJsonDepth.
inline bool json_too_deep(std::string_view text) {
  return json_nesting_depth(text) > kMaxJsonDepth;
}

}  // namespace servelab
