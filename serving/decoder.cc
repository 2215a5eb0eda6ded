#include "serving/decoder.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "serving/byte_level.h"
#include "serving/json_spec.h"
#include "serving/utf8.h"

namespace servelab {

namespace {

using nlohmann::json;

using json_spec::fail;
using json_spec::string_member;

// A string holding exactly one well-formed character.
std::string one_character(const json& spec, const std::string& file, const std::string& key,
                          const char* name) {
  const std::string& s = string_member(spec, file, key, name);
  if (s.empty() || !utf8::is_valid(s) || utf8::sequence_length(s, 0) != s.size()) {
    fail(file, key + "." + name, "expected one character, got " + json(s).dump());
  }
  return s;
}

std::size_t count_member(const json& spec, const std::string& file, const std::string& key,
                         const char* name) {
  auto it = spec.find(name);
  if (it == spec.end() || !it->is_number_integer() || it->get<std::int64_t>() < 0) {
    fail(file, key + "." + name,
         "expected a non-negative integer, got " +
             (it == spec.end() ? std::string("nothing") : it->dump()));
  }
  return it->get<std::size_t>();
}

// The byte a "<0xHH>" token stands for (Hugging Face's ByteFallback reads two hex digits of
// either case).
std::optional<unsigned char> fallback_byte(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

// ByteFallback's text of a run of `tokens` byte tokens: its bytes when they are UTF-8, else one
// U+FFFD per token.
std::string run_text(const std::string& run, std::size_t tokens) {
  if (utf8::is_valid(run)) return run;
  std::string out;
  for (std::size_t i = 0; i < tokens; ++i) out += "\xEF\xBF\xBD";
  return out;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  std::size_t pos = 0;
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, pos)) {
    out.append(s, pos, at - pos);
    out += to;
    pos = at + from.size();
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

}  // namespace

Decoder::Decoder() { steps_.push_back(Step{Step::Kind::kByteLevel, {}, {}}); }

bool Decoder::byte_level_only() const {
  return steps_.size() == 1 && steps_[0].kind == Step::Kind::kByteLevel;
}

Decoder Decoder::from_json(const json& spec, const std::string& file, const std::string& key) {
  if (spec.is_null()) {
    fail(file, key, "expected a decoder (ByteLevel, or a Sequence such as Llama 2's), got null");
  }
  Decoder d;
  d.steps_.clear();
  d.add_steps(spec, file, key);
  return d;
}

void Decoder::add_steps(const json& spec, const std::string& file, const std::string& key) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    fail(file, key, "expected an object with a string \"type\", got " + spec.dump());
  }
  const std::string type = spec["type"].get<std::string>();
  Step step{};
  if (type == "Sequence") {
    auto it = spec.find("decoders");
    if (it == spec.end() || !it->is_array()) {
      fail(file, key + ".decoders", "expected an array of decoders");
    }
    for (std::size_t i = 0; i < it->size(); ++i) {
      add_steps((*it)[i], file, key + ".decoders[" + std::to_string(i) + "]");
    }
    return;
  } else if (type == "ByteLevel") {
    step.kind = Step::Kind::kByteLevel;
  } else if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    step.content = string_member(spec, file, key, "content");
    auto p = spec.find("pattern");
    if (p == spec.end() || !p->is_object() || !p->contains("String") ||
        !(*p)["String"].is_string() || (*p)["String"].get<std::string>().empty()) {
      fail(file, key + ".pattern",
           "expected {\"String\": a non-empty string} (a Regex pattern is not supported), got " +
               (p == spec.end() ? std::string("nothing") : p->dump()));
    }
    step.pattern = (*p)["String"].get<std::string>();
  } else if (type == "ByteFallback") {
    step.kind = Step::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = Step::Kind::kFuse;
  } else if (type == "Strip") {
    step.kind = Step::Kind::kStrip;
    step.content = one_character(spec, file, key, "content");
    step.start = count_member(spec, file, key, "start");
    step.stop = count_member(spec, file, key, "stop");
  } else if (type == "Metaspace") {
    step.kind = Step::Kind::kMetaspace;
    step.content = one_character(spec, file, key, "replacement");
    if (auto s = spec.find("prepend_scheme"); s != spec.end() && !s->is_null()) {
      if (!s->is_string() || (*s != "always" && *s != "first" && *s != "never")) {
        fail(file, key + ".prepend_scheme",
             "expected \"always\", \"first\" or \"never\", got " + s->dump());
      }
      step.strip_first = *s != "never";
    } else if (auto a = spec.find("add_prefix_space"); a != spec.end() && !a->is_null()) {
      if (!a->is_boolean()) fail(file, key + ".add_prefix_space", "expected true or false");
      step.strip_first = a->get<bool>();  // the older files' spelling
    }
  } else {
    fail(file, key + ".type",
         "unsupported decoder \"" + type +
             "\" (expected ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace or "
             "Sequence)");
  }
  steps_.push_back(std::move(step));
}

