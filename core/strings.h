// Small string helpers, one definition each for the whole project.
//
// Contract: join(items, sep) is the items in order with `sep` between consecutive ones (""
// for none); ends_with(s, suffix) is true iff `suffix` is a suffix of `s` (always for "").
// Neither allocates more than the result.
#pragma once

#include <cstddef>
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

}  // namespace servelab
