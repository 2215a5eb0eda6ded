// The policy-plugin registry: for each plugin kind (batch, queue, preemption, prefix_cache,
// allocation, and the victim rules named by the preemption plugins' `victim` parameter) the
// plugins that exist, each with a one-line description, its origin (paper or system), its typed
// parameters with defaults and ranges, and its factory, which builds the plugin's objects into a
// SchedulerConfig (and KvCacheOptions). `sim policies` prints the catalogue (format_catalogue),
// experiment files name plugins through parse_policy_spec, and build_policy() runs the factory:
// a plugin is usable exactly when it is registered, and nothing maps names to behaviour anywhere
// else. An unknown name is a ConfigError listing the known ones.
//
// Registration: each plugin's file defines a namespace-scope `const PolicyRegistrar` object
// (policies/*.cc; a test or a program may register more the same way), so adding a policy is
// one new file (docs/policies.md, "Adding a policy"). Static registrars in a static library are
// dropped by the linker when nothing references their object file, so servelab_policies is
// linked whole (policies/CMakeLists.txt: $<LINK_LIBRARY:WHOLE_ARCHIVE,...>). The registry
// itself is a function-local static, so registrars may run in any order; listings are ordered
// by (rank, registration name), never by static-initialisation order, so the catalogue and the
// error messages are the same whatever the link order.
//
// A new kind (the routers of a cluster) is a PolicyKind value, a product field in PolicyTarget
// and its YAML key; parse, catalogue and errors need nothing new.
//
// YAML shape: a kind's value is either the plugin name (`queue: fcfs`) or a mapping with `name`
// and parameters (`queue: {name: predicted-sjf, error: 0.5}`). Parameters left out take their
// defaults; the resulting PolicySpec always holds every parameter of the plugin.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/kv_cache_manager.h"
#include "core/router.h"
#include "core/scheduler_config.h"
#include "serving/config_node.h"

namespace servelab {

// kVictim is not a `policies:` key: victim rules are named by the preemption plugins' `victim`
// parameter (so they are not in kAllPolicyKinds, the YAML keys).
enum class PolicyKind : std::uint8_t {
  kBatch,
  kQueue,
  kPreemption,
  kPrefixCache,
  kAllocation,
  kVictim,
  kRouter,     // `cluster.router` (core/router.h); not a `policies:` key either
  kAdmission,  // overload control: which arrivals are shed (core/admission_policy.h)
  kLengthCap,  // overload control: max_output_tokens lowered under load (core/length_cap.h)
};
inline constexpr PolicyKind kAllPolicyKinds[] = {PolicyKind::kBatch,      PolicyKind::kQueue,
                                                 PolicyKind::kPreemption, PolicyKind::kPrefixCache,
                                                 PolicyKind::kAllocation, PolicyKind::kAdmission,
                                                 PolicyKind::kLengthCap};
// The YAML key of a kind ("batch", "queue", "preemption", "prefix_cache", "allocation",
// "admission", "length_cap"; "victim", "router").
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
  // For string: the value names a registered plugin of this kind (the choices are the
  // registry's, listed when asked, so a plugin registered later is accepted too).
  std::optional<PolicyKind> plugin_of = std::nullopt;
};

struct PolicySpec;

// What a plugin's factory builds into. `scheduler` is always set; `kv_cache` is null when only
// the scheduler's side is wanted (experiment loading); `seed` is the experiment seed.
// `router` is set only when a router is built (it receives the router plugin's maker).
// `ttft_targets_ns` is the TTFT objective of each request class (index:
// RequestSpec::request_class) in nanoseconds, kNoTtftTarget for a class without one; empty when
// the experiment states none or is still being loaded. Only deadline orders read it (edf).
inline constexpr TimeNs kNoTtftTarget = -1;
struct PolicyTarget {
  SchedulerConfig* scheduler = nullptr;
  KvCacheOptions* kv_cache = nullptr;
  std::uint64_t seed = 0;
  RouterMaker* router = nullptr;
  std::vector<TimeNs> ttft_targets_ns = {};
};

// Builds the plugin `spec` names (its parameters validated by the registry) into `target`: sets
// the fields its kind owns (batch: scheduler->batch; queue: scheduler->make_waiting_queue;
// preemption: scheduler->preemption, max_preemptions and, through the victim rule's factory,
// scheduler->victim; victim: scheduler->victim; prefix_cache: scheduler->enable_prefix_caching
// and kv_cache->prefix_cache (the PrefixCache factory); allocation: kv_cache's allocation mode;
// router: *router, a maker that builds one Router per routing stage; admission:
// scheduler->admission; length_cap: scheduler->length_cap).
// May throw std::invalid_argument for values the plugin's constructor refuses.
using PolicyFactory = std::function<void(const PolicySpec& spec, PolicyTarget& target)>;

