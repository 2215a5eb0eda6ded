// One streamed choice's text through a tool-call parser (engine/tool_parser.h): what can be sent
// as content at once, and, when the choice ends, the rest of its content and its tool calls.
//
// Contract: the content sent by push() then finish(), and finish()'s calls, are what
// parse_tool_calls gives for the whole text (its content, or "" for null), except where a
// parser's content is not a continuation of the text already sent (mistral's whitespace-stripped
// content of an unreadable call section after leading whitespace: the rest is then dropped).
// Text that may begin a call (a marker, or a tail of the text that may begin one) is held back;
// from a call section on, everything is held and the calls arrive whole, in finish(), with their
// ids (vLLM streams a call's name, then pieces of its arguments; an OpenAI client that joins the
// deltas gets the same call). push() is amortised O(delta): the text before the held part is not
// scanned again.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tool_parser.h"

namespace servelab {

class ToolCallStream {
 public:
  ToolCallStream(const ToolParser& parser, std::string response_id, std::int32_t choice,
                 bool parallel_tool_calls);

  // The choice's next piece of text -> the content that can be sent now (may be empty).
  std::string push(std::string_view delta);

  struct End {
    std::string content;  // the content not sent yet
    std::vector<ToolCall> calls;
  };
  // At the choice's end (once).
  End finish();

  const ToolParser& parser() const { return *parser_; }

 private:
  const ToolParser* parser_;
  std::string response_id_;
  std::int32_t choice_ = 0;
  bool parallel_ = true;
  std::string text_;
  std::size_t sent_ = 0;  // text_[0, sent_) went out as content
  bool held_ = false;     // the rest is a call section: nothing more goes out before finish()
};

}  // namespace servelab
