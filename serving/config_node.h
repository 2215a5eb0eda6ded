// ConfigNode: strict, typed access to a YAML document with errors that name the place.
//
// Every error is a ConfigError whose message reads
//   FILE:LINE:COL: key 'a.b.c': expected <what>, got <what was there>
// and which the commands turn into exit code 2. Sections call allow_keys() so an unknown key
// (a typo) is an error, never silently ignored. Values set with --set carry the location
// "--set a.b.c" instead of a line.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/config_error.h"

namespace servelab {

class ConfigNode {
 public:
  // Parses `path`. Throws ConfigError for a missing/unreadable file, a directory, malformed YAML
  // (with the line), a document whose top level is not a mapping, or one check_yaml_structure()
  // refuses (duplicate keys, nesting too deep, alias bombs).
  static ConfigNode load_file(const std::string& path);
  // Parses YAML text; `name` stands for the file in messages.
  static ConfigNode load_string(const std::string& text, const std::string& name);

  ConfigNode(YAML::Node node, std::shared_ptr<const std::string> file, std::string path);

  const YAML::Node& yaml() const { return node_; }
  const std::string& file() const { return *file_; }
  // Dotted key path from the document root ("" for the root).
  const std::string& path() const { return path_; }
  // "FILE:LINE:COL" of this node (or of the nearest located ancestor).
  std::string location() const;

  bool is_map() const { return node_.IsMap(); }
  bool is_sequence() const { return node_.IsSequence(); }
  bool is_scalar() const { return node_.IsScalar(); }
  bool has(std::string_view key) const;
  // Keys of a mapping, in document order.
  std::vector<std::string> keys() const;

  // The child under `key`; error if absent or this is not a mapping.
  ConfigNode at(std::string_view key) const;
  std::optional<ConfigNode> find(std::string_view key) const;
  // Elements of a sequence; error if this is not a sequence.
  std::vector<ConfigNode> elements() const;

  // Errors for any key of this mapping not in `allowed` (message lists the allowed keys).
  // Also errors when this node is not a mapping.
  void allow_keys(std::initializer_list<std::string_view> allowed) const;
  void allow_keys(const std::vector<std::string>& allowed) const;

  // Typed scalars of this node. A number or a boolean is written plain: a quoted scalar ("20",
  // 'true') is text, and as_int/as_double/as_bool refuse it ("got the quoted text '20'").
  std::int64_t as_int(std::int64_t min = INT64_MIN, std::int64_t max = INT64_MAX) const;
  double as_double(double min = -1e300, double max = 1e300) const;
  bool as_bool() const;
  std::string as_string() const;
  // One of `choices`; the message lists them.
  std::string as_choice(std::initializer_list<std::string_view> choices) const;

  // Typed children: required (error if absent) or with a default when absent.
  std::int64_t get_int(std::string_view key, std::int64_t min = INT64_MIN,
                       std::int64_t max = INT64_MAX) const;
  std::int64_t get_int(std::string_view key, std::int64_t def, std::int64_t min,
                       std::int64_t max) const;
  double get_double(std::string_view key, double min = -1e300, double max = 1e300) const;
  double get_double(std::string_view key, double def, double min, double max) const;
  bool get_bool(std::string_view key, bool def) const;
  std::string get_string(std::string_view key) const;
  std::string get_string(std::string_view key, std::string_view def) const;

  // Throws ConfigError "LOCATION: key 'PATH': expected WHAT, got <value>".
  [[noreturn]] void fail(std::string_view expected) const;
  // Same, for a problem that is not about a type ("LOCATION: key 'PATH': MESSAGE").
  [[noreturn]] void fail_message(std::string_view message) const;

 private:
  std::string child_path(std::string_view key) const;
  std::string describe_value() const;
  bool quoted() const;  // a scalar written in quotes

  YAML::Node node_;
  std::shared_ptr<const std::string> file_;
  std::string path_;
};

// Limits of a YAML document (or --set value), checked by load_file/load_string/apply_override.
inline constexpr std::size_t kMaxYamlNodes = 1'000'000;  // aliases expanded: no alias bombs
inline constexpr int kMaxYamlDepth = 200;                // nesting levels

// Throws ConfigError naming `name`:LINE:COL for a mapping with a duplicate key (yaml-cpp would
// keep the first silently), nesting deeper than kMaxYamlDepth, or more than kMaxYamlNodes nodes
// counted with anchors and aliases expanded (so `sweep:`, `compare:` and --set values cannot
// blow up exponentially when copied or printed).
void check_yaml_structure(const YAML::Node& root, const std::string& name);

// Applies `assignment` ("a.b.c=value", value parsed as YAML) to the document under `root`,
// creating maps as needed; the node is marked so errors about it say "--set a.b.c". A component
// may index an existing list entry ("workload.parts[1].priority=2": from 0; an index past the
// list's end is an error, lists are never grown).
// Throws ConfigError on a malformed assignment.
void apply_override(YAML::Node root, const std::string& assignment);

// The key path of an override ("KEY.PATH" of "KEY.PATH=VALUE") with list indices written
// without leading zeros ("parts[01]" is "parts[1]"): two spellings of one key compare equal.
std::string override_key(std::string_view assignment);
// Whether override `later` ("KEY=VALUE"), applied after `earlier`, replaces what `earlier` set:
// its key holds `earlier`'s and its value is a mapping or a list ("workload.arrival={...}" after
// "workload.arrival.rate=9"). The other order refines (a deeper key after a whole section), and a
// holder given a plain value (`model=NAME` beside `model.quantization=...`) replaces nothing.
bool override_replaces(std::string_view earlier, std::string_view later);
// Whether key path `holder` holds `held`: `held` continues it with a `.` or `[` ("workload"
// holds "workload.arrival.rate" and "workload[0]", not "workloads").
bool key_holds(std::string_view holder, std::string_view held);

// A deep copy of `node` without the marks apply_override() leaves, for writing back out.
YAML::Node without_override_marks(const YAML::Node& node);

// `node` as one line of YAML flow text for a `--set KEY=TEXT` (a compare variant's or a sweep
// axis's value), quoted scalars quoted again so the override reads them as text, as the file
// did ("20" stays a string, never the number 20).
std::string override_text(const YAML::Node& node);

}  // namespace servelab
