// SentencePiece-style tokenizer.json files (Llama 2, Mistral: BPE over characters with
// byte_fallback, the "▁" space marker) and the normalizers (Qwen2's NFC): Hugging Face's
// tokenizers pipeline step by step on small hand-made vocabularies whose expected ids follow
// from the merge ranks.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "serving/byte_level.h"
#include "serving/decoder.h"
#include "serving/home.h"
#include "serving/normalizer.h"
#include "serving/tokenizer.h"
#include "test_util.h"
#include "tests/sentencepiece_layout.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_util::temp_dir;
using test_util::write_file;
using Ids = std::vector<std::int32_t>;

const std::string kSpace = "\u2581";  // SentencePiece's space marker

// Words at ids 3..; the byte tokens <0x00>..<0xFF> after them.
const std::vector<std::string> kWords = {kSpace,
                                         "H",
                                         "e",
                                         "l",
                                         "o",
                                         "w",
                                         "r",
                                         "d",
                                         "lo",
                                         kSpace + "H",
                                         "el",
                                         "ello",
                                         kSpace + "Hello",
                                         kSpace + "w",
                                         "or",
                                         kSpace + "wor",
                                         "ld",
                                         kSpace + "world",
                                         "o" + kSpace};
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"l", "o"},    {kSpace, "H"}, {"e", "l"},           {"el", "lo"}, {kSpace + "H", "ello"},
    {kSpace, "w"}, {"o", "r"},    {kSpace + "w", "or"}, {"l", "d"},   {kSpace + "wor", "ld"}};

std::int32_t word(const std::string& w) {
  for (std::size_t i = 0; i < kWords.size(); ++i) {
    if (kWords[i] == w) return static_cast<std::int32_t>(i + 3);
  }
  ADD_FAILURE() << "no word " << w;
  return -1;
}
std::int32_t byte_token(int b) { return static_cast<std::int32_t>(3 + kWords.size()) + b; }

// Llama 2's layout: Prepend + Replace normalizer, no pre-tokenizer, the Replace / ByteFallback /
// Fuse / Strip decoder, <s> before a sequence.
json llama2_file(const std::vector<std::pair<std::string, std::string>>& merges = kMerges) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (std::size_t i = 0; i < kWords.size(); ++i) vocab[kWords[i]] = i + 3;
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    vocab[hex] = byte_token(b);
  }
  json m = json::array();
  for (const auto& [l, r] : merges) m.push_back(l + " " + r);
  return test_util::llama2_layout(vocab, m);
}

// The newer conversions' layout: no normalizer, a Metaspace pre-tokenizer and decoder.
json metaspace_file(const std::string& scheme, bool split,
                    const std::vector<std::pair<std::string, std::string>>& merges = kMerges) {
  json doc = llama2_file(merges);
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", scheme}, {"split", split}};
  doc["decoder"] = {
      {"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", scheme}, {"split", split}};
  return doc;
}

std::unique_ptr<Tokenizer> load(const json& doc, const std::string& name) {
  const fs::path file = temp_dir("sp_tokenizer") / (name + ".json");
  write_file(file, doc.dump());
  return load_tokenizer(file);
}

TEST(SentencePieceTokenizer, Llama2LayoutMergesWordsWithTheSpaceMarker) {
  const auto tok = load(llama2_file(), "llama2");
  const Ids hello_world = {word(kSpace + "Hello"), word(kSpace + "world")};
  EXPECT_EQ(tok->encode("Hello world"), hello_world);
  EXPECT_EQ(tok->encode_with_special_tokens("Hello world"),
            (Ids{1, word(kSpace + "Hello"), word(kSpace + "world")}));
  // The normalizer works on each text between added tokens: both get the marker.
  EXPECT_EQ(tok->encode("Hello</s>world"),
            (Ids{word(kSpace + "Hello"), 2, word(kSpace + "world")}));
  // A character outside the vocabulary falls back to its UTF-8 bytes.
  EXPECT_EQ(tok->encode("H\u00e9"), (Ids{word(kSpace + "H"), byte_token(0xC3), byte_token(0xA9)}));
  // Decoding: the marker is a space, the byte runs are text, the text's first space is cut.
  EXPECT_EQ(tok->decode(hello_world), "Hello world");
  EXPECT_EQ(tok->decode(tok->encode("H\u00e9 world")), "H\u00e9 world");
  EXPECT_EQ(tok->decode(Ids{1, word(kSpace + "Hello")}), "<s> Hello");
  // A byte run that is not UTF-8 is one U+FFFD per byte token (Hugging Face's ByteFallback).
  EXPECT_EQ(tok->decode(Ids{byte_token(0xC3), word("H"), byte_token(0xE2), byte_token(0x96)}),
            "\uFFFDH\uFFFD\uFFFD");
  EXPECT_EQ(*tok->token_string(word(kSpace + "Hello")), kSpace + "Hello");
  EXPECT_EQ(*tok->token_string(byte_token(0x0A)), "<0x0A>");
  EXPECT_EQ(tok->token_id("<0x0A>"), byte_token(0x0A));
  // Invalid UTF-8 input never throws: an ill-formed byte is its byte token.
  EXPECT_EQ(tok->encode("\xff"), (Ids{word(kSpace), byte_token(0xFF)}));
}

