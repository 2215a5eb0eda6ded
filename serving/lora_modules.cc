#include "serving/lora_modules.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "core/config_error.h"

namespace servelab {

namespace {

[[noreturn]] void fail(std::string_view text, const std::string& what) {
  throw ConfigError("--lora-modules '" + std::string(text) + "': " + what);
}

// A decimal integer in [lo, hi], the whole of `s`.
bool parse_int(std::string_view s, std::int64_t lo, std::int64_t hi, std::int64_t& out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && out >= lo && out <= hi;
}

}  // namespace

LoraModule parse_lora_module(std::string_view text, std::int32_t default_rank) {
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos) fail(text, "expected NAME=ID or NAME=ID:RANK");
  LoraModule m;
  m.name = std::string(text.substr(0, eq));
  if (m.name.empty() || std::any_of(m.name.begin(), m.name.end(), [](unsigned char c) {
        return std::isspace(c) != 0 || std::iscntrl(c) != 0;
      })) {
    fail(text, "expected a name without spaces before '='");
  }
  std::string_view rest = text.substr(eq + 1);
  std::string_view rank_text;
  if (const std::size_t colon = rest.find(':'); colon != std::string_view::npos) {
    rank_text = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  std::int64_t id = 0;
  if (!parse_int(rest, 1, 0xfffffffeLL, id)) {
    fail(text, "expected the adapter id, an integer from 1 to 4294967294, after '='");
  }
  m.id = static_cast<std::uint32_t>(id);
  std::int64_t rank = default_rank;
  if (!rank_text.empty() || text.back() == ':') {
    if (!parse_int(rank_text, 1, kMaxLoraRank, rank)) {
      fail(text, "expected the rank, an integer from 1 to " + std::to_string(kMaxLoraRank) +
                     ", after ':'");
    }
  }
  m.rank = static_cast<std::int32_t>(rank);
  return m;
}

std::vector<LoraModule> parse_lora_modules(const std::vector<std::string>& texts,
                                           const LoraConfig& lora, const std::string& base_model) {
  if (texts.empty()) return {};
  if (!lora.enabled()) {
    throw ConfigError(
        "--lora-modules: LoRA is off; the experiment needs serving.lora (max_loras, "
        "max_lora_rank), vLLM's --enable-lora");
  }
  std::vector<LoraModule> out;
  for (const std::string& t : texts) {
    const LoraModule m = parse_lora_module(t, lora.max_lora_rank);
    if (m.name == base_model) fail(t, "the name is the base model's");
    if (m.rank > lora.max_lora_rank) {
      fail(t, "rank " + std::to_string(m.rank) + " exceeds serving.lora.max_lora_rank (" +
                  std::to_string(lora.max_lora_rank) + ")");
    }
    for (const LoraModule& o : out) {
      if (o.name == m.name) fail(t, "the name '" + m.name + "' is given twice");
      if (o.id == m.id) {
        fail(t, "adapter " + std::to_string(m.id) + " is already served as '" + o.name + "'");
      }
    }
    out.push_back(m);
  }
  return out;
}

std::string lora_model_name(const std::vector<LoraModule>& modules, std::uint32_t id) {
  for (const LoraModule& m : modules) {
    if (m.id == id) return m.name;
  }
  return "lora-" + std::to_string(id);
}

}  // namespace servelab
