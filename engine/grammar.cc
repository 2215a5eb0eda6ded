#include "engine/grammar.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace servelab {

Grammar::Symbol Grammar::new_rule() {
  rules_.emplace_back();
  return static_cast<Symbol>(rules_.size() - 1);
}

void Grammar::add(Symbol rule, std::vector<Symbol> alternative) {
  rules_[static_cast<std::size_t>(rule)].push_back(std::move(alternative));
}

Grammar::Symbol Grammar::rule(std::vector<std::vector<Symbol>> alternatives) {
  const Symbol r = new_rule();
  rules_[static_cast<std::size_t>(r)] = std::move(alternatives);
  return r;
}

void Grammar::set_name(Symbol rule, std::string name) {
  if (names_.size() <= static_cast<std::size_t>(rule)) names_.resize(rules_.size());
  names_[static_cast<std::size_t>(rule)] = std::move(name);
}

std::string Grammar::name(Symbol rule) const {
  const auto r = static_cast<std::size_t>(rule);
  if (r < names_.size() && !names_[r].empty()) return "'" + names_[r] + "'";
  return std::to_string(rule);
}

Grammar::Symbol Grammar::bytes(const ByteSet& set) {
  for (std::size_t i = 0; i < terminals_.size(); ++i) {
    if (terminals_[i] == set) return -1 - static_cast<Symbol>(i);
  }
  terminals_.push_back(set);
  return -static_cast<Symbol>(terminals_.size());
}

Grammar::Symbol Grammar::byte(unsigned char c) {
  ByteSet s;
  s.set(c);
  return bytes(s);
}

Grammar::Symbol Grammar::range(unsigned char lo, unsigned char hi) {
  ByteSet s;
  for (unsigned c = lo; c <= hi; ++c) s.set(c);
  return bytes(s);
}

std::vector<Grammar::Symbol> Grammar::literal(std::string_view text) {
  std::vector<Symbol> out;
  out.reserve(text.size());
  for (const char c : text) out.push_back(byte(static_cast<unsigned char>(c)));
  return out;
}

Grammar::Symbol Grammar::star(Symbol x) {
  const Symbol r = new_rule();
  add(r, {x, r});
  add(r, {});
  return r;
}

Grammar::Symbol Grammar::plus(Symbol x) { return rule({{x, star(x)}}); }

Grammar::Symbol Grammar::optional(Symbol x) { return rule({{x}, {}}); }

Grammar::Symbol Grammar::repeat(Symbol x, std::int64_t min, std::int64_t max) {
  // The optional tail first: max - min nested optionals (x (x (...)?)?)?, or x* when unbounded.
  Symbol tail = -1;
  if (max < 0) {
    tail = star(x);
  } else if (max > min) {
    tail = optional(x);
    for (std::int64_t i = min + 1; i < max; ++i) tail = rule({{x, tail}, {}});
  }
  std::vector<Symbol> seq(static_cast<std::size_t>(min), x);
  if (tail >= 0) seq.push_back(tail);
  return rule({seq});
}

Grammar::Symbol Grammar::narrowed(Symbol rule, const ByteSet& keep) {
  std::vector<Symbol> copy_of(rules_.size(), -1);
  std::vector<Symbol> todo = {rule};
  copy_of[static_cast<std::size_t>(rule)] = new_rule();
  while (!todo.empty()) {
    const Symbol r = todo.back();
    todo.pop_back();
    // By index: new rules grow rules_.
    for (std::size_t a = 0; a < rules_[static_cast<std::size_t>(r)].size(); ++a) {
      std::vector<Symbol> alt = rules_[static_cast<std::size_t>(r)][a];
      for (Symbol& s : alt) {
        if (s < 0) {
          s = bytes(terminal(s) & keep);
        } else {
          if (copy_of[static_cast<std::size_t>(s)] < 0) {
            copy_of[static_cast<std::size_t>(s)] = new_rule();
            todo.push_back(s);
          }
          s = copy_of[static_cast<std::size_t>(s)];
        }
      }
      add(copy_of[static_cast<std::size_t>(r)], std::move(alt));
    }
  }
  return copy_of[static_cast<std::size_t>(rule)];
}

