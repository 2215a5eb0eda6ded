#include "serving/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "serving/json_spec.h"
#include "serving/utf8.h"

namespace servelab {

namespace {

using nlohmann::json;

using json_spec::fail;
using json_spec::string_member;

// utf8proc on one well-formed run of text.
std::string form_of_valid(std::string_view text, Normalizer::Form form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case Normalizer::Form::kNfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case Normalizer::Form::kNfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case Normalizer::Form::kNfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case Normalizer::Form::kNfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    // Only an allocation failure is left for well-formed input.
    if (n == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
    return std::string(text);
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
  std::free(out);
  return result;
}

bool is_ascii(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

std::string Normalizer::unicode_form(std::string_view text, Form form) {
  if (is_ascii(text)) return std::string(text);  // every form leaves ASCII as it is
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = pos;
    while (end < text.size()) {
      const std::size_t len = utf8::sequence_length(text, end);
      if (len == 0) break;
      end += len;
    }
    if (end > pos) out += form_of_valid(text.substr(pos, end - pos), form);
    if (end < text.size()) out.push_back(text[end++]);  // an ill-formed byte, kept
    pos = end;
  }
  return out;
}

Normalizer Normalizer::from_json(const json& spec, const std::string& file,
                                 const std::string& key) {
  Normalizer n;
  if (!spec.is_null()) n.add_steps(spec, file, key);
  return n;
}

void Normalizer::add_steps(const json& spec, const std::string& file, const std::string& key) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    fail(file, key, "expected an object with a string \"type\", got " + spec.dump());
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "Sequence") {
    auto it = spec.find("normalizers");
    if (it == spec.end() || !it->is_array()) {
      fail(file, key + ".normalizers", "expected an array of normalizers");
    }
    for (std::size_t i = 0; i < it->size(); ++i) {
      add_steps((*it)[i], file, key + ".normalizers[" + std::to_string(i) + "]");
    }
    return;
  }
  Step step{};
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = Step::Kind::kForm;
    step.form = type == "NFC"    ? Form::kNfc
                : type == "NFD"  ? Form::kNfd
                : type == "NFKC" ? Form::kNfkc
                                 : Form::kNfkd;
  } else if (type == "Prepend") {
    step.kind = Step::Kind::kPrepend;
    step.text = string_member(spec, file, key, "prepend");
  } else if (type == "Replace") {
    step.kind = Step::Kind::kReplace;
    step.content = string_member(spec, file, key, "content");
    auto p = spec.find("pattern");
    if (p != spec.end() && p->is_object() && p->contains("String") && (*p)["String"].is_string()) {
      step.text = (*p)["String"].get<std::string>();
      if (step.text.empty()) fail(file, key + ".pattern.String", "expected a non-empty string");
    } else if (p != spec.end() && p->is_object() && p->contains("Regex") &&
               (*p)["Regex"].is_string()) {
      try {
        step.regex = std::make_shared<const UnicodeRegex>((*p)["Regex"].get<std::string>());
      } catch (const std::invalid_argument& e) {
        fail(file, key + ".pattern.Regex", e.what());
      }
    } else {
      fail(file, key + ".pattern",
           "expected {\"String\": ...} or {\"Regex\": ...}, got " +
               (p == spec.end() ? std::string("nothing") : p->dump()));
    }
  } else {
    fail(file, key + ".type",
         "unsupported normalizer \"" + type +
             "\" (expected NFC, NFD, NFKC, NFKD, Prepend, Replace or Sequence)");
  }
  steps_.push_back(std::move(step));
}

std::string Normalizer::normalize(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kForm:
        s = unicode_form(s, step.form);
        break;
      case Step::Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.text);
        break;
      case Step::Kind::kReplace: {
        std::vector<std::pair<std::size_t, std::size_t>> matches;
        if (step.regex) {
          step.regex->find_all(s, matches);
        } else {
          for (std::size_t at = s.find(step.text); at != std::string::npos;
               at = s.find(step.text, at + step.text.size())) {
            matches.emplace_back(at, at + step.text.size());
          }
        }
        if (matches.empty()) break;
        std::string out;
        out.reserve(s.size() + matches.size() * step.content.size());
        std::size_t pos = 0;
        for (const auto& [b, e] : matches) {
          out.append(s, pos, b - pos);
          out += step.content;
          pos = e;
        }
        out.append(s, pos, std::string::npos);
        s = std::move(out);
        break;
      }
    }
  }
  return s;
}

}  // namespace servelab
