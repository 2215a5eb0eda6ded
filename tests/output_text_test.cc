// OutputText (engine/output_text.h): a choice's text kept up to date token by token equals the
// text of all its ids decoded at once (render_text), after every token, on random ids: byte-level
// tokenizers (the byte tokenizer, GPT-2, cl100k: many ids end inside a UTF-8 character) and the
// SentencePiece-style one (Llama 2's layout: a decoder that strips the start of a text, byte
// fallback), with and without a prompt to continue, and ids outside the vocabulary.
#include "engine/output_text.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "serving/home.h"
#include "serving/tokenizer.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

std::unique_ptr<Tokenizer> load(const std::string& name) {
  if (name == "cl100k") {  // unpacked into the build folder by CMake
    return load_tokenizer(executable_dir().parent_path() / "data/tokenizers/cl100k/tokenizer.json");
  }
  if (name == "sentencepiece-small") {
    return load_tokenizer(servelab_home() / "tests/data/tokenizer/sentencepiece-small.json");
  }
  if (name == "sentencepiece-metaspace") {  // the same vocabulary, a Metaspace decoder
    nlohmann::json doc = nlohmann::json::parse(
        test_util::read_file(servelab_home() / "tests/data/tokenizer/sentencepiece-small.json"));
    doc["decoder"] = {{"type", "Sequence"},
                      {"decoders",
                       {{{"type", "ByteFallback"}},
                        {{"type", "Fuse"}},
                        {{"type", "Metaspace"},
                         {"replacement", "\u2581"},
                         {"prepend_scheme", "always"},
                         {"split", true}}}}};
    const auto file = test_util::temp_dir("output_text_metaspace") / "tokenizer.json";
    test_util::write_file(file, doc.dump());
    return load_tokenizer(file);
  }
  return load_tokenizer(servelab_home() / "data/tokenizers" / name / "tokenizer.json");
}

void check_random_outputs(const std::string& name, std::uint32_t seed) {
  SCOPED_TRACE(name);
  const std::unique_ptr<Tokenizer> tok = load(name);
  std::mt19937 rng(seed);
  const std::int32_t vocab = tok->vocab_size();
  // Ids of a small range more often too: neighbouring ids (byte tokens, "<0xE2>" "<0x82>"
  // "<0xAC>" runs) meet more incomplete characters than uniform ids do.
  auto draw = [&](std::int32_t lo, std::int32_t hi) {
    return std::uniform_int_distribution<std::int32_t>(lo, hi - 1)(rng);
  };
  int checked = 0;
  for (int run = 0; run < 200; ++run) {
    std::vector<std::int32_t> context;
    const int context_len = draw(0, 9);
    for (int i = 0; i < context_len; ++i) context.push_back(draw(0, vocab));
    OutputText text(*tok, context);
    std::vector<std::int32_t> ids;
    const int len = draw(1, 60);
    const std::int32_t band = draw(0, std::max(1, vocab - 300));
    for (int i = 0; i < len; ++i) {
      std::int32_t id = draw(0, 4) == 0 ? draw(0, vocab) : band + draw(0, std::min(300, vocab));
      if (run % 50 == 49 && i == len / 2) id = vocab + 7;  // outside the vocabulary
      ids.push_back(id);
      text.push(id);
      ASSERT_EQ(text.text(), render_text(*tok, ids, context))
          << "run " << run << ", context " << testing::PrintToString(context) << ", ids "
          << testing::PrintToString(ids);
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(OutputText, ByteTokenizerEqualsTheWholeDecode) { check_random_outputs("bytes", 1); }
TEST(OutputText, Gpt2EqualsTheWholeDecode) { check_random_outputs("gpt2", 2); }
TEST(OutputText, Cl100kEqualsTheWholeDecode) { check_random_outputs("cl100k", 3); }
TEST(OutputText, SentencePieceEqualsTheWholeDecode) {
  check_random_outputs("sentencepiece-small", 4);
  check_random_outputs("sentencepiece-metaspace", 5);
}

// A character split over three byte-level ids: nothing of it settles until it completes, then
// it replaces the U+FFFD the partial text showed.
TEST(OutputText, AnIncompleteCharacterIsReplacedWhenItCompletes) {
  const std::unique_ptr<Tokenizer> tok = load("bytes");
  OutputText text(*tok, {});
  const std::string euro = "\xE2\x82\xAC";
  std::vector<std::int32_t> ids = tok->encode("a" + euro);
  ASSERT_EQ(ids.size(), 4u);
  text.push(ids[0]);
  EXPECT_EQ(text.text(), "a");
  text.push(ids[1]);
  EXPECT_EQ(text.text(), "a\xEF\xBF\xBD");
  text.push(ids[2]);
  text.push(ids[3]);
  EXPECT_EQ(text.text(), "a" + euro);
}

}  // namespace
}  // namespace servelab