std::size_t GrammarStateHash::operator()(const GrammarState& s) const {
  std::uint64_t h = 1469598103934665603ull ^ static_cast<std::uint64_t>(s.accepting);
  for (const std::int32_t v : s.stacks) {
    h ^= static_cast<std::uint32_t>(v);
    h *= 1099511628211ull;
  }
  return static_cast<std::size_t>(h ^ (h >> 29));
}

GrammarMatcher::GrammarMatcher(const Grammar& g) : terminals_() {
  if (g.start() < 0 || static_cast<std::size_t>(g.start()) >= g.num_rules()) {
    throw std::invalid_argument("grammar: the start symbol is not a rule");
  }
  for (std::size_t t = 0; t < g.num_terminals(); ++t) {
    terminals_.push_back(g.terminal(-1 - static_cast<Grammar::Symbol>(t)));
  }
  // Productive rules: those that derive some finite text. An alternative holding an unproductive
  // symbol (a JSON schema's `false`, an empty byte set, a rule that only reaches itself) could
  // start but never finish, so it is left out: every parse kept can then be completed, and a
  // grammar whose start is unproductive matches nothing at all (refused below).
  std::vector<char> productive(g.num_rules(), 0);
  const auto produces = [&](const std::vector<Grammar::Symbol>& alt) {
    return std::all_of(alt.begin(), alt.end(), [&](Grammar::Symbol x) {
      return x >= 0 ? productive[static_cast<std::size_t>(x)] != 0 : g.terminal(x).any();
    });
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < g.num_rules(); ++r) {
      if (productive[r]) continue;
      const auto& alts = g.alternatives(static_cast<Grammar::Symbol>(r));
      if (std::any_of(alts.begin(), alts.end(), produces)) {
        productive[r] = 1;
        changed = true;
      }
    }
  }
  // A grammar that matches nothing keeps its alternatives (its matcher is dead at once).
  matches_nothing_ = !productive[static_cast<std::size_t>(g.start())];
  const auto kept = [&](const std::vector<Grammar::Symbol>& alt) {
    return matches_nothing_ || produces(alt);
  };
  rule_starts_.resize(g.num_rules());
  for (std::size_t r = 0; r < g.num_rules(); ++r) {
    for (const std::vector<Grammar::Symbol>& alt :
         g.alternatives(static_cast<Grammar::Symbol>(r))) {
      if (!kept(alt)) continue;
      rule_starts_[r].push_back(static_cast<std::int32_t>(items_.size()));
      items_.insert(items_.end(), alt.begin(), alt.end());
      items_.push_back(kEnd);
    }
  }
  // A reachable rule without alternatives can never match: a compiler's mistake, said here
  // rather than found as a dead state later.
  std::vector<char> seen(g.num_rules(), 0);
  std::vector<std::int32_t> todo = {g.start()};
  seen[static_cast<std::size_t>(g.start())] = 1;
  while (!todo.empty()) {
    const std::int32_t r = todo.back();
    todo.pop_back();
    if (rule_starts_[static_cast<std::size_t>(r)].empty()) {
      throw std::invalid_argument("grammar: rule " + std::to_string(r) + " has no alternative");
    }
    for (const std::int32_t first : rule_starts_[static_cast<std::size_t>(r)]) {
      for (std::int32_t i = first; items_[static_cast<std::size_t>(i)] != kEnd; ++i) {
        const std::int32_t s = items_[static_cast<std::size_t>(i)];
        if (s >= 0 && !seen[static_cast<std::size_t>(s)]) {
          seen[static_cast<std::size_t>(s)] = 1;
          todo.push_back(s);
        }
      }
    }
  }
  // Left recursion the recognizer cannot run: an alternative of r whose first non-nullable
  // prefix reaches rule s with symbols after it (the stack grows: an edge r -> s that grows), s
  // and r in one strongly connected component of such left edges (tail calls r -> s, s last,
  // keep the stack flat and are fine: R := x R with x nullable).
  const std::size_t n = g.num_rules();
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r) {
      if (nullable[r] || !seen[r]) continue;
      for (const std::vector<Grammar::Symbol>& alt :
           g.alternatives(static_cast<Grammar::Symbol>(r))) {
        bool all = true;
        for (const Grammar::Symbol x : alt) {
          all = all && x >= 0 && nullable[static_cast<std::size_t>(x)];
        }
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  struct Edge {
    std::int32_t to;
    bool grows;
  };
  std::vector<std::vector<Edge>> left(n);
  for (std::size_t r = 0; r < n; ++r) {
    if (!seen[r]) continue;
    for (const std::vector<Grammar::Symbol>& alt :
         g.alternatives(static_cast<Grammar::Symbol>(r))) {
      if (!kept(alt)) continue;  // left out above
      for (std::size_t k = 0; k < alt.size(); ++k) {
        if (alt[k] < 0) break;
        left[r].push_back({alt[k], k + 1 < alt.size()});
        if (!nullable[static_cast<std::size_t>(alt[k])]) break;
      }
    }
  }
  // Tarjan's strongly connected components, iteratively.
  std::vector<std::int32_t> index(n, -1), low(n, 0), component(n, -1), stack;
  std::vector<char> on_stack(n, 0);
  std::int32_t counter = 0, components = 0;
  for (std::size_t root = 0; root < n; ++root) {
    if (!seen[root] || index[root] >= 0) continue;
    std::vector<std::pair<std::size_t, std::size_t>> work = {{root, 0}};
    while (!work.empty()) {
      const std::size_t v = work.back().first;
      std::size_t& next = work.back().second;
      if (next == 0) {
        index[v] = low[v] = counter++;
        stack.push_back(static_cast<std::int32_t>(v));
        on_stack[v] = 1;
      }
      if (next < left[v].size()) {
        const auto w = static_cast<std::size_t>(left[v][next++].to);
        if (index[w] < 0) {
          work.emplace_back(w, 0);
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        while (true) {
          const auto w = static_cast<std::size_t>(stack.back());
          stack.pop_back();
          on_stack[w] = 0;
          component[w] = components;
          if (w == v) break;
        }
        ++components;
      }
      work.pop_back();
      if (!work.empty()) {
        const std::size_t parent = work.back().first;
        low[parent] = std::min(low[parent], low[v]);
      }
    }
  }
  for (std::size_t r = 0; r < n; ++r) {
    for (const Edge& e : left[r]) {
      if (e.grows && component[r] == component[static_cast<std::size_t>(e.to)]) {
        throw std::invalid_argument("grammar: the rule " + g.name(static_cast<Grammar::Symbol>(r)) +
                                    " is left-recursive (it can reach itself again before any "
                                    "character with more to match after: write the repetition "
                                    "on the right)");
      }
    }
  }
  start_ = g.start();
}

GrammarState GrammarMatcher::close(std::vector<std::vector<std::int32_t>> pending,
                                   bool prune) const {
  GrammarState out;
  const auto too_many = [] {
    return std::length_error("grammar: more than " + std::to_string(kMaxGrammarParses) +
                             " parses alive at once (the grammar is too ambiguous)");
  };
  std::vector<std::vector<std::int32_t>> ready;
  // Every stack met while expanding (a nullable loop such as R := A R with A nullable comes back
  // to a stack it has seen, and stops there).
  const auto key_of = [](const std::vector<std::int32_t>& st) {
    return std::string(reinterpret_cast<const char*>(st.data()), st.size() * sizeof(std::int32_t));
  };
  std::unordered_set<std::string> visited;
  while (!pending.empty()) {
    std::vector<std::int32_t> st = std::move(pending.back());
    pending.pop_back();
    if (!visited.insert(key_of(st)).second) continue;
    if (visited.size() > kMaxGrammarParses * 8) {
      if (!prune) throw too_many();
      break;  // the parses found so far are kept (each one a parse of the text)
    }
    while (true) {
      if (st.empty()) {
        out.accepting = true;
        break;
      }
      const std::int32_t item = st.back();
      const std::int32_t sym = items_[static_cast<std::size_t>(item)];
      if (sym == kEnd) {  // the rule on top is complete: back to its caller's continuation
        st.pop_back();
        continue;
      }
      if (sym < 0) {  // waits on a terminal
        ready.push_back(std::move(st));
        break;
      }
      // A rule: the caller continues after it (a tail call drops the caller's finished frame),
      // and each alternative is a parse of its own.
      st.back() = item + 1;
      if (items_[static_cast<std::size_t>(item + 1)] == kEnd) st.pop_back();
      if (st.size() >= kMaxGrammarDepth) break;  // a left-recursive grammar's endless descent
      const std::vector<std::int32_t>& starts = rule_starts_[static_cast<std::size_t>(sym)];
      for (std::size_t a = 1; a < starts.size(); ++a) {
        std::vector<std::int32_t> other = st;
        other.push_back(starts[a]);
        pending.push_back(std::move(other));
      }
      st.push_back(starts[0]);
      if (!visited.insert(key_of(st)).second) break;
    }
  }
  // Shallower stacks first (when pruning, those are kept), then by their items.
  std::sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  ready.erase(std::unique(ready.begin(), ready.end()), ready.end());
  if (ready.size() > kMaxGrammarParses) {
    if (!prune) throw too_many();
    ready.resize(kMaxGrammarParses);
  }
  for (const std::vector<std::int32_t>& st : ready) {
    out.stacks.push_back(static_cast<std::int32_t>(st.size()));
    out.stacks.insert(out.stacks.end(), st.begin(), st.end());
  }
  return out;
}

GrammarState GrammarMatcher::initial() const {
  std::vector<std::vector<std::int32_t>> pending;
  for (const std::int32_t first : rule_starts_[static_cast<std::size_t>(start_)]) {
    pending.push_back({first});
  }
  return close(std::move(pending), /*prune=*/false);
}

GrammarState GrammarMatcher::advance(const GrammarState& s, unsigned char b) const {
  std::vector<std::vector<std::int32_t>> pending;
  for (std::size_t i = 0; i < s.stacks.size();) {
    const auto n = static_cast<std::size_t>(s.stacks[i]);
    const std::int32_t top = s.stacks[i + n];
    const std::int32_t sym = items_[static_cast<std::size_t>(top)];
    if (terminals_[static_cast<std::size_t>(-1 - sym)].test(b)) {
      std::vector<std::int32_t> st(s.stacks.begin() + static_cast<std::ptrdiff_t>(i + 1),
                                   s.stacks.begin() + static_cast<std::ptrdiff_t>(i + 1 + n));
      st.back() = top + 1;
      pending.push_back(std::move(st));
    }
    i += n + 1;
  }
  if (pending.empty()) return {};
  return close(std::move(pending), /*prune=*/true);
}

GrammarState GrammarMatcher::advance(GrammarState s, std::string_view text) const {
  for (const char c : text) {
    s = advance(s, static_cast<unsigned char>(c));
    if (s.dead()) break;
  }
  return s;
}

ByteSet GrammarMatcher::next_bytes(const GrammarState& s) const {
  ByteSet out;
  for (std::size_t i = 0; i < s.stacks.size();) {
    const auto n = static_cast<std::size_t>(s.stacks[i]);
    out |= terminals_[static_cast<std::size_t>(-1 -
                                               items_[static_cast<std::size_t>(s.stacks[i + n])])];
    i += n + 1;
  }
  return out;
}

}  // namespace servelab
