// The tokenizer (serving/tokenizer.h) against real vocabularies and encodings from independent
// sources: GPT-2 (data/tokenizers/gpt2) and cl100k (data/tokenizers/cl100k, unpacked into the
// build folder), whose expected ids come from gpt-tokenizer's published test plans and from the
// npm packages' own encoders run under node (tests/data/tokenizer/make_vectors.js). Also: round
// trips, special tokens, invalid bytes, bad files (FILE: KEY errors), the Llama 3 chat format
// against the ids in Meta's llama3 repository (llama/test_tokenizer.py).
#include "serving/tokenizer.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/config_error.h"
#include "serving/added_tokens.h"
#include "serving/byte_level.h"
#include "serving/chat_template.h"
#include "serving/home.h"
#include "serving/utf8.h"
#include "test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using test_util::read_file;
using test_util::temp_dir;
using test_util::write_file;
using Ids = std::vector<std::int32_t>;

fs::path gpt2_path() { return servelab_home() / "data/tokenizers/gpt2/tokenizer.json"; }
// Unpacked by CMake into the build folder, the parent of the tests' folder.
fs::path cl100k_path() {
  return executable_dir().parent_path() / "data/tokenizers/cl100k/tokenizer.json";
}

const Tokenizer& gpt2() {
  static const std::unique_ptr<Tokenizer> t = load_tokenizer(gpt2_path());
  return *t;
}
const Tokenizer& cl100k() {
  static const std::unique_ptr<Tokenizer> t = load_tokenizer(cl100k_path());
  return *t;
}

struct Vector {
  std::string text;
  Ids ids;
  std::string source;
};

std::vector<Vector> vectors(const std::string& name) {
  const nlohmann::json j =
      nlohmann::json::parse(read_file(servelab_home() / "tests/data/tokenizer" / name));
  std::vector<Vector> out;
  for (const auto& c : j.at("cases")) {
    out.push_back({c.at("text").get<std::string>(), c.at("ids").get<Ids>(),
                   c.at("source").get<std::string>()});
  }
  return out;
}

void expect_vectors(const Tokenizer& tok, const std::string& name, std::size_t min_cases) {
  const std::vector<Vector> cases = vectors(name);
  ASSERT_GE(cases.size(), min_cases);
  for (const Vector& v : cases) {
    EXPECT_EQ(tok.encode(v.text), v.ids) << "text: \"" << v.text << "\" (" << v.source << ")";
    EXPECT_EQ(tok.decode(v.ids), v.text) << "ids of \"" << v.text << "\"";
  }
}

TEST(Tokenizer, Gpt2MatchesPublishedEncodings) { expect_vectors(gpt2(), "gpt2_vectors.json", 80); }

TEST(Tokenizer, Cl100kMatchesPublishedEncodings) {
  expect_vectors(cl100k(), "cl100k_vectors.json", 80);
}

// --- round trips --------------------------------------------------------------------------------

const std::vector<std::string>& round_trip_texts() {
  static const std::vector<std::string> texts = {
      "",
      "plain ASCII words.",
      "emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵",
      "CJK: 你好，世界。日本語のテキスト。한국어 문장.",
      "whitespace runs:     \t\t  \n\n\n   \r\n \u00a0\u2003\u3000 end   ",
      "\n\n\nleading newlines and trailing ones\n\n",
      "numbers 0 7 42 1234567 3.14159e-10 -0x7FFFFFFF 1,000,000.00",
      "mixed scripts Ελληνικά русский עברית العربية हिन्दी ไทย",
      "combining marks: e\u0301 a\u0308 \u0915\u094d\u0937",
      "code {\n\tif (x < y && y > z) return \"s\\n\";\n}\n",
      "special text inside: <|endoftext|> and <|im_start|> and <|fim_prefix|>x",
      std::string(300, ' ') + std::string(200, 'a') + std::string(100, '9'),
  };
  return texts;
}

TEST(Tokenizer, RoundTripsValidUtf8) {
  for (const Tokenizer* tok : {&gpt2(), &cl100k()}) {
    for (const std::string& text : round_trip_texts()) {
      EXPECT_EQ(tok->decode(tok->encode(text)), text) << text;
    }
  }
}

