// The policy-plugin registry: for each plugin kind (batch, queue, preemption, prefix_cache,
// allocation) the plugins that exist, each with a one-line description, its origin (paper or
// system) and its typed parameters with defaults and ranges. `sim policies` prints the
// catalogue (format_catalogue), and experiment files name plugins through parse_policy_spec,
// so a plugin is usable from YAML exactly when it is registered here.
//
// YAML shape: a kind's value is either the plugin name (`queue: fcfs`) or a mapping with `name`
// and parameters (`queue: {name: predicted-sjf, error: 0.5}`). Parameters left out take their
// defaults; the resulting PolicySpec always holds every parameter of the plugin.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/scheduler_config.h"
#include "serving/config_node.h"

namespace servelab {

enum class PolicyKind : std::uint8_t { kBatch, kQueue, kPreemption, kPrefixCache, kAllocation };
inline constexpr PolicyKind kAllPolicyKinds[] = {PolicyKind::kBatch, PolicyKind::kQueue,
                                                 PolicyKind::kPreemption, PolicyKind::kPrefixCache,
                                                 PolicyKind::kAllocation};
// The YAML key of a kind ("batch", "queue", "preemption", "prefix_cache", "allocation").
const char* to_string(PolicyKind kind);

enum class ParamType : std::uint8_t { kInt, kDouble, kBool, kString };
const char* to_string(ParamType type);

using ParamValue = std::variant<std::int64_t, double, bool, std::string>;
// A value as YAML would spell it (doubles in shortest round-trip form).
std::string format_param(const ParamValue& v);

struct ParamInfo {
  std::string name;
  ParamType type = ParamType::kInt;
  ParamValue def;                    // of the matching alternative
  double min = -1e300, max = 1e300;  // inclusive range, for int and double
  std::vector<std::string> choices;  // for string: the allowed values (empty: any)
  std::string doc;                   // one line
};

struct PluginInfo {
  PolicyKind kind = PolicyKind::kQueue;
  std::string name;
  std::string description;  // one line
  std::string origin;       // the paper or system it follows
  std::vector<ParamInfo> params;
};

// A chosen plugin with every parameter's value (defaults filled in).
struct PolicySpec {
  std::string name;
  std::map<std::string, ParamValue> params;

  // Typed access. Throws std::logic_error if the parameter is absent or of another type (a
  // programming error: the registry validated the spec).
  std::int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  friend bool operator==(const PolicySpec&, const PolicySpec&) = default;
};

class PolicyRegistry {
 public:
  // The process-wide registry with every built-in plugin registered (built on first use, so
  // no static-initialisation order or dropped-object problems with static libraries).
  static const PolicyRegistry& instance();

  // Registers a plugin. Throws std::logic_error on a duplicate name within its kind or a
  // default that does not match its parameter's type.
  void add(PluginInfo info);
  // nullptr if unknown.
  const PluginInfo* find(PolicyKind kind, std::string_view name) const;
  // The plugins of a kind in registration order.
  std::vector<const PluginInfo*> list(PolicyKind kind) const;

 private:
  std::vector<PluginInfo> plugins_;
};

// Registration functions of the plugin families (each in the file that implements them).
void register_queue_orders(PolicyRegistry& registry);   // policies/queue_order.cc
void register_core_policies(PolicyRegistry& registry);  // policies/registry.cc

// The spec of plugin `name` with all defaults. Throws ConfigError if unknown.
PolicySpec default_policy_spec(PolicyKind kind, const std::string& name);

// Parses a `policies.<kind>` value (scalar name or mapping, see above). Throws ConfigError that
// names FILE:LINE:COL and the key: an unknown plugin (listing the available ones), an unknown
// parameter (listing the plugin's parameters) or a value of the wrong type or out of range.
PolicySpec parse_policy_spec(PolicyKind kind, const ConfigNode& node);

// `spec` as YAML text for a resolved config: the bare name when the plugin has no parameters,
// else a flow map "{name: N, p: v, ...}".
std::string format_policy_spec(const PolicySpec& spec);

// Applies the `batch` and `preemption` choices to `sc` (batch formation, sarathi chunk size,
// admission watermark, preemption victim, max_preemptions). REQUIRES: registry-validated specs.
void apply_scheduler_policies(const PolicySpec& batch, const PolicySpec& preemption,
                              SchedulerConfig& sc);

// The catalogue `sim policies` prints: every kind, every plugin with description, origin and
// parameters (type, default, range or choices, doc).
std::string format_catalogue();

}  // namespace servelab
