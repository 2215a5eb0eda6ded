#include "serving/byte_tokenizer.h"

#include <charconv>
#include <stdexcept>

namespace servelab {

ByteTokenizer::ByteTokenizer(std::int32_t vocab_size) : vocab_size_(vocab_size) {
  if (vocab_size < 256) {
    throw std::invalid_argument("ByteTokenizer: the vocabulary must hold the 256 bytes (got " +
                                std::to_string(vocab_size) + ")");
  }
}

std::vector<std::int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size());
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string bytes;
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      throw std::out_of_range("ByteTokenizer: token id " + std::to_string(id) +
                              " outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
    }
    if (id < 256) {
      bytes.push_back(static_cast<char>(id));
    } else {
      bytes += "<|" + std::to_string(id) + "|>";
    }
  }
  return sanitize_utf8(bytes);
}

std::optional<std::int32_t> ByteTokenizer::token_id(std::string_view token) const {
  if (token.size() == 1) return static_cast<unsigned char>(token[0]);
  if (token.size() > 4 && token.substr(0, 2) == "<|" && token.substr(token.size() - 2) == "|>") {
    const std::string_view digits = token.substr(2, token.size() - 4);
    std::int32_t id = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
    if (ec == std::errc() && end == digits.data() + digits.size() && id >= 256 &&
        id < vocab_size_ && std::to_string(id) == digits) {
      return id;
    }
  }
  return std::nullopt;
}

std::string sanitize_utf8(std::string_view s) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t len = 0;
    std::uint32_t min = 0;
    if (b < 0x80) {
      out.push_back(s[i++]);
      continue;
    } else if (b >= 0xC2 && b <= 0xDF) {
      len = 2, min = 0x80;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3, min = 0x800;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4, min = 0x10000;
    }
    std::size_t good = 0;  // bytes of a valid sequence (0: invalid at i)
    if (len > 0 && i + len <= s.size()) {
      std::uint32_t cp = b & (0xFF >> (len + 1));
      bool ok = true;
      for (std::size_t k = 1; k < len && ok; ++k) {
        const auto c = static_cast<unsigned char>(s[i + k]);
        ok = (c & 0xC0) == 0x80;
        cp = (cp << 6) | (c & 0x3F);
      }
      if (ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF)) good = len;
    }
    if (good > 0) {
      out.append(s.substr(i, good));
      i += good;
    } else {
      out.append(kReplacement);
      ++i;
      // The continuation bytes of the broken sequence go with it.
      while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80 && len > 1) {
        ++i;
        --len;
      }
    }
  }
  return out;
}

std::string plain_chat_prompt(std::span<const PlainChatMessage> messages,
                              bool add_generation_prompt) {
  std::string text;
  for (const PlainChatMessage& m : messages) text += m.role + ": " + m.content + "\n";
  if (add_generation_prompt) text += "assistant: ";
  return text;
}

}  // namespace servelab
