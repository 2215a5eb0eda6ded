#include "policies/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "core/batch_formation.h"
#include "core/preemption_mode.h"
#include "core/strings.h"
#include "core/waiting_queue.h"

namespace servelab {

const char* to_string(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kBatch:
      return "batch";
    case PolicyKind::kQueue:
      return "queue";
    case PolicyKind::kPreemption:
      return "preemption";
    case PolicyKind::kPrefixCache:
      return "prefix_cache";
    case PolicyKind::kAllocation:
      return "allocation";
    case PolicyKind::kVictim:
      return "victim";
    case PolicyKind::kRouter:
      return "router";
    case PolicyKind::kAdmission:
      return "admission";
    case PolicyKind::kLengthCap:
      return "length_cap";
  }
  return "?";
}

const char* to_string(ParamType type) {
  switch (type) {
    case ParamType::kInt:
      return "int";
    case ParamType::kDouble:
      return "double";
    case ParamType::kBool:
      return "bool";
    case ParamType::kString:
      return "string";
  }
  return "?";
}

std::string format_param(const ParamValue& v) {
  if (const auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) {
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, *d);
    return std::string(buf, res.ptr);
  }
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  return std::get<std::string>(v);
}

namespace {

template <class T>
const T& get_typed(const PolicySpec& spec, const std::string& key) {
  const auto it = spec.params.find(key);
  if (it == spec.params.end()) {
    throw std::logic_error("policy '" + spec.name + "' has no parameter '" + key + "'");
  }
  const T* v = std::get_if<T>(&it->second);
  if (v == nullptr) {
    throw std::logic_error("policy '" + spec.name + "': parameter '" + key + "' has another type");
  }
  return *v;
}

// "an int in [0, 10]", "a double >= 0", "one of a, b", ...
std::string expected_text(const ParamInfo& p) {
  switch (p.type) {
    case ParamType::kBool:
      return "a bool (true or false)";
    case ParamType::kString:
      if (p.plugin_of) return "one of " + PolicyRegistry::instance().names(*p.plugin_of);
      return p.choices.empty() ? "a string" : "one of " + join(p.choices);
    case ParamType::kInt:
    case ParamType::kDouble: {
      const bool is_int = p.type == ParamType::kInt;
      std::string text = is_int ? "an int" : "a double";
      auto num = [&](double x) {
        return is_int ? std::to_string(static_cast<std::int64_t>(x)) : format_param(x);
      };
      const bool lo = p.min > -1e300, hi = p.max < 1e300;
      if (lo && hi) return text + " in [" + num(p.min) + ", " + num(p.max) + "]";
      if (lo) return text + " >= " + num(p.min);
      if (hi) return text + " <= " + num(p.max);
      return text;
    }
  }
  return "?";
}

ParamValue parse_param(const ParamInfo& p, const ConfigNode& v) {
  switch (p.type) {
    case ParamType::kInt: {
      const double lo = std::max(p.min, -9.2e18), hi = std::min(p.max, 9.2e18);
      if (!v.is_scalar()) v.fail(expected_text(p));
      try {
        return v.as_int(static_cast<std::int64_t>(lo), static_cast<std::int64_t>(hi));
      } catch (const ConfigError&) {
        v.fail(expected_text(p));
      }
    }
    case ParamType::kDouble:
      if (!v.is_scalar()) v.fail(expected_text(p));
      try {
        return v.as_double(p.min, p.max);
      } catch (const ConfigError&) {
        v.fail(expected_text(p));
      }
    case ParamType::kBool:
      if (!v.is_scalar()) v.fail(expected_text(p));
      try {
        return v.as_bool();
      } catch (const ConfigError&) {
        v.fail(expected_text(p));
      }
    case ParamType::kString: {
      if (!v.is_scalar()) v.fail(expected_text(p));
      std::string s = v.as_string();
      if (p.plugin_of && PolicyRegistry::instance().find(*p.plugin_of, s) == nullptr) {
        v.fail(expected_text(p));
      }
      if (!p.choices.empty()) {
        bool ok = false;
        for (const std::string& c : p.choices) ok = ok || c == s;
        if (!ok) v.fail(expected_text(p));
      }
      return s;
    }
  }
  v.fail("a parameter value");
}

}  // namespace

std::int64_t PolicySpec::get_int(const std::string& key) const {
  return get_typed<std::int64_t>(*this, key);
}
double PolicySpec::get_double(const std::string& key) const {
  return get_typed<double>(*this, key);
}
bool PolicySpec::get_bool(const std::string& key) const { return get_typed<bool>(*this, key); }
const std::string& PolicySpec::get_string(const std::string& key) const {
  return get_typed<std::string>(*this, key);
}

