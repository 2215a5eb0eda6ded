#include "policies/registry.h"

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "core/strings.h"

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

namespace {

// The parameters every preemption plugin shares.
ParamInfo victim_param() {
  return {"victim",
          ParamType::kString,
          std::string("last-running"),
          -1e300,
          1e300,
          {"last-running", "lowest-priority", "fewest-computed", "most-blocks"},
          "last-running: the most recently admitted running request (vLLM FCFS); "
          "lowest-priority: max (priority, arrival) over running (vLLM priority); "
          "fewest-computed: fewest output tokens, then longest prompt (SGLang retract order); "
          "most-blocks: most KV blocks held, ties to the later arrival. A victim already "
          "scheduled this step is refunded"};
}

ParamInfo max_preemptions_param() {
  return {"max_preemptions",
          ParamType::kInt,
          std::int64_t{0},
          0,
          1e9,
          {},
          "abort a request preempted more than this many times (0: no cap)"};
}

}  // namespace

void register_core_policies(PolicyRegistry& r) {
  r.add({PolicyKind::kBatch,
         "vllm",
         "continuous batching: running requests first, then waiting ones, under one token "
         "budget with chunked prefill",
         "vLLM v1 Scheduler.schedule() (vllm/v1/core/sched/scheduler.py)",
         {}});
  r.add({PolicyKind::kBatch,
         "static",
         "static batching: a batch forms only when nothing runs, reserves every member's maximum "
         "length, prefills (chunked) then decodes in lockstep; nobody joins until all finish",
         "request-level batching of pre-Orca servers (e.g. FasterTransformer, TF Serving)",
         {}});
  r.add({PolicyKind::kBatch,
         "orca",
         "iteration-level scheduling: running requests decode every step, new ones join whole "
         "(no chunking, head-of-line) when blocks for prompt + max_output_tokens can be reserved",
         "Orca (Yu et al., OSDI'22); Sarathi-Serve's orca_scheduler.py baseline",
         {}});
  r.add({PolicyKind::kBatch,
         "sarathi",
         "stall-free batching: decodes first, then ongoing partial prefills, then new prompts, "
         "chunked to a per-step token budget tau",
         "Sarathi-Serve (Agrawal et al., OSDI'24; sarathi/core/scheduler/sarathi_scheduler.py)",
         {{"chunk_size",
           ParamType::kInt,
           std::int64_t{0},
           0,
           1 << 24,
           {},
           "the token budget tau per step (0: max_num_batched_tokens; capped by it)"},
          {"watermark",
           ParamType::kDouble,
           0.01,
           0.0,
           0.99,
           {},
           "fraction of the KV blocks an admission must leave free"}}});
  r.add({PolicyKind::kBatch,
         "prefill-first",
         "a step is prefill-only when the waiting head can be admitted whole (head-of-line), "
         "else decode-only over all running requests; never mixed, no chunking",
         "vLLM v0 _schedule_default (vllm/core/scheduler.py, chunked prefill off)",
         {{"watermark",
           ParamType::kDouble,
           0.01,
           0.0,
           0.99,
           {},
           "fraction of the KV blocks an admission must leave free"}}});
  r.add({PolicyKind::kPreemption,
         "recompute",
         "free the victim's KV (full blocks stay cached) and recompute prompt + outputs on "
         "resume",
         "vLLM v1 _preempt_request (recompute only)",
         {victim_param(), max_preemptions_param()}});
  r.add({PolicyKind::kPreemption,
         "swap",
         "move the victim's KV to host memory (serving.swap_space_gb) and copy it back before "
         "new admissions; recompute instead when the host pool is full",
         "vLLM v0 --preemption-mode swap (vllm/core/scheduler.py _preempt_by_swap)",
         {victim_param(), max_preemptions_param()}});
  r.add({PolicyKind::kPreemption,
         "auto",
         "per victim, swap when two host-link transfers of its blocks cost less than "
         "recomputing its computed tokens by the cost model, else recompute",
         "vLLM v0 preemption modes chosen per victim by cost (FastServe-style KV offload)",
         {victim_param(), max_preemptions_param()}});
  r.add({PolicyKind::kPrefixCache,
         "hash",
         "hash-chained full blocks are shared across requests and kept until evicted (LRU)",
         "vLLM v1 automatic prefix caching (kv_cache_utils.hash_block_tokens)",
         {}});
  r.add({PolicyKind::kPrefixCache,
         "radix",
         "a radix tree of full blocks owns the cache: nodes used by running requests (and their "
         "ancestors) are locked, unlocked leaves are evicted least recently used first",
         "SGLang (RadixAttention)",
         {}});
  r.add({PolicyKind::kPrefixCache,
         "none",
         "no prefix caching: every request computes its whole "
         "prompt",
         "vLLM --no-enable-prefix-caching",
         {}});
  r.add({PolicyKind::kAllocation,
         "paged",
         "fixed-size KV blocks allocated on demand from one pool",
         "PagedAttention (Kwon et al., SOSP'23)",
         {}});
  r.add({PolicyKind::kAllocation,
         "contiguous",
         "each request reserves KV for its maximum length at admission (no sharing, no prefix "
         "cache)",
         "serving systems before PagedAttention (FasterTransformer, Orca), as in Kwon et al.",
         {{"reserve",
           ParamType::kString,
           std::string("max_model_len"),
           -1e300,
           1e300,
           {"max_model_len", "max_tokens"},
           "max_model_len: every request reserves max_model_len tokens; max_tokens: prompt + "
           "its max_output_tokens"}}});
}

