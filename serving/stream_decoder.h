// Incremental detokenisation for streamed completions: ids arrive one at a time, text goes out
// in pieces whose concatenation equals decode(all ids). A byte-level token can end in the middle
// of a UTF-8 character (GPT-2 and cl100k split most emoji over two or three tokens), and decoding
// such a prefix gives U+FFFD; the decoder holds those ids back until the character completes.
//
// Contract: the concatenation of every push() result and of finish() equals tok.decode(ids) of
// all the ids pushed, for a byte-level tokenizer (whose text is its tokens' bytes concatenated,
// ill-formed parts replaced by U+FFFD), except when kMaxPending ids in a row end inside a
// character: those are let out with U+FFFD rather than held forever (only invalid UTF-8 does
// that; a character spans at most four byte-level tokens). Not thread-safe (one per stream); the
// Tokenizer must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "serving/tokenizer.h"

namespace servelab {

class StreamDecoder {
 public:
  static constexpr std::size_t kMaxPending = 8;

  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}

  // The text that `id` completes ("" while a character is incomplete). Throws std::out_of_range
  // for an id outside the vocabulary, as Tokenizer::decode does (the id is then not kept).
  std::string push(std::int32_t id);

  // The text of the ids still held back (U+FFFD for an incomplete character at the end).
  std::string finish();

 private:
  const Tokenizer& tok_;
  std::vector<std::int32_t> pending_;
};

}  // namespace servelab
