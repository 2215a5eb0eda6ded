// The automata of structured outputs (engine/grammar_automaton.h) by spec, so that requests
// asking for the same schema, regex or choices (and ending at the same tokens) share compiled
// grammar, automaton states, transitions and masks: a request after the first starts warm
// (bench/structured_output_bench.cc: a 72-token JSON output 8 ms cold, tens of microseconds
// warm). At most `capacity` specs are kept, the least recently asked dropped first (requests
// holding one keep it alive). Thread-safe. One per server (ApiLimits::grammar_cache).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/grammar_automaton.h"
#include "engine/structured_output.h"
#include "engine/token_trie.h"

namespace servelab {

class GrammarCache {
 public:
  explicit GrammarCache(std::size_t capacity = 16);

  // The automaton of `spec` ending at `end_tokens` over `trie` (the server's one vocabulary:
  // not part of the key): compiled on first use (throwing as compile_structured_output does),
  // then shared.
  std::shared_ptr<const GrammarAutomaton> get(const StructuredOutputSpec& spec,
                                              const std::vector<std::int32_t>& end_tokens,
                                              const std::shared_ptr<const TokenTrie>& trie);

  std::size_t size() const;

 private:
  std::size_t capacity_;
  mutable std::mutex mu_;
  // Most recently asked first.
  std::list<std::pair<std::string, std::shared_ptr<const GrammarAutomaton>>> order_;
  std::unordered_map<std::string, decltype(order_)::iterator> by_key_;
};

}  // namespace servelab
