// Reading the typed parts of a tokenizer.json (normalizer, pre_tokenizer, decoder) with errors
// that name the file and the key: "FILE: KEY: what was expected" as a ConfigError.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/config_error.h"

namespace servelab::json_spec {

[[noreturn]] inline void fail(const std::string& file, const std::string& key,
                              const std::string& what) {
  throw ConfigError(file + ": " + key + ": " + what);
}

// spec[name], which must be a string.
inline const std::string& string_member(const nlohmann::json& spec, const std::string& file,
                                        const std::string& key, const char* name) {
  auto it = spec.find(name);
  if (it == spec.end() || !it->is_string()) {
    fail(file, key + "." + name,
         "expected a string, got " + (it == spec.end() ? std::string("nothing") : it->dump()));
  }
  return it->get_ref<const std::string&>();
}

}  // namespace servelab::json_spec
