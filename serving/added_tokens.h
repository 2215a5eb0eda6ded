// The added tokens of a tokenizer.json (`added_tokens`: special tokens such as <|eot_id|>, and
// any others): found in the text before pre-tokenisation and emitted as their own ids, the text
// between them going through the pre-tokenizer and BPE.
//
// Matching is leftmost, then longest (as Hugging Face does): at each position, the longest added
// token that starts there. lstrip/rstrip extend a match over the whitespace before/after it
// (Unicode White_Space, as Rust's char::is_whitespace: U+3000 and U+00A0 included).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

class AddedTokens {
 public:
  struct Token {
    std::int32_t id;
    std::string content;
    bool lstrip = false;
    bool rstrip = false;
    bool special = true;
    // Matched in the normalized text (Hugging Face's `normalized`), not in the input.
    bool normalized = false;
  };

  // A match of an added token: the bytes [begin, end) it covers (whitespace included with
  // lstrip/rstrip) and its id.
  struct Match {
    std::size_t begin, end;
    std::int32_t id;
  };

  AddedTokens() = default;
  // REQUIRES: contents are non-empty and distinct.
  explicit AddedTokens(std::vector<Token> tokens);

  // The next match at or after `from`, or nullopt.
  std::optional<Match> find(std::string_view text, std::size_t from) const;

  std::optional<std::int32_t> id_of(std::string_view content) const;
  // The token with id `id`, or nullptr.
  const Token* by_id(std::int32_t id) const;
  bool empty() const { return tokens_.empty(); }
  const std::vector<Token>& tokens() const { return tokens_; }

 private:
  std::vector<Token> tokens_;          // sorted by content length, longest first
  std::vector<std::size_t> by_first_;  // index ranges per first byte: [by_first_[b], [b + 1])
  std::vector<std::size_t> order_;     // token indices grouped by first byte, longest first
};

}  // namespace servelab
