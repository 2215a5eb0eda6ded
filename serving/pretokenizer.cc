#include "serving/pretokenizer.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "serving/json_spec.h"

namespace servelab {

namespace {

using json_spec::fail;

const nlohmann::json& member(const nlohmann::json& obj, const char* name, const std::string& file,
                             const std::string& key) {
  auto it = obj.find(name);
  if (it == obj.end()) fail(file, key + "." + name, "missing");
  return *it;
}

bool flag(const nlohmann::json& obj, const char* name, bool fallback, const std::string& file,
          const std::string& key) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(file, key + "." + name, "expected true or false, got " + it->dump());
  return it->get<bool>();
}

std::string quote_literal(const std::string& s) {
  // \Q...\E quotes everything but a literal "\E", which is split around.
  std::string out = "\\Q";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 2, "\\E") == 0) {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  return out + "\\E";
}

}  // namespace

const char* PreTokenizer::gpt2_pattern() {
  return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& spec, const std::string& file,
                                     const std::string& key) {
  PreTokenizer p;
  if (!spec.is_null()) p.add_steps(spec, file, key, true);
  return p;
}

void PreTokenizer::add_steps(const nlohmann::json& spec, const std::string& file,
                             const std::string& key, bool first) {
  if (!spec.is_object()) fail(file, key, "expected an object, got " + spec.dump());
  const nlohmann::json& type = member(spec, "type", file, key);
  const std::string t = type.is_string() ? type.get<std::string>() : type.dump();
  if (t == "Sequence") {
    const nlohmann::json& list = member(spec, "pretokenizers", file, key);
    if (!list.is_array()) fail(file, key + ".pretokenizers", "expected an array");
    for (std::size_t i = 0; i < list.size(); ++i) {
      add_steps(list[i], file, key + ".pretokenizers[" + std::to_string(i) + "]", first && i == 0);
    }
  } else if (t == "ByteLevel") {
    if (flag(spec, "add_prefix_space", false, file, key)) {
      if (!first) {
        fail(file, key + ".add_prefix_space",
             "true is supported only when ByteLevel is the first pre-tokenizer");
      }
      add_prefix_space_ = true;
    }
    if (flag(spec, "use_regex", true, file, key)) {
      steps_.push_back(
          {std::make_shared<UnicodeRegex>(gpt2_pattern()), Behavior::kIsolated, false});
    }
  } else if (t == "Split") {
    const nlohmann::json& pattern = member(spec, "pattern", file, key);
    std::string regex;
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      regex = pattern["Regex"].get<std::string>();
    } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      regex = quote_literal(pattern["String"].get<std::string>());
    } else {
      fail(file, key + ".pattern",
           "expected {\"Regex\": \"...\"} or {\"String\": \"...\"}, got " + pattern.dump());
    }
    Step step;
    try {
      step.regex = std::make_shared<UnicodeRegex>(regex);
    } catch (const std::invalid_argument& e) {
      fail(file, key + ".pattern", std::string("the pattern does not compile: ") + e.what());
    }
    const nlohmann::json& behavior = member(spec, "behavior", file, key);
    const std::string b = behavior.is_string() ? behavior.get<std::string>() : behavior.dump();
    if (b == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (b == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (b == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (b == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else if (b == "Contiguous") {
      step.behavior = Behavior::kContiguous;
    } else {
      fail(file, key + ".behavior",
           "expected Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous, got " +
               behavior.dump());
    }
    step.invert = flag(spec, "invert", false, file, key);
    steps_.push_back(std::move(step));
  } else if (t == "Metaspace") {
    if (!first || !steps_.empty() || add_prefix_space_) {
      fail(file, key, "Metaspace is supported only as the first pre-tokenizer");
    }
    const nlohmann::json& r = member(spec, "replacement", file, key);
    if (!r.is_string() || r.get<std::string>().empty()) {
      fail(file, key + ".replacement", "expected a non-empty string, got " + r.dump());
    }
    replacement_ = r.get<std::string>();
    if (auto s = spec.find("prepend_scheme"); s != spec.end() && !s->is_null()) {
      if (*s == "always") {
        prepend_ = Prepend::kAlways;
      } else if (*s == "first") {
        prepend_ = Prepend::kFirst;
      } else if (*s == "never") {
        prepend_ = Prepend::kNever;
      } else {
        fail(file, key + ".prepend_scheme",
             "expected \"always\", \"first\" or \"never\", got " + s->dump());
      }
    } else {
      prepend_ =
          flag(spec, "add_prefix_space", true, file, key) ? Prepend::kAlways : Prepend::kNever;
    }
    if (flag(spec, "split", true, file, key)) {
      steps_.push_back({std::make_shared<UnicodeRegex>(quote_literal(replacement_)),
                        Behavior::kMergedWithNext, false});
    }
  } else {
    fail(file, key + ".type",
         "unsupported pre-tokenizer " + type.dump() +
             " (expected ByteLevel, Split, Metaspace or Sequence)");
  }
}

void PreTokenizer::apply(const Step& step, std::string_view text, const Piece& piece,
                         std::vector<Piece>& out) {
  const std::string_view sub = text.substr(piece.first, piece.second - piece.first);
  thread_local std::vector<std::pair<std::size_t, std::size_t>> matches;
  matches.clear();
  step.regex->find_all(sub, matches);
  // The piece as alternating segments; `delim` marks those the behaviour acts on (the matches,
  // or with invert the text between them).
  struct Segment {
    std::size_t b, e;
    bool delim;
  };
  thread_local std::vector<Segment> segs;
  segs.clear();
  std::size_t pos = 0;
  for (const auto& [b, e] : matches) {
    if (b > pos) segs.push_back({pos, b, step.invert});
    segs.push_back({b, e, !step.invert});
    pos = e;
  }
  if (pos < sub.size()) segs.push_back({pos, sub.size(), step.invert});

  const std::size_t base = piece.first;
  const std::size_t first_out = out.size();
  bool pending_next = false;  // MergedWithNext: a delimiter waits for the following segment
  std::size_t pending_begin = 0;
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const Segment& s = segs[i];
    switch (step.behavior) {
      case Behavior::kIsolated:
        out.emplace_back(base + s.b, base + s.e);
        break;
      case Behavior::kRemoved:
        if (!s.delim) out.emplace_back(base + s.b, base + s.e);
        break;
      case Behavior::kMergedWithPrevious:
        // Hugging Face: a delimiter joins the segment before it unless that was one too.
        if (s.delim && i > 0 && !segs[i - 1].delim && out.size() > first_out) {
          out.back().second = base + s.e;
        } else {
          out.emplace_back(base + s.b, base + s.e);
        }
        break;
      case Behavior::kMergedWithNext:
        // Hugging Face: a delimiter joins the segment after it unless that is one too.
        if (s.delim) {
          if (i + 1 < segs.size() && !segs[i + 1].delim) {
            pending_begin = base + s.b;
            pending_next = true;
          } else {
            out.emplace_back(base + s.b, base + s.e);
          }
        } else {
          out.emplace_back(pending_next ? pending_begin : base + s.b, base + s.e);
          pending_next = false;
        }
        break;
      case Behavior::kContiguous:
        if (s.delim && i > 0 && segs[i - 1].delim) {
          out.back().second = base + s.e;
        } else {
          out.emplace_back(base + s.b, base + s.e);
        }
        break;
    }
  }
}

std::string PreTokenizer::rewrite(std::string_view text, bool at_start) const {
  std::string out;
  if (replacement_.empty()) return std::string(text);
  out.reserve(text.size() + replacement_.size());
  for (const char c : text) {
    if (c == ' ') {
      out += replacement_;
    } else {
      out.push_back(c);
    }
  }
  const bool prepend = prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && at_start);
  if (prepend && !out.starts_with(replacement_)) out.insert(0, replacement_);
  return out;
}

void PreTokenizer::split(std::string_view text, std::vector<Piece>& out) const {
  if (text.empty()) return;
  if (steps_.empty()) {
    out.emplace_back(0, text.size());
    return;
  }
  if (steps_.size() == 1) {
    apply(steps_[0], text, {0, text.size()}, out);
    return;
  }
  std::vector<Piece> current{{0, text.size()}}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (const Piece& p : current) apply(step, text, p, next);
    current.swap(next);
  }
  out.insert(out.end(), current.begin(), current.end());
}

}  // namespace servelab
