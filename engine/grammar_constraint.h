// Structured outputs' OutputConstraint (core/output_constraint.h): a sequence's output text held
// to a grammar (engine/grammar.h), token by token over a vocabulary (engine/token_trie.h).
//
// The tokens allowed after some outputs are those whose bytes the grammar can take next from the
// state those outputs lead to (every byte of the token: a token may end mid-way through a
// grammar symbol, even mid-way through a UTF-8 character); the end-of-sequence tokens are
// allowed where the text so far is a whole sentence of the grammar, and are the only ones where
// no token can continue it (a dead end: the vocabulary lacks the bytes the grammar needs, or the
// outputs already left the grammar, or a grammar so ambiguous that the recognizer refuses the
// state: std::length_error, kMaxGrammarParses). As xgrammar's matcher does in vLLM.
//
// Cost: the recognizer's states are numbered as they are met and their byte transitions kept
// (a deterministic automaton built lazily: each (state, byte) goes through GrammarMatcher once),
// so walking the vocabulary's trie costs a table lookup per trie node; a sequence's state is
// kept per sequence and advanced by its new outputs only; a state's mask is computed once. The
// automaton keeps at most kMaxAutomatonStates states (then it starts again, empty). Thread-safe
// (one lock per constraint).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/output_constraint.h"
#include "engine/grammar.h"
#include "engine/token_trie.h"

namespace servelab {

inline constexpr std::size_t kMaxAutomatonStates = 4096;

class GrammarConstraint final : public OutputConstraint {
 public:
  // `end_tokens`: the ids that end a sequence (the EOS and the request's stop token ids).
  // `reasoning_end`: a reasoning model's end-of-thinking token (</think>), when its outputs are
  // held only after it (vLLM's structured outputs with a reasoning parser): until a sequence's
  // outputs hold it, allowed() returns null (no constraint), and the grammar then starts at the
  // token after its first occurrence.
  GrammarConstraint(std::shared_ptr<const GrammarMatcher> matcher,
                    std::shared_ptr<const TokenTrie> trie, std::vector<std::int32_t> end_tokens,
                    std::optional<std::int32_t> reasoning_end = std::nullopt);

  std::shared_ptr<const TokenMask> allowed(RequestId sequence,
                                           std::span<const std::int32_t> earlier,
                                           std::span<const std::int32_t> later) const override;

  // The mask of state `s` (for tests and benchmarks; allowed() caches masks).
  TokenMask mask_of(const GrammarState& s) const;

 private:
  static constexpr std::int32_t kDead = -1, kUnknown = -2;
  // The automaton (under mu_): state ids, their transitions and masks.
  std::int32_t intern(const GrammarState& s) const;
  std::int32_t step(std::int32_t id, unsigned char b) const;
  std::int32_t feed(std::int32_t id, std::span<const std::int32_t> tokens) const;
  TokenMask walk(std::int32_t id) const;
  void reset_if_full() const;

  std::shared_ptr<const GrammarMatcher> matcher_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<std::int32_t> end_tokens_;
  std::optional<std::int32_t> reasoning_end_;
  std::size_t words_ = 0;

  mutable std::mutex mu_;
  mutable std::unordered_map<GrammarState, std::int32_t, GrammarStateHash> ids_;
  mutable std::vector<GrammarState> states_;
  mutable std::vector<std::array<std::int32_t, 256>> next_;
  mutable std::vector<std::shared_ptr<const TokenMask>> masks_;
  mutable std::shared_ptr<const TokenMask> dead_mask_;  // the end tokens alone
  struct Sequence {
    std::size_t fed = 0;      // outputs fed to the grammar (those from grammar_from on)
    GrammarState state;       // after them
    std::size_t scanned = 0;  // outputs searched for the reasoning end
    std::optional<std::size_t> grammar_from;  // the first output the grammar holds
  };
  mutable std::unordered_map<RequestId, Sequence> sequences_;
};

}  // namespace servelab
