#include "engine/tool_call_stream.h"

#include <algorithm>
#include <utility>

namespace servelab {

ToolCallStream::ToolCallStream(const ToolParser& parser, std::string response_id,
                               std::int32_t choice, bool parallel_tool_calls)
    : parser_(&parser),
      response_id_(std::move(response_id)),
      choice_(choice),
      parallel_(parallel_tool_calls) {}

std::string ToolCallStream::push(std::string_view delta) {
  text_ += delta;
  if (held_) return {};
  const ToolParser::Prefix p = parser_->content_prefix(text_, sent_);
  held_ = p.final && p.length < text_.size();
  const std::size_t end = std::max(sent_, std::min(p.length, text_.size()));
  std::string out = text_.substr(sent_, end - sent_);
  sent_ = end;
  return out;
}

ToolCallStream::End ToolCallStream::finish() {
  ExtractedToolCalls found = parse_tool_calls(*parser_, text_, response_id_, choice_, parallel_);
  End end;
  const std::string content = found.content.value_or("");
  if (content.compare(0, sent_, text_, 0, sent_) == 0 && content.size() >= sent_) {
    end.content = content.substr(sent_);
  }
  end.calls = std::move(found.calls);
  return end;
}

}  // namespace servelab
