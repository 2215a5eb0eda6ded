// Structured outputs' OutputConstraint (core/output_constraint.h): a request's sequences' output
// text held to a grammar, token by token, through the masks of a GrammarAutomaton
// (engine/grammar_automaton.h: what a mask holds, how it is computed and cached), which requests
// of the same spec share (engine/grammar_cache.h). What is per request: each sequence's state,
// advanced by its new outputs only (a sequence's calls may come in any order: a verify row's
// drafts, a preempted sequence's recompute), and, for a reasoning model, where its grammar
// starts. As xgrammar's matcher does in vLLM.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/output_constraint.h"
#include "engine/grammar_automaton.h"

namespace servelab {

class GrammarConstraint final : public OutputConstraint {
 public:
  // `reasoning_end`: a reasoning model's end-of-thinking token (</think>), when its outputs are
  // held only after it (vLLM's structured outputs with a reasoning parser): until a sequence's
  // outputs hold it, allowed() returns null (no constraint), and the grammar then starts at the
  // token after its first occurrence.
  explicit GrammarConstraint(std::shared_ptr<const GrammarAutomaton> automaton,
                             std::optional<std::int32_t> reasoning_end = std::nullopt);
  // With an automaton of its own: `end_tokens` the ids that end a sequence (the EOS and the
  // request's stop token ids).
  GrammarConstraint(std::shared_ptr<const GrammarMatcher> matcher,
                    std::shared_ptr<const TokenTrie> trie, std::vector<std::int32_t> end_tokens,
                    std::optional<std::int32_t> reasoning_end = std::nullopt);

  std::shared_ptr<const TokenMask> allowed(RequestId sequence,
                                           std::span<const std::int32_t> earlier,
                                           std::span<const std::int32_t> later) const override;

  // The mask of recognizer state `s`, computed afresh (for tests and benchmarks).
  TokenMask mask_of(const GrammarState& s) const;

  const std::shared_ptr<const GrammarAutomaton>& automaton() const { return automaton_; }

 private:
  std::shared_ptr<const GrammarAutomaton> automaton_;
  std::optional<std::int32_t> reasoning_end_;
  struct Sequence {
    std::size_t fed = 0;      // outputs fed to the grammar (those from grammar_from on)
    GrammarState state;       // after them
    std::size_t scanned = 0;  // outputs searched for the reasoning end
    std::optional<std::size_t> grammar_from;  // the first output the grammar holds
  };
  // Under the automaton's lock.
  mutable std::unordered_map<RequestId, Sequence> sequences_;
};

}  // namespace servelab
