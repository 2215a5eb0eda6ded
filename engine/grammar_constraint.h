// Structured outputs' OutputConstraint (core/output_constraint.h): a sequence's output text held
// to a grammar (engine/grammar.h), token by token over a vocabulary (engine/token_trie.h).
//
// The tokens allowed after some outputs are those whose bytes the grammar can take next from the
// state those outputs lead to (every byte of the token: a token may end mid-way through a
// grammar symbol, even mid-way through a UTF-8 character); the end-of-sequence tokens are
// allowed where the text so far is a whole sentence of the grammar, and are the only ones where
// no token can continue it (a dead end: the vocabulary lacks the bytes the grammar needs, or the
// outputs already left the grammar). As xgrammar's matcher does in vLLM.
//
// Cost: a sequence's state is kept per sequence and advanced by its new outputs only; the mask
// of a state is computed by one walk of the trie and cached (kMaskCacheStates states, the
// oldest dropped first), so the repeated states of a JSON text (inside a string, between
// members) cost a lookup. Thread-safe (one lock per constraint).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/output_constraint.h"
#include "engine/grammar.h"
#include "engine/token_trie.h"

namespace servelab {

inline constexpr std::size_t kMaskCacheStates = 256;

class GrammarConstraint final : public OutputConstraint {
 public:
  // `end_tokens`: the ids that end a sequence (the EOS and the request's stop token ids).
  GrammarConstraint(std::shared_ptr<const GrammarMatcher> matcher,
                    std::shared_ptr<const TokenTrie> trie, std::vector<std::int32_t> end_tokens);

  std::shared_ptr<const TokenMask> allowed(RequestId sequence,
                                           std::span<const std::int32_t> earlier,
                                           std::span<const std::int32_t> later) const override;

  // The state after `tokens` from `s` (dead at the first token outside the trie or the grammar).
  GrammarState feed(GrammarState s, std::span<const std::int32_t> tokens) const;
  // The mask of state `s` (not cached).
  TokenMask mask_of(const GrammarState& s) const;

 private:
  std::shared_ptr<const GrammarMatcher> matcher_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<std::int32_t> end_tokens_;
  std::size_t words_ = 0;

  mutable std::mutex mu_;
  struct Sequence {
    std::size_t fed = 0;  // outputs fed
    GrammarState state;
  };
  mutable std::unordered_map<RequestId, Sequence> sequences_;
  mutable std::unordered_map<GrammarState, std::shared_ptr<const TokenMask>, GrammarStateHash>
      masks_;
  mutable std::deque<GrammarState> mask_order_;
};

}  // namespace servelab
