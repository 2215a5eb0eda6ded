#include "engine/output_text.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace servelab {

std::string render_text(const Tokenizer& tok, std::span<const std::int32_t> ids,
                        std::span<const std::int32_t> context) {
  try {
    return tok.decode_after(context, ids);
  } catch (const std::out_of_range&) {
  }
  std::string text;
  for (const std::int32_t id : ids) {
    try {
      text += tok.decode(std::span<const std::int32_t>(&id, 1));
    } catch (const std::out_of_range&) {
      text += "<|" + std::to_string(id) + "|>";
    }
  }
  return text;
}

namespace {

// A SentencePiece byte-fallback token, "<0xNN>".
bool byte_fallback(const Tokenizer& tok, std::int32_t id) {
  const std::optional<std::string> s = tok.token_string(id);
  return s && s->size() == 6 && s->starts_with("<0x") && s->back() == '>';
}

}  // namespace

void OutputText::reset(const Tokenizer& tok, std::vector<std::int32_t> context) {
  tok_ = &tok;
  context_ = std::move(context);
  ids_.clear();
  settled_ids_ = settled_bytes_ = 0;
  per_id_ = false;
  text_.clear();
}

void OutputText::push(std::int32_t id) {
  ids_.push_back(id);
  if (!per_id_) {
    // The last kDecodeContext ids before the unsettled ones: the prompt's, then the outputs'.
    std::vector<std::int32_t> before;
    if (tok_->decode_needs_context()) {
      const std::size_t take_ids = std::min(settled_ids_, kDecodeContext);
      const std::size_t take_context = std::min(context_.size(), kDecodeContext - take_ids);
      before.assign(context_.end() - static_cast<std::ptrdiff_t>(take_context), context_.end());
      before.insert(before.end(),
                    ids_.begin() + static_cast<std::ptrdiff_t>(settled_ids_ - take_ids),
                    ids_.begin() + static_cast<std::ptrdiff_t>(settled_ids_));
    }
    const std::span<const std::int32_t> fresh =
        std::span<const std::int32_t>(ids_).subspan(settled_ids_);
    try {
      const std::string tail = tok_->decode_after(before, fresh);
      text_.resize(settled_bytes_);
      text_ += tail;
      // A trailing U+FFFD may be a character a later id completes, and a byte-fallback token
      // ("<0xE2>") may be joined by the next one into one UTF-8 sequence (all of whose bytes
      // become U+FFFD if it is invalid, the ASCII ones too): those ids stay unsettled.
      if (!tail.ends_with("\xEF\xBF\xBD") && !byte_fallback(*tok_, id)) {
        settled_ids_ = ids_.size();
        settled_bytes_ = text_.size();
      }
      return;
    } catch (const std::out_of_range&) {
      per_id_ = true;
    }
  }
  text_ = render_text(*tok_, ids_, context_);
}

}  // namespace servelab