std::vector<ParamInfo> preemption_params() {
  ParamInfo victim{"victim",
                   ParamType::kString,
                   std::string("last-running"),
                   -1e300,
                   1e300,
                   {},
                   "last-running: the most recently admitted running request (vLLM FCFS); "
                   "lowest-priority: max (priority, arrival) over running (vLLM priority); "
                   "fewest-computed: fewest output tokens, then longest prompt (SGLang retract "
                   "order); most-blocks: most KV blocks held, ties to the later arrival. A victim "
                   "already scheduled this step is refunded"};
  victim.plugin_of = PolicyKind::kVictim;
  ParamInfo cap{"max_preemptions",
                ParamType::kInt,
                std::int64_t{0},
                0,
                1e9,
                {},
                "abort a request preempted more than this many times (0: no cap)"};
  return {victim, cap};
}

void build_preemption(std::shared_ptr<const PreemptionMode> mode, const PolicySpec& spec,
                      PolicyTarget& target) {
  target.scheduler->preemption = std::move(mode);
  target.scheduler->max_preemptions = static_cast<std::int32_t>(spec.get_int("max_preemptions"));
  build_policy(PolicyKind::kVictim,
               default_policy_spec(PolicyKind::kVictim, spec.get_string("victim")), target);
}

const PolicyRegistry& PolicyRegistry::instance() { return mutable_instance(); }

PolicyRegistry& PolicyRegistry::mutable_instance() {
  static PolicyRegistry* registry = new PolicyRegistry();  // never destroyed
  return *registry;
}

void PolicyRegistry::add(PluginInfo info) {
  if (find(info.kind, info.name) != nullptr) {
    throw std::logic_error(std::string("policy registry: duplicate ") + to_string(info.kind) +
                           " plugin '" + info.name + "'");
  }
  if (!info.factory) {
    throw std::logic_error("policy registry: plugin '" + info.name + "' has no factory");
  }
  for (const ParamInfo& p : info.params) {
    if (p.def.index() != static_cast<std::size_t>(p.type)) {
      throw std::logic_error("policy registry: plugin '" + info.name + "' parameter '" + p.name +
                             "' has a default of another type");
    }
  }
  plugins_.push_back(std::make_unique<PluginInfo>(std::move(info)));
}

bool PolicyRegistry::remove(PolicyKind kind, std::string_view name) {
  for (auto it = plugins_.begin(); it != plugins_.end(); ++it) {
    if ((*it)->kind == kind && (*it)->name == name) {
      plugins_.erase(it);
      return true;
    }
  }
  return false;
}

const PluginInfo* PolicyRegistry::find(PolicyKind kind, std::string_view name) const {
  for (const auto& p : plugins_) {
    if (p->kind == kind && p->name == name) return p.get();
  }
  return nullptr;
}

std::vector<const PluginInfo*> PolicyRegistry::list(PolicyKind kind) const {
  std::vector<const PluginInfo*> out;
  for (const auto& p : plugins_) {
    if (p->kind == kind) out.push_back(p.get());
  }
  std::sort(out.begin(), out.end(), [](const PluginInfo* a, const PluginInfo* b) {
    return std::tie(a->rank, a->name) < std::tie(b->rank, b->name);
  });
  return out;
}

std::string PolicyRegistry::names(PolicyKind kind) const {
  std::string out;
  for (const PluginInfo* p : list(kind)) out += (out.empty() ? "" : ", ") + p->name;
  return out;
}

namespace {

PolicySpec defaults_of(const PluginInfo& info) {
  PolicySpec spec;
  spec.name = info.name;
  for (const ParamInfo& p : info.params) spec.params[p.name] = p.def;
  return spec;
}

}  // namespace

PolicySpec default_policy_spec(PolicyKind kind, const std::string& name) {
  const PluginInfo* info = PolicyRegistry::instance().find(kind, name);
  if (info == nullptr) {
    throw ConfigError(std::string("unknown ") + to_string(kind) + " policy '" + name +
                      "' (available: " + PolicyRegistry::instance().names(kind) + ")");
  }
  return defaults_of(*info);
}

PolicySpec parse_policy_spec(PolicyKind kind, const ConfigNode& node) {
  const std::string expected_name = std::string("a ") + to_string(kind) + " policy name (one of " +
                                    PolicyRegistry::instance().names(kind) + ")";
  if (node.is_scalar()) {
    const std::string name = node.as_string();
    const PluginInfo* info = PolicyRegistry::instance().find(kind, name);
    if (info == nullptr) node.fail(expected_name);
    return defaults_of(*info);
  }
  if (!node.is_map()) node.fail(expected_name + " or a mapping {name: ..., parameters}");
  if (!node.has("name")) node.at("name");  // throws "required but missing" at the mapping
  const ConfigNode name_node = node.at("name");
  if (!name_node.is_scalar()) name_node.fail(expected_name);
  const PluginInfo* info = PolicyRegistry::instance().find(kind, name_node.as_string());
  if (info == nullptr) name_node.fail(expected_name);
  std::vector<std::string> allowed = {"name"};
  for (const ParamInfo& p : info->params) allowed.push_back(p.name);
  node.allow_keys(allowed);
  PolicySpec spec = defaults_of(*info);
  for (const ParamInfo& p : info->params) {
    if (auto v = node.find(p.name)) spec.params[p.name] = parse_param(p, *v);
  }
  return spec;
}