TEST(SentencePieceTokenizer, AnOutputDecodedAfterItsPromptKeepsItsFirstSpace) {
  const auto tok = load(llama2_file(), "context");
  ASSERT_TRUE(tok->decode_needs_context());
  const Ids prompt = {1, word(kSpace + "Hello")};
  const Ids out = {word(kSpace + "world"), word(kSpace + "world")};
  // Alone the text's first space is stripped; after the prompt (vLLM's detokenizer) it stays.
  EXPECT_EQ(tok->decode(out), "world world");
  EXPECT_EQ(tok->decode_after(prompt, out), " world world");
  EXPECT_EQ(tok->decode_after({}, out), "world world");
  // Token by token, each step's text after the previous ones concatenates to the whole.
  std::string streamed;
  Ids seen = prompt;
  for (const std::int32_t id : out) {
    streamed += tok->decode_after(seen, Ids{id});
    seen.push_back(id);
  }
  EXPECT_EQ(streamed, " world world");
  // A byte-level tokenizer needs no context.
  const auto bytes = load_tokenizer(servelab_home() / "data/tokenizers/gpt2/tokenizer.json");
  EXPECT_FALSE(bytes->decode_needs_context());
}

TEST(SentencePieceTokenizer, MetaspacePrependSchemes) {
  const Ids hello_world = {word(kSpace + "Hello"), word(kSpace + "world")};
  const auto first = load(metaspace_file("first", false), "first");
  EXPECT_EQ(first->encode("Hello world"), hello_world);
  // "first": only the text that begins the input gets the marker.
  EXPECT_EQ(first->encode("<s>Hello"), (Ids{1, word("H"), word("ello")}));
  EXPECT_EQ(first->decode(hello_world), "Hello world");
  // The Metaspace decoder drops the first token's markers.
  EXPECT_EQ(first->decode(Ids{word(kSpace + "world"), word(kSpace + "world")}), "world world");
  const auto always = load(metaspace_file("always", false), "always");
  EXPECT_EQ(always->encode("<s>Hello"), (Ids{1, word(kSpace + "Hello")}));
  const auto never = load(metaspace_file("never", false), "never");
  EXPECT_EQ(never->encode("Hello"), (Ids{word("H"), word("ello")}));
  EXPECT_EQ(never->decode(hello_world), " Hello world");
}

TEST(SentencePieceTokenizer, MetaspaceSplitKeepsMergesInsideWords) {
  // A merge across the marker ("o" + "▁") joins words unless Metaspace splits at each marker.
  std::vector<std::pair<std::string, std::string>> merges = {{"o", kSpace}};
  merges.insert(merges.end(), kMerges.begin(), kMerges.end());
  const auto joined = load(metaspace_file("first", false, merges), "joined");
  const Ids ids = joined->encode("Hello world");
  EXPECT_NE(ids, (Ids{word(kSpace + "Hello"), word(kSpace + "world")}));
  EXPECT_EQ(joined->decode(ids), "Hello world");
  const auto split = load(metaspace_file("first", true, merges), "split");
  EXPECT_EQ(split->encode("Hello world"), (Ids{word(kSpace + "Hello"), word(kSpace + "world")}));
}

