#include "engine/grammar_automaton.h"

#include <algorithm>
#include <stdexcept>

namespace servelab {
namespace {

void set_bit(TokenMask& m, std::int32_t t) {
  m[static_cast<std::size_t>(t) / 32] |= 1u << (static_cast<unsigned>(t) % 32);
}

}  // namespace

GrammarAutomaton::GrammarAutomaton(std::shared_ptr<const GrammarMatcher> matcher,
                                   std::shared_ptr<const TokenTrie> trie,
                                   std::vector<std::int32_t> end_tokens)
    : matcher_(std::move(matcher)),
      initial_(matcher_->initial()),
      trie_(std::move(trie)),
      end_tokens_(std::move(end_tokens)) {
  std::int32_t top = trie_->vocab();
  for (const std::int32_t t : end_tokens_) top = std::max(top, t + 1);
  words_ = (static_cast<std::size_t>(top) + 31) / 32;
}

std::int32_t GrammarAutomaton::intern(const GrammarState& s) const {
  if (s.dead()) return kDead;
  const auto [it, added] = ids_.try_emplace(s, static_cast<std::int32_t>(states_.size()));
  if (added) {
    states_.push_back(s);
    next_.emplace_back();
    next_.back().fill(kUnknown);
    masks_.emplace_back();
  }
  return it->second;
}

std::int32_t GrammarAutomaton::step(std::int32_t id, unsigned char b) const {
  std::int32_t& to = next_[static_cast<std::size_t>(id)][b];
  if (to == kUnknown) {
    // intern() may grow next_: write through the index, not the reference. advance() never
    // throws for ambiguity (it keeps kMaxGrammarParses parses: engine/grammar.h).
    const std::int32_t got = intern(matcher_->advance(states_[static_cast<std::size_t>(id)], b));
    next_[static_cast<std::size_t>(id)][b] = got;
    return got;
  }
  return to;
}

std::int32_t GrammarAutomaton::feed(std::int32_t id, std::span<const std::int32_t> tokens) const {
  for (const std::int32_t t : tokens) {
    if (id == kDead) return kDead;
    const std::string* b = trie_->bytes(t);
    if (b == nullptr) return kDead;
    for (const char c : *b) {
      id = step(id, static_cast<unsigned char>(c));
      if (id == kDead) return kDead;
    }
  }
  return id;
}

TokenMask GrammarAutomaton::walk(std::int32_t id) const {
  TokenMask mask(words_, 0u);
  bool any = false;
  const bool accepting = id != kDead && states_[static_cast<std::size_t>(id)].accepting;
  if (id != kDead) {
    // Depth-first over the trie, each node beside the state its bytes lead to.
    std::vector<std::pair<const TokenTrie::Node*, std::int32_t>> todo = {{&trie_->root(), id}};
    while (!todo.empty()) {
      const auto [node, at] = todo.back();
      todo.pop_back();
      for (const TokenTrie::Edge& e : trie_->edges(*node)) {
        const std::int32_t to = step(at, e.byte);
        if (to == kDead) continue;
        const TokenTrie::Node& child = trie_->node(e.child);
        for (const std::int32_t t : trie_->tokens(child)) {
          set_bit(mask, t);
          any = true;
        }
        if (child.num_edges > 0 && !states_[static_cast<std::size_t>(to)].stacks.empty()) {
          todo.emplace_back(&child, to);
        }
      }
    }
  }
  if (accepting || !any) {
    for (const std::int32_t t : end_tokens_) {
      if (t >= 0) set_bit(mask, t);
    }
  }
  return mask;
}

void GrammarAutomaton::reset_if_full() const {
  if (states_.size() < kMaxAutomatonStates) return;
  ids_.clear();
  states_.clear();
  next_.clear();
  masks_.clear();
}

GrammarState GrammarAutomaton::state(std::int32_t id) const {
  return id == kDead ? GrammarState{} : states_[static_cast<std::size_t>(id)];
}

std::shared_ptr<const TokenMask> GrammarAutomaton::mask(std::int32_t id) const {
  if (id == kDead) {
    if (dead_mask_ == nullptr) dead_mask_ = std::make_shared<const TokenMask>(walk(kDead));
    return dead_mask_;
  }
  if (masks_[static_cast<std::size_t>(id)] == nullptr) {
    auto m = std::make_shared<const TokenMask>(walk(id));  // walk() may grow masks_
    masks_[static_cast<std::size_t>(id)] = std::move(m);
  }
  return masks_[static_cast<std::size_t>(id)];
}

}  // namespace servelab