// Random valid UTF-8 from a seeded stream of code points across the planes, and random bytes.
std::string random_text(std::uint64_t& state, std::size_t n, bool valid) {
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  std::string s;
  while (s.size() < n) {
    if (!valid) {
      s.push_back(static_cast<char>(next() & 0xFF));
      continue;
    }
    static const std::uint32_t ranges[][2] = {
        {0x20, 0x7E},     {0x09, 0x0D},     {0xA0, 0x24F},      {0x370, 0x52F},
        {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1FAFF}, {0x2000, 0x206F}};
    const auto& r = ranges[next() % 8];
    const std::uint32_t cp = r[0] + static_cast<std::uint32_t>(next() % (r[1] - r[0] + 1));
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return s;
}

TEST(Tokenizer, RoundTripsRandomTextAndInvalidBytes) {
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  for (const Tokenizer* tok : {&gpt2(), &cl100k()}) {
    for (int i = 0; i < 200; ++i) {
      const std::string text = random_text(state, 1 + i % 97, true);
      ASSERT_TRUE(utf8::is_valid(text));
      EXPECT_EQ(tok->decode(tok->encode(text)), text);
      // Arbitrary bytes: encode never throws, every byte is kept, decode makes them valid.
      const std::string bytes = random_text(state, 1 + i % 61, false);
      std::vector<std::int32_t> ids;
      ASSERT_NO_THROW(ids = tok->encode(bytes));
      EXPECT_EQ(tok->decode(ids), utf8::to_valid(bytes));
    }
  }
}

TEST(Tokenizer, LongRunsEncodeQuicklyAndRoundTrip) {
  // One piece each: whitespace the split pattern must backtrack over, a long word, digits.
  for (const std::string& text :
       {std::string(100000, ' ') + "x", std::string(100000, 'a'), std::string(30000, '7'),
        std::string(50000, '\n') + std::string(50000, '\xff')}) {
    for (const Tokenizer* tok : {&gpt2(), &cl100k()}) {
      const auto ids = tok->encode(text);
      EXPECT_LT(ids.size(), text.size());
      EXPECT_EQ(tok->decode(ids), utf8::to_valid(text));
    }
  }
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  const std::vector<Vector> cases = vectors("cl100k_vectors.json");
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) {
        for (const Vector& v : cases) failures[t] += cl100k().encode(v.text) != v.ids;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

TEST(Tokenizer, ByteTokenizerIsTheBytes) {
  // data/tokenizers/bytes: for the 256-token `tiny` model.
  const auto tok = load_tokenizer(servelab_home() / "data/tokenizers/bytes/tokenizer.json");
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->encode("hi €"), (Ids{104, 105, 32, 0xE2, 0x82, 0xAC}));
  std::uint64_t state = 99;
  for (int i = 0; i < 20; ++i) {
    const std::string bytes = random_text(state, 50, false);
    const Ids ids = tok->encode(bytes);
    ASSERT_EQ(ids.size(), bytes.size());
    for (std::size_t k = 0; k < ids.size(); ++k) {
      EXPECT_EQ(ids[k], static_cast<unsigned char>(bytes[k]));
    }
    EXPECT_EQ(tok->decode(ids), utf8::to_valid(bytes));
  }
  EXPECT_THROW(tok->decode(Ids{256}), std::out_of_range);
  const std::vector<ChatMessage> msgs = {{"user", "hi"}};
  EXPECT_THROW(apply_chat_template(*tok, msgs), ConfigError);
}

// --- special tokens, ids, decoding ------------------------------------------------------------

TEST(Tokenizer, SpecialTokensAreMatchedInText) {
  const Tokenizer& g = gpt2();
  EXPECT_EQ(g.token_id("<|endoftext|>"), 50256);
  Ids want = g.encode("Hello");
  want.push_back(50256);
  const Ids world = g.encode(" world");
  want.insert(want.end(), world.begin(), world.end());
  EXPECT_EQ(g.encode("Hello<|endoftext|> world"), want);
  EXPECT_EQ(g.encode("<|endoftext|><|endoftext|>"), (Ids{50256, 50256}));
  // Not a special token: the text is encoded as text.
  EXPECT_GT(g.encode("<|endoftext|").size(), 1u);

  const Tokenizer& c = cl100k();
  EXPECT_EQ(c.token_id("<|im_start|>"), 100264);
  EXPECT_EQ(c.token_id("<|endofprompt|>"), 100276);
  EXPECT_EQ(c.encode("<|im_start|>hello<|im_end|>"), (Ids{100264, 15339, 100265}));
  EXPECT_EQ(c.decode(Ids{100264, 15339, 100265}), "<|im_start|>hello<|im_end|>");
}

// An added token's lstrip/rstrip take the whitespace Hugging Face's tokenizers take: Rust's
// char::is_whitespace (Unicode White_Space: U+3000, U+00A0, U+2028, ...; not U+001C-001F).
TEST(AddedTokens, LstripAndRstripTakeUnicodeWhitespace) {
  const AddedTokens tokens({{100300, "<L>", /*lstrip=*/true, /*rstrip=*/false},
                            {100301, "<R>", /*lstrip=*/false, /*rstrip=*/true}});
  const auto match = [&](std::string_view text) {
    const std::optional<AddedTokens::Match> m = tokens.find(text, 0);
    return m ? std::make_pair(m->begin, m->end) : std::make_pair(std::size_t{99}, std::size_t{99});
  };
  using Span = std::pair<std::size_t, std::size_t>;
  EXPECT_EQ(match("a\u3000<L>"), (Span{1, 7}));
  EXPECT_EQ(match("a \u00a0\t\u2028<L>"), (Span{1, 11}));
  EXPECT_EQ(match("a\x1c<L>"), (Span{2, 5}));
  EXPECT_EQ(match("<R>\u00a0\u2009\u205f b"), (Span{0, 12}));
  EXPECT_EQ(match("<R>\x1f"), (Span{0, 3}));
  // From a later start, lstrip stops there.
  EXPECT_EQ(tokens.find("\u3000\u3000<L>", 3)->begin, 3u);
}

TEST(Tokenizer, TokenIdFindsVocabularyTokensByTheirText) {
  EXPECT_EQ(gpt2().token_id("hello"), 31373);
  EXPECT_EQ(gpt2().token_id("\u0120hello"), 23748);  // "Ġhello": " hello" in the byte alphabet
  EXPECT_EQ(gpt2().token_id(" hello"), std::nullopt);
  EXPECT_EQ(gpt2().token_id("no such token at all"), std::nullopt);
  EXPECT_EQ(cl100k().token_id("hello"), 15339);
}

// token_string is token_id's inverse over every id a token uses (added tokens by their
// content), nullopt for the others.
TEST(Tokenizer, TokenStringIsTokenIdsInverse) {
  EXPECT_EQ(gpt2().token_string(23748), "\u0120hello");
  EXPECT_EQ(gpt2().token_string(50256), "<|endoftext|>");
  EXPECT_EQ(cl100k().token_string(100264), "<|im_start|>");
  EXPECT_EQ(cl100k().token_string(100256), std::nullopt);  // unused
  EXPECT_EQ(gpt2().token_string(50257), std::nullopt);
  EXPECT_EQ(gpt2().token_string(-1), std::nullopt);
  for (const Tokenizer* t : {&gpt2(), &cl100k()}) {
    std::int32_t used = 0;
    for (std::int32_t id = 0; id < t->vocab_size(); ++id) {
      const std::optional<std::string> s = t->token_string(id);
      if (!s) continue;
      ++used;
      ASSERT_EQ(t->token_id(*s), id) << *s;
    }
    EXPECT_GE(used, t->vocab_size() - 20);
  }
}

TEST(Tokenizer, VocabSizeAndOutOfRangeIds) {
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(cl100k().vocab_size(), 100277);  // ids 100256, 100261-3, 100267-75 unused
  EXPECT_THROW(gpt2().decode(Ids{50257}), std::out_of_range);
  EXPECT_THROW(gpt2().decode(Ids{-1}), std::out_of_range);
  EXPECT_THROW(cl100k().decode(Ids{100256}), std::out_of_range);
  EXPECT_THROW(cl100k().decode(Ids{15339, 100277}), std::out_of_range);
  EXPECT_EQ(cl100k().decode(Ids{}), "");
}

TEST(Tokenizer, PartialCharactersDecodeAsReplacementCharacters) {
  // GPT-2 encodes " 🌍" (F0 9F 8C 8D) as " \xF0\x9F" + "\x8C" + "\x8D".
  const Tokenizer& g = gpt2();
  ASSERT_EQ(g.encode(" 🌍"), (Ids{12520, 234, 235}));
  EXPECT_EQ(g.decode(Ids{12520}), " \uFFFD");
  EXPECT_EQ(g.decode(Ids{12520, 234}), " \uFFFD");
  EXPECT_EQ(g.decode(Ids{234, 235}), "\uFFFD\uFFFD");
  EXPECT_EQ(g.decode(Ids{12520, 234, 235}), " 🌍");
}

TEST(Utf8, ReplacesMaximalIllFormedSubparts) {
  EXPECT_EQ(utf8::to_valid("abc"), "abc");
  EXPECT_EQ(utf8::to_valid("\xC0\xAF"), "\uFFFD\uFFFD");  // C0 never starts a char
  EXPECT_EQ(utf8::to_valid("\xE2\x82"), "\uFFFD");        // cut short: one
  EXPECT_EQ(utf8::to_valid("\xE2\x82x"), "\uFFFDx");
  EXPECT_EQ(utf8::to_valid("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");            // a surrogate
  EXPECT_EQ(utf8::to_valid("\xF4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");  // > U+10FFFF
  EXPECT_EQ(utf8::to_valid("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_FALSE(utf8::is_valid("\x80"));
  EXPECT_TRUE(utf8::is_valid("€"));
}

TEST(ByteLevel, AlphabetRoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(byte_level::decode(byte_level::encode(all)), all);
  EXPECT_EQ(byte_level::char_of(' '), "\u0120");   // Ġ
  EXPECT_EQ(byte_level::char_of('\n'), "\u010A");  // Ċ
  EXPECT_EQ(byte_level::char_of('A'), "A");
  EXPECT_EQ(byte_level::decode("<|eot_id|>"), "<|eot_id|>");
  EXPECT_EQ(byte_level::decode("日本"), std::nullopt);
}

// --- files written here: pre-tokenizer layouts and bad input -----------------------------------

// A byte-level tokenizer.json: the 256 byte tokens (id = byte value), `merges` of byte strings
// (each merged token gets the next id), `pre` as the pre_tokenizer.
nlohmann::json tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                              const nlohmann::json& pre) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    vocab[std::string(byte_level::char_of(static_cast<unsigned char>(b)))] = b;
  }
  nlohmann::json m = nlohmann::json::array();
  int next = 256;
  for (const auto& [l, r] : merges) {
    const std::string merged = byte_level::encode(l + r);
    if (!vocab.contains(merged)) vocab[merged] = next++;
    m.push_back(byte_level::encode(l) + " " + byte_level::encode(r));
  }
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", 1000},
             {"content", "<|end|>"},
             {"special", true},
             {"lstrip", false},
             {"rstrip", false},
             {"single_word", false},
             {"normalized", false}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}}};
}

