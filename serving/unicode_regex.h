// A Unicode-aware regular expression for pre-tokenisation, over PCRE2 (UTF and UCP modes, JIT
// compiled): \p{L}, \p{N}, \s match by Unicode property, (?i:...) folds case, lookahead works, as
// the split patterns of Hugging Face tokenizer.json files (written for Oniguruma) expect.
//
// Subjects may hold invalid UTF-8 (PCRE2_MATCH_INVALID_UTF): an ill-formed byte never matches
// anything, so it ends up between matches. Matching never throws; a match that exceeds PCRE2's
// limits (not seen with the known patterns) ends the search, leaving the rest unmatched.
// Thread-safe: the compiled pattern is shared read-only, match state is per call.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace servelab {

class UnicodeRegex {
 public:
  // Throws std::invalid_argument with PCRE2's message and the offset when `pattern` does not
  // compile.
  explicit UnicodeRegex(const std::string& pattern);
  ~UnicodeRegex();
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  // Appends to `out` the [begin, end) byte ranges of the successive non-overlapping, non-empty
  // matches in `text`, left to right (an empty match advances by one character).
  void find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace servelab
