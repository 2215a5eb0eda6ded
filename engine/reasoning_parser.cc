#include "engine/reasoning_parser.h"

#include <algorithm>

#include "core/config_error.h"
#include "engine/marker_tail.h"

namespace servelab {
namespace {

constexpr std::string_view kStart = "<think>";
constexpr std::string_view kEnd = "</think>";

class DeepSeekR1 final : public ReasoningParser {
 public:
  std::string name() const override { return "deepseek_r1"; }
  bool unterminated_is_reasoning() const override { return true; }
};

class Qwen3 final : public ReasoningParser {
 public:
  std::string name() const override { return "qwen3"; }
  bool unterminated_is_reasoning() const override { return false; }
};

}  // namespace

ExtractedReasoning ReasoningParser::extract(std::string_view text) const {
  const std::size_t start = text.find(kStart);
  const std::string_view rest =
      start == std::string_view::npos ? text : text.substr(start + kStart.size());
  const std::size_t end = rest.find(kEnd);
  ExtractedReasoning out;
  if (end == std::string_view::npos) {
    (unterminated_is_reasoning() ? out.reasoning : out.content) = std::string(rest);
    return out;
  }
  out.reasoning = std::string(rest.substr(0, end));
  const std::string_view content = rest.substr(end + kEnd.size());
  if (!content.empty()) out.content = std::string(content);
  return out;
}

void ReasoningParser::check_tokenizer(const Tokenizer& tokenizer) const {
  for (const std::string_view token : {kStart, kEnd}) {
    if (!tokenizer.token_id(token)) {
      throw ConfigError("--reasoning-parser " + name() + ": the tokenizer has no " +
                        std::string(token) + " token (the parser reads models that think in " +
                        "<think> ... </think>)");
    }
  }
}

bool prompt_ends_reasoning(const std::vector<std::int32_t>& prompt, std::int32_t open,
                           std::int32_t close) {
  const auto last = std::find_if(prompt.rbegin(), prompt.rend(),
                                 [&](std::int32_t t) { return t == open || t == close; });
  return last != prompt.rend() && *last == close;
}

std::vector<std::string> reasoning_parser_names() { return {"deepseek_r1", "qwen3"}; }

std::unique_ptr<const ReasoningParser> make_reasoning_parser(const std::string& name) {
  if (name == "deepseek_r1") return std::make_unique<const DeepSeekR1>();
  if (name == "qwen3") return std::make_unique<const Qwen3>();
  throw ConfigError("--reasoning-parser " + name + ": unknown parser (deepseek_r1, qwen3)");
}

ReasoningStream::ReasoningStream(const ReasoningParser& parser) : parser_(&parser) {}

ReasoningStream::Piece ReasoningStream::push(std::string_view delta) {
  text_ += delta;
  return release(false);
}

ReasoningStream::Piece ReasoningStream::finish() { return release(true); }

ReasoningStream::Piece ReasoningStream::release(bool at_end) {
  Piece out;
  const std::string_view text(text_);
  if (!start_known_) {
    if (text.starts_with(kStart)) {
      start_ = kStart.size();
    } else if (kStart.starts_with(text) && !at_end) {
      return out;  // may still become <think>
    }
    start_known_ = true;
    sent_ = start_;
  }
  if (!ended_) {
    const std::size_t end = text.find(kEnd, sent_);
    if (end != std::string_view::npos) {
      // Reasoning not sent yet (all of it for qwen3, which holds it until now).
      out.reasoning = text_.substr(sent_, end - sent_);
      ended_ = true;
      sent_ = end + kEnd.size();
    } else if (parser_->unterminated_is_reasoning()) {
      const std::size_t keep =
          at_end ? text.size() : text.size() - partial_marker_tail(text, sent_, kEnd);
      out.reasoning = text_.substr(sent_, keep - sent_);
      sent_ = keep;
      return out;
    } else {
      if (!at_end) return out;  // qwen3: content or reasoning, told only by </think>
      out.content = text_.substr(sent_);
      sent_ = text.size();
      return out;
    }
  }
  out.content = text_.substr(sent_);
  sent_ = text.size();
  return out;
}

}  // namespace servelab
