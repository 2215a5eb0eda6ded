#include "serving/stream_decoder.h"

#include <string_view>

namespace servelab {

namespace {

// Whether `text` ends with U+FFFD, the mark of an incomplete character at the end.
bool ends_incomplete(std::string_view text) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  return text.size() >= kReplacement.size() &&
         text.substr(text.size() - kReplacement.size()) == kReplacement;
}

}  // namespace

std::string StreamDecoder::push(std::int32_t id) {
  pending_.push_back(id);
  std::string text;
  try {
    text = tok_.decode(pending_);
  } catch (...) {
    pending_.pop_back();
    throw;
  }
  // A U+FFFD at the end may be a character still arriving: wait for more bytes, within limits.
  if (ends_incomplete(text) && pending_.size() < kMaxPending) return {};
  pending_.clear();
  return text;
}

std::string StreamDecoder::finish() {
  std::string text = pending_.empty() ? std::string() : tok_.decode(pending_);
  pending_.clear();
  return text;
}

}  // namespace servelab
