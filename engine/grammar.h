// A context-free grammar over bytes, and its recognizer: what structured outputs
// (engine/structured_output.h) hold a sequence's output text to, one byte at a time.
//
// Grammar is built with the helpers below (rules of alternatives, each a sequence of symbols; a
// symbol is a rule or a terminal, a set of bytes). JSON schemas (engine/json_schema_grammar.h),
// regular expressions (engine/regex_grammar.h) and choices compile to it. A grammar must not be
// left-recursive (a rule that can reach itself again before consuming a byte); the compilers
// never build one, and the recognizer drops a parse deeper than kMaxGrammarDepth.
//
// GrammarMatcher runs it as a pushdown automaton over every parse at once: a GrammarState is the
// set of parser stacks still alive after the bytes fed so far, each stack's top waiting on a
// terminal, plus whether some parse has ended (the text so far is a sentence of the grammar).
// Equal states compare equal whatever the path to them, so a state can key a cache (the token
// masks of engine/structured_output.h are cached by state). A nonterminal that is the last
// symbol of its alternative is entered as a tail call (its caller's frame is dropped), so a
// repetition (R := x R | empty) keeps the stack flat however long it runs.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

using ByteSet = std::bitset<256>;

class Grammar {
 public:
  // >= 0: a rule's id; < 0: the terminal -1 - index.
  using Symbol = std::int32_t;

  // A new rule without alternatives (add them with add(); a rule may refer to itself).
  Symbol new_rule();
  // Appends an alternative (a sequence of symbols; empty: the empty string) to `rule`.
  void add(Symbol rule, std::vector<Symbol> alternative);
  // A new rule with these alternatives.
  Symbol rule(std::vector<std::vector<Symbol>> alternatives);
  // The terminal matching one byte of `set` (one symbol per distinct set).
  Symbol bytes(const ByteSet& set);
  Symbol byte(unsigned char c);
  Symbol range(unsigned char lo, unsigned char hi);
  // The terminals of text's bytes, in order (an alternative's worth).
  std::vector<Symbol> literal(std::string_view text);
  // A rule matching exactly `text`.
  Symbol literal_rule(std::string_view text) { return rule({literal(text)}); }
  // x* (R := x R | empty), x+ and x? as new rules.
  Symbol star(Symbol x);
  Symbol plus(Symbol x);
  Symbol optional(Symbol x);
  // x repeated min .. max times (max < 0: unbounded). REQUIRES 0 <= min, max < 0 or min <= max.
  Symbol repeat(Symbol x, std::int64_t min, std::int64_t max);
  // A copy of `rule` and every rule it reaches with each terminal narrowed to the bytes of
  // `keep` (the texts of `rule` written with those bytes only).
  Symbol narrowed(Symbol rule, const ByteSet& keep);

  // A name for `rule` in error messages (an EBNF grammar's rule names).
  void set_name(Symbol rule, std::string name);
  std::string name(Symbol rule) const;

  void set_start(Symbol s) { start_ = s; }
  Symbol start() const { return start_; }
  std::size_t num_rules() const { return rules_.size(); }
  const std::vector<std::vector<Symbol>>& alternatives(Symbol rule) const {
    return rules_[static_cast<std::size_t>(rule)];
  }
  const ByteSet& terminal(Symbol s) const { return terminals_[static_cast<std::size_t>(-1 - s)]; }
  std::size_t num_terminals() const { return terminals_.size(); }

 private:
  std::vector<std::vector<std::vector<Symbol>>> rules_;
  std::vector<ByteSet> terminals_;
  std::vector<std::string> names_;
  Symbol start_ = -1;
};

// The deepest parse stack the recognizer keeps, and the most parses one state may hold: a
// grammar with more at its start is refused (initial(): std::length_error); a state after some
// bytes that would hold more keeps kMaxGrammarParses of them (advance(): see there).
inline constexpr std::size_t kMaxGrammarDepth = 2048;
inline constexpr std::size_t kMaxGrammarParses = 4096;

// The parses alive after some bytes: stacks of items (positions in the flattened grammar),
// sorted, as one flat list (each stack: its size, then its items bottom to top), and whether a
// parse has completed.
struct GrammarState {
  std::vector<std::int32_t> stacks;
  bool accepting = false;
  bool dead() const { return stacks.empty() && !accepting; }
  friend bool operator==(const GrammarState&, const GrammarState&) = default;
};

struct GrammarStateHash {
  std::size_t operator()(const GrammarState& s) const;
};

class GrammarMatcher {
 public:
  // Alternatives that could never complete (holding a symbol that derives no finite text) are
  // left out, so every parse kept can still finish (unless the grammar matches nothing at all:
  // matches_nothing()).
  // REQUIRES: g.start() is a rule. Throws std::invalid_argument for a reachable rule without
  // alternatives (it can never match) and for left recursion (a reachable rule that can reach
  // itself again before any byte, which the recognizer cannot run), naming the rule.
  explicit GrammarMatcher(const Grammar& g);

  // The state before any byte. Throws std::length_error where it would hold more than
  // kMaxGrammarParses parses (a choice among thousands of strings).
  GrammarState initial() const;
  // The state after feeding byte `b` in state `s` (dead when no parse takes it). Never throws
  // for ambiguity: where more than kMaxGrammarParses parses would be alive (a very ambiguous
  // grammar, such as the regex `(a{0,100}b?){0,100}` on a long run of `a`), it keeps that many
  // (the shallowest stacks) and drops the rest. Every parse kept is a parse of the text and can
  // still complete, so the state stays sound (accepting only where the text is a sentence, and
  // every byte it takes leads on towards one); only some ways on may be lost, and matches() may
  // then say no to a sentence.
  GrammarState advance(const GrammarState& s, unsigned char b) const;
  // Feeds `text`; stops early (dead) at the first byte no parse takes.
  GrammarState advance(GrammarState s, std::string_view text) const;
  // The bytes some parse of `s` takes next.
  ByteSet next_bytes(const GrammarState& s) const;
  // Whether no text at all is a sentence (the start rule never completes: a JSON schema false).
  bool matches_nothing() const { return matches_nothing_; }
  // Whether the whole of `text` is a sentence of the grammar.
  bool matches(std::string_view text) const { return advance(initial(), text).accepting; }

 private:
  static constexpr std::int32_t kEnd = INT32_MIN;
  // Expands `pending` stacks to those whose top waits on a terminal, into a state. Beyond
  // kMaxGrammarParses parses: std::length_error, or with `prune` the shallowest ones kept.
  GrammarState close(std::vector<std::vector<std::int32_t>> pending, bool prune) const;

  std::vector<std::int32_t> items_;  // every alternative's symbols, each followed by kEnd
  bool matches_nothing_ = false;
  std::vector<std::vector<std::int32_t>> rule_starts_;  // per rule, its alternatives' first items
  std::vector<ByteSet> terminals_;
  std::int32_t start_ = 0;
};

}  // namespace servelab
