// Unicode whitespace in UTF-8 text, as the two runtimes the serving path mirrors define it:
// - Unicode's White_Space property (Rust's char::is_whitespace, which Hugging Face tokenizers
//   use for an added token's lstrip/rstrip): U+0009-000D, U+0020, U+0085, U+00A0, U+1680,
//   U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000;
// - Python's str.isspace() (str.strip(), split(), Jinja's trim): the same plus U+001C-001F.
// Each function looks at raw bytes, so invalid UTF-8 is simply not whitespace.
#pragma once

#include <cstddef>
#include <string_view>

namespace servelab::unicode_space {

// The byte length (1 to 3) of the whitespace character that starts at `s[i]`, or 0 when none
// does. `python`: Python's definition (with U+001C-001F), otherwise White_Space.
inline std::size_t at(std::string_view s, std::size_t i, bool python = true) {
  if (i >= s.size()) return 0;
  const auto b = [&](std::size_t k) {
    return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u;
  };
  const unsigned c = b(0);
  if (c == ' ' || (c >= '\t' && c <= '\r')) return 1;
  if (c >= 0x1c && c <= 0x1f) return python ? 1 : 0;
  if (c == 0xC2) return (b(1) == 0x85 || b(1) == 0xA0) ? 2 : 0;
  if (c == 0xE1) return (b(1) == 0x9A && b(2) == 0x80) ? 3 : 0;
  if (c == 0xE2 && b(1) == 0x80) {
    const unsigned d = b(2);
    return ((d >= 0x80 && d <= 0x8A) || d == 0xA8 || d == 0xA9 || d == 0xAF) ? 3 : 0;
  }
  if (c == 0xE2) return (b(1) == 0x81 && b(2) == 0x9F) ? 3 : 0;
  if (c == 0xE3) return (b(1) == 0x80 && b(2) == 0x80) ? 3 : 0;
  return 0;
}

// The byte length of the whitespace character that ends just before `s[end]`, or 0.
inline std::size_t before(std::string_view s, std::size_t end, bool python = true) {
  for (std::size_t n = 1; n <= 3 && n <= end; ++n) {
    if (at(s, end - n, python) == n) return n;
  }
  return 0;
}

// `s` without its leading and trailing whitespace.
inline std::string_view trim(std::string_view s, bool python = true) {
  std::size_t b = 0, e = s.size();
  for (std::size_t n; b < e && (n = at(s, b, python)) > 0;) b += n;
  for (std::size_t n; e > b && (n = before(s, e, python)) > 0;) e -= n;
  return s.substr(b, e - b);
}

// The byte length of the line break that starts at `s[i]` as Python's str.splitlines() knows
// them (\n, \r, \r\n, \v, \f, U+001C-001E, U+0085, U+2028, U+2029), or 0.
inline std::size_t line_break_at(std::string_view s, std::size_t i) {
  if (i >= s.size()) return 0;
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == '\r') return (i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
  if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) return 1;
  if (s.substr(i, 2) == "\xC2\x85") return 2;
  if (s.substr(i, 3) == "\xE2\x80\xA8" || s.substr(i, 3) == "\xE2\x80\xA9") return 3;
  return 0;
}

}  // namespace servelab::unicode_space
