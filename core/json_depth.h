// Nesting depth of JSON text, checked before it is parsed. nlohmann::json parses iteratively but
// dumps, copies and compares recursively, so a value nested some 100,000 levels deep (a 200 KB
// line) overflows the stack when an error message quotes it. Every reader of JSON that a user or
// a client supplies (trace rows, session files, HTTP bodies, checkpoints' and tokenizers'
// headers) refuses text nested deeper than kMaxJsonDepth with its own message, before parsing.
#pragma once

#include <cstddef>
#include <string_view>

namespace servelab {

// Deeper than any JSON ServeLab reads (its own formats nest at most 6 levels; a tokenizer.json
// about 8), far below what the stack can take.
inline constexpr std::size_t kMaxJsonDepth = 256;

// The deepest nesting of arrays and objects in `text` (0 for a scalar), counting brackets
// outside string literals (backslash escapes honoured). Linear, no allocation; it does not
// validate the text (the parser does).
inline std::size_t json_nesting_depth(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
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
      if (++depth > deepest) deepest = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// True when `text` is nested deeper than kMaxJsonDepth.
inline bool json_too_deep(std::string_view text) {
  return json_nesting_depth(text) > kMaxJsonDepth;
}

}  // namespace servelab
