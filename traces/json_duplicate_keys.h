// Duplicate keys in JSON input. nlohmann::json keeps the last of an object's repeated keys
// without a word, so a hand-edited sessions file with two "requests" arrays, a trace row with
// two "output_length" fields or a config.json with two "hidden_size" entries would run on
// whichever came last. The readers of JSON that users write (trace rows, sessions files, Hugging
// Face config.json) call first_duplicate_key() on the text and refuse it, naming the key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_depth.h"

namespace servelab {

// The first key that appears twice in one object of `text` (in document order), or nullopt
// when there is none or `text` is not valid JSON (the parser reports that). REQUIRES: `text`
// nested at most kMaxJsonDepth levels (core/json_depth.h), which bounds the stack kept here.
inline std::optional<std::string> first_duplicate_key(std::string_view text) {
  struct Sax : nlohmann::json_sax<nlohmann::json> {
    std::vector<std::set<std::string>> objects;  // the keys of each open object
    std::optional<std::string> duplicate;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override {
      objects.emplace_back();
      return true;
    }
    bool key(string_t& k) override {
      if (!objects.back().insert(k).second) {
        duplicate = k;
        return false;  // stop at the first
      }
      return true;
    }
    bool end_object() override {
      objects.pop_back();
      return true;
    }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
      return false;
    }
  } sax;
  nlohmann::json::sax_parse(text.begin(), text.end(), &sax, nlohmann::json::input_format_t::json,
                            /*strict=*/false);
  return sax.duplicate;
}

// What makes JSON text a user wrote unfit to read, checked before it is parsed: nesting past
// kMaxJsonDepth ("nested more than 256 levels deep") or a key repeated in one object ("key "K"
// appears twice in one object"); nullopt when neither (malformed text is the parser's to report).
inline std::optional<std::string> json_text_problem(std::string_view text) {
  if (json_too_deep(text)) {
    return "nested more than " + std::to_string(kMaxJsonDepth) + " levels deep";
  }
  if (std::optional<std::string> dup = first_duplicate_key(text)) {
    return "key \"" + *dup + "\" appears twice in one object";
  }
  return std::nullopt;
}

}  // namespace servelab
