// Fuzz target: the tokenizer (serving/tokenizer.h) on arbitrary bytes.
//
// Input layout: byte 0 chooses the tokenizer (its value mod 3: 0 GPT-2, data/tokenizers/gpt2;
// 1 cl100k, unpacked into the build folder by CMake; 2 a small SentencePiece-style file in Llama
// 2's layout, tests/data/tokenizer/sentencepiece-small.json), the remaining bytes are the text.
// encode must not throw on any bytes; every id must be below vocab_size(); decode must give
// valid UTF-8. decode(encode(x)) must equal x with its ill-formed UTF-8 replaced by U+FFFD for
// the byte-level ones, and x itself for the SentencePiece one where x is valid UTF-8 without
// its added tokens' text or the "▁" marker (which decodes as a space). Anything else (an
// exception, a mismatch, a sanitizer report, a timeout) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "serving/home.h"
#include "serving/tokenizer.h"
#include "serving/utf8.h"

namespace {

const servelab::Tokenizer& tokenizer(int which) {
  static const std::unique_ptr<servelab::Tokenizer> gpt2 =
      servelab::load_tokenizer(servelab::servelab_home() / "data/tokenizers/gpt2/tokenizer.json");
  // The fuzz executable sits in <build>/tests/fuzz/.
  static const std::unique_ptr<servelab::Tokenizer> cl =
      servelab::load_tokenizer(servelab::executable_dir().parent_path().parent_path() /
                               "data/tokenizers/cl100k/tokenizer.json");
  static const std::unique_ptr<servelab::Tokenizer> sp = servelab::load_tokenizer(
      servelab::servelab_home() / "tests/data/tokenizer/sentencepiece-small.json");
  return which == 0 ? *gpt2 : which == 1 ? *cl : *sp;
}

// Whether the SentencePiece file must give `text` back: valid UTF-8 holding neither the marker
// nor an added token's text.
bool sentencepiece_round_trips(std::string_view text) {
  if (!servelab::utf8::is_valid(text)) return false;
  for (const std::string_view s : {"\u2581", "<s>", "</s>", "<unk>"}) {
    if (text.find(s) != std::string_view::npos) return false;
  }
  return true;
}

}  // namespace

// Both tokenizers load here, before the first input: loading cl100k's 100k-entry vocabulary
// under ASan takes seconds, which counted against the first input's 10 s timeout (a replay of
// the corpus on a loaded machine timed out on it, 2026-12-02).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (int which = 0; which < 3; ++which) tokenizer(which);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int which = data[0] % 3;
  const servelab::Tokenizer& tok = tokenizer(which);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<std::int32_t> ids = tok.encode(text);
  for (std::int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) {
      std::fprintf(stderr, "tokenizer_fuzz: id %d outside [0, %d)\n", id, tok.vocab_size());
      std::abort();
    }
  }
  const std::string back = tok.decode(ids);
  if (!servelab::utf8::is_valid(back)) {
    std::fprintf(stderr, "tokenizer_fuzz: decode gave ill-formed UTF-8\n");
    std::abort();
  }
  if (which == 2) {
    if (sentencepiece_round_trips(text) && back != text) {
      std::fprintf(stderr, "tokenizer_fuzz: decode(encode(x)) differs from x (SentencePiece)\n");
      std::abort();
    }
    return 0;
  }
  if (back != servelab::utf8::to_valid(text)) {
    std::fprintf(stderr, "tokenizer_fuzz: decode(encode(x)) differs from x\n");
    std::abort();
  }
  return 0;
}
