// The special tokens a tokenizer.json's `post_processor` puts around one encoded sequence: what
// Hugging Face's `encode(text, add_special_tokens=True)` adds, and so what vLLM's completions
// endpoint adds to a text prompt by default (Llama 3: <|begin_of_text|> before it; GPT-2:
// nothing).
//
// Read from the post_processor of a tokenizer.json:
//   null, or "ByteLevel" (it only trims offsets): nothing;
//   "TemplateProcessing": its `single` template, a list of {"SpecialToken": {"id": NAME}} and
//     exactly one {"Sequence": {"id": "A"}}; each NAME's ids come from `special_tokens`
//     (NAME: {"ids": [...]}); `pair` is not used (one sequence at a time);
//   "Sequence": its `processors` in order (Llama 3.1's [ByteLevel, TemplateProcessing]);
// anything else (Bert or Roberta processing, ...) is a ConfigError naming the file and the key.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace servelab {

struct SequenceTemplate {
  std::vector<std::int32_t> before;  // ids before the sequence
  std::vector<std::int32_t> after;   // ids after it
  bool empty() const { return before.empty() && after.empty(); }
};

// `post_processor`: the value of the key (null included); `file`: for errors.
SequenceTemplate read_post_processor(const nlohmann::json& post_processor, const std::string& file);

}  // namespace servelab
