// Reasoning parsers (engine/reasoning_parser.h): a reasoning model's <think> ... </think> split
// from its answer as vLLM's deepseek_r1 and qwen3 parsers split a whole text, and ReasoningStream
// sending the same split for a stream cut anywhere (deepseek_r1's reasoning as it comes).
#include "engine/reasoning_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "serving/home.h"
#include "serving/tokenizer.h"

namespace servelab {
namespace {

using Split = std::pair<std::optional<std::string>, std::optional<std::string>>;

Split split(const std::string& parser, const std::string& text) {
  const ExtractedReasoning e = make_reasoning_parser(parser)->extract(text);
  return {e.reasoning, e.content};
}

TEST(ReasoningParser, DeepSeekR1AndQwen3SplitAsVllm) {
  const std::optional<std::string> null;
  EXPECT_EQ(split("deepseek_r1", "<think>Add them.</think>3"), Split("Add them.", "3"));
  // The template opened the thinking: the output starts inside it.
  EXPECT_EQ(split("deepseek_r1", "Add them.\n</think>\n\nIt is 3."),
            Split("Add them.\n", "\n\nIt is 3."));
  EXPECT_EQ(split("deepseek_r1", "<think>still thinking"), Split("still thinking", null));
  EXPECT_EQ(split("deepseek_r1", "<think>done</think>"), Split("done", null));
  // Text before a <think> is dropped, as vLLM's partition drops it.
  EXPECT_EQ(split("deepseek_r1", "x<think>a</think>b</think>c"), Split("a", "b</think>c"));
  EXPECT_EQ(split("qwen3", "<think>Add them.</think>3"), Split("Add them.", "3"));
  EXPECT_EQ(split("qwen3", "Just 3."), Split(null, "Just 3."));
  EXPECT_EQ(split("qwen3", "<think>cut off"), Split(null, "cut off"));
  EXPECT_EQ(split("qwen3", "</think>3"), Split("", "3"));
}

TEST(ReasoningParser, UnknownNamesAndMissingTokensAreConfigErrors) {
  EXPECT_THROW(make_reasoning_parser("granite"), ConfigError);
  const std::unique_ptr<Tokenizer> bytes =
      load_tokenizer(servelab_home() / "data/tokenizers/bytes/tokenizer.json");
  try {
    make_reasoning_parser("qwen3")->check_tokenizer(*bytes);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).substr(0, 54),
              "--reasoning-parser qwen3: the tokenizer has no <think>");
  }
}

struct Streamed {
  std::string reasoning, content;
};

Streamed stream(const ReasoningParser& parser, const std::string& text,
                const std::vector<std::size_t>& cuts, std::string* first_reasoning = nullptr) {
  ReasoningStream s(parser);
  Streamed out;
  std::size_t at = 0;
  const auto take = [&](const ReasoningStream::Piece& p) {
    out.reasoning += p.reasoning;
    out.content += p.content;
  };
  for (const std::size_t cut : cuts) {
    take(s.push(std::string_view(text).substr(at, cut - at)));
    if (first_reasoning != nullptr && first_reasoning->empty()) *first_reasoning = out.reasoning;
    at = cut;
  }
  take(s.push(std::string_view(text).substr(at)));
  take(s.finish());
  return out;
}

TEST(ReasoningStream, AnyCutSendsTheWholeTextsSplit) {
  const std::vector<std::string> outputs = {
      "<think>Let me add: 1 + 2 = 3 </thin k> </think>The answer is 3.",
      "Add them.\n</think>\n\nIt is 3.",
      "<think>never closes </thi",
      "<thi",
      "</think>",
      "<think></think>",
      "plain answer with < and </ and </think",
      "<think>a</think>b<think>c</think>d",
  };
  std::mt19937 rng(11);
  for (const std::string& name : reasoning_parser_names()) {
    const auto parser = make_reasoning_parser(name);
    for (const std::string& text : outputs) {
      const ExtractedReasoning whole = parser->extract(text);
      for (int trial = 0; trial < 100; ++trial) {
        std::vector<std::size_t> cuts;
        for (std::size_t i = 1; i < text.size(); ++i) {
          if (trial == 0 || rng() % 3 == 0) cuts.push_back(i);
        }
        const Streamed got = stream(*parser, text, cuts);
        ASSERT_EQ(got.reasoning, whole.reasoning.value_or("")) << name << ": " << text;
        ASSERT_EQ(got.content, whole.content.value_or("")) << name << ": " << text;
      }
    }
  }
}

// deepseek_r1 sends its reasoning as it comes; qwen3 holds it until </think> shows what it is.
TEST(ReasoningStream, DeepSeekR1StreamsTheReasoningQwen3HoldsIt) {
  const auto r1 = make_reasoning_parser("deepseek_r1");
  ReasoningStream s(*r1);
  EXPECT_EQ(s.push("<thi").reasoning, "");
  EXPECT_EQ(s.push("nk>First").reasoning, "First");
  EXPECT_EQ(s.push(", add.</").reasoning, ", add.");
  const ReasoningStream::Piece end = s.push("think>3");
  EXPECT_EQ(end.reasoning, "");
  EXPECT_EQ(end.content, "3");
  EXPECT_EQ(s.push(" apples").content, " apples");
  const auto qwen = make_reasoning_parser("qwen3");
  ReasoningStream q(*qwen);
  EXPECT_EQ(q.push("<think>First, add.").reasoning, "");
  const ReasoningStream::Piece qend = q.push("</think>3");
  EXPECT_EQ(qend.reasoning, "First, add.");
  EXPECT_EQ(qend.content, "3");
}

}  // namespace
}  // namespace servelab
