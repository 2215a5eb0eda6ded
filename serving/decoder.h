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

#include <nlohmann/json_fwd.hpp>
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
};

}  // namespace servelab