void build_policy(PolicyKind kind, const PolicySpec& spec, PolicyTarget& target,
                  const std::string& key) {
  const std::string where = key.empty() ? std::string("policies.") + to_string(kind) : key;
  const PluginInfo* info = PolicyRegistry::instance().find(kind, spec.name);
  if (info == nullptr) {
    throw ConfigError(where + ": unknown " + to_string(kind) + " policy '" + spec.name +
                      "' (available: " + PolicyRegistry::instance().names(kind) + ")");
  }
  try {
    info->factory(spec, target);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(where + ": " + e.what());
  }
}

void check_policy_combination(const SchedulerConfig& sc, const std::string& file) {
  const std::string at = file.empty() ? "" : file + ": ";
  const std::string_view batch = sc.batch != nullptr ? sc.batch->name() : "vllm";
  if (sc.batch != nullptr && sc.batch->needs_ranked_queue()) {
    const std::unique_ptr<WaitingQueue> q =
        sc.make_waiting_queue ? sc.make_waiting_queue() : std::make_unique<FcfsWaitingQueue>();
    if (!q->ranks()) {
      std::string ranking;  // the registered orders that rank, built with their defaults
      for (const PluginInfo* p : PolicyRegistry::instance().list(PolicyKind::kQueue)) {
        SchedulerConfig probe;
        PolicyTarget target{&probe, nullptr, 0};
        p->factory(defaults_of(*p), target);
        if (!probe.make_waiting_queue || !probe.make_waiting_queue()->ranks()) continue;
        ranking += (ranking.empty() ? "" : ", ") + p->name;
      }
      throw ConfigError(at + "policies.queue: '" + q->name() +
                        "' does not rank running requests against waiting ones, which batch '" +
                        std::string(batch) + "' needs (orders that do: " + ranking + ")");
    }
  }
  if (sc.preemption == nullptr || !sc.preemption->uses_host_memory()) return;
  if (sc.batch == nullptr || sc.batch->resumes_swapped()) return;
  throw ConfigError(at + "policies.preemption: '" + std::string(sc.preemption->name()) +
                    "' is not supported with batch '" + std::string(batch) +
                    "' (swapping needs batch vllm; use preemption recompute)");
}

void use_policy(SchedulerConfig& sc, PolicyKind kind, const std::string& name,
                const std::map<std::string, ParamValue>& params) {
  PolicySpec spec = default_policy_spec(kind, name);
  for (const auto& [k, v] : params) {
    const auto it = spec.params.find(k);
    if (it == spec.params.end() || it->second.index() != v.index()) {
      throw ConfigError(std::string(to_string(kind)) + " policy '" + name + "': no parameter '" +
                        k + "' of that type");
    }
    it->second = v;
  }
  PolicyTarget target{&sc, nullptr, 0};
  build_policy(kind, spec, target);
}

std::string format_policy_spec(const PolicySpec& spec) {
  if (spec.params.empty()) return spec.name;
  std::string out = "{name: " + spec.name;
  for (const auto& [k, v] : spec.params) out += ", " + k + ": " + format_param(v);
  return out + "}";
}

std::string format_catalogue() {
  const PolicyRegistry& reg = PolicyRegistry::instance();
  std::string out =
      "Policy plugins, by kind. Choose one per kind in an experiment's `policies:` section,\n"
      "either by name (queue: fcfs) or with parameters (queue: {name: predicted-sjf, error: "
      "0.5}).\n";
  // The routers are chosen in `cluster.router` (docs/experiments.md), listed after the rest.
  constexpr PolicyKind kListed[] = {PolicyKind::kBatch,      PolicyKind::kQueue,
                                    PolicyKind::kPreemption, PolicyKind::kPrefixCache,
                                    PolicyKind::kAllocation, PolicyKind::kAdmission,
                                    PolicyKind::kLengthCap,  PolicyKind::kRouter};
  for (PolicyKind kind : kListed) {
    out += "\n";
    out += to_string(kind);
    out += kind == PolicyKind::kRouter ? " (cluster.router):\n" : ":\n";
    for (const PluginInfo* p : reg.list(kind)) {
      out += "  " + p->name + "\n";
      out += "      " + p->description + "\n";
      out += "      origin: " + p->origin + "\n";
      for (const ParamInfo& q : p->params) {
        out += "      " + q.name + " (" + expected_text(q) + ", default " + format_param(q.def) +
               "): " + q.doc + "\n";
      }
    }
  }
  return out;
}

}  // namespace servelab