// The tokenizer's decode (per-id tables bound once) gives what the decoder's steps give on the
// token strings, for random id sequences (byte runs valid and not, added tokens, the first
// token's marker), in both layouts.
TEST(SentencePieceTokenizer, BoundDecodeEqualsTheStepsOnTokenStrings) {
  std::uint64_t rng = 0x9E3779B97F4A7C15ull;
  auto next = [&rng] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  for (const json& doc :
       {llama2_file(), metaspace_file("first", true), metaspace_file("never", false)}) {
    const auto tok = load(doc, "bound");
    const Decoder steps = Decoder::from_json(doc["decoder"], "f.json", "decoder");
    for (int trial = 0; trial < 300; ++trial) {
      Ids ids;
      for (std::uint64_t n = next() % 12; n > 0; --n) {
        const std::uint64_t r = next() % 4;
        // Words and specials, valid byte runs (é), stray bytes.
        if (r == 0) {
          ids.push_back(static_cast<std::int32_t>(next() % (3 + kWords.size())));
        } else if (r == 1) {
          ids.push_back(byte_token(0xC3));
          ids.push_back(byte_token(0xA9));
        } else if (r == 2) {
          ids.push_back(byte_token(static_cast<int>(next() % 256)));
        } else {
          ids.push_back(word(kSpace + "world"));
        }
      }
      std::vector<std::string> strings;
      for (const std::int32_t id : ids) strings.push_back(*tok->token_string(id));
      ASSERT_EQ(tok->decode(ids), steps.decode(strings)) << doc["decoder"].dump();
    }
  }
}

TEST(Normalizer, UnicodeFormsAndReplace) {
  const std::string decomposed = "e\u0301", composed = "\u00e9";
  EXPECT_EQ(Normalizer::unicode_form(decomposed, Normalizer::Form::kNfc), composed);
  EXPECT_EQ(Normalizer::unicode_form(composed, Normalizer::Form::kNfd), decomposed);
  EXPECT_EQ(Normalizer::unicode_form("\uFB01", Normalizer::Form::kNfkc), "fi");
  EXPECT_EQ(Normalizer::unicode_form("\uFB01", Normalizer::Form::kNfc), "\uFB01");
  // Ill-formed bytes are kept, the valid text around them normalized.
  EXPECT_EQ(Normalizer::unicode_form("e\u0301\xff"
                                     "e\u0301",
                                     Normalizer::Form::kNfc),
            composed + "\xff" + composed);
  const Normalizer n = Normalizer::from_json(
      {{"type", "Sequence"},
       {"normalizers",
        {{{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "_"}},
         {{"type", "Prepend"}, {"prepend", ">"}}}}},
      "f.json", "normalizer");
  EXPECT_EQ(n.normalize("a  b c"), ">a_b_c");
  EXPECT_EQ(n.normalize(""), "");
  EXPECT_TRUE(Normalizer::from_json(nullptr, "f.json", "normalizer").identity());
}

TEST(Normalizer, NfcTokenizerEncodesBothSpellingsAlike) {
  // Qwen2's layout: a byte-level BPE with an NFC normalizer.
  json vocab = json::object();
  for (int b = 0; b < 256; ++b)
    vocab[std::string(byte_level::char_of(static_cast<unsigned char>(b)))] = b;
  json doc = {
      {"added_tokens",
       {{{"id", 256}, {"content", "\u00e9!"}, {"normalized", true}, {"special", false}},
        {{"id", 257}, {"content", "<|end|>"}, {"normalized", false}, {"special", true}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  const auto tok = load(doc, "nfc");
  EXPECT_EQ(tok->encode("e\u0301"), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(tok->encode("\u00e9"), (Ids{0xC3, 0xA9}));
  // A `normalized` added token matches the normalized text; the others the input.
  EXPECT_EQ(tok->encode("ae\u0301!<|end|>"), (Ids{'a', 256, 257}));
  EXPECT_EQ(tok->decode(Ids{256}), "\u00e9!");
}

TEST(SentencePieceTokenizer, BadFilesNameTheKey) {
  struct Case {
    std::function<void(json&)> edit;
    std::string key;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["model"]["vocab"].erase("<0x41>"); }, "model.vocab: no token for byte 0x41"},
      {[](json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       },
       "normalizer.type"},
      {[](json& j) {
         j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", "("}};
       },
       "normalizer.normalizers[1].pattern.Regex"},
      {[](json& j) { j["decoder"]["decoders"][3]["content"] = "ab"; },
       "decoder.decoders[3].content"},
      {[](json& j) {
         j["decoder"]["decoders"][0]["pattern"] = {{"Regex", " "}};
       },
       "decoder.decoders[0].pattern"},
      {[](json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "decoder.type"},
      {[](json& j) {
         j["pre_tokenizer"] = {
             {"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "twice"}};
       },
       "pre_tokenizer.prepend_scheme"},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "ByteLevel"}, {"use_regex", false}},
                                 {{"type", "Metaspace"}, {"replacement", kSpace}}}}};
       },
       "pre_tokenizer.pretokenizers[1]: Metaspace is supported only as the first"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].key);
    json doc = llama2_file();
    cases[i].edit(doc);
    try {
      load(doc, "bad" + std::to_string(i));
      ADD_FAILURE() << "loaded";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(cases[i].key), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace servelab