std::unique_ptr<Tokenizer> load_json(const nlohmann::json& doc, const std::string& name) {
  const fs::path dir = temp_dir("tokenizer");
  const fs::path file = dir / (name + ".json");
  write_file(file, doc.dump());
  return load_tokenizer(file);
}

nlohmann::json split(const std::string& literal, const std::string& behavior, bool invert) {
  return {{"type", "Split"},
          {"pattern", {{"String", literal}}},
          {"behavior", behavior},
          {"invert", invert}};
}

TEST(PreTokenizer, SplitBehaviorsDecidePieceBoundaries) {
  // Merges that can only apply inside a piece show where the pieces are.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"a", "b"}, {"a", "-"}, {"-", "b"}, {"-", "-"}};
  auto ids = [&](const nlohmann::json& pre, const std::string& text) {
    auto tok = load_json(tiny_tokenizer(merges, pre), "split");
    Ids out = tok->encode(text);
    std::vector<std::string> pieces;
    for (std::int32_t id : out) pieces.push_back(tok->decode(Ids{id}));
    return pieces;
  };
  using P = std::vector<std::string>;
  EXPECT_EQ(ids(nullptr, "ab"), (P{"ab"}));
  EXPECT_EQ(ids(split("-", "Isolated", false), "a-b"), (P{"a", "-", "b"}));
  EXPECT_EQ(ids(split("-", "Removed", false), "a-b"), (P{"a", "b"}));
  EXPECT_EQ(ids(split("-", "MergedWithPrevious", false), "a-b"), (P{"a-", "b"}));
  EXPECT_EQ(ids(split("-", "MergedWithNext", false), "a-b"), (P{"a", "-b"}));
  EXPECT_EQ(ids(split("-", "Isolated", false), "a--b"), (P{"a", "-", "-", "b"}));
  EXPECT_EQ(ids(split("-", "Contiguous", false), "a--b"), (P{"a", "--", "b"}));
  // Of delimiters in a row, only the one beside the text merges with it (Hugging Face's).
  EXPECT_EQ(ids(split("-", "MergedWithNext", false), "a--b"), (P{"a", "-", "-b"}));
  EXPECT_EQ(ids(split("-", "MergedWithPrevious", false), "a--b"), (P{"a-", "-", "b"}));
  EXPECT_EQ(ids(split("-", "MergedWithNext", false), "a-"), (P{"a", "-"}));
  EXPECT_EQ(ids(split("-", "Removed", true), "a-b"), (P{"-"}));
  // A Sequence applies its steps in turn; ByteLevel without regex does not split.
  const nlohmann::json seq = {
      {"type", "Sequence"},
      {"pretokenizers",
       {split("-", "MergedWithNext", false),
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  EXPECT_EQ(ids(seq, "ab-b"), (P{"ab", "-b"}));
  // Added tokens split the text before pre-tokenisation.
  EXPECT_EQ(ids(nullptr, "a<|end|>b"), (P{"a", "<|end|>", "b"}));
}

TEST(PreTokenizer, ByteLevelAddPrefixSpace) {
  const nlohmann::json pre = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  auto tok = load_json(tiny_tokenizer({{" ", "h"}, {" h", "i"}}, pre), "prefix");
  const std::int32_t hi = *tok->token_id("\u0120hi");
  EXPECT_EQ(tok->encode("hi"), (Ids{hi}));
  EXPECT_EQ(tok->encode(" hi"), (Ids{hi}));
  EXPECT_EQ(tok->encode("hi hi"), (Ids{hi, hi}));
}

// Each case: a change to a valid file, and what the ConfigError must name.
struct BadFile {
  std::string name;
  std::function<void(nlohmann::json&)> edit;
  std::string key;
};

TEST(Tokenizer, BadFilesNameTheFileAndKey) {
  const std::vector<BadFile> cases = {
      {"model_type", [](auto& j) { j["model"]["type"] = "WordPiece"; }, "model.type"},
      {"no_model", [](auto& j) { j.erase("model"); }, "model: missing"},
      {"pre_type",
       [](auto& j) {
         j["pre_tokenizer"] = {{"type", "Whitespace"}};
       },
       "pre_tokenizer.type"},
      {"bad_regex",
       [](auto& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers",
                                {{{"type", "Split"},
                                  {"pattern", {{"Regex", "(unclosed"}}},
                                  {"behavior", "Isolated"}}}}};
       },
       "pre_tokenizer.pretokenizers[0].pattern"},
      {"behavior", [](auto& j) { j["pre_tokenizer"] = split("-", "Sideways", false); },
       "pre_tokenizer.behavior"},
      {"merge_unknown", [](auto& j) { j["model"]["merges"].push_back("zzzz q"); },
       "model.merges[1]"},
      {"merge_form", [](auto& j) { j["model"]["merges"][0] = "ab"; }, "model.merges[0]"},
      {"merge_array", [](auto& j) { j["model"]["merges"][0] = {"a"}; }, "model.merges[0]"},
      {"missing_byte", [](auto& j) { j["model"]["vocab"].erase("A"); }, "model.vocab"},
      {"vocab_id", [](auto& j) { j["model"]["vocab"]["A"] = "sixty-five"; }, "model.vocab[\"A\"]"},
      {"vocab_dup", [](auto& j) { j["model"]["vocab"]["A"] = 66; }, "model.vocab"},
      {"vocab_huge_id", [](auto& j) { j["model"]["vocab"]["A"] = 1 << 29; }, "model.vocab[\"A\"]"},
      {"added_huge_id", [](auto& j) { j["added_tokens"][0]["id"] = 1 << 29; },
       "added_tokens[0].id"},
      {"normalizer",
       [](auto& j) {
         j["normalizer"] = {{"type", "BertNormalizer"}};
       },
       "normalizer.type"},
      {"decoder",
       [](auto& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "decoder.type"},
      {"no_decoder", [](auto& j) { j["decoder"] = nullptr; }, "decoder"},
      {"added_empty", [](auto& j) { j["added_tokens"][0]["content"] = ""; },
       "added_tokens[0].content"},
      {"added_id", [](auto& j) { j["added_tokens"][0]["id"] = -3; }, "added_tokens[0].id"},
      {"single_word", [](auto& j) { j["added_tokens"][0]["single_word"] = true; },
       "added_tokens[0].single_word"},
      {"byte_fallback", [](auto& j) { j["model"]["byte_fallback"] = true; },
       "model.vocab: no token for byte 0x00 (\"<0x00>\"): byte_fallback needs"},
      {"dropout", [](auto& j) { j["model"]["dropout"] = 0.1; }, "model.dropout"},
      {"prefix", [](auto& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "model.continuing_subword_prefix"},
      {"post_type",
       [](auto& j) {
         j["post_processor"] = {{"type", "BertProcessing"}};
       },
       "post_processor.type"},
      {"post_no_sequence",
       [](auto& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", {{{"SpecialToken", {{"id", "<|end|>"}}}}}},
                                {"special_tokens", {{"<|end|>", {{"ids", {1000}}}}}}};
       },
       "post_processor.single"},
      {"post_unknown_special",
       [](auto& j) {
         j["post_processor"] = {
             {"type", "TemplateProcessing"},
             {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
             {"special_tokens", nlohmann::json::object()}};
       },
       "post_processor.special_tokens"},
      {"post_id_outside",
       [](auto& j) {
         j["post_processor"] = {
             {"type", "Sequence"},
             {"processors",
              {{{"type", "ByteLevel"}},
               {{"type", "TemplateProcessing"},
                {"single", {{{"Sequence", {{"id", "A"}}}}, {{"SpecialToken", {{"id", "</s>"}}}}}},
                {"special_tokens", {{"</s>", {{"ids", {5000}}}}}}}}}};
       },
       "post_processor"},
  };
  const fs::path dir = temp_dir("tokenizer_bad");
  for (const BadFile& c : cases) {
    nlohmann::json doc = tiny_tokenizer({{"a", "b"}}, nullptr);
    c.edit(doc);
    const fs::path file = dir / (c.name + ".json");
    write_file(file, doc.dump());
    try {
      load_tokenizer(file);
      ADD_FAILURE() << c.name << ": loaded";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file.string() + ": "), std::string::npos) << c.name << ": " << msg;
      EXPECT_NE(msg.find(c.key), std::string::npos) << c.name << ": " << msg;
    }
  }
  write_file(dir / "broken.json", "{\"model\": {\"type\": \"BPE\",");
  try {
    load_tokenizer(dir / "broken.json");
    ADD_FAILURE() << "malformed JSON loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json: malformed JSON"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_tokenizer(dir / "absent.json"), ConfigError);
}

// --- the Llama 3 chat format -------------------------------------------------------------------

// cl100k with Llama 3's special tokens: Llama 3's first 100,256 tokens are cl100k's, so the ids
// Meta's llama3 repository checks (llama/test_tokenizer.py) are reproducible without shipping
// the Llama 3 tokenizer.
const Tokenizer& llama3_like() {
  static const std::unique_ptr<Tokenizer> t = [] {
    nlohmann::json doc = nlohmann::json::parse(read_file(cl100k_path()));
    nlohmann::json added = nlohmann::json::array();
    const std::pair<const char*, int> specials[] = {
        {"<|begin_of_text|>", 128000}, {"<|end_of_text|>", 128001}, {"<|start_header_id|>", 128006},
        {"<|end_header_id|>", 128007}, {"<|eom_id|>", 128008},      {"<|eot_id|>", 128009}};
    for (const auto& [content, id] : specials) {
      added.push_back({{"id", id}, {"content", content}, {"special", true}});
    }
    doc["added_tokens"] = added;
    return load_json(doc, "llama3_like");
  }();
  return *t;
}

TEST(ChatTemplate, MatchesMetasLlama3Encodings) {
  const Tokenizer& tok = llama3_like();
  EXPECT_EQ(tok.encode("This is a test sentence."), (Ids{2028, 374, 264, 1296, 11914, 13}));
  EXPECT_EQ(tok.decode(Ids{128000, 2028, 374, 264, 1296, 11914, 13, 128001}),
            "<|begin_of_text|>This is a test sentence.<|end_of_text|>");
  const std::vector<ChatMessage> dialog = {{"system", "This is a test sentence."},
                                           {"user", "This is a response."}};
  const Ids want = {128000, 128006, 9125,   128007, 271,    2028,   374,    264,  1296,
                    11914,  13,     128009, 128006, 882,    128007, 271,    2028, 374,
                    264,    2077,   13,     128009, 128006, 78191,  128007, 271};
  EXPECT_EQ(apply_chat_template(tok, dialog), want);
  // Without the generation prompt the assistant header is left off.
  EXPECT_EQ(apply_chat_template(tok, dialog, false), Ids(want.begin(), want.end() - 4));
  // Contents are trimmed, as the template's `| trim` does.
  const std::vector<ChatMessage> spaced = {{"system", "  This is a test sentence.\n"},
                                           {"user", "\tThis is a response.  "}};
  EXPECT_EQ(apply_chat_template(tok, spaced), want);
  // The rendered text, tokenised whole, gives the same ids.
  const std::string rendered =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nThis is a test "
      "sentence.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nThis is a "
      "response.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(tok.encode(rendered), want);
  EXPECT_EQ(tok.decode(want), rendered);
  // continue_final_message: the last message stays open (no <|eot_id|>), as Hugging Face
  // renders the template and cuts it after the final message's (trimmed) content.
  EXPECT_EQ(apply_chat_template(tok, spaced, false, true), Ids(want.begin(), want.end() - 5));
  EXPECT_EQ(tok.decode(apply_chat_template(tok, spaced, false, true)),
            rendered.substr(0, rendered.rfind("response.") + 9));
}

// The post_processor's special tokens (serving/post_processor.h): Llama 3's TemplateProcessing
// puts <|begin_of_text|> before a sequence, Llama 3.1's Sequence [ByteLevel, TemplateProcessing]
// too; a template may put tokens after it; GPT-2 (null) adds nothing; encode never adds them.
TEST(Tokenizer, PostProcessorSpecialTokensAroundOneSequence) {
  const nlohmann::json llama3_template = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", nlohmann::json::array()},
      {"special_tokens",
       {{"<|begin_of_text|>",
         {{"id", "<|begin_of_text|>"}, {"ids", {128000}}, {"tokens", {"<|begin_of_text|>"}}}}}}};
  nlohmann::json doc = nlohmann::json::parse(read_file(cl100k_path()));
  doc["added_tokens"] = {{{"id", 128000}, {"content", "<|begin_of_text|>"}, {"special", true}},
                         {{"id", 128001}, {"content", "<|end_of_text|>"}, {"special", true}}};
  doc["post_processor"] = llama3_template;
  const Ids body = {2028, 374, 264, 1296, 11914, 13};  // "This is a test sentence."
  Ids with_bos = {128000};
  with_bos.insert(with_bos.end(), body.begin(), body.end());
  const auto llama3 = load_json(doc, "llama3_post");
  EXPECT_EQ(llama3->encode("This is a test sentence."), body);
  EXPECT_EQ(llama3->encode_with_special_tokens("This is a test sentence."), with_bos);
  doc["post_processor"] = {{"type", "Sequence"},
                           {"processors", {{{"type", "ByteLevel"}}, llama3_template}}};
  EXPECT_EQ(load_json(doc, "llama31_post")->encode_with_special_tokens("This is a test sentence."),
            with_bos);
  nlohmann::json around = llama3_template;
  around["single"].push_back({{"SpecialToken", {{"id", "<|end_of_text|>"}}}});
  around["special_tokens"]["<|end_of_text|>"] = {{"ids", {128001}}};
  doc["post_processor"] = around;
  Ids both = with_bos;
  both.push_back(128001);
  EXPECT_EQ(load_json(doc, "around_post")->encode_with_special_tokens("This is a test sentence."),
            both);
  EXPECT_EQ(gpt2().encode_with_special_tokens("Hello"), gpt2().encode("Hello"));
}