void apply_scheduler_policies(const PolicySpec& batch, const PolicySpec& preemption,
                              SchedulerConfig& sc) {
  if (batch.name == "static") {
    sc.batch_formation = BatchFormation::kStatic;
  } else if (batch.name == "orca") {
    sc.batch_formation = BatchFormation::kOrca;
  } else if (batch.name == "sarathi") {
    sc.batch_formation = BatchFormation::kSarathi;
    sc.sarathi_chunk_size = static_cast<std::int32_t>(batch.get_int("chunk_size"));
    sc.admission_watermark = batch.get_double("watermark");
  } else if (batch.name == "prefill-first") {
    sc.batch_formation = BatchFormation::kPrefillFirst;
    sc.admission_watermark = batch.get_double("watermark");
  } else {
    sc.batch_formation = BatchFormation::kVllm;
  }
  const std::string& victim = preemption.get_string("victim");
  sc.preemption_victim = victim == "lowest-priority"   ? PreemptionVictim::kLowestPriority
                         : victim == "fewest-computed" ? PreemptionVictim::kFewestComputed
                         : victim == "most-blocks"     ? PreemptionVictim::kMostBlocks
                                                       : PreemptionVictim::kLastRunning;
  sc.max_preemptions = static_cast<std::int32_t>(preemption.get_int("max_preemptions"));
  sc.preemption_mode = preemption.name == "swap"   ? PreemptionMode::kSwap
                       : preemption.name == "auto" ? PreemptionMode::kAuto
                                                   : PreemptionMode::kRecompute;
  // Only the vllm formation resumes swapped requests (static and orca never preempt).
  if (sc.preemption_mode != PreemptionMode::kRecompute &&
      (sc.batch_formation == BatchFormation::kSarathi ||
       sc.batch_formation == BatchFormation::kPrefillFirst)) {
    throw ConfigError("policies.preemption: '" + preemption.name +
                      "' is not supported with batch '" + batch.name +
                      "' (swapping needs batch vllm; use preemption recompute)");
  }
}

const PolicyRegistry& PolicyRegistry::instance() {
  static const PolicyRegistry* registry = [] {
    auto* r = new PolicyRegistry();  // never destroyed: usable from any static destructor
    register_core_policies(*r);
    register_queue_orders(*r);
    return r;
  }();
  return *registry;
}

void PolicyRegistry::add(PluginInfo info) {
  if (find(info.kind, info.name) != nullptr) {
    throw std::logic_error(std::string("policy registry: duplicate ") + to_string(info.kind) +
                           " plugin '" + info.name + "'");
  }
  for (const ParamInfo& p : info.params) {
    if (p.def.index() != static_cast<std::size_t>(p.type)) {
      throw std::logic_error("policy registry: plugin '" + info.name + "' parameter '" + p.name +
                             "' has a default of another type");
    }
  }
  plugins_.push_back(std::move(info));
}

const PluginInfo* PolicyRegistry::find(PolicyKind kind, std::string_view name) const {
  for (const PluginInfo& p : plugins_) {
    if (p.kind == kind && p.name == name) return &p;
  }
  return nullptr;
}

std::vector<const PluginInfo*> PolicyRegistry::list(PolicyKind kind) const {
  std::vector<const PluginInfo*> out;
  for (const PluginInfo& p : plugins_) {
    if (p.kind == kind) out.push_back(&p);
  }
  return out;
}

namespace {

std::vector<std::string> plugin_names(PolicyKind kind) {
  std::vector<std::string> names;
  for (const PluginInfo* p : PolicyRegistry::instance().list(kind)) names.push_back(p->name);
  return names;
}

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
                      "' (available: " + join(plugin_names(kind)) + ")");
  }
  return defaults_of(*info);
}

PolicySpec parse_policy_spec(PolicyKind kind, const ConfigNode& node) {
  const std::string expected_name = std::string("a ") + to_string(kind) + " policy name (one of " +
                                    join(plugin_names(kind)) + ")";
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
  for (PolicyKind kind : kAllPolicyKinds) {
    out += "\n";
    out += to_string(kind);
    out += ":\n";
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
