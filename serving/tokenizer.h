// Text <-> token ids for prompts and completions given as text (`engine serve`).
//
// load_tokenizer reads a Hugging Face tokenizer.json whose model is BPE, byte-level (GPT-2,
// Llama 3, Qwen2, tiktoken conversions such as cl100k) or SentencePiece-style with byte_fallback
// (Llama 2, Mistral): the vocabulary and merges (both the "a b" and the ["a", "b"] forms),
// ignore_merges, added_tokens (leftmost-longest, lstrip/rstrip honoured; those not `normalized`
// matched in the input, the others in the normalized text), the normalizer (NFC and the other
// forms, Prepend, Replace, Sequence: serving/normalizer.h), the pre_tokenizer (ByteLevel, Split,
// Metaspace, Sequence: serving/pretokenizer.h) and the decoder (serving/decoder.h). What such a
// file may hold but this reader does not implement (another normalizer, model or pre-tokenizer
// type, dropout, word prefixes/suffixes, single_word added tokens) is a ConfigError naming the
// file and the key, never a silent difference. The post_processor's special tokens
// (serving/post_processor.h: Llama 3's <|begin_of_text|>) are added by
// encode_with_special_tokens, Hugging Face's add_special_tokens=True; encode adds none.
// See docs/serving.md, section "Tokenizer".
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "serving/post_processor.h"

namespace servelab {

// Implementations are immutable after construction and thread-safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Text -> ids, no special tokens added. Never throws on any UTF-8 or invalid byte input.
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // The same between the post_processor's special tokens (Hugging Face's encode with
  // add_special_tokens=True: what vLLM's completions endpoint does to a text prompt).
  std::vector<std::int32_t> encode_with_special_tokens(std::string_view text) const {
    const SequenceTemplate& t = sequence_template();
    std::vector<std::int32_t> ids = t.before;
    const std::vector<std::int32_t> body = encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    ids.insert(ids.end(), t.after.begin(), t.after.end());
    return ids;
  }
  // The text `ids` add after `context` (vLLM's detokenizer, primed with the prompt): decode of
  // both without decode(context)'s text, or decode(ids) where that is not how it starts. Only a
  // decoder that treats the start of the text apart (Llama 2's Strip, Metaspace) needs the
  // context; a byte-level one's text is decode(ids). Throws as decode does.
  std::string decode_after(std::span<const std::int32_t> context,
                           std::span<const std::int32_t> ids) const {
    if (context.empty() || !decode_needs_context()) return decode(ids);
    std::vector<std::int32_t> all(context.begin(), context.end());
    all.insert(all.end(), ids.begin(), ids.end());
    std::string text = decode(all);
    const std::string head = decode(context);
    if (!text.starts_with(head)) return decode(ids);
    return text.substr(head.size());
  }
  // Whether decode(a + b) can differ from decode(a) + decode(b) at more than a character split
  // between them (a decoder that strips the start of the text).
  virtual bool decode_needs_context() const { return false; }
  // The post_processor's tokens around one sequence (empty without one).
  virtual const SequenceTemplate& sequence_template() const = 0;
  // Ids -> text, as Hugging Face's decode (skip_special_tokens=False) gives it; always valid
  // UTF-8 (byte-level: invalid sequences come back as U+FFFD). Throws std::out_of_range for an
  // id outside the vocabulary.
  virtual std::string decode(std::span<const std::int32_t> ids) const = 0;
  // One past the largest id (ids below it that no token uses are outside the vocabulary too).
  virtual std::int32_t vocab_size() const = 0;
  // The id of an added token by its content ("<|eot_id|>"), or of a vocabulary token by its
  // text as tokenizer.json writes it (GPT-2's byte alphabet: " hello" is "Ġhello").
  virtual std::optional<std::int32_t> token_id(
      std::string_view token) const = 0;  // special or normal
  // The inverse of token_id: an added token's content, a vocabulary token's text as the file
  // writes it (Hugging Face's convert_ids_to_tokens); nullopt for an id no token uses.
  virtual std::optional<std::string> token_string(std::int32_t id) const = 0;
  // The bytes token `id` adds to a text it does not begin (its raw bytes, which may be part of a
  // UTF-8 character; an added token's content): what structured outputs hold to a grammar
  // (engine/structured_output.h). nullopt for an id no token uses, or where the decoder gives
  // tokens no text of their own (a chain other than ByteLevel, Llama 2's or Metaspace).
  virtual std::optional<std::string> token_bytes(std::int32_t id) const = 0;
  // Whether `id` is an added token marked special (<|eot_id|>): what Hugging Face's decode with
  // skip_special_tokens, vLLM's default for output text, leaves out.
  virtual bool special(std::int32_t id) const = 0;
};

// HF tokenizer.json (model.type BPE); ConfigError naming the file and key on bad input.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& tokenizer_json);

}  // namespace servelab
