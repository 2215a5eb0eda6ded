// UTF-8 helpers for the tokenizer and the server: reading one code point, making arbitrary bytes
// valid UTF-8, counting characters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace servelab::utf8 {

// The length of the well-formed UTF-8 sequence that starts at text[pos] (1 to 4), or 0 when the
// bytes there are not one (a stray continuation byte, an overlong form, a surrogate, a code point
// above U+10FFFF, or a sequence cut short). REQUIRES: pos < text.size().
std::size_t sequence_length(std::string_view text, std::size_t pos);

// `bytes` with every ill-formed part replaced by U+FFFD, one replacement per maximal ill-formed
// subpart (the Unicode Standard's recommended practice, as WHATWG decoders and Rust's
// from_utf8_lossy do). Valid input comes back unchanged.
std::string to_valid(std::string_view bytes);

// Whether `text` is well-formed UTF-8.
bool is_valid(std::string_view text);

// The characters a reader sees in `bytes`: the code points of to_valid(bytes).
std::size_t characters(std::string_view bytes);

// Appends code point `cp` (REQUIRES: at most U+10FFFF) as UTF-8 to `out`.
void append(std::string& out, std::uint32_t cp);

}  // namespace servelab::utf8
