// Small string helpers, one definition each for the whole project.
//
// Contract: join(items, sep) is the items in order with `sep` between consecutive ones (""
// for none); ends_with(s, suffix) is true iff `suffix` is a suffix of `s` (always for "").
// Neither allocates more than the result. is_name_char(c): c may appear in a name that becomes
// a file or folder name (an experiment's, a variant's, a request class's): an ASCII letter or
// digit, '-', '_' or '.', whatever the locale. format_text(format, ...) is std::snprintf's output
// as a std::string, however long.
#pragma once

#include <algorithm>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

inline std::string join(const std::vector<std::string>& items, std::string_view sep = ", ") {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

inline bool ends_with(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

constexpr bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

[[gnu::format(printf, 1, 2)]] inline std::string format_text(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string text(static_cast<std::size_t>(std::max(n, 0)) + 1, '\0');
  std::vsnprintf(text.data(), text.size(), format, args);
  va_end(args);
  text.pop_back();
  return text;
}

}  // namespace servelab
