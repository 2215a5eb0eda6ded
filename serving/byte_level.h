// GPT-2's byte-level alphabet: each of the 256 byte values stands for one printable Unicode
// character (printable Latin-1 bytes for themselves, the others for U+0100 onwards), so that a
// byte-level BPE vocabulary (GPT-2, Llama 3, Qwen2, tiktoken conversions) writes every token as
// text. tokenizer.json files store their vocabulary and merges in this alphabet.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace servelab::byte_level {

// The UTF-8 text of the character byte `b` stands for (1 or 2 bytes).
std::string_view char_of(unsigned char b);

// `bytes` written in the alphabet (each byte becomes its character).
std::string encode(std::string_view bytes);

// The bytes a token written in the alphabet stands for, or nullopt when `text` holds a
// character outside the alphabet (an added token's literal text, say).
std::optional<std::string> decode(std::string_view text);

}  // namespace servelab::byte_level
