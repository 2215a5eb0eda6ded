#include "serving/experiment.h"

#include <cctype>
#include <filesystem>
#include <utility>

#include "traces/workload.h"

namespace servelab {

namespace {

void parse_serving(const ConfigNode& s, ExperimentConfig& c) {
  s.allow_keys({"block_size", "max_num_batched_tokens", "max_num_seqs", "max_model_len",
                "long_prefill_token_threshold", "enable_chunked_prefill", "gpu_memory_utilization",
                "num_gpu_blocks", "activation_reserve_gb", "swap_space_gb", "num_scheduler_steps",
                "frontend"});
  SchedulerConfig& sc = c.scheduler;
  sc.block_size = static_cast<std::int32_t>(s.get_int("block_size", sc.block_size, 1, 256));
  sc.max_num_batched_tokens = static_cast<std::int32_t>(
      s.get_int("max_num_batched_tokens", sc.max_num_batched_tokens, 1, 1 << 24));
  sc.max_num_seqs =
      static_cast<std::int32_t>(s.get_int("max_num_seqs", sc.max_num_seqs, 1, 1 << 20));
  sc.max_model_len =
      static_cast<std::int32_t>(s.get_int("max_model_len", sc.max_model_len, 2, 1 << 24));
  sc.long_prefill_token_threshold = static_cast<std::int32_t>(
      s.get_int("long_prefill_token_threshold", sc.long_prefill_token_threshold, 0, 1 << 24));
  sc.enable_chunked_prefill = s.get_bool("enable_chunked_prefill", sc.enable_chunked_prefill);
  c.gpu_memory_utilization =
      s.get_double("gpu_memory_utilization", c.gpu_memory_utilization, 0.01, 1.0);
  if (s.has("num_gpu_blocks")) c.num_gpu_blocks = s.get_int("num_gpu_blocks", 2, 1LL << 31);
  if (s.has("activation_reserve_gb")) {
    c.activation_reserve_gb = s.get_double("activation_reserve_gb", 0.0, 1e4);
  }
  c.swap_space_gb = s.get_double("swap_space_gb", c.swap_space_gb, 0, 1e5);
  if (s.has("num_scheduler_steps")) {
    sc.num_scheduler_steps = static_cast<std::int32_t>(s.get_int("num_scheduler_steps", 1, 1024));
    c.num_scheduler_steps_location = s.at("num_scheduler_steps").location();
  }
  if (auto f = s.find("frontend")) {
    // The front end's cost per request (serving/frontend.h); microseconds.
    f->allow_keys({"per_request_us", "per_prompt_token_us", "concurrency"});
    FrontendConfig& fe = c.frontend;
    fe.set = true;
    fe.per_request_us = f->get_double("per_request_us", 0.0, 0.0, 1e9);
    fe.per_prompt_token_us = f->get_double("per_prompt_token_us", 0.0, 0.0, 1e6);
    fe.concurrency = static_cast<std::int32_t>(f->get_int("concurrency", 1, 0, 1 << 20));
  }
}

void parse_policies(const ConfigNode& p, ExperimentConfig& c) {
  p.allow_keys({"batch", "queue", "preemption", "prefix_cache", "allocation"});
  // Each value is a plugin name or {name: ..., parameters}; the registry checks both.
  const std::pair<PolicyKind, PolicySpec*> kinds[] = {
      {PolicyKind::kBatch, &c.policies.batch},
      {PolicyKind::kQueue, &c.policies.queue},
      {PolicyKind::kPreemption, &c.policies.preemption},
      {PolicyKind::kPrefixCache, &c.policies.prefix_cache},
      {PolicyKind::kAllocation, &c.policies.allocation},
  };
  for (const auto& [kind, spec] : kinds) {
    if (auto v = p.find(to_string(kind))) *spec = parse_policy_spec(kind, *v);
  }
  // Each plugin's factory builds its objects into the scheduler config (the KV cache side is
  // built at run time, kv_cache_options_for).
  PolicyTarget target{&c.scheduler, nullptr, c.seed};
  for (const auto& [kind, spec] : kinds) {
    build_policy(kind, *spec, target, c.file + ": policies." + to_string(kind));
  }
  check_policy_combination(c.scheduler);
}

// A plugin without parameters as its bare name (as before the registry), else a flow map.
void emit_policy(YAML::Emitter& e, const char* key, const PolicySpec& spec) {
  e << YAML::Key << key << YAML::Value;
  if (spec.params.empty()) {
    e << spec.name;
    return;
  }
  e << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << spec.name;
  for (const auto& [k, v] : spec.params) {
    // Shortest round-trip text (0.1, not 0.10000000000000001); numbers stay unquoted.
    e << YAML::Key << k << YAML::Value << format_param(v);
  }
  e << YAML::EndMap;
}

void parse_slo(const ConfigNode& s, ExperimentConfig& c) {
  s.allow_keys({"ttft_ms", "tpot_ms", "e2e_ms"});
  if (s.has("ttft_ms")) c.slo.ttft_ms = s.get_double("ttft_ms", 0.0, 1e12);
  if (s.has("tpot_ms")) c.slo.tpot_ms = s.get_double("tpot_ms", 0.0, 1e12);
  if (s.has("e2e_ms")) c.slo.e2e_ms = s.get_double("e2e_ms", 0.0, 1e12);
}

void parse_outputs(const ConfigNode& o, ExperimentConfig& c) {
  o.allow_keys({"requests_csv", "steps_csv", "record_schedule", "record_events", "record_blocks"});
  c.outputs.requests_csv = o.get_bool("requests_csv", c.outputs.requests_csv);
  c.outputs.steps_csv = o.get_bool("steps_csv", c.outputs.steps_csv);
  c.outputs.record_schedule = o.get_bool("record_schedule", c.outputs.record_schedule);
  c.outputs.record_events = o.get_bool("record_events", c.outputs.record_events);
  c.outputs.record_blocks = o.get_bool("record_blocks", c.outputs.record_blocks);
}

// cost_model: {type: roofline, step_overhead_us, sequence_overhead_us} or {type: calibrated,
// file: cost.yaml}; a file alone means calibrated. A relative file is looked for in the working
// directory, then beside the experiment, then in the source tree.
void parse_cost_model(const ConfigNode& n, ExperimentConfig& c) {
  n.allow_keys({"type", "file", "step_overhead_us", "sequence_overhead_us"});
  CostModelChoice& cm = c.cost_model;
  cm.type = n.has("type")   ? n.at("type").as_choice({"roofline", "calibrated"})
            : n.has("file") ? "calibrated"
                            : "roofline";
  if (cm.type == "roofline") {
    if (n.has("file")) n.at("file").fail_message("a roofline cost model takes no file");
    // The hardware entry's bounds (serving/hardware_config.cc).
    if (n.has("step_overhead_us")) {
      cm.step_overhead_us = n.get_double("step_overhead_us", 0.0, 1e7 - 1);
    }
    if (n.has("sequence_overhead_us")) {
      cm.sequence_overhead_us = n.get_double("sequence_overhead_us", 0.0, 1e6 - 1);
    }
    return;
  }
  for (const char* key : {"step_overhead_us", "sequence_overhead_us"}) {
    if (n.has(key)) {
      n.at(key).fail_message(std::string("a calibrated cost model fits its own host time; ") + key +
                             " is a roofline key");
    }
  }
  const ConfigNode file = n.at("file");
  const std::string path = file.as_string();
  std::error_code ec;
  std::optional<std::string> found;
  if (std::filesystem::path(path).is_absolute() || std::filesystem::exists(path, ec)) {
    found = path;
  } else {
    found = resolve_data_path(path, c.base_dir);
  }
  if (!found || !std::filesystem::exists(*found, ec)) {
    file.fail_message("cost model file '" + path + "' not found");
  }
  cm.file = *found;
  cm.calibrated = load_calibrated_profile(cm.file);
}

}  // namespace

ConfigNode ExperimentConfig::workload_section() const {
  ConfigNode root_node(root, std::make_shared<const std::string>(file), "");
  return root_node.at("workload");
}

ExperimentConfig load_experiment(const std::string& path, const std::vector<std::string>& overrides,
                                 std::optional<std::uint64_t> seed) {
  ConfigNode doc = ConfigNode::load_file(path);
  YAML::Node root = doc.yaml();
  for (const std::string& o : overrides) apply_override(root, o);
  ConfigNode top(root, std::make_shared<const std::string>(path), "");

  ExperimentConfig c;
  c.file = path;
  c.base_dir = std::filesystem::path(path).parent_path().string();
  if (c.base_dir.empty())
    c.base_dir.push_back('.');  // (not = ".": GCC 12 -Wrestrict false positive)
  top.allow_keys({"name", "description", "seed", "model", "hardware", "serving", "policies",
                  "workload", "slo", "outputs", "compare", "cost_model", "sweep", "limits",
                  "parallel", "topology"});
  c.name = top.has("name") ? top.get_string("name") : std::filesystem::path(path).stem().string();
  // The name becomes a folder name (out/<name>): no '/', no "." or "..", no hidden folder.
  bool name_ok = !c.name.empty() && c.name.front() != '.';
  for (char ch : c.name) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')) {
      name_ok = false;
    }
  }
  if (!name_ok) {
    constexpr const char* kWhat =
        "a name of letters, digits, '-', '_' or '.' that does not start with '.'";
    if (top.has("name")) top.at("name").fail(kWhat);
    throw ConfigError(path + ": the experiment name '" + c.name + "' (from the file name) is not " +
                      kWhat + "; set `name:`");
  }
  c.description = top.get_string("description", "");
  c.seed = static_cast<std::uint64_t>(top.get_int("seed", 0, 0, INT64_MAX));
  if (seed) c.seed = *seed;
  c.model = top.get_string("model");
  c.hardware = top.get_string("hardware");
  if (auto s = top.find("serving")) parse_serving(*s, c);
  if (auto p = top.find("policies")) parse_policies(*p, c);
  // Multi-step needs a formation that reserves lookahead slots (every built-in one does).
  if (c.scheduler.num_scheduler_steps > 1 && c.scheduler.batch != nullptr &&
      !c.scheduler.batch->supports_multi_step()) {
    throw ConfigError(c.num_scheduler_steps_location +
                      ": key 'serving.num_scheduler_steps': batch formation '" +
                      std::string(c.scheduler.batch->name()) +
                      "' does not support multi-step scheduling (it reserves no lookahead "
                      "slots); use 1 or a formation that does (vllm, prefill-first, sarathi, "
                      "orca, static)");
  }
  if (auto s = top.find("slo")) parse_slo(*s, c);
  if (auto o = top.find("outputs")) parse_outputs(*o, c);
  if (auto m = top.find("cost_model")) parse_cost_model(*m, c);
  parse_parallel_section(top, c.parallel);
  if (!top.has("workload")) top.at("workload");  // throws "required but missing"
  if (auto l = top.find("limits")) {
    l->allow_keys({"max_requests", "max_duration_s"});
    c.limits_set = true;
    c.max_requests = l->get_int("max_requests", kDefaultMaxRequests, 1, 1'000'000'000'000);
    c.max_duration_ns = seconds_to_ns(
        l->get_double("max_duration_s", static_cast<double>(kDefaultMaxDurationS), 1e-9, 4e9));
  }
  // The workload's own size against the limits, before anything runs (a trace or session
  // workload is checked as it is read: run_simulation wraps it in limit_workload()).
  const ConfigNode w = top.at("workload");
  if (w.is_map() && w.has("num_requests") && w.at("num_requests").is_scalar()) {
    const ConfigNode n = w.at("num_requests");
    const double v = n.as_double();
    if (v > static_cast<double>(c.max_requests)) {
      n.fail("at most limits.max_requests (" + std::to_string(c.max_requests) +
             "); raise limits.max_requests to run more");
    }
  }
  if (w.is_map() && w.has("duration_s") && w.at("duration_s").is_scalar()) {
    const ConfigNode d = w.at("duration_s");
    if (d.as_double() > ns_to_s(c.max_duration_ns)) {
      d.fail("at most limits.max_duration_s (" + std::to_string(ns_to_s(c.max_duration_ns)) +
             " s); raise limits.max_duration_s to simulate longer");
    }
  }
  c.root = root;
  return c;
}

