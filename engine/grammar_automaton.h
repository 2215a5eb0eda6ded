// The token masks of one grammar (engine/grammar.h) over one vocabulary (engine/token_trie.h)
// with one set of end tokens: what structured outputs ask at every sampled row
// (engine/grammar_constraint.h), shared by every request of the same spec
// (engine/grammar_cache.h).
//
// The recognizer's states are numbered as they are met and their byte transitions kept (a
// deterministic automaton built lazily: each (state, byte) goes through GrammarMatcher once), so
// walking the trie costs a table lookup per trie node; a state's mask is computed once. A mask
// holds the tokens whose every byte the grammar takes from the state (a token may end mid-way
// through a grammar symbol, even a UTF-8 character), plus the end tokens where the text is a
// whole sentence of the grammar; where no token can go on (a dead end: the vocabulary lacks the
// bytes the grammar needs, or the outputs left the grammar), the end tokens alone. A state of a
// very ambiguous grammar keeps at most kMaxGrammarParses parses (GrammarMatcher::advance), so its
// mask may hold fewer tokens than the grammar allows there, but never one that leaves the
// grammar, and the end tokens only where the text is complete. At most
// kMaxAutomatonStates states are kept (then it starts again, empty: ids are only valid under
// one lock()).
//
// Thread-safe through lock(): every other member REQUIRES the caller to hold it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/output_constraint.h"
#include "engine/grammar.h"
#include "engine/token_trie.h"

namespace servelab {

inline constexpr std::size_t kMaxAutomatonStates = 4096;

class GrammarAutomaton {
 public:
  static constexpr std::int32_t kDead = -1;

  // Computes the grammar's initial state: throws std::length_error (kMaxGrammarParses) for a
  // grammar with too many parses at its start (a choice among thousands of strings), so that a
  // request is refused when it arrives, not in the middle of a step.
  GrammarAutomaton(std::shared_ptr<const GrammarMatcher> matcher,
                   std::shared_ptr<const TokenTrie> trie, std::vector<std::int32_t> end_tokens);

  std::unique_lock<std::mutex> lock() const { return std::unique_lock<std::mutex>(mu_); }

  // Forgets every state when kMaxAutomatonStates are kept (call first, under the lock).
  void reset_if_full() const;
  // The id of state `s` (kDead for a dead state).
  std::int32_t intern(const GrammarState& s) const;
  std::int32_t initial() const { return intern(initial_); }
  // The state after `tokens` (kDead at the first token outside the trie or the grammar).
  std::int32_t feed(std::int32_t id, std::span<const std::int32_t> tokens) const;
  // A state's recognizer state (for kDead: the dead one).
  GrammarState state(std::int32_t id) const;
  // A state's mask (cached; kDead: the end tokens alone).
  std::shared_ptr<const TokenMask> mask(std::int32_t id) const;
  // The mask of a state, computed afresh (for tests and benchmarks).
  TokenMask walk(std::int32_t id) const;

 private:
  static constexpr std::int32_t kUnknown = -2;
  std::int32_t step(std::int32_t id, unsigned char b) const;

  std::shared_ptr<const GrammarMatcher> matcher_;
  GrammarState initial_;  // matcher_->initial(), computed once
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<std::int32_t> end_tokens_;
  std::size_t words_ = 0;

  mutable std::mutex mu_;
  mutable std::unordered_map<GrammarState, std::int32_t, GrammarStateHash> ids_;
  mutable std::vector<GrammarState> states_;
  mutable std::vector<std::array<std::int32_t, 256>> next_;
  mutable std::vector<std::shared_ptr<const TokenMask>> masks_;
  mutable std::shared_ptr<const TokenMask> dead_mask_;
};

}  // namespace servelab
