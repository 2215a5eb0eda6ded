// Fuzz target: the tokenizer (serving/tokenizer.h) on arbitrary bytes.
//
// Input layout: byte 0 chooses the tokenizer (even: GPT-2, data/tokenizers/gpt2; odd: cl100k,
// unpacked into the build folder by CMake), the remaining bytes are the text. encode must not
// throw on any bytes; every id must be below vocab_size(); decode(encode(x)) must equal x with
// its ill-formed UTF-8 replaced by U+FFFD. Anything else (an exception, a mismatch, a sanitizer
// report, a timeout) is a finding.
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

const servelab::Tokenizer& tokenizer(bool cl100k) {
  static const std::unique_ptr<servelab::Tokenizer> gpt2 =
      servelab::load_tokenizer(servelab::servelab_home() / "data/tokenizers/gpt2/tokenizer.json");
  // The fuzz executable sits in <build>/tests/fuzz/.
  static const std::unique_ptr<servelab::Tokenizer> cl =
      servelab::load_tokenizer(servelab::executable_dir().parent_path().parent_path() /
                               "data/tokenizers/cl100k/tokenizer.json");
  return cl100k ? *cl : *gpt2;
}

}  // namespace

// Both tokenizers load here, before the first input: loading cl100k's 100k-entry vocabulary
// under ASan takes seconds, which counted against the first input's 10 s timeout (a replay of
// the corpus on a loaded machine timed out on it, 2026-12-02).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizer(false);
  tokenizer(true);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const servelab::Tokenizer& tok = tokenizer(data[0] & 1);
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<std::int32_t> ids = tok.encode(text);
  for (std::int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) {
      std::fprintf(stderr, "tokenizer_fuzz: id %d outside [0, %d)\n", id, tok.vocab_size());
      std::abort();
    }
  }
  if (tok.decode(ids) != servelab::utf8::to_valid(text)) {
    std::fprintf(stderr, "tokenizer_fuzz: decode(encode(x)) differs from x\n");
    std::abort();
  }
  return 0;
}
