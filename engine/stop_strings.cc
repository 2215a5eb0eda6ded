#include "engine/stop_strings.h"

#include <algorithm>

namespace servelab {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
}  // namespace

StopStrings::StopStrings(std::vector<std::string> stops, bool include_in_output,
                         std::int32_t min_tokens)
    : stops_(std::move(stops)), include_(include_in_output), min_tokens_(min_tokens) {
  if (!include_) {
    for (const std::string& s : stops_) holdback_ = std::max(holdback_, s.size() - 1);
  }
}

std::size_t StopStrings::settled_length(std::string_view text) {
  std::size_t n = text.size();
  while (n >= kReplacement.size() &&
         text.substr(n - kReplacement.size(), kReplacement.size()) == kReplacement) {
    n -= kReplacement.size();
  }
  return n;
}

bool StopStrings::update(std::string_view text, std::int32_t num_tokens) {
  if (stopped()) return true;
  const std::size_t settled = settled_length(text);
  // A character that a later token completed can shorten the settled text (3 bytes of U+FFFD
  // become a 2-byte character): search from what is still known to be unchanged.
  const std::size_t new_from = std::min(checked_, settled);
  checked_ = settled;
  if (num_tokens <= min_tokens_ || settled <= new_from) return false;
  const std::string_view s = text.substr(0, settled);
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    const std::string& stop = stops_[i];
    // The match must end in the new text: start at most len - 1 bytes before it.
    const std::size_t from = new_from >= stop.size() - 1 ? new_from - (stop.size() - 1) : 0;
    const std::size_t at = s.find(stop, from);
    if (at == std::string_view::npos) continue;
    matched_ = static_cast<int>(i);
    text_end_ = include_ ? at + stop.size() : at;
    return true;
  }
  return false;
}

std::size_t StopStrings::sendable(std::string_view text, bool last) const {
  if (stopped()) return std::min(text_end_, text.size());
  if (last) return text.size();
  std::size_t n = settled_length(text);
  n = n > holdback_ ? n - holdback_ : 0;
  // Back to a character boundary: never split a UTF-8 sequence.
  while (n > 0 && n < text.size() && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace servelab
