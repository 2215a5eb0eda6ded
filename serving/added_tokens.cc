#include "serving/added_tokens.h"

#include <algorithm>

#include "serving/unicode_space.h"

namespace servelab {

AddedTokens::AddedTokens(std::vector<Token> tokens) : tokens_(std::move(tokens)) {
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const Token& a, const Token& b) {
    return a.content.size() > b.content.size();
  });
  // Counting sort of the (length-ordered) tokens by first byte keeps longest-first per bucket.
  by_first_.assign(257, 0);
  for (const Token& t : tokens_) ++by_first_[static_cast<unsigned char>(t.content[0]) + 1];
  for (std::size_t b = 1; b < by_first_.size(); ++b) by_first_[b] += by_first_[b - 1];
  order_.resize(tokens_.size());
  std::vector<std::size_t> fill(by_first_.begin(), by_first_.end() - 1);
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    order_[fill[static_cast<unsigned char>(tokens_[i].content[0])]++] = i;
  }
}

std::optional<AddedTokens::Match> AddedTokens::find(std::string_view text, std::size_t from) const {
  if (tokens_.empty()) return std::nullopt;
  for (std::size_t pos = from; pos < text.size(); ++pos) {
    const auto b = static_cast<unsigned char>(text[pos]);
    for (std::size_t k = by_first_[b]; k < by_first_[b + 1u]; ++k) {
      const Token& t = tokens_[order_[k]];
      if (text.compare(pos, t.content.size(), t.content) != 0) continue;
      Match m{pos, pos + t.content.size(), t.id};
      // Unicode White_Space (Rust's char::is_whitespace), as Hugging Face strips.
      if (t.lstrip) {
        for (std::size_t n;
             (n = unicode_space::before(text, m.begin, false)) > 0 && m.begin - n >= from;) {
          m.begin -= n;
        }
      }
      if (t.rstrip) {
        for (std::size_t n; (n = unicode_space::at(text, m.end, false)) > 0;) m.end += n;
      }
      return m;
    }
  }
  return std::nullopt;
}

std::optional<std::int32_t> AddedTokens::id_of(std::string_view content) const {
  for (const Token& t : tokens_) {
    if (t.content == content) return t.id;
  }
  return std::nullopt;
}

const AddedTokens::Token* AddedTokens::by_id(std::int32_t id) const {
  for (const Token& t : tokens_) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

}  // namespace servelab