struct PluginInfo {
  PolicyKind kind = PolicyKind::kQueue;
  std::string name;
  std::string description;  // one line
  std::string origin;       // the paper or system it follows
  std::vector<ParamInfo> params;
  PolicyFactory factory;  // required
  int rank = 100;         // listing order within the kind (then the name)
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
  // The process-wide registry: every plugin whose PolicyRegistrar has run (all of them once
  // main() starts). Never destroyed, so usable from any static destructor.
  static const PolicyRegistry& instance();
  // The same, for registrars.
  static PolicyRegistry& mutable_instance();

  // Registers a plugin. Throws std::logic_error on a duplicate name within its kind, a missing
  // factory or a default that does not match its parameter's type.
  void add(PluginInfo info);
  // Unregisters a plugin (the Python module replaces a plugin a notebook registers again);
  // returns whether it was registered. Objects its factory already built are unaffected.
  bool remove(PolicyKind kind, std::string_view name);
  // nullptr if unknown.
  const PluginInfo* find(PolicyKind kind, std::string_view name) const;
  // The plugins of a kind by (rank, name).
  std::vector<const PluginInfo*> list(PolicyKind kind) const;
  // Their names, in the same order, comma-separated ("fcfs, priority, ...").
  std::string names(PolicyKind kind) const;

 private:
  std::vector<std::unique_ptr<PluginInfo>> plugins_;  // stable addresses
};

// Registers a plugin when constructed: define one at namespace scope in the plugin's file,
// `const PolicyRegistrar kRegistrar({PolicyKind::kBatch, "name", ..., factory});`. A duplicate
// or malformed entry throws std::logic_error during static initialisation (the program stops at
// once: a programming error).
struct PolicyRegistrar {
  explicit PolicyRegistrar(PluginInfo info) {
    PolicyRegistry::mutable_instance().add(std::move(info));
  }
};

// Factories for the common cases: a plugin whose object is default-constructed.
template <class Formation>
PolicyFactory batch_factory() {
  return [](const PolicySpec&, PolicyTarget& t) {
    t.scheduler->batch = std::make_shared<const Formation>();
  };
}
template <class Rule>
PolicyFactory victim_factory() {
  return [](const PolicySpec&, PolicyTarget& t) {
    t.scheduler->victim = std::make_shared<const Rule>();
  };
}
// The parameters every preemption plugin has: `victim` (a kVictim plugin, default
// last-running) and `max_preemptions`.
std::vector<ParamInfo> preemption_params();
// Builds the mode, the cap and the victim rule its `victim` parameter names.
void build_preemption(std::shared_ptr<const PreemptionMode> mode, const PolicySpec& spec,
                      PolicyTarget& target);
template <class Mode>
PolicyFactory preemption_factory() {
  return [](const PolicySpec& spec, PolicyTarget& t) {
    build_preemption(std::make_shared<const Mode>(), spec, t);
  };
}

// The spec of plugin `name` with all defaults. Throws ConfigError if unknown.
PolicySpec default_policy_spec(PolicyKind kind, const std::string& name);

// Parses a `policies.<kind>` value (scalar name or mapping, see above). Throws ConfigError that
// names FILE:LINE:COL and the key: an unknown plugin (listing the available ones), an unknown
// parameter (listing the plugin's parameters) or a value of the wrong type or out of range.
PolicySpec parse_policy_spec(PolicyKind kind, const ConfigNode& node);

// `spec` as YAML text for a resolved config: the bare name when the plugin has no parameters,
// else a flow map "{name: N, p: v, ...}".
std::string format_policy_spec(const PolicySpec& spec);

// Runs the factory of the plugin `spec` names. Throws ConfigError naming `key` (e.g.
// "policies.batch", or "FILE: policies.batch") when the plugin is unknown (listing the known
// ones) or refuses its parameters.
void build_policy(PolicyKind kind, const PolicySpec& spec, PolicyTarget& target,
                  const std::string& key = "");
// Checks that the built plugins work together: a batch formation that ranks running requests
// (preemptive) needs a queue order that ranks (ConfigError naming policies.queue and listing the
// orders that do), and a preemption mode that uses host memory needs a batch formation that
// resumes swapped requests (ConfigError naming policies.preemption). `file` (may be empty)
// prefixes the message.
void check_policy_combination(const SchedulerConfig& sc, const std::string& file = "");

// For programs and tests that build a SchedulerConfig in code: builds plugin `name` of `kind`
// with `params` over its defaults into `sc` (a kv_cache-side effect needs build_policy). Throws
// ConfigError on an unknown plugin or parameter, or a parameter of the wrong type.
void use_policy(SchedulerConfig& sc, PolicyKind kind, const std::string& name,
                const std::map<std::string, ParamValue>& params = {});

// The catalogue `sim policies` prints: every kind, every plugin with description, origin and
// parameters (type, default, range or choices, doc).
std::string format_catalogue();

}  // namespace servelab
