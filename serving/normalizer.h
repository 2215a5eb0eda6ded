// The `normalizer` of a Hugging Face tokenizer.json: what rewrites the text between added tokens
// before pre-tokenisation. Supported steps (Hugging Face's meanings):
//   - {"type": "NFC"}, "NFD", "NFKC", "NFKD": Unicode normalization forms (utf8proc; Qwen2's
//     files use NFC);
//   - {"type": "Prepend", "prepend": P}: P before a non-empty text (Llama 2's and Mistral's "▁");
//   - {"type": "Replace", "pattern": {"String": S} or {"Regex": R}, "content": C}: every
//     non-overlapping match, left to right, becomes C (Llama 2's " " -> "▁");
//   - {"type": "Sequence", "normalizers": [...]}: each step on the previous step's output;
//   - null: the text unchanged.
// Anything else (Lowercase, Strip, BertNormalizer, Precompiled, ...) is a ConfigError naming the
// file and key, never a silent difference.
//
// normalize never throws: ill-formed UTF-8 is passed through byte for byte by the Unicode forms
// (each maximal valid run is normalized on its own). Immutable and thread-safe after loading.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "serving/unicode_regex.h"

namespace servelab {

class Normalizer {
 public:
  enum class Form { kNfc, kNfd, kNfkc, kNfkd };

  // The identity (a file whose normalizer is null).
  Normalizer() = default;

  // Reads `spec` (the value of `key` in `file`); ConfigError "FILE: KEY: what was expected".
  static Normalizer from_json(const nlohmann::json& spec, const std::string& file,
                              const std::string& key);

  // `text` after every step.
  std::string normalize(std::string_view text) const;

  // Whether normalize is the identity (no step).
  bool identity() const { return steps_.empty(); }

  // One Unicode normalization form of `text` (ill-formed bytes kept as they are).
  static std::string unicode_form(std::string_view text, Form form);

 private:
  struct Step {
    enum class Kind { kForm, kPrepend, kReplace } kind;
    Form form = Form::kNfc;
    std::string text;     // Prepend's prefix, Replace's String pattern (when regex is null)
    std::string content;  // Replace's replacement
    std::shared_ptr<const UnicodeRegex> regex;  // Replace's Regex pattern
  };
  void add_steps(const nlohmann::json& spec, const std::string& file, const std::string& key);

  std::vector<Step> steps_;
};

}  // namespace servelab
