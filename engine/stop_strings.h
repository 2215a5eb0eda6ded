// StopStrings: vLLM's stop strings (SamplingParams.stop) on a request's incrementally
// detokenized output, for `engine serve` (docs/serving.md "Stop strings").
//
// After each output token the caller passes the output's decoded text so far. The text that is
// settled is the text without its trailing U+FFFD characters (an incomplete UTF-8 sequence that
// a later token may complete, which vLLM's incremental detokenizer holds back too). A stop string
// matches when it occurs in the settled text ending inside what the token added to it (vLLM's
// check_stop_strings: the search starts len(stop) - 1 bytes before the new text), the stop
// strings tried in the request's order; it is checked only once the output has more than
// min_tokens tokens (vLLM: no stop string before min_tokens). On a match the output ends there:
// the text is cut before the stop string, or after it with include_stop_str_in_output (text after
// the stop string in the same token is dropped either way), finish_reason "stop" and stop_reason
// the string.
//
// Streaming: sendable() says how much of the text may be streamed before the request ends: the
// settled text less the last max(len(stop)) - 1 bytes (they may begin a stop string; none
// with include_stop_str_in_output), cut back to a UTF-8 character boundary, so no byte of a stop
// string, or after it, is ever streamed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

class StopStrings {
 public:
  StopStrings() = default;
  // REQUIRES: no empty string in `stops`.
  StopStrings(std::vector<std::string> stops, bool include_in_output, std::int32_t min_tokens);

  bool empty() const { return stops_.empty(); }

  // The output is now `num_tokens` tokens decoding to `text`. Returns true when a stop string
  // completed (then matched() and text_end() say which and where the output text ends); once
  // matched, later calls return true without looking.
  bool update(std::string_view text, std::int32_t num_tokens);

  bool stopped() const { return matched_ >= 0; }
  // The stop string that matched. REQUIRES: stopped().
  const std::string& matched() const { return stops_[static_cast<std::size_t>(matched_)]; }
  // The length of the output text (bytes of the text passed to update) once stopped.
  std::size_t text_end() const { return text_end_; }

  // How many leading bytes of `text` (the output so far) may be streamed while the request runs
  // (`last`: the request ends with this text, everything may go).
  std::size_t sendable(std::string_view text, bool last) const;

  // `text` less its trailing U+FFFD characters.
  static std::size_t settled_length(std::string_view text);

 private:
  std::vector<std::string> stops_;
  bool include_ = false;
  std::int32_t min_tokens_ = 0;
  std::size_t holdback_ = 0;  // max(len(stop)) - 1, or 0 with include_stop_str_in_output
  std::size_t checked_ = 0;   // settled bytes already searched
  int matched_ = -1;
  std::size_t text_end_ = 0;
};

}  // namespace servelab