std::string resolved_config_yaml(const ExperimentConfig& c,
                                 const std::vector<std::pair<std::string, std::string>>& extra) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << c.name;
  if (!c.description.empty()) e << YAML::Key << "description" << YAML::Value << c.description;
  e << YAML::Key << "seed" << YAML::Value << c.seed;
  e << YAML::Key << "model" << YAML::Value << c.model;
  e << YAML::Key << "hardware" << YAML::Value << c.hardware;
  e << YAML::Key << "serving" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "block_size" << YAML::Value << c.scheduler.block_size;
  e << YAML::Key << "max_num_batched_tokens" << YAML::Value << c.scheduler.max_num_batched_tokens;
  e << YAML::Key << "max_num_seqs" << YAML::Value << c.scheduler.max_num_seqs;
  e << YAML::Key << "max_model_len" << YAML::Value << c.scheduler.max_model_len;
  e << YAML::Key << "long_prefill_token_threshold" << YAML::Value
    << c.scheduler.long_prefill_token_threshold;
  e << YAML::Key << "enable_chunked_prefill" << YAML::Value << c.scheduler.enable_chunked_prefill;
  if (c.scheduler.num_scheduler_steps != 1) {
    e << YAML::Key << "num_scheduler_steps" << YAML::Value << c.scheduler.num_scheduler_steps;
  }
  e << YAML::Key << "gpu_memory_utilization" << YAML::Value << c.gpu_memory_utilization;
  if (c.num_gpu_blocks) e << YAML::Key << "num_gpu_blocks" << YAML::Value << *c.num_gpu_blocks;
  if (c.activation_reserve_gb) {
    e << YAML::Key << "activation_reserve_gb" << YAML::Value << *c.activation_reserve_gb;
  }
  e << YAML::Key << "swap_space_gb" << YAML::Value << c.swap_space_gb;
  if (c.frontend.set) {
    e << YAML::Key << "frontend" << YAML::Value << YAML::Flow << YAML::BeginMap;
    e << YAML::Key << "per_request_us" << YAML::Value << c.frontend.per_request_us;
    e << YAML::Key << "per_prompt_token_us" << YAML::Value << c.frontend.per_prompt_token_us;
    e << YAML::Key << "concurrency" << YAML::Value << c.frontend.concurrency;
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
  e << YAML::Key << "policies" << YAML::Value << YAML::BeginMap;
  emit_policy(e, "batch", c.policies.batch);
  emit_policy(e, "queue", c.policies.queue);
  emit_policy(e, "preemption", c.policies.preemption);
  emit_policy(e, "prefix_cache", c.policies.prefix_cache);
  emit_policy(e, "allocation", c.policies.allocation);
  e << YAML::EndMap;
  e << YAML::Key << "workload" << YAML::Value << without_override_marks(c.root["workload"]);
  e << YAML::Key << "slo" << YAML::Value << YAML::BeginMap;
  if (c.slo.ttft_ms) e << YAML::Key << "ttft_ms" << YAML::Value << *c.slo.ttft_ms;
  if (c.slo.tpot_ms) e << YAML::Key << "tpot_ms" << YAML::Value << *c.slo.tpot_ms;
  if (c.slo.e2e_ms) e << YAML::Key << "e2e_ms" << YAML::Value << *c.slo.e2e_ms;
  e << YAML::EndMap;
  e << YAML::Key << "outputs" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "requests_csv" << YAML::Value << c.outputs.requests_csv;
  e << YAML::Key << "steps_csv" << YAML::Value << c.outputs.steps_csv;
  e << YAML::Key << "record_schedule" << YAML::Value << c.outputs.record_schedule;
  if (c.outputs.record_events) e << YAML::Key << "record_events" << YAML::Value << true;
  if (c.outputs.record_blocks) e << YAML::Key << "record_blocks" << YAML::Value << true;
  e << YAML::EndMap;
  if (c.cost_model.type != "roofline") {
    e << YAML::Key << "cost_model" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "type" << YAML::Value << c.cost_model.type;
    e << YAML::Key << "file" << YAML::Value << c.cost_model.file;
    e << YAML::EndMap;
  } else if (c.cost_model.step_overhead_us || c.cost_model.sequence_overhead_us) {
    e << YAML::Key << "cost_model" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "type" << YAML::Value << "roofline";
    if (c.cost_model.step_overhead_us) {
      e << YAML::Key << "step_overhead_us" << YAML::Value << *c.cost_model.step_overhead_us;
    }
    if (c.cost_model.sequence_overhead_us) {
      e << YAML::Key << "sequence_overhead_us" << YAML::Value << *c.cost_model.sequence_overhead_us;
    }
    e << YAML::EndMap;
  }
  if (c.parallel.set) {
    e << YAML::Key << "parallel" << YAML::Value << YAML::Flow << YAML::BeginMap;
    e << YAML::Key << "tensor" << YAML::Value << c.parallel.tensor;
    e << YAML::Key << "pipeline" << YAML::Value << c.parallel.pipeline;
    e << YAML::Key << "microbatches" << YAML::Value << c.parallel.microbatches;
    e << YAML::EndMap;
  }
  if (c.parallel.topology) {
    e << YAML::Key << "topology" << YAML::Value << without_override_marks(c.root["topology"]);
  }
  if (c.limits_set) {
    e << YAML::Key << "limits" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "max_requests" << YAML::Value << c.max_requests;
    e << YAML::Key << "max_duration_s" << YAML::Value << ns_to_s(c.max_duration_ns);
    e << YAML::EndMap;
  }
  if (!extra.empty()) {
    e << YAML::Key << "derived" << YAML::Value << YAML::BeginMap;
    for (const auto& [k, v] : extra) e << YAML::Key << k << YAML::Value << v;
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace servelab
