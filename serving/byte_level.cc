#include "serving/byte_level.h"

#include <cstdint>

namespace servelab::byte_level {

namespace {

struct Alphabet {
  std::array<std::string, 256> chars;       // byte -> UTF-8 of its character
  std::array<std::int16_t, 324> byte_of{};  // code point -> byte, -1 outside the alphabet

  Alphabet() {
    byte_of.fill(-1);
    int next = 256;  // code points handed to the bytes that are not printable
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int cp = printable ? b : next++;
      byte_of[static_cast<std::size_t>(cp)] = static_cast<std::int16_t>(b);
      std::string& s = chars[static_cast<std::size_t>(b)];
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

std::string_view char_of(unsigned char b) { return alphabet().chars[b]; }

std::string encode(std::string_view bytes) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(a.chars[static_cast<unsigned char>(c)]);
  return out;
}

std::optional<std::string> decode(std::string_view text) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c0 = static_cast<unsigned char>(text[i]);
    std::uint32_t cp;
    if (c0 < 0x80) {
      cp = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < text.size()) {
      cp = (static_cast<std::uint32_t>(c0 & 0x1F) << 6) |
           (static_cast<unsigned char>(text[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // three- and four-byte characters are all outside the alphabet
    }
    if (cp >= a.byte_of.size() || a.byte_of[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(a.byte_of[cp]));
  }
  return out;
}

}  // namespace servelab::byte_level
