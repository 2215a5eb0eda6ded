#include "engine/grammar_cache.h"

#include <algorithm>

namespace servelab {
namespace {

// Every field that changes the automaton, in one string.
std::string key_of(const StructuredOutputSpec& spec, const std::vector<std::int32_t>& ends) {
  nlohmann::ordered_json k = {{"kind", static_cast<int>(spec.kind)},
                              {"ws", spec.any_whitespace},
                              {"schema", spec.schema},
                              {"regex", spec.regex},
                              {"choice", spec.choice},
                              {"grammar", spec.grammar},
                              {"ends", ends}};
  return k.dump();
}

}  // namespace

GrammarCache::GrammarCache(std::size_t capacity) : capacity_(std::max<std::size_t>(1, capacity)) {}

std::shared_ptr<const GrammarAutomaton> GrammarCache::get(
    const StructuredOutputSpec& spec, const std::vector<std::int32_t>& end_tokens,
    const std::shared_ptr<const TokenTrie>& trie) {
  const std::string key = key_of(spec, end_tokens);
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (const auto it = by_key_.find(key); it != by_key_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock (a large schema must not hold up the others); a race compiles
  // twice and keeps one.
  auto made =
      std::make_shared<const GrammarAutomaton>(compile_structured_output(spec), trie, end_tokens);
  const std::lock_guard<std::mutex> lock(mu_);
  if (const auto it = by_key_.find(key); it != by_key_.end()) return it->second->second;
  order_.emplace_front(key, std::move(made));
  by_key_[key] = order_.begin();
  if (order_.size() > capacity_) {
    by_key_.erase(order_.back().first);
    order_.pop_back();
  }
  return order_.front().second;
}

std::size_t GrammarCache::size() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return order_.size();
}

}  // namespace servelab
