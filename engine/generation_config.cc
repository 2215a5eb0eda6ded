#include "engine/generation_config.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/config_error.h"
#include "traces/json_duplicate_keys.h"

namespace servelab {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Where a value came from, for errors: "PATH: " or "--override-generation-config: ".
struct Origin {
  std::string where;
  [[noreturn]] void fail(const std::string& key, const std::string& expected,
                         const json& got) const {
    throw ConfigError(where + ": " + key + ": expected " + expected + " (got " + got.dump() + ")");
  }
};

double number_in(const Origin& o, const json& v, const char* key, double lo, double hi,
                 const std::string& expected) {
  if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi) o.fail(key, expected, v);
  return v.get<double>();
}

// An integer JSON value in [lo, hi] (an unsigned one past int64's range is out of it, not
// wrapped to a negative number).
bool integer_in(const json& v, std::int64_t lo, std::int64_t hi) {
  if (v.is_number_unsigned()) {  // every integer >= 0 parses as unsigned
    const std::uint64_t u = v.get<std::uint64_t>();
    return (lo <= 0 || u >= static_cast<std::uint64_t>(lo)) && u <= static_cast<std::uint64_t>(hi);
  }
  return v.is_number_integer() && v.get<std::int64_t>() >= lo && v.get<std::int64_t>() <= hi;
}

// The sampling keys of `obj` over `d` (null values are absent, as vLLM reads them); with
// `strict`, any other key is an error.
void apply(const json& obj, const Origin& o, bool strict, GenerationDefaults& d) {
  if (!obj.is_object()) {
    throw ConfigError(o.where + ": expected a JSON object (got " + obj.dump() + ")");
  }
  for (const auto& [key, v] : obj.items()) {
    if (v.is_null() && !strict) continue;
    RequestSampling& s = d.sampling;
    if (key == "temperature") {
      s.temperature = number_in(o, v, "temperature", 0, 1e6, "a number >= 0");
      s.temperature = vllm_temperature(s.temperature);  // as requests
    } else if (key == "top_p") {
      s.top_p = number_in(o, v, "top_p", 0, 1, "a number in (0, 1]");
      if (s.top_p == 0) o.fail("top_p", "a number in (0, 1]", v);
    } else if (key == "top_k") {
      if (!integer_in(v, -1, INT32_MAX)) {
        o.fail("top_k", "an integer: -1 or 0 (every token) or at least 1", v);
      }
      s.top_k = std::max<std::int32_t>(0, v.get<std::int32_t>());
    } else if (key == "min_p") {
      s.min_p = number_in(o, v, "min_p", 0, 1, "a number in [0, 1]");
    } else if (key == "repetition_penalty") {
      s.repetition_penalty =
          number_in(o, v, "repetition_penalty", kMinRepetitionPenalty, kMaxRepetitionPenalty,
                    "a number > 0 (1: none), in [1e-6, 1e6]");
    } else if (key == "max_new_tokens") {
      if (!integer_in(v, 1, 1 << 24)) {
        o.fail("max_new_tokens", "an integer >= 1", v);
      }
      d.max_new_tokens = v.get<std::int32_t>();
    } else if (key == "eos_token_id" && !strict) {
      d.eos_token_ids.clear();
      for (const json& id : v.is_array() ? v : json::array({v})) {
        if (!integer_in(id, 0, INT32_MAX)) {
          o.fail("eos_token_id", "a token id or a list of them", v);
        }
        d.eos_token_ids.push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
      }
    } else if (strict) {
      throw ConfigError(o.where + ": unknown key '" + key +
                        "' (expected temperature, top_p, top_k, min_p, repetition_penalty or "
                        "max_new_tokens)");
    }
  }
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path.string() + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  // A key twice (the parser would keep the later one without a word) or nesting too deep.
  if (const std::optional<std::string> problem = json_text_problem(ss.str())) {
    throw ConfigError(path.string() + ": " + *problem);
  }
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    throw ConfigError(path.string() + ": not valid JSON: " + e.what());
  }
}

}  // namespace

bool GenerationDefaults::greedy() const {
  const RequestSampling& s = sampling;
  return s.temperature == 0 && !s.adjusts_logits();
}

std::string GenerationDefaults::describe() const {
  const RequestSampling& s = sampling;
  std::string out;
  char buf[64];
  const auto add = [&](const char* name, double v) {
    std::snprintf(buf, sizeof buf, "%s%s %g", out.empty() ? "" : ", ", name, v);
    out += buf;
  };
  add("temperature", s.temperature);
  if (s.top_p != 1) add("top_p", s.top_p);
  if (s.top_k != 0) add("top_k", s.top_k);
  if (s.min_p != 0) add("min_p", s.min_p);
  if (s.repetition_penalty != 1) add("repetition_penalty", s.repetition_penalty);
  if (max_new_tokens) add("max_new_tokens", *max_new_tokens);
  if (max_tokens_cap) add("max_tokens at most", *max_tokens_cap);
  return out;
}

GenerationDefaults load_generation_defaults(const std::string& source, const std::string& weights,
                                            const std::string& override_json,
                                            std::int32_t vocab_size) {
  GenerationDefaults d;
  if (source == "servelab") {
    d.source = "servelab's greedy defaults";
    d.sampling.temperature = 0;
  } else {
    d.sampling.temperature = 1;  // vLLM's SamplingParams default
    d.source = source == "auto" ? "vLLM's defaults (no generation_config.json beside --weights)"
                                : "vLLM's defaults";
    std::optional<fs::path> file;
    if (source == "auto") {
      if (!weights.empty()) {
        const fs::path dir =
            fs::is_directory(weights) ? fs::path(weights) : fs::path(weights).parent_path();
        if (fs::exists(dir / "generation_config.json")) file = dir / "generation_config.json";
      }
    } else if (source != "vllm") {
      file =
          fs::is_directory(source) ? fs::path(source) / "generation_config.json" : fs::path(source);
      if (!fs::exists(*file)) {
        throw ConfigError("--generation-config " + source + ": " + file->string() +
                          " does not exist (expected servelab, vllm, auto, a folder with a "
                          "generation_config.json or such a file)");
      }
    }
    if (file) {
      apply(read_json(*file), Origin{file->string()}, false, d);
      d.source = file->string();
      if (source != "auto") d.max_tokens_cap = d.max_new_tokens;
      for (const std::int32_t id : d.eos_token_ids) {
        if (id >= vocab_size) {
          throw ConfigError(file->string() + ": eos_token_id: " + std::to_string(id) +
                            " is outside the model's vocabulary of " + std::to_string(vocab_size));
        }
      }
    }
  }
  if (!override_json.empty()) {
    const Origin o{"--override-generation-config"};
    json obj;
    try {
      obj = json::parse(override_json);
    } catch (const json::exception& e) {
      throw ConfigError(o.where + ": not valid JSON: " + e.what());
    }
    const std::optional<std::int32_t> before = d.max_new_tokens;
    d.max_new_tokens.reset();
    apply(obj, o, true, d);
    if (d.max_new_tokens) {
      d.max_tokens_cap = d.max_new_tokens;
    } else {
      d.max_new_tokens = before;
    }
    d.source += " with --override-generation-config";
  }
  return d;
}

}  // namespace servelab
