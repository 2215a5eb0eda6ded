#include "engine/grammar_constraint.h"

#include <algorithm>

namespace servelab {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const GrammarAutomaton> automaton,
                                     std::optional<std::int32_t> reasoning_end)
    : automaton_(std::move(automaton)), reasoning_end_(reasoning_end) {}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const GrammarMatcher> matcher,
                                     std::shared_ptr<const TokenTrie> trie,
                                     std::vector<std::int32_t> end_tokens,
                                     std::optional<std::int32_t> reasoning_end)
    : GrammarConstraint(std::make_shared<const GrammarAutomaton>(
                            std::move(matcher), std::move(trie), std::move(end_tokens)),
                        reasoning_end) {}

TokenMask GrammarConstraint::mask_of(const GrammarState& s) const {
  const GrammarAutomaton& a = *automaton_;
  const auto lock = a.lock();
  a.reset_if_full();
  return a.walk(a.intern(s));
}

std::shared_ptr<const TokenMask> GrammarConstraint::allowed(
    RequestId sequence, std::span<const std::int32_t> earlier,
    std::span<const std::int32_t> later) const {
  const GrammarAutomaton& a = *automaton_;
  const auto lock = a.lock();
  a.reset_if_full();
  auto [it, added] = sequences_.try_emplace(sequence);
  Sequence& seq = it->second;
  if (added || seq.scanned > earlier.size() || seq.fed > earlier.size()) {
    seq = {0, a.state(a.initial()), 0,
           reasoning_end_ ? std::nullopt : std::optional<std::size_t>(0)};
  }
  // A reasoning model's outputs are held from the token after its first reasoning end on.
  if (!seq.grammar_from) {
    const auto at = std::find(earlier.begin() + static_cast<std::ptrdiff_t>(seq.scanned),
                              earlier.end(), *reasoning_end_);
    seq.scanned = earlier.size();
    if (at != earlier.end()) seq.grammar_from = static_cast<std::size_t>(at - earlier.begin()) + 1;
  }
  std::int32_t id;
  if (seq.grammar_from) {
    const std::span<const std::int32_t> held = earlier.subspan(*seq.grammar_from);
    id = a.intern(seq.state);
    if (seq.fed < held.size()) {
      id = a.feed(id, held.subspan(seq.fed));
      seq.fed = held.size();
      seq.state = a.state(id);
    }
    id = a.feed(id, later);
  } else {
    const auto at = std::find(later.begin(), later.end(), *reasoning_end_);
    if (at == later.end()) return nullptr;  // still reasoning: no constraint yet
    id = a.feed(a.initial(), later.subspan(static_cast<std::size_t>(at - later.begin()) + 1));
  }
  return a.mask(id);
}

}  // namespace servelab
