#include "traces/mix_workload.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "core/rng.h"
#include "core/strings.h"

namespace servelab {

namespace {

bool well_formed_class_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  return std::all_of(s.begin(), s.end(), is_name_char);
}

}  // namespace

std::vector<std::string> request_class_names(const ConfigNode& workload_section) {
  if (!workload_section.is_map() || !workload_section.has("type") ||
      workload_section.at("type").as_string() != "mix") {
    return {};
  }
  const std::vector<ConfigNode> parts = workload_section.at("parts").elements();
  if (parts.empty()) workload_section.at("parts").fail("a list of at least one part");
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const ConfigNode& part : parts) {
    const ConfigNode node = part.at("class");
    const std::string name = node.as_string();
    if (!well_formed_class_name(name)) {
      node.fail("a class name of 1 to 64 letters, digits, '-', '_' or '.'");
    }
    if (!seen.insert(name).second) {
      node.fail_message("class '" + name + "' is named by an earlier part; each part is one class");
    }
    names.push_back(name);
  }
  return names;
}

bool workload_gives(const ConfigNode& workload_section, std::string_view key) {
  if (!workload_section.is_map()) return false;
  if (workload_section.has(key)) return true;
  if (!workload_section.has("type") || workload_section.at("type").as_string() != "mix" ||
      !workload_section.has("parts") || !workload_section.at("parts").is_sequence()) {
    return false;
  }
  for (const ConfigNode& part : workload_section.at("parts").elements()) {
    if (part.is_map() && part.has("workload") && part.at("workload").is_map() &&
        part.at("workload").has(key)) {
      return true;
    }
  }
  return false;
}

std::uint64_t part_seed(std::uint64_t seed, const std::string& class_name) {
  return mix64(seed ^ name_hash("mix-part:" + class_name));
}

MixWorkload::MixWorkload(std::vector<MixPart> parts) : parts_(std::move(parts)) {
  if (parts_.empty()) throw std::invalid_argument("MixWorkload: no parts");
  for (const MixPart& p : parts_) {
    if (!p.workload || p.workload->dependent()) {
      throw std::invalid_argument("MixWorkload: part '" + p.class_name +
                                  "' has no workload or a dependent one");
    }
  }
  heads_.resize(parts_.size());
}

std::optional<RequestSpec> MixWorkload::next() {
  if (!started_) {
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      heads_[i] = parts_[i].workload->next();
      // A part with nothing to serve is a mistake in it (a window past its trace's end), as a
      // whole workload's is: its class would report zeros.
      if (!heads_[i]) {
        const MixPart& p = parts_[i];
        throw ConfigError((p.where.empty() ? "part '" + p.class_name + "'" : p.where) +
                          ": class '" + p.class_name + "' produced no requests (" +
                          p.workload->describe() +
                          "); check its file and its transforms (window_s, sample)");
      }
    }
    started_ = true;
  }
  std::size_t best = parts_.size();
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    if (!heads_[i]) continue;
    if (best == parts_.size() || heads_[i]->arrival_ns < heads_[best]->arrival_ns) best = i;
  }
  if (best == parts_.size()) return std::nullopt;
  RequestSpec spec = std::move(*heads_[best]);
  heads_[best] = parts_[best].workload->next();
  const MixPart& part = parts_[best];
  if (part.content_namespace != 0) {
    for (PromptSegment& s : spec.prompt)
      s.content_id = mix64(s.content_id ^ part.content_namespace);
  }
  spec.id = next_id_++;
  spec.request_class = static_cast<std::uint32_t>(best);
  if (part.tenant) spec.tenant = *part.tenant;
  if (part.priority) spec.priority = *part.priority;
  return spec;
}

std::string MixWorkload::describe() const {
  std::string s = "mix of " + std::to_string(parts_.size()) + " classes:";
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    s += (i == 0 ? " " : "; ") + parts_[i].class_name + " (" + parts_[i].workload->describe() + ")";
  }
  return s;
}

std::int64_t MixWorkload::skipped_rows() const {
  std::int64_t n = 0;
  for (const MixPart& p : parts_) n += p.workload->skipped_rows();
  return n;
}

std::int64_t MixWorkload::filtered_rows() const {
  std::int64_t n = 0;
  for (const MixPart& p : parts_) n += p.workload->filtered_rows();
  return n;
}

std::unique_ptr<Workload> make_mix_workload(const ConfigNode& section, std::uint64_t seed,
                                            const std::string& base_dir) {
  section.allow_keys(
      {"type", "parts", "transforms", "sampling", "cache_salt", "multimodal", "lora"});
  const std::vector<std::string> names = request_class_names(section);
  const std::vector<ConfigNode> nodes = section.at("parts").elements();
  std::vector<MixPart> parts;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const ConfigNode& n = nodes[i];
    n.allow_keys({"class", "tenant", "priority", "workload"});
    MixPart part;
    part.class_name = names[i];
    if (!n.has("tenant")) {
      part.tenant = static_cast<std::uint32_t>(i);
    } else if (const ConfigNode t = n.at("tenant");
               !(t.is_scalar() && t.as_string() == "workload")) {
      try {
        part.tenant = static_cast<std::uint32_t>(t.as_int(0, UINT32_MAX));
      } catch (const ConfigError&) {
        t.fail("an integer in [0, 4294967295], or 'workload' to keep the workload's tenants");
      }
    }
    if (n.has("priority")) {
      part.priority =
          static_cast<std::int32_t>(n.get_int("priority", -1'000'000'000, 1'000'000'000));
    }
    const ConfigNode w = n.at("workload");
    if (!w.is_map()) w.fail("a workload mapping ({type: synthetic, ...})");
    part.workload = make_workload(w, part_seed(seed, part.class_name), base_dir);
    part.where = w.location() + ": key '" + w.path() + "'";
    if (w.at("type").as_string() != "synthetic") {
      part.content_namespace = mix64(part_seed(seed, part.class_name) ^ 0x74726163652d6e73ULL) | 1;
    }
    if (part.workload->dependent() || w.at("type").as_string() == "mix") {
      w.at("type").fail_message(
          "a mix part must be open loop: type '" + w.at("type").as_string() +
          "' is not (a multiturn or sessions workload releases requests as earlier ones finish; "
          "a mix's parts go in one list)");
    }
    parts.push_back(std::move(part));
  }
  return std::make_unique<MixWorkload>(std::move(parts));
}

}  // namespace servelab
