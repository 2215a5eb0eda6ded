// Tokenizer: text to token ids and back, the interface `engine serve` encodes prompts and decodes
// outputs through. The Hugging Face tokenizer.json (byte-level BPE) implementation and the chat
// template (serving/chat_template.h) are the tokenizer helper's; until they are merged `engine
// serve` uses the stand-in in serving/byte_tokenizer.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text -> ids, no special tokens added. Never throws on any UTF-8 or invalid byte input.
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // Ids -> text (byte-level: invalid UTF-8 sequences come back as U+FFFD). Throws
  // std::out_of_range for an id outside the vocabulary.
  virtual std::string decode(std::span<const std::int32_t> ids) const = 0;
  virtual std::int32_t vocab_size() const = 0;
  virtual std::optional<std::int32_t> token_id(
      std::string_view token) const = 0;  // special or normal
};

// HF tokenizer.json (model.type BPE, byte-level); ConfigError naming the file and key on bad input.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& tokenizer_json);

}  // namespace servelab
