#include "serving/quoted_replies.h"

#include <memory>
#include <utility>

namespace servelab {

void QuotedReplies::keep(RequestId id, std::vector<std::int32_t> tokens) {
  if (!tokens.empty()) replies_[output_content_id(id)] = std::move(tokens);
}

void QuotedReplies::quote(RequestSpec& spec) const {
  if (replies_.empty() || spec.prompt_values) return;
  bool quotes = false;
  for (const PromptSegment& s : spec.prompt) quotes = quotes || replies_.contains(s.content_id);
  if (!quotes) return;
  auto values = std::make_shared<std::vector<std::int32_t>>();
  values->reserve(static_cast<std::size_t>(spec.prompt_len));
  for (const PromptSegment& s : spec.prompt) {
    const auto reply = replies_.find(s.content_id);
    for (std::uint32_t j = 0; j < s.length; ++j) {
      const std::uint64_t at = static_cast<std::uint64_t>(s.offset) + j;
      values->push_back(
          reply != replies_.end() && at < reply->second.size()
              ? reply->second[static_cast<std::size_t>(at)]
              : token_value(s.content_id, static_cast<std::uint32_t>(at), vocab_size_));
    }
  }
  spec.prompt_values = std::move(values);
}

}  // namespace servelab