TEST(ChatTemplate, RefusesUnknownRolesAndTokenizersWithoutTheSpecialTokens) {
  const std::vector<ChatMessage> bad_role = {{"user", "hi"}, {"narrator", "x"}};
  try {
    apply_chat_template(llama3_like(), bad_role);
    ADD_FAILURE() << "unknown role accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("messages[1].role"), std::string::npos) << e.what();
  }
  const std::vector<ChatMessage> ok = {{"user", "hi"}};
  try {
    apply_chat_template(gpt2(), ok);
    ADD_FAILURE() << "GPT-2 has no Llama 3 special tokens";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("<|begin_of_text|>"), std::string::npos) << e.what();
  }
}

// encode_chat (engine serve's chat messages): the Llama 3 format where the special tokens exist,
// plain "ROLE: CONTENT" lines otherwise.
TEST(ChatTemplate, EncodeChatFallsBackToPlainLinesWithoutChatTokens) {
  const std::vector<ChatMessage> dialog = {{"system", "This is a test sentence."},
                                           {"user", "This is a response."}};
  EXPECT_TRUE(has_llama3_chat_tokens(llama3_like()));
  EXPECT_EQ(encode_chat(llama3_like(), dialog), apply_chat_template(llama3_like(), dialog));
  EXPECT_FALSE(has_llama3_chat_tokens(gpt2()));
  const std::string plain = "system: This is a test sentence.\nuser: This is a response.\n";
  EXPECT_EQ(encode_chat(gpt2(), dialog), gpt2().encode(plain + "assistant: "));
  EXPECT_EQ(encode_chat(gpt2(), dialog, false), gpt2().encode(plain));
  EXPECT_EQ(encode_chat(gpt2(), dialog, false, true),
            gpt2().encode(plain.substr(0, plain.size() - 1)));
}

