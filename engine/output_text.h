// A choice's output text as `engine serve` shows it, kept up to date token by token.
//
// render_text(tok, ids, context) is the text of generated ids: Tokenizer::decode_after(context,
// ids), vLLM's detokenizer primed with the prompt's last ids. A model may generate ids the
// tokenizer has no token for (random weights with a smaller tokenizer): those render as
// "<|ID|>", the rest decode one id at a time (a character split around such an id becomes
// U+FFFD).
//
// OutputText holds the same text for ids pushed one at a time without decoding them all again
// at every token (which made a streamed or stop-string choice quadratic in its length): the text
// of the ids up to the last one whose decode ended on a complete character (and that is not a
// SentencePiece byte-fallback token, which the next one may join) is kept, and only the ids
// after it (usually the newest one; more while a character is incomplete) are decoded, after the
// last kDecodeContext ids before them. Contract: after every push, text() equals
// render_text(tok, every id pushed, context) (tests/output_text_test.cc holds it to that on
// random ids over byte-level and SentencePiece tokenizers). Once an id outside the vocabulary is
// pushed, text() is render_text over all ids at every push, as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "serving/tokenizer.h"

namespace servelab {

// How many ids before the ones decoded a decode is primed with.
inline constexpr std::size_t kDecodeContext = 8;

std::string render_text(const Tokenizer& tok, std::span<const std::int32_t> ids,
                        std::span<const std::int32_t> context = {});

class OutputText {
 public:
  OutputText() = default;  // REQUIRES: reset() before push()
  OutputText(const Tokenizer& tok, std::vector<std::int32_t> context) {
    reset(tok, std::move(context));
  }
  void reset(const Tokenizer& tok, std::vector<std::int32_t> context);

  // One more id of the output (the caller leaves out what is not shown: special tokens without
  // skip_special_tokens=false, a stop token).
  void push(std::int32_t id);
  const std::string& text() const { return text_; }

 private:
  const Tokenizer* tok_ = nullptr;
  std::vector<std::int32_t> context_;  // the prompt's last ids
  std::vector<std::int32_t> ids_;
  std::size_t settled_ids_ = 0;    // ids whose text is final
  std::size_t settled_bytes_ = 0;  // their text's length: the start of text_
  bool per_id_ = false;            // an id outside the vocabulary was pushed
  std::string text_;
};

}  // namespace servelab
