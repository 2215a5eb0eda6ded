// A reasoning model's thinking split from its answer, as vLLM's reasoning parsers split it
// (`engine serve --reasoning-parser NAME`; docs/serving.md "Reasoning"): the chat response's
// message gets `reasoning_content` beside `content`, streamed as delta.reasoning_content.
//
// The parsers (vLLM's of the same names), on a choice's whole text:
// - deepseek_r1 (DeepSeek-R1 and its distillations): the text after the first <think> (or all
//   of it: the model may start inside its thinking, the template having opened it) up to the
//   first </think> is the reasoning, what follows it the content (null when empty); without
//   </think> the whole text is reasoning and the content null.
// - qwen3 (Qwen3): the same, but without </think> the whole text is content and the reasoning
//   null.
// The tokenizer must have <think> and </think> tokens (vLLM refuses to start otherwise).
//
// ReasoningStream: the same split as the text arrives. deepseek_r1's reasoning goes out as it
// comes (a tail that may begin </think> held); qwen3's cannot be told from content before its
// </think> arrives, so its text is held until then (the reasoning then goes out at once) or until
// the end (all content). After </think> the content goes out as it comes. Contract: what a
// stream sends, cut anywhere, is the whole text's split ("" for null), except where a <think>
// comes after the start of the text (the whole-text split drops what precedes it, which a
// deepseek_r1 stream has sent as reasoning by then).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serving/tokenizer.h"

namespace servelab {

struct ExtractedReasoning {
  std::optional<std::string> reasoning;
  std::optional<std::string> content;
};

class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;
  virtual std::string name() const = 0;
  // The split of a choice's whole text.
  ExtractedReasoning extract(std::string_view text) const;
  // ConfigError when the tokenizer lacks <think> or </think>.
  void check_tokenizer(const Tokenizer& tokenizer) const;
  // Whether text without </think> is reasoning (deepseek_r1) or content (qwen3).
  virtual bool unterminated_is_reasoning() const = 0;
};

// vLLM's is_reasoning_end over a chat prompt: whether its last <think> or </think> (`open`,
// `close`) is </think>, a template having closed the thinking (Qwen3's and DeepSeek's with
// chat_template_kwargs enable_thinking false). The output is then all content, streamed as it
// comes (vLLM's prompt_is_reasoning_end), and a constrained output holds from its first token.
bool prompt_ends_reasoning(const std::vector<std::int32_t>& prompt, std::int32_t open,
                           std::int32_t close);

// deepseek_r1 or qwen3; ConfigError listing the names for another.
std::unique_ptr<const ReasoningParser> make_reasoning_parser(const std::string& name);
std::vector<std::string> reasoning_parser_names();

class ReasoningStream {
 public:
  explicit ReasoningStream(const ReasoningParser& parser);
  struct Piece {
    std::string reasoning;
    std::string content;
  };
  // The choice's next text -> what can be sent now.
  Piece push(std::string_view delta);
  // At the choice's end (once): the rest.
  Piece finish();

 private:
  Piece release(bool at_end);

  const ReasoningParser* parser_;
  std::string text_;
  std::size_t start_ = 0;     // where the reasoning begins (after a leading <think>)
  std::size_t sent_ = 0;      // text_[start_, sent_) went out (reasoning, or content once ended_)
  bool start_known_ = false;  // whether a leading <think> was ruled in or out
  bool ended_ = false;        // </think> seen: what follows it is content
};

}  // namespace servelab
