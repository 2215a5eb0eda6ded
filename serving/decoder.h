// The `decoder` of a Hugging Face tokenizer.json: how the tokens of some ids become text. Hugging
// Face's decode turns each id into its token string (an added token's content, a vocabulary
// token's text as the file writes it), runs the decoder's steps over that list, and joins it.
// Supported steps (Hugging Face's meanings, each mapping a list of strings to a list):
//   - ByteLevel: the tokens joined and read through GPT-2's byte alphabet (a token holding a
//     character outside it is kept as its own bytes), ill-formed UTF-8 replaced by U+FFFD;
//   - Replace {"pattern": {"String": S}, "content": C}: in each token, S becomes C;
//   - ByteFallback: each run of "<0xHH>" tokens becomes its bytes when they are valid UTF-8, one
//     U+FFFD per token otherwise;
//   - Fuse: the tokens joined into one;
//   - Strip {"content": C, "start": A, "stop": B}: up to A leading and B trailing C characters
//     cut from each token;
//   - Metaspace {"replacement": R, "prepend_scheme": ...}: R becomes a space, except in the first
//     token (where it is dropped) unless prepend_scheme is "never";
//   - Sequence {"decoders": [...]}.
// Anything else (WordPiece, CTC, BPEDecoder, a Regex Replace) is a ConfigError naming the file
// and key. Immutable and thread-safe after loading.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace servelab {

class Decoder {
 public:
  // The ByteLevel decoder alone.
  Decoder();

  // Reads `spec` (the value of `key` in `file`); ConfigError "FILE: KEY: what was expected".
  // A null decoder is refused (Hugging Face would join the tokens with spaces).
  static Decoder from_json(const nlohmann::json& spec, const std::string& file,
                           const std::string& key);

  // The text of `tokens` (token strings, any bytes), always well-formed UTF-8.
  std::string decode(std::vector<std::string> tokens) const;

  // Whether this is the ByteLevel decoder alone (text = the tokens' bytes concatenated, made
  // valid), which the tokenizer decodes without building token strings.
  bool byte_level_only() const;

  // Binds the decoder to a vocabulary: `written[id]` is token id's string (nullopt: unused id).
  // For Llama 2's chain (Replace steps, ByteFallback, Fuse, Strip steps) and a Metaspace decoder
  // alone, the per-token steps are applied here once per id, so decode_ids only joins texts;
  // other chains keep the strings for decode.
  void bind(const std::vector<std::optional<std::string>>& written);
  // decode() of the bound tokens of `ids`. REQUIRES: bind() was called and every id is bound.
  std::string decode_ids(std::span<const std::int32_t> ids) const;
  // The bytes bound token `id` adds to a text it does not begin (a byte-fallback token's byte,
  // the others' per-token text); nullopt for a chain whose tokens have no text of their own
  // (kGeneral) or an unbound id. REQUIRES: bind() was called.
  std::optional<std::string> token_bytes(std::int32_t id) const;

 private:
  struct Step {
    enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
    std::string pattern, content;  // Replace; Strip's and Metaspace's character in content
    std::size_t start = 0, stop = 0;
    bool strip_first = true;  // Metaspace: the first token's replacements are dropped
  };
  void add_steps(const nlohmann::json& spec, const std::string& file, const std::string& key);
  static void apply(const Step& step, std::vector<std::string>& tokens);

  std::vector<Step> steps_;
  // bind()'s tables: the kind of chain, and per id its text after the per-token steps (or as
  // written for the general path) and its ByteFallback byte (-1: none).
  enum class Plan { kGeneral, kPerTokenThenFuse, kMetaspace } plan_ = Plan::kGeneral;
  std::size_t fuse_at_ = 0;  // kPerTokenThenFuse: the index of the Fuse step
  bool byte_fallback_ = false;
  std::vector<std::string> texts_;
  std::vector<std::string> written_;  // kMetaspace: the written tokens (for the first one)
  std::vector<std::int16_t> bytes_;
};

}  // namespace servelab
