#include "engine/grammar_constraint.h"

#include <algorithm>

namespace servelab {
namespace {

void set_bit(TokenMask& m, std::int32_t t) {
  m[static_cast<std::size_t>(t) / 32] |= 1u << (static_cast<unsigned>(t) % 32);
}

}  // namespace

GrammarConstraint::GrammarConstraint(std::shared_ptr<const GrammarMatcher> matcher,
                                     std::shared_ptr<const TokenTrie> trie,
                                     std::vector<std::int32_t> end_tokens)
    : matcher_(std::move(matcher)), trie_(std::move(trie)), end_tokens_(std::move(end_tokens)) {
  std::int32_t top = trie_->vocab();
  for (const std::int32_t t : end_tokens_) top = std::max(top, t + 1);
  words_ = (static_cast<std::size_t>(top) + 31) / 32;
}

GrammarState GrammarConstraint::feed(GrammarState s, std::span<const std::int32_t> tokens) const {
  for (const std::int32_t t : tokens) {
    if (s.dead()) break;
    const std::string* b = trie_->bytes(t);
    if (b == nullptr) return {};
    s = matcher_->advance(std::move(s), *b);
  }
  return s;
}

TokenMask GrammarConstraint::mask_of(const GrammarState& s) const {
  TokenMask mask(words_, 0u);
  bool any = false;
  if (!s.stacks.empty()) {
    // Depth-first over the trie, the grammar state of each node's bytes beside it.
    struct Frame {
      const TokenTrie::Node* node;
      GrammarState state;
    };
    std::vector<Frame> todo;
    todo.push_back({&trie_->root(), s});
    while (!todo.empty()) {
      Frame f = std::move(todo.back());
      todo.pop_back();
      const ByteSet next = matcher_->next_bytes(f.state);
      for (const TokenTrie::Edge& e : trie_->edges(*f.node)) {
        if (!next.test(e.byte)) continue;
        GrammarState after = matcher_->advance(f.state, e.byte);
        if (after.dead()) continue;
        const TokenTrie::Node& child = trie_->node(e.child);
        for (const std::int32_t t : trie_->tokens(child)) {
          set_bit(mask, t);
          any = true;
        }
        if (child.num_edges > 0 && !after.stacks.empty())
          todo.push_back({&child, std::move(after)});
      }
    }
  }
  if (s.accepting || !any) {
    for (const std::int32_t t : end_tokens_) {
      if (t >= 0) set_bit(mask, t);
    }
  }
  return mask;
}

std::shared_ptr<const TokenMask> GrammarConstraint::allowed(
    RequestId sequence, std::span<const std::int32_t> earlier,
    std::span<const std::int32_t> later) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, added] = sequences_.try_emplace(sequence);
  Sequence& seq = it->second;
  if (added || seq.fed > earlier.size()) {
    seq.fed = 0;
    seq.state = matcher_->initial();
  }
  seq.state = feed(std::move(seq.state), earlier.subspan(seq.fed));
  seq.fed = earlier.size();
  const GrammarState state = later.empty() ? seq.state : feed(seq.state, later);
  if (const auto m = masks_.find(state); m != masks_.end()) return m->second;
  auto mask = std::make_shared<const TokenMask>(mask_of(state));
  if (masks_.size() >= kMaskCacheStates) {
    masks_.erase(mask_order_.front());
    mask_order_.pop_front();
  }
  masks_.emplace(state, mask);
  mask_order_.push_back(state);
  return mask;
}

}  // namespace servelab
