#include "serving/post_processor.h"

#include <nlohmann/json.hpp>

#include "core/config_error.h"

namespace servelab {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& file, const std::string& key, const std::string& what) {
  throw ConfigError(file + ": " + key + ": " + what);
}

void read_template(const json& p, const std::string& file, const std::string& key,
                   SequenceTemplate& out) {
  if (!p.contains("single") || !p["single"].is_array()) {
    fail(file, key + ".single", "expected the template of one sequence (an array)");
  }
  const json* specials = p.contains("special_tokens") ? &p["special_tokens"] : nullptr;
  SequenceTemplate t;
  bool seen_sequence = false;
  const json& single = p["single"];
  for (std::size_t i = 0; i < single.size(); ++i) {
    const std::string at = key + ".single[" + std::to_string(i) + "]";
    const json& item = single[i];
    if (item.is_object() && item.contains("Sequence")) {
      if (seen_sequence) fail(file, at, "a second Sequence (expected exactly one)");
      seen_sequence = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken") || !item["SpecialToken"].is_object() ||
        !item["SpecialToken"].contains("id") || !item["SpecialToken"]["id"].is_string()) {
      fail(
          file, at,
          "expected {\"SpecialToken\": {\"id\": NAME}} or {\"Sequence\": ...}, got " + item.dump());
    }
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    if (specials == nullptr || !specials->is_object() || !specials->contains(name) ||
        !(*specials)[name].is_object() || !(*specials)[name].contains("ids") ||
        !(*specials)[name]["ids"].is_array()) {
      fail(file, key + ".special_tokens", "no \"ids\" for \"" + name + "\"");
    }
    for (const json& id : (*specials)[name]["ids"]) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
          id.get<std::int64_t>() > (std::int64_t{1} << 30)) {
        fail(file, key + ".special_tokens[\"" + name + "\"].ids",
             "expected token ids, got " + id.dump());
      }
      (seen_sequence ? t.after : t.before)
          .push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
    }
  }
  if (!seen_sequence) fail(file, key + ".single", "no {\"Sequence\": ...} item (expected one)");
  // A later processor wraps what the earlier ones made.
  t.before.insert(t.before.end(), out.before.begin(), out.before.end());
  out.after.insert(out.after.end(), t.after.begin(), t.after.end());
  out.before = std::move(t.before);
}

void read_one(const json& p, const std::string& file, const std::string& key,
              SequenceTemplate& out) {
  if (p.is_null()) return;
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
    fail(file, key, "expected an object with a string \"type\", got " + p.dump());
  }
  const std::string type = p["type"].get<std::string>();
  if (type == "ByteLevel") return;  // offsets only
  if (type == "TemplateProcessing") {
    read_template(p, file, key, out);
  } else if (type == "Sequence") {
    if (!p.contains("processors") || !p["processors"].is_array()) {
      fail(file, key + ".processors", "expected an array");
    }
    for (std::size_t i = 0; i < p["processors"].size(); ++i) {
      read_one(p["processors"][i], file, key + ".processors[" + std::to_string(i) + "]", out);
    }
  } else {
    fail(file, key + ".type",
         "unsupported post-processor \"" + type +
             "\" (expected ByteLevel, TemplateProcessing or Sequence)");
  }
}

}  // namespace

SequenceTemplate read_post_processor(const json& post_processor, const std::string& file) {
  SequenceTemplate t;
  read_one(post_processor, file, "post_processor", t);
  return t;
}

}  // namespace servelab
