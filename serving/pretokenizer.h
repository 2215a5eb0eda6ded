// Pre-tokenisation: how a tokenizer.json splits text into the pieces that BPE encodes one at a
// time (a merge never crosses a piece boundary). Supports the `pre_tokenizer` layouts of
// byte-level BPE files:
//   - {"type": "ByteLevel", "use_regex": true}: GPT-2's built-in split pattern;
//   - {"type": "ByteLevel", "use_regex": false}: no split (the byte mapping itself is BPE's job);
//   - {"type": "Split", "pattern": {"Regex": R} or {"String": S}, "behavior": B, "invert": I}:
//     B one of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous (Hugging Face's
//     meanings); the Llama 3 and cl100k files use Isolated with their split pattern;
//   - {"type": "Sequence", "pretokenizers": [...]}: each step splits the previous step's pieces;
//   - {"type": "Metaspace", "replacement": R, "prepend_scheme": S, "split": B} (SentencePiece
//     conversions: Llama 2, Mistral), as the only or first step: every space becomes R, R goes
//     before a text not starting with it (S "always"; "first": only the text that begins the
//     input; "never"), and with `split` each R starts a piece (MergedWithNext). Older files'
//     add_prefix_space: true/false reads as "always"/"never".
// ByteLevel's add_prefix_space (a space before text that does not start with one) is honoured
// when ByteLevel is the first step; elsewhere it is refused, as is any other type.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "serving/unicode_regex.h"

namespace servelab {

class PreTokenizer {
 public:
  enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

  // A piece of the text: [begin, end) in bytes.
  using Piece = std::pair<std::size_t, std::size_t>;

  // No splitting at all (a file whose pre_tokenizer is null).
  PreTokenizer() = default;

  // Reads `spec` (the value of `key` in `file`). Throws ConfigError "FILE: KEY...: what was
  // expected" for an unknown type, behaviour or a pattern that does not compile.
  static PreTokenizer from_json(const nlohmann::json& spec, const std::string& file,
                                const std::string& key);

  // GPT-2's split pattern, as ByteLevel with use_regex applies it.
  static const char* gpt2_pattern();

  // Appends the pieces of `text` to `out`, in order; they cover the text except what a Removed
  // behaviour drops. Never throws on any bytes.
  void split(std::string_view text, std::vector<Piece>& out) const;

  // Whether a space goes before text that does not start with one (ByteLevel add_prefix_space).
  bool add_prefix_space() const { return add_prefix_space_; }

  // Whether Metaspace rewrites the text before split.
  bool rewrites() const { return !replacement_.empty(); }
  // Metaspace's rewrite of one segment of the input (the text between added tokens);
  // `at_start`: the segment begins the input. The text itself without Metaspace.
  std::string rewrite(std::string_view text, bool at_start) const;

 private:
  struct Step {
    std::shared_ptr<const UnicodeRegex> regex;
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
  };
  void add_steps(const nlohmann::json& spec, const std::string& file, const std::string& key,
                 bool first);
  static void apply(const Step& step, std::string_view text, const Piece& piece,
                    std::vector<Piece>& out);

  enum class Prepend { kAlways, kFirst, kNever };

  std::vector<Step> steps_;
  bool add_prefix_space_ = false;
  std::string replacement_;  // Metaspace's (empty: no Metaspace)
  Prepend prepend_ = Prepend::kAlways;
};

}  // namespace servelab