void Decoder::apply(const Step& step, std::vector<std::string>& tokens) {
  switch (step.kind) {
    case Step::Kind::kByteLevel: {
      std::string bytes;
      for (const std::string& t : tokens) {
        const std::optional<std::string> b = byte_level::decode(t);
        bytes += b ? *b : t;
      }
      tokens.assign(1, utf8::to_valid(bytes));
      return;
    }
    case Step::Kind::kReplace:
      for (std::string& t : tokens) replace_all(t, step.pattern, step.content);
      return;
    case Step::Kind::kByteFallback: {
      std::vector<std::string> out;
      out.reserve(tokens.size());
      std::string run;
      std::size_t run_tokens = 0;
      auto flush = [&] {
        if (run_tokens == 0) return;
        out.push_back(run_text(run, run_tokens));
        run.clear();
        run_tokens = 0;
      };
      for (std::string& t : tokens) {
        if (const std::optional<unsigned char> b = fallback_byte(t)) {
          run.push_back(static_cast<char>(*b));
          ++run_tokens;
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      tokens = std::move(out);
      return;
    }
    case Step::Kind::kFuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, std::move(all));
      return;
    }
    case Step::Kind::kStrip: {
      const std::size_t w = step.content.size();
      for (std::string& t : tokens) {
        std::size_t b = 0, e = t.size();
        for (std::size_t i = 0; i < step.start && e - b >= w && t.compare(b, w, step.content) == 0;
             ++i) {
          b += w;
        }
        for (std::size_t i = 0;
             i < step.stop && e - b >= w && t.compare(e - w, w, step.content) == 0; ++i) {
          e -= w;
        }
        t = t.substr(b, e - b);
      }
      return;
    }
    case Step::Kind::kMetaspace:
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        replace_all(tokens[i], step.content, i == 0 && step.strip_first ? "" : " ");
      }
      return;
  }
}

void Decoder::bind(const std::vector<std::optional<std::string>>& written) {
  // Llama 2's chain: per-token Replace steps, an optional ByteFallback, Fuse, then only steps on
  // the one fused text.
  plan_ = Plan::kGeneral;
  std::size_t i = 0;
  while (i < steps_.size() && steps_[i].kind == Step::Kind::kReplace) ++i;
  byte_fallback_ = i < steps_.size() && steps_[i].kind == Step::Kind::kByteFallback;
  if (byte_fallback_) ++i;
  if (i < steps_.size() && steps_[i].kind == Step::Kind::kFuse) {
    bool rest_whole = true;
    for (std::size_t k = i + 1; k < steps_.size(); ++k) {
      rest_whole = rest_whole && steps_[k].kind == Step::Kind::kStrip;
    }
    if (rest_whole) {
      plan_ = Plan::kPerTokenThenFuse;
      fuse_at_ = i;
    }
  } else if (steps_.size() == 1 && steps_[0].kind == Step::Kind::kMetaspace) {
    plan_ = Plan::kMetaspace;
  }
  if (plan_ == Plan::kGeneral) byte_fallback_ = false;
  texts_.assign(written.size(), std::string());
  written_.assign(plan_ == Plan::kMetaspace ? written.size() : 0, std::string());
  bytes_.assign(written.size(), -1);
  for (std::size_t id = 0; id < written.size(); ++id) {
    if (!written[id]) continue;
    std::string t = *written[id];
    if (plan_ == Plan::kPerTokenThenFuse) {
      for (std::size_t k = 0; k < steps_.size() && steps_[k].kind == Step::Kind::kReplace; ++k) {
        replace_all(t, steps_[k].pattern, steps_[k].content);
      }
      if (byte_fallback_) {
        if (const std::optional<unsigned char> b = fallback_byte(t)) bytes_[id] = *b;
      }
    } else if (plan_ == Plan::kMetaspace) {
      written_[id] = t;
      replace_all(t, steps_[0].content, " ");  // a token that is not the first
    }
    texts_[id] = std::move(t);
  }
}

std::string Decoder::decode_ids(std::span<const std::int32_t> ids) const {
  if (plan_ == Plan::kGeneral) {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const std::int32_t id : ids) tokens.push_back(texts_[static_cast<std::size_t>(id)]);
    return decode(std::move(tokens));
  }
  std::string text;
  if (plan_ == Plan::kMetaspace) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto id = static_cast<std::size_t>(ids[i]);
      if (i == 0) {
        // The first token from its written form: its markers dropped (or spaces with "never").
        std::string first = written_[id];
        replace_all(first, steps_[0].content, steps_[0].strip_first ? "" : " ");
        text += first;
      } else {
        text += texts_[id];
      }
    }
    return utf8::to_valid(text);
  }
  std::string run;
  std::size_t run_tokens = 0;
  auto flush = [&] {
    if (run_tokens == 0) return;
    text += run_text(run, run_tokens);
    run.clear();
    run_tokens = 0;
  };
  for (const std::int32_t id : ids) {
    const auto i = static_cast<std::size_t>(id);
    if (bytes_[i] >= 0) {
      run.push_back(static_cast<char>(bytes_[i]));
      ++run_tokens;
    } else {
      flush();
      text += texts_[i];
    }
  }
  flush();
  std::vector<std::string> fused{std::move(text)};
  for (std::size_t k = fuse_at_ + 1; k < steps_.size(); ++k) apply(steps_[k], fused);
  return utf8::to_valid(fused[0]);
}

std::optional<std::string> Decoder::token_bytes(std::int32_t id) const {
  if (plan_ == Plan::kGeneral || id < 0 || static_cast<std::size_t>(id) >= texts_.size()) {
    return std::nullopt;
  }
  const auto i = static_cast<std::size_t>(id);
  if (bytes_[i] >= 0) return std::string(1, static_cast<char>(bytes_[i]));
  return texts_[i];
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  for (const Step& step : steps_) apply(step, tokens);
  std::string text;
  for (const std::string& t : tokens) text += t;
  return utf8::to_valid(text);
}

}  // namespace servelab
