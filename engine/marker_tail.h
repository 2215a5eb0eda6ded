// Streaming text that a marker may cut (a tool call's <tool_call>, a reasoning model's
// </think>): the tail of what has arrived that may be the start of the marker, which a stream
// holds back until the next text shows whether it is.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace servelab {

// The length of the longest proper prefix of `marker` that `text` ends with, looking only at
// text[from, ...) (what precedes `from` is known not to start the marker); 0 when none.
inline std::size_t partial_marker_tail(std::string_view text, std::size_t from,
                                       std::string_view marker) {
  if (marker.empty() || from >= text.size()) return 0;
  const std::size_t longest = std::min(marker.size() - 1, text.size() - from);
  for (std::size_t n = longest; n > 0; --n) {
    if (marker.substr(0, n) == text.substr(text.size() - n)) return n;
  }
  return 0;
}

}  // namespace servelab
