// ByteTokenizer: a STAND-IN tokenizer for `engine serve` until the BPE tokenizer
// (serving/tokenizer.h's load_tokenizer) is merged. Token ids 0..255 are the bytes themselves;
// ids 256..vocab_size-1 (models with a larger vocabulary) are placeholder tokens spelled
// "<|N|>". It gives text prompts and text outputs a meaning on models without a tokenizer.json,
// the catalogue's `tiny` model (vocabulary 256) above all; it is not any real model's encoding.
//
// plain_chat_prompt() is the stand-in for the Llama 3 chat template: "role: content\n" per
// message, then "assistant: " when a generation prompt is asked for.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "serving/tokenizer.h"

namespace servelab {

class ByteTokenizer : public Tokenizer {
 public:
  // REQUIRES: vocab_size >= 256 (std::invalid_argument otherwise).
  explicit ByteTokenizer(std::int32_t vocab_size);
  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int32_t vocab_size() const override { return vocab_size_; }
  std::optional<std::int32_t> token_id(std::string_view token) const override;

 private:
  std::int32_t vocab_size_;
};

// Replaces every invalid UTF-8 sequence of `bytes` by U+FFFD (one per maximal invalid prefix).
std::string sanitize_utf8(std::string_view bytes);

struct PlainChatMessage {
  std::string role;
  std::string content;
};
std::string plain_chat_prompt(std::span<const PlainChatMessage> messages,
                              bool add_generation_prompt = true);

}  // namespace servelab
