// Test helper: a tokenizer.json in Llama 2's layout around a given vocabulary and merges
// (<unk> 0, <s> 1, </s> 2 as special added tokens; the Prepend + Replace normalizer; no
// pre-tokenizer; <s> before a sequence; the Replace / ByteFallback / Fuse / Strip decoder; BPE
// with byte_fallback). The vocabulary must hold the three specials and the 256 "<0xHH>" tokens.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace servelab::test_util {

inline nlohmann::json llama2_layout(const nlohmann::json& vocab, const nlohmann::json& merges) {
  using nlohmann::json;
  const std::string sp = "\u2581";
  json added = json::array();
  const char* content[] = {"<unk>", "<s>", "</s>"};
  for (int id = 0; id < 3; ++id) {
    added.push_back({{"id", id},
                     {"content", content[id]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", sp}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair", json::array()},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", "<unk>"},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"vocab", vocab},
            {"merges", merges}}}};
}

}  // namespace servelab::test_util