// ChatML (Qwen2's): each message between <|im_start|>ROLE\n and <|im_end|>\n, untrimmed;
// encode_chat picks it where the tokenizer has the two tokens and not Llama 3's.
TEST(ChatTemplate, ChatMlWhereTheTokenizerHasItsTokens) {
  nlohmann::json doc =
      nlohmann::json::parse(read_file(servelab_home() / "data/tokenizers/bytes/tokenizer.json"));
  doc["added_tokens"] = {{{"id", 1}, {"content", "<|im_start|>"}, {"special", true}},
                         {{"id", 2}, {"content", "<|im_end|>"}, {"special", true}}};
  const auto tok = load_json(doc, "chatml");
  ASSERT_TRUE(has_chatml_tokens(*tok));
  EXPECT_FALSE(has_chatml_tokens(gpt2()));
  const std::vector<ChatMessage> dialog = {{"system", "Be brief."}, {"user", " Hi "}};
  const std::string rendered =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n";
  EXPECT_EQ(encode_chat(*tok, dialog), tok->encode(rendered + "<|im_start|>assistant\n"));
  const Ids ids = encode_chat(*tok, dialog, false);
  EXPECT_EQ(ids, tok->encode(rendered));
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids[ids.size() - 2], 2);
  const std::vector<ChatMessage> open = {{"user", "Hi"}, {"assistant", "Once"}};
  EXPECT_EQ(encode_chat(*tok, open, false, true),
            tok->encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nOnce"));
  const std::vector<ChatMessage> tool = {{"tool", "x"}};
  EXPECT_THROW(apply_chatml(*tok, tool), ConfigError);
  EXPECT_THROW(apply_chatml(gpt2(), dialog), ConfigError);
}

}  // namespace
}  // namespace servelab
