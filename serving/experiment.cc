#include "serving/experiment.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <utility>

#include "core/block_pool.h"
#include "core/preemption_mode.h"
#include "core/strings.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/model_config.h"
#include "traces/data_paths.h"
#include "traces/lora_workload.h"
#include "traces/mix_workload.h"
#include "traces/workload.h"

namespace servelab {

namespace {

// serving.speculative_config: vLLM's keys (method, num_speculative_tokens, prompt_lookup_min /
// prompt_lookup_max for ngram, model for draft_model), plus the simulator's acceptance_rate (one
// probability, or a list with one per draft position). docs/experiments.md documents each.
void parse_speculative(const ConfigNode& n, ExperimentConfig& c) {
  n.allow_keys({"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
                "model", "acceptance_rate"});
  SpeculativeConfig& sp = c.scheduler.speculative;
  c.speculative_location = n.location();
  const std::string method = n.at("method").as_choice({"ngram", "draft_model", "eagle"});
  sp.method = method == "ngram"         ? SpecMethod::kNgram
              : method == "draft_model" ? SpecMethod::kDraftModel
                                        : SpecMethod::kEagle;
  sp.num_speculative_tokens = static_cast<std::int32_t>(n.get_int("num_speculative_tokens", 0, 64));
  const bool ngram = sp.method == SpecMethod::kNgram;
  for (const char* key : {"prompt_lookup_min", "prompt_lookup_max"}) {
    if (!ngram && n.has(key)) n.at(key).fail_message("only for method ngram");
  }
  // vLLM's defaults (SpeculativeConfig): 5 and 5 when neither is given; one given sets both.
  const bool has_min = n.has("prompt_lookup_min"), has_max = n.has("prompt_lookup_max");
  if (has_min) {
    sp.prompt_lookup_min = static_cast<std::int32_t>(n.get_int("prompt_lookup_min", 1, 1024));
  }
  if (has_max) {
    sp.prompt_lookup_max = static_cast<std::int32_t>(n.get_int("prompt_lookup_max", 1, 1024));
  }
  if (has_min && !has_max) sp.prompt_lookup_max = sp.prompt_lookup_min;
  if (has_max && !has_min) sp.prompt_lookup_min = sp.prompt_lookup_max;
  if (sp.prompt_lookup_max < sp.prompt_lookup_min) {
    n.at("prompt_lookup_max")
        .fail("at least prompt_lookup_min (" + std::to_string(sp.prompt_lookup_min) + ")");
  }
  if (sp.method == SpecMethod::kDraftModel) {
    sp.draft_model = n.get_string("model");  // a catalogue name, checked by the simulator
  } else if (n.has("model")) {
    n.at("model").fail_message("only for method draft_model");
  }
  if (auto a = n.find("acceptance_rate")) {
    if (a->is_sequence()) {
      const std::vector<ConfigNode> rates = a->elements();
      // (With num_speculative_tokens 0, speculation off, only emptiness matters: a sweep may
      // switch it off without editing the list.)
      if (rates.empty() || (sp.num_speculative_tokens > 0 &&
                            rates.size() > static_cast<std::size_t>(sp.num_speculative_tokens))) {
        a->fail("a probability, or a list of 1 to num_speculative_tokens (" +
                std::to_string(sp.num_speculative_tokens) + ") probabilities");
      }
      for (const ConfigNode& r : rates) sp.acceptance_rates.push_back(r.as_double(0.0, 1.0));
    } else {
      sp.acceptance_rates.push_back(a->as_double(0.0, 1.0));
    }
  }
}

// serving.lora: vLLM's LoRA limits (max_loras, max_lora_rank; vllm/config/lora.py). Present means
// enable_lora; max_lora_rank takes vLLM's allowed values. docs/experiments.md documents both.
void parse_lora(const ConfigNode& n, ExperimentConfig& c) {
  if (!n.is_map()) n.fail("a mapping (max_loras, max_lora_rank)");
  n.allow_keys({"max_loras", "max_lora_rank"});
  LoraConfig& l = c.scheduler.lora;
  c.lora_location = n.location();
  l.max_loras = static_cast<std::int32_t>(n.get_int("max_loras", 1, 1, 1 << 16));
  l.max_lora_rank = static_cast<std::int32_t>(n.get_int("max_lora_rank", 16, 1, kMaxLoraRank));
  static constexpr std::int32_t kRanks[] = {1, 8, 16, 32, 64, 128, 256, 320, 512};
  if (std::find(std::begin(kRanks), std::end(kRanks), l.max_lora_rank) == std::end(kRanks)) {
    n.at("max_lora_rank").fail("one of vLLM's ranks 1, 8, 16, 32, 64, 128, 256, 320, 512");
  }
}

// workload.lora against serving.lora: adapters need LoRA on, and fit max_lora_rank.
void check_lora_section(const ConfigNode& w, const ExperimentConfig& c) {
  if (!w.is_map() || !w.has("lora")) return;
  const ConfigNode n = w.at("lora");
  const LoraWorkloadOptions o = *parse_lora_workload_options(w);  // its own keys, first
  if (!c.scheduler.lora.enabled()) {
    n.fail_message("requests under LoRA adapters need serving.lora (max_loras, max_lora_rank)");
  }
  if (o.rank > c.scheduler.lora.max_lora_rank) {
    const std::string most = std::to_string(c.scheduler.lora.max_lora_rank);
    if (n.has("rank")) n.at("rank").fail("a rank up to serving.lora.max_lora_rank (" + most + ")");
    n.fail_message("the default rank " + std::to_string(o.rank) +
                   " exceeds serving.lora.max_lora_rank (" + most + "); give " + n.path() +
                   ".rank");
  }
}

// Whether `workload` is a multi-turn one (`multiturn` or `sessions`), whose requests belong to
// sessions (a mix's parts are open-loop workloads: never sessions).
bool has_sessions(const ConfigNode& w) {
  if (!w.is_map() || !w.has("type") || !w.at("type").is_scalar()) return true;  // reported later
  const std::string type = w.at("type").as_string();
  return type == "multiturn" || type == "sessions";
}

// `workload.lora` (and a mix's parts' `workload.lora`) against serving.lora.
void check_workload_lora(const ConfigNode& top, const ExperimentConfig& c) {
  const std::optional<ConfigNode> w = top.find("workload");
  if (!w || !w->is_map()) return;
  check_lora_section(*w, c);
  if (!w->has("type") || w->at("type").as_string() != "mix" || !w->has("parts") ||
      !w->at("parts").is_sequence()) {
    return;
  }
  // Every part numbers its adapters 1, 2, ...: the same ids name the same adapters, which have
  // one rank each (the engine stopped mid-run on adapter 1 at two ranks; the simulator counted
  // one adapter).
  std::optional<std::pair<std::int32_t, std::string>> first_rank;  // rank, where it was given
  for (const ConfigNode& part : w->at("parts").elements()) {
    if (const std::optional<ConfigNode> pw = part.is_map() ? part.find("workload") : std::nullopt) {
      check_lora_section(*pw, c);
      if (!pw->is_map() || !pw->has("lora")) continue;
      const LoraWorkloadOptions o = *parse_lora_workload_options(*pw);
      const ConfigNode n = pw->at("lora");
      const std::string where = n.has("rank") ? n.at("rank").location() : n.location();
      if (!first_rank) {
        first_rank.emplace(o.rank, where);
      } else if (first_rank->first != o.rank) {
        (n.has("rank") ? n.at("rank") : n)
            .fail_message("rank " + std::to_string(o.rank) + " differs from another part's rank " +
                          std::to_string(first_rank->first) + " (" + first_rank->second +
                          "): every part's adapters are ids 1, 2, ..., the same adapters, and an "
                          "adapter has one rank; give the parts the same rank");
      }
    }
  }
}

// prefix_cache.pinned's {shared_prefix: P, length: N} against the workload that generates the
// prefixes: only a synthetic workload's `shared_prefix` and a multiturn one's `system_prompt`
// draw them from the experiment seed (a mix's parts draw from their own seeds, traces carry
// their own tokens), P must be one of its num_prefixes and N at most its length; anything else
// would pin blocks that no request can hit.
void check_pinned_prefixes(const ConfigNode& top, const PrefixCacheSection& section) {
  for (const PinnedPrefixConfig& p : section.pinned) {
    if (!p.shared_prefix) continue;
    const std::string at = p.location + ": shared_prefix " + std::to_string(*p.shared_prefix);
    const std::optional<ConfigNode> w = top.find("workload");
    const std::optional<ConfigNode> type = w && w->is_map() ? w->find("type") : std::nullopt;
    if (!type || !type->is_scalar()) return;  // the workload's own parse reports it
    const std::string t = type->as_string();
    const char* key = t == "synthetic" ? "shared_prefix" : t == "multiturn" ? "system_prompt" : "";
    const std::optional<ConfigNode> gen = *key != 0 ? w->find(key) : std::nullopt;
    if (!gen) {
      throw ConfigError(at + ": the workload (" + type->location() + ", type " + t +
                        ") generates no shared prefixes from the experiment seed (a synthetic "
                        "workload's shared_prefix and a multiturn one's system_prompt do); pin "
                        "{tokens: [...]} instead");
    }
    if (!gen->is_map()) return;
    if (const auto n = gen->find("num_prefixes"); n && n->is_scalar()) {
      const std::int64_t count = n->as_int(1, INT64_MAX);
      if (*p.shared_prefix >= static_cast<std::uint64_t>(count)) {
        throw ConfigError(at + ": expected 0 .. " + std::to_string(count - 1) + " (" +
                          n->location() + ": workload." + key + ".num_prefixes is " +
                          std::to_string(count) + ")");
      }
    }
    if (const auto n = gen->find("length"); n && n->is_scalar()) {
      const std::int64_t length = n->as_int(1, INT64_MAX);
      if (p.length > length) {
        throw ConfigError(at + ": length " + std::to_string(p.length) +
                          " is longer than the prefix (" + n->location() + ": workload." + key +
                          ".length is " + std::to_string(length) +
                          "); the tokens after it would never be hit");
      }
    }
  }
}

// serving.async_scheduling against the other choices (the Scheduler refuses the same ones; here
// the error names the file): vLLM v1 refuses speculative decoding other than EAGLE/MTP with it,
// and has neither multi-step rounds nor swap; ServeLab's async plans are vLLM v1's formation.
// A file found by a relative path, by the absolute name the system reads it by: symbolic links
// followed (weakly_canonical, as the trace readers name their files). `dir/../f` reached through
// a linked `dir` is the link target's sibling, which lexically_normal() does not know: config.yaml
// named another file than the one read, and its rerun read that one.
std::string file_as_read(const std::string& found) {
  std::error_code ec;
  const std::filesystem::path physical =
      std::filesystem::weakly_canonical(std::filesystem::absolute(found), ec);
  return ec ? std::filesystem::absolute(found).lexically_normal().string() : physical.string();
}

// `workload` with each data file it names (a trace's or sessions file's `path`, a length table's
// `file` or `table`) as the absolute path it was read from, so the run's config.yaml reads the
// same files from any folder (a relative path resolved against the experiment's folder).
YAML::Node with_absolute_data_paths(YAML::Node workload, const std::string& base_dir) {
  for_each_data_path(workload, [&](YAML::Node& value) {
    if (!std::filesystem::path(value.Scalar()).is_relative()) return;
    if (const auto found = resolve_data_path(value.Scalar(), base_dir)) {
      value = file_as_read(*found);
    }
  });
  return workload;
}

// Whether the batch formation reads enable_chunked_prefill and long_prefill_token_threshold.
bool uses_vllm_chunking(const SchedulerConfig& sc) {
  return sc.batch == nullptr || sc.batch->name() == "vllm" || sc.batch->name() == "preemptive";
}

// serving.enable_chunked_prefill and serving.long_prefill_token_threshold shape vLLM's prompt
// chunking (the vllm and preemptive formations); another formation would ignore them without a
// word, so writing one beside it is an error naming the key and what chunks there instead.
void check_chunking_keys(const ConfigNode& top, const ExperimentConfig& c) {
  if (uses_vllm_chunking(c.scheduler)) return;
  const std::string name(c.scheduler.batch->name());
  const auto serving = top.find("serving");
  if (!serving || !serving->is_map()) return;
  const std::string instead =
      name == "sarathi"  ? "; sarathi chunks by its chunk_size parameter"
      : name == "sglang" ? "; sglang chunks by its chunked_prefill_size parameter"
      : name == "static" ? "; static chunks prompts under the token budget alone"
                         : "; '" + name + "' never chunks a prompt";
  // A value that says what the formation does anyway is a record (vLLM v0's
  // `enable_chunked_prefill: false` beside prefill-first); one that asks otherwise is refused.
  const bool chunks = name == "sarathi" || name == "sglang" || name == "static";
  const auto refuse = [&](const ConfigNode& k) {
    k.fail_message("applies to policies.batch vllm and preemptive (vLLM's chunking), not '" + name +
                   "'" + instead);
  };
  if (const auto k = serving->find("enable_chunked_prefill");
      k && c.scheduler.enable_chunked_prefill != chunks) {
    refuse(*k);
  }
  if (const auto k = serving->find("long_prefill_token_threshold");
      k && c.scheduler.long_prefill_token_threshold != 0) {
    refuse(*k);
  }
}

void check_async_scheduling(const ExperimentConfig& c) {
  const SchedulerConfig& sc = c.scheduler;
  if (!sc.async_scheduling) return;
  const std::string at = c.async_scheduling_location + ": key 'serving.async_scheduling': ";
  if (sc.num_scheduler_steps > 1) {
    throw ConfigError(at + "async scheduling (vLLM v1) does not combine with num_scheduler_steps " +
                      std::to_string(sc.num_scheduler_steps) +
                      " (vLLM v0's multi-step scheduling, " + c.num_scheduler_steps_location +
                      "); use one or the other");
  }
  if (sc.speculative.enabled()) {
    throw ConfigError(at + "async scheduling does not combine with serving.speculative_config (" +
                      c.speculative_location +
                      "; vLLM allows only EAGLE/MTP drafts with it, which ServeLab's async plans "
                      "do not carry yet)");
  }
  if (sc.batch != nullptr && sc.batch->name() != "vllm") {
    throw ConfigError(at +
                      "async scheduling needs policies.batch vllm (vLLM v1's scheduler), not '" +
                      std::string(sc.batch->name()) + "'");
  }
  if (sc.preemption != nullptr && sc.preemption->uses_host_memory()) {
    throw ConfigError(at +
                      "async scheduling needs policies.preemption recompute (vLLM v1 has no "
                      "swap), not '" +
                      std::string(sc.preemption->name()) + "'");
  }
  const std::unique_ptr<WaitingQueue> queue =
      sc.make_waiting_queue ? sc.make_waiting_queue() : nullptr;
  if (queue != nullptr && queue->times_service()) {
    throw ConfigError(at + "async scheduling does not combine with policies.queue '" +
                      queue->name() +
                      "', which charges requests for the duration of each step they ran in "
                      "(overlapped steps have none of their own)");
  }
}

void parse_serving(const ConfigNode& s, ExperimentConfig& c) {
  s.allow_keys({"block_size", "max_num_batched_tokens", "max_num_seqs", "max_model_len",
                "long_prefill_token_threshold", "enable_chunked_prefill", "gpu_memory_utilization",
                "num_gpu_blocks", "activation_reserve_gb", "swap_space_gb", "num_scheduler_steps",
                "frontend", "speculative_config", "lora", "async_scheduling"});
  SchedulerConfig& sc = c.scheduler;
  sc.block_size = static_cast<std::int32_t>(s.get_int("block_size", sc.block_size, 1, 256));
  sc.max_num_batched_tokens = static_cast<std::int32_t>(
      s.get_int("max_num_batched_tokens", sc.max_num_batched_tokens, 1, 1 << 24));
  sc.max_num_seqs =
      static_cast<std::int32_t>(s.get_int("max_num_seqs", sc.max_num_seqs, 1, 1 << 20));
  sc.max_model_len =
      static_cast<std::int32_t>(s.get_int("max_model_len", sc.max_model_len, 2, 1 << 24));
  if (s.has("max_model_len")) c.max_model_len_location = s.at("max_model_len").location();
  sc.long_prefill_token_threshold = static_cast<std::int32_t>(
      s.get_int("long_prefill_token_threshold", sc.long_prefill_token_threshold, 0, 1 << 24));
  sc.enable_chunked_prefill = s.get_bool("enable_chunked_prefill", sc.enable_chunked_prefill);
  c.gpu_memory_utilization =
      s.get_double("gpu_memory_utilization", c.gpu_memory_utilization, 0.01, 1.0);
  if (s.has("num_gpu_blocks"))
    c.num_gpu_blocks = s.get_int("num_gpu_blocks", 2, BlockPool::kMaxBlocks);
  if (s.has("activation_reserve_gb")) {
    c.activation_reserve_gb = s.get_double("activation_reserve_gb", 0.0, 1e4);
  }
  c.swap_space_gb = s.get_double("swap_space_gb", c.swap_space_gb, 0, 1e5);
  if (s.has("num_scheduler_steps")) {
    sc.num_scheduler_steps = static_cast<std::int32_t>(s.get_int("num_scheduler_steps", 1, 1024));
    c.num_scheduler_steps_location = s.at("num_scheduler_steps").location();
  }
  if (auto sp = s.find("speculative_config")) parse_speculative(*sp, c);
  if (auto l = s.find("lora")) parse_lora(*l, c);
  sc.async_scheduling = s.get_bool("async_scheduling", false);
  if (sc.async_scheduling) c.async_scheduling_location = s.at("async_scheduling").location();
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
  p.allow_keys(
      {"batch", "queue", "preemption", "prefix_cache", "allocation", "admission", "length_cap"});
  // Each value is a plugin name or {name: ..., parameters}; the registry checks both.
  const std::pair<PolicyKind, PolicySpec*> kinds[] = {
      {PolicyKind::kBatch, &c.policies.batch},
      {PolicyKind::kQueue, &c.policies.queue},
      {PolicyKind::kPreemption, &c.policies.preemption},
      {PolicyKind::kPrefixCache, &c.policies.prefix_cache},
      {PolicyKind::kAllocation, &c.policies.allocation},
      {PolicyKind::kAdmission, &c.policies.admission},
      {PolicyKind::kLengthCap, &c.policies.length_cap},
  };
  for (const auto& [kind, spec] : kinds) {
    if (auto v = p.find(to_string(kind))) *spec = parse_policy_spec(kind, *v);
  }
  // Each plugin's factory builds its objects into the scheduler config (the KV cache side is
  // built at run time, kv_cache_options_for).
  PolicyTarget target{&c.scheduler, nullptr, c.seed};
  for (const auto& [kind, spec] : kinds) {
    const std::string key = std::string("policies.") + to_string(kind);
    const std::optional<ConfigNode> v = p.find(to_string(kind));
    build_policy(kind, *spec, target,
                 v ? v->location() + ": key '" + key + "'" : c.file + ": " + key);
  }
  check_policy_combination(c.scheduler, c.file);
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

void parse_slo_targets(const ConfigNode& s, SloTargets& t) {
  // > 0: a target of 0 ms could never be met (goodput 0 whatever the run).
  auto target = [&](const char* key, std::optional<double>& out) {
    if (!s.has(key)) return;
    const double v = s.get_double(key, 0.0, 1e12);
    if (!(v > 0)) s.at(key).fail("a number of ms > 0 (and at most 1e12)");
    out = v;
  };
  target("ttft_ms", t.ttft_ms);
  target("tpot_ms", t.tpot_ms);
  target("e2e_ms", t.e2e_ms);
}

// `slo:`; its `classes` keys must name classes of the workload (c.request_classes).
void parse_slo(const ConfigNode& s, ExperimentConfig& c) {
  s.allow_keys({"ttft_ms", "tpot_ms", "e2e_ms", "classes"});
  parse_slo_targets(s, c.slo);
  if (!s.has("classes")) return;
  const ConfigNode classes = s.at("classes");
  if (!classes.is_map()) classes.fail("a mapping of class name to {ttft_ms, tpot_ms, e2e_ms}");
  if (c.request_classes.empty()) {
    classes.fail_message(
        "the workload has no request classes: per-class targets need a `type: mix` workload "
        "whose parts name them");
  }
  for (const std::string& name : classes.keys()) {
    const ConfigNode t = classes.at(name);
    if (std::find(c.request_classes.begin(), c.request_classes.end(), name) ==
        c.request_classes.end()) {
      std::string known;
      for (const std::string& k : c.request_classes) known += (known.empty() ? "" : ", ") + k;
      t.fail_message("no class '" + name + "' in the workload (its classes: " + known + ")");
    }
    if (!t.is_map()) t.fail("a mapping {ttft_ms, tpot_ms, e2e_ms}");
    t.allow_keys({"ttft_ms", "tpot_ms", "e2e_ms"});
    parse_slo_targets(t, c.slo.classes[name]);
  }
}

// A deadline order needs deadlines: at least one TTFT objective (a class without one comes after
// every deadline, which is FCFS for the whole run when no class has one).
void check_deadline_queue(const ExperimentConfig& c) {
  if (c.policies.queue.name != "edf") return;
  for (const TimeNs t : ttft_targets_ns(c)) {
    if (t != kNoTtftTarget) return;
  }
  throw ConfigError(c.file +
                    ": policies.queue: edf orders requests by their TTFT deadline (arrival + "
                    "the request class's TTFT objective), but the experiment sets none; set "
                    "slo.ttft_ms (or slo.classes.NAME.ttft_ms)");
}

void parse_outputs(const ConfigNode& o, ExperimentConfig& c) {
  o.allow_keys({"requests_csv", "steps_csv", "record_schedule", "record_events", "record_blocks"});
  c.outputs.requests_csv = o.get_bool("requests_csv", c.outputs.requests_csv);
  c.outputs.steps_csv = o.get_bool("steps_csv", c.outputs.steps_csv);
  c.outputs.record_schedule = o.get_bool("record_schedule", c.outputs.record_schedule);
  c.outputs.record_events = o.get_bool("record_events", c.outputs.record_events);
  c.outputs.record_blocks = o.get_bool("record_blocks", c.outputs.record_blocks);
}

// cost_model: {type: roofline, step_overhead_us, sequence_overhead_us, block_indirection_ns} or
// {type: calibrated,
// file: cost.yaml}; a file alone means calibrated. A relative file is looked for in the working
// directory, then beside the experiment, then in the source tree.
void parse_cost_model(const ConfigNode& n, ExperimentConfig& c) {
  n.allow_keys(
      {"type", "file", "step_overhead_us", "sequence_overhead_us", "block_indirection_ns"});
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
    if (n.has("block_indirection_ns")) {
      cm.block_indirection_ns = n.get_double("block_indirection_ns", 0.0, 1e6 - 1);
    }
    return;
  }
  for (const char* key : {"step_overhead_us", "sequence_overhead_us", "block_indirection_ns"}) {
    if (n.has(key)) {
      n.at(key).fail_message(std::string("a calibrated cost model fits its own step time; ") + key +
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
  // By absolute path, as model files: config.yaml must name this file from any folder (sim
  // validate, run elsewhere, replayed with whatever file of that name was there).
  cm.file = file_as_read(*found);
  cm.calibrated = load_calibrated_profile(cm.file);
}

// cluster: {router, decode_router, kv_transfer, pools: [{name, model, hardware, count, role,
// parallel, topology}, ...]}.
// A model or hardware file named by a relative path is found as the workload's files are:
// beside the experiment first (resolve_data_path), else as given; found, it is made absolute
// (the run's config.yaml then names the same file from any folder). A catalogue name is kept.
void resolve_model_file(std::string& name, const std::string& base_dir) {
  const bool is_file = ends_with(name, ".yaml") || ends_with(name, ".yml") ||
                       ends_with(name, ".json") || name.find('/') != std::string::npos;
  if (!is_file || !std::filesystem::path(name).is_relative()) return;
  if (std::optional<std::string> found = resolve_data_path(name, base_dir)) {
    name = file_as_read(*found);
  }
}

void parse_cluster(const ConfigNode& n, ExperimentConfig& c) {
  n.allow_keys({"pools", "router", "decode_router", "kv_transfer", "topology"});
  ClusterConfig& cl = c.cluster;
  cl.set = true;
  if (auto r = n.find("router")) cl.router = parse_policy_spec(PolicyKind::kRouter, *r);
  if (auto r = n.find("decode_router")) {
    cl.decode_router = parse_policy_spec(PolicyKind::kRouter, *r);
  }
  if (auto t = n.find("kv_transfer")) {
    t->allow_keys({"bandwidth_gb_s", "latency_us", "layerwise", "sharing", "links"});
    cl.kv_transfer_set = true;
    cl.kv_transfer.bandwidth_gb_s = t->get_double("bandwidth_gb_s", 0.0, 0.0, 1e6);
    if (cl.kv_transfer.bandwidth_gb_s > 0 && cl.kv_transfer.bandwidth_gb_s < 1e-3) {
      // Slower links would take transfers past the representable times.
      t->at("bandwidth_gb_s").fail("0 (the host links) or a number of GB/s in [0.001, 1e6]");
    }
    cl.kv_transfer.latency_us = t->get_double("latency_us", cl.kv_transfer.latency_us, 0.0, 1e9);
    cl.kv_transfer.layerwise = t->get_bool("layerwise", false);
    if (auto l = t->find("links"); l && l->as_choice({"per_replica", "per_pair"}) == "per_pair") {
      cl.kv_transfer.links = KvTransferConfig::Links::kPerPair;
    }
    if (auto s = t->find("sharing")) {
      if (s->as_choice({"queue", "fair"}) == "fair") {
        cl.kv_transfer.sharing = KvTransferConfig::Sharing::kFair;
      }
      if (cl.kv_transfer.layerwise && cl.kv_transfer.sharing == KvTransferConfig::Sharing::kFair) {
        s->fail_message(
            "'fair' sharing is not modelled for layer-wise transfers (layerwise: true); use "
            "'queue' or layerwise: false");
      }
    }
  }
  const ConfigNode pools = n.at("pools");
  if (!pools.is_sequence() || pools.elements().empty()) {
    pools.fail("a non-empty list of pools ({name, model, hardware, count, role, ...})");
  }
  const std::string catalog = default_catalog_dir();
  // One topology for the whole cluster: its links' defaults are the experiment hardware's ports.
  std::optional<Topology> topology;
  if (auto t = n.find("topology")) {
    cl.topology = *t;
    const HardwareConfig hw = load_hardware(c.hardware, catalog);
    topology = parse_topology(*t, hw.interconnect, hw.name);
    if (auto k = n.find("kv_transfer")) {
      for (const char* key : {"bandwidth_gb_s", "links"}) {
        if (!k->has(key)) continue;
        k->at(key).fail_message(
            std::string("with cluster.topology the KV travels over the topology's links; remove ") +
            key + " (or the topology)");
      }
    }
  }
  std::int64_t total = 0;
  std::optional<ConfigNode> decode_role, prefill_role;
  std::string prefill_model;
  for (const ConfigNode& p : pools.elements()) {
    for (const char* old : {"tensor_parallel", "pipeline_parallel"}) {
      if (p.has(old)) {
        p.at(old).fail_message(std::string("a pool states its parallelism as the top level does: "
                                           "parallel: {tensor: N, pipeline: M}, not ") +
                               old);
      }
    }
    p.allow_keys({"name", "model", "hardware", "count", "role", "parallel", "topology"});
    PoolConfig pool;
    pool.location = p.location();
    pool.name = p.get_string("name", "pool" + std::to_string(cl.pools.size()));
    if (pool.name.empty()) p.at("name").fail("a non-empty pool name");
    for (const PoolConfig& q : cl.pools) {
      if (q.name == pool.name) {
        (p.has("name") ? p.at("name") : p)
            .fail_message("pool name '" + pool.name + "' is used twice; pool names are unique");
      }
    }
    pool.model = p.get_string("model", c.model);
    pool.hardware = p.get_string("hardware", c.hardware);
    resolve_model_file(pool.model, c.base_dir);
    resolve_model_file(pool.hardware, c.base_dir);
    // Unknown names are errors here, at the pool's key, not when the run starts.
    try {
      (void)load_model(pool.model, catalog);
    } catch (const ConfigError& e) {
      (p.has("model") ? p.at("model") : p).fail_message(e.what());
    }
    try {
      (void)load_hardware(pool.hardware, catalog);
    } catch (const ConfigError& e) {
      (p.has("hardware") ? p.at("hardware") : p).fail_message(e.what());
    }
    pool.count = static_cast<std::int32_t>(p.get_int("count", 1, 1, 1 << 20));
    total += pool.count;
    if (auto r = p.find("role")) {
      const std::string role = r->as_choice({"unified", "prefill", "decode"});
      pool.role = role == "prefill"  ? ReplicaRole::kPrefill
                  : role == "decode" ? ReplicaRole::kDecode
                                     : ReplicaRole::kUnified;
      if (pool.role == ReplicaRole::kDecode && !decode_role) decode_role = *r;
      if (pool.role == ReplicaRole::kPrefill && !prefill_role) {
        prefill_role = *r;
        prefill_model = pool.model;
      }
    }
    // The pool's parallelism, checked now against its model and topology (errors name
    // cluster.pools[i].parallel.tensor and the like); with a cluster topology, against that
    // (each replica's own placement is checked below).
    parse_parallel_section(p, pool.parallel);
    if (topology && pool.parallel.topology) {
      p.at("topology")
          .fail_message(
              "the cluster has a topology (cluster.topology) that places every pool's replicas; "
              "remove the pool's topology");
    }
    ParallelChoice check = pool.parallel;
    if (topology) check.topology = *cl.topology;
    (void)resolve_parallel(
        check, load_model(pool.model, catalog),
        topology ? load_hardware(c.hardware, catalog) : load_hardware(pool.hardware, catalog));
    cl.pools.push_back(std::move(pool));
  }
  if (total > (1 << 20)) pools.fail("at most 1048576 replicas in all");
  if (topology) {
    // Replicas one after another, pool by pool: enough GPUs, and no tensor group across nodes.
    std::string need;
    for (const PoolConfig& pool : cl.pools) {
      need += (need.empty() ? "" : " + ") + pool.name + " " + std::to_string(pool.count) + " x " +
              std::to_string(pool.num_gpus());
    }
    if (cl.num_gpus() > topology->num_gpus()) {
      cl.topology->fail_message("the pools need " + std::to_string(cl.num_gpus()) + " GPUs (" +
                                need + "), the topology has " +
                                std::to_string(topology->num_gpus()));
    }
    const std::vector<std::int32_t> first = cl.first_gpus();
    std::size_t r = 0;
    for (std::size_t i = 0; i < cl.pools.size(); ++i) {
      const PoolConfig& pool = cl.pools[i];
      const std::string key = pool.location + ": key 'cluster.pools[" + std::to_string(i) + "]'";
      for (std::int32_t k = 0; k < pool.count; ++k, ++r) {
        const std::string at = " (pool '" + pool.name + "', replica " + std::to_string(k) +
                               " from GPU " + topology->vertex_name(first[r]) + ")";
        check_replica_placement(pool.parallel.tensor, pool.parallel.pipeline, *topology, first[r],
                                (pool.parallel.set ? pool.parallel.tensor_where : key) + at,
                                (pool.parallel.set ? pool.parallel.pipeline_where : key) + at);
      }
    }
  }
  if (decode_role && !prefill_role) {
    decode_role->fail_message(
        "a decode pool needs a prefill pool to send it requests; add a pool with role prefill");
  }
  if (prefill_role && !decode_role) {
    prefill_role->fail_message(
        "a prefill pool needs a decode pool to hand its requests to; add a pool with role decode");
  }
  if (prefill_role) {
    // The KV a prefill replica computed is only meaningful to a replica of the same model.
    for (const ConfigNode& p : pools.elements()) {
      // Resolved as the pool's own (a relative file path names the same file made absolute).
      std::string model = p.get_string("model", c.model);
      resolve_model_file(model, c.base_dir);
      if (p.has("role") && p.at("role").as_string() != "unified" && model != prefill_model) {
        (p.has("model") ? p.at("model") : p)
            .fail_message("prefill and decode pools must serve the same model ('" + prefill_model +
                          "'), got '" + model + "'");
      }
    }
  }
  if (!cl.disaggregated() && (cl.decode_router || cl.kv_transfer_set)) {
    n.at(cl.decode_router ? "decode_router" : "kv_transfer")
        .fail_message("only meaningful with prefill and decode pools");
  }
  // The router's factory runs once here, so a parameter it refuses is an error now.
  SchedulerConfig scratch;
  RouterMaker maker;
  PolicyTarget target{&scratch, nullptr, c.seed, &maker};
  for (const char* key : {"router", "decode_router"}) {
    const std::optional<ConfigNode> r = n.find(key);
    const std::string where =
        r ? r->location() + ": key 'cluster." + key + "'" : c.file + ": cluster." + key;
    if (std::string_view(key) == "router") {
      build_policy(PolicyKind::kRouter, cl.router, target, where);
    } else if (cl.decode_router) {
      build_policy(PolicyKind::kRouter, *cl.decode_router, target, where);
    }
  }
}

// A replica's `parallel:` (when given) and `topology:` (when given), as config.yaml echoes them:
// the top level's, or a cluster pool's.
void emit_parallel(YAML::Emitter& e, const ParallelChoice& p) {
  if (p.set) {
    e << YAML::Key << "parallel" << YAML::Value << YAML::Flow << YAML::BeginMap;
    e << YAML::Key << "tensor" << YAML::Value << p.tensor;
    e << YAML::Key << "pipeline" << YAML::Value << p.pipeline;
    e << YAML::Key << "microbatches" << YAML::Value << p.microbatches;
    if (p.expert) {
      e << YAML::Key << "expert" << YAML::Value << true;
      e << YAML::Key << "expert_placement" << YAML::Value
        << std::string(expert_placement_name(p.expert_placement));
      if (p.redundant_experts > 0) {
        e << YAML::Key << "redundant_experts" << YAML::Value << p.redundant_experts;
      }
    }
    e << YAML::EndMap;
  }
  if (p.topology) {
    e << YAML::Key << "topology" << YAML::Value << without_override_marks(p.topology->yaml());
  }
}

void emit_cluster(YAML::Emitter& e, const ClusterConfig& cl) {
  e << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
  emit_policy(e, "router", cl.router);
  if (cl.decode_router) emit_policy(e, "decode_router", *cl.decode_router);
  if (cl.disaggregated()) {
    e << YAML::Key << "kv_transfer" << YAML::Value << YAML::Flow << YAML::BeginMap;
    // With a cluster topology the KV takes its links (and the key is refused there).
    if (!cl.topology) {
      e << YAML::Key << "bandwidth_gb_s" << YAML::Value << cl.kv_transfer.bandwidth_gb_s;
      e << YAML::Key << "links" << YAML::Value
        << (cl.kv_transfer.links == KvTransferConfig::Links::kPerPair ? "per_pair" : "per_replica");
    }
    e << YAML::Key << "latency_us" << YAML::Value << cl.kv_transfer.latency_us;
    e << YAML::Key << "layerwise" << YAML::Value << cl.kv_transfer.layerwise;
    e << YAML::Key << "sharing" << YAML::Value
      << (cl.kv_transfer.sharing == KvTransferConfig::Sharing::kFair ? "fair" : "queue");
    e << YAML::EndMap;
  }
  if (cl.topology) {
    e << YAML::Key << "topology" << YAML::Value << without_override_marks(cl.topology->yaml());
  }
  e << YAML::Key << "pools" << YAML::Value << YAML::BeginSeq;
  for (const PoolConfig& p : cl.pools) {
    e << YAML::Flow << YAML::BeginMap;
    e << YAML::Key << "name" << YAML::Value << p.name;
    e << YAML::Key << "model" << YAML::Value << p.model;
    e << YAML::Key << "hardware" << YAML::Value << p.hardware;
    e << YAML::Key << "count" << YAML::Value << p.count;
    e << YAML::Key << "role" << YAML::Value << to_string(p.role);
    emit_parallel(e, p.parallel);
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::EndMap;
}

}  // namespace

const char* to_string(ReplicaRole role) {
  switch (role) {
    case ReplicaRole::kUnified:
      return "unified";
    case ReplicaRole::kPrefill:
      return "prefill";
    case ReplicaRole::kDecode:
      return "decode";
  }
  return "?";
}

std::int32_t ClusterConfig::num_replicas() const {
  std::int32_t n = 0;
  for (const PoolConfig& p : pools) n += p.count;
  return n;
}

std::int64_t ClusterConfig::num_gpus() const {
  std::int64_t n = 0;
  for (const PoolConfig& p : pools) n += std::int64_t{p.count} * p.num_gpus();
  return n;
}

std::vector<std::int32_t> ClusterConfig::first_gpus() const {
  std::vector<std::int32_t> first;
  std::int32_t next = 0;
  for (const PoolConfig& p : pools) {
    for (std::int32_t k = 0; k < p.count; ++k) {
      first.push_back(next);
      if (topology) next += p.num_gpus();  // REQUIRES (checked at load): they fit the topology
    }
  }
  return first;
}

std::int64_t ExperimentConfig::num_gpus() const {
  if (cluster.set) return cluster.num_gpus();
  return std::int64_t{parallel.tensor} * parallel.pipeline;
}

bool ClusterConfig::disaggregated() const {
  for (const PoolConfig& p : pools) {
    if (p.role != ReplicaRole::kUnified) return true;
  }
  return false;
}

ConfigNode ExperimentConfig::workload_section() const {
  ConfigNode root_node(root, std::make_shared<const std::string>(file), "");
  return root_node.at("workload");
}

namespace {

// The experiment in `doc` (already parsed): `path` names it in messages, `base_dir` resolves its
// relative data paths, `default_name` names it when it has no `name:`.
ExperimentConfig experiment_from_document(const ConfigNode& doc, const std::string& path,
                                          std::string base_dir, const std::string& default_name,
                                          const std::vector<std::string>& overrides,
                                          std::optional<std::uint64_t> seed) {
  YAML::Node root = doc.yaml();
  for (const std::string& o : overrides) {
    // The variants and the grid are read from the file by `sim compare` and `sim sweep`, and
    // `derived:` is a run's record, never read: an override of them would be silently ignored.
    for (const std::string section : {"compare", "sweep", "derived"}) {
      const std::string key = o.substr(0, o.find('='));
      if (key == section || key.starts_with(section + ".") || key.starts_with(section + "[")) {
        throw ConfigError(
            "--set " + key + ": the " + section + ": section cannot be set with --set (" +
            (section == "compare" ? "pass the variants with --variant NAME:key=value,... instead"
             : section == "sweep"
                 ? "edit the experiment's sweep: section"
                 : "it records what a run derived and is ignored when read; set what it derives "
                   "from, e.g. serving.num_gpu_blocks") +
            ")");
      }
    }
    // `--set model.kv_cache_dtype=fp8` on `model: NAME`: the name becomes {name: NAME} first.
    if (o.starts_with("model.") && root["model"].IsScalar()) {
      YAML::Node name = root["model"];
      YAML::Node map(YAML::NodeType::Map);
      map["name"] = name;
      root["model"] = map;
    }
    apply_override(root, o);
  }
  ConfigNode top(root, std::make_shared<const std::string>(path), "");

  ExperimentConfig c;
  c.file = path;
  c.base_dir = std::move(base_dir);
  top.allow_keys({"name",     "description", "seed",         "model",      "hardware",
                  "serving",  "policies",    "workload",     "slo",        "outputs",
                  "compare",  "cost_model",  "sweep",        "limits",     "cluster",
                  "parallel", "topology",    "prefix_cache", "kv_offload", "derived"});
  // A run's config.yaml records what the run derived from the rest (block count, block bytes,
  // the workload's description): read back, it is a record, not a setting, and is ignored.
  if (const auto d = top.find("derived"); d && !d->is_map()) {
    d->fail("the mapping a run's config.yaml records (ignored when read)");
  }
  c.name = top.has("name") ? top.get_string("name") : default_name;
  // The name becomes a folder name (out/<name>): no '/', no "." or "..", no hidden folder.
  const bool name_ok = !c.name.empty() && c.name.front() != '.' &&
                       std::all_of(c.name.begin(), c.name.end(), is_name_char);
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
  if (top.has("model") && top.at("model").is_map()) {
    const ConfigNode m = top.at("model");
    m.allow_keys({"name", "kv_cache_dtype", "quantization", "router_skew"});
    c.model = m.get_string("name");
    ModelConfig storage;
    parse_model_storage(m, storage);
    if (m.has("kv_cache_dtype")) c.kv_cache_dtype = storage.kv_cache_dtype;
    if (m.has("quantization")) {
      c.quantization = storage.quantization;
      c.quantization_where = m.at("quantization").location() + ": key 'model.quantization'";
    }
    if (m.has("router_skew")) {
      c.router_skew = m.get_double("router_skew", 0, 0, ModelConfig::kMaxRouterSkew);
      c.router_skew_where = m.at("router_skew").location() + ": key 'model.router_skew'";
    }
  } else {
    c.model = top.get_string("model");
  }
  c.hardware = top.get_string("hardware");
  resolve_model_file(c.model, c.base_dir);
  resolve_model_file(c.hardware, c.base_dir);
  // An unknown name or a bad file is an error at its key here, not one without a line when the
  // run starts (as a cluster pool's).
  try {
    (void)load_model(c.model, default_catalog_dir());
  } catch (const ConfigError& e) {
    const ConfigNode m = top.at("model");
    (m.is_map() ? m.at("name") : m).fail_message(e.what());
  }
  try {
    (void)load_hardware(c.hardware, default_catalog_dir());
  } catch (const ConfigError& e) {
    top.at("hardware").fail_message(e.what());
  }
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
  if (c.scheduler.speculative.enabled()) {
    // The core supports it in vLLM v1's formation with one step per plan (core/scheduler.h).
    const std::string at = c.speculative_location + ": key 'serving.speculative_config': ";
    if (c.scheduler.num_scheduler_steps > 1) {
      throw ConfigError(at + "speculative decoding does not combine with num_scheduler_steps > 1");
    }
    if (c.scheduler.batch != nullptr && c.scheduler.batch->name() != "vllm") {
      throw ConfigError(at + "speculative decoding needs policies.batch vllm, not '" +
                        std::string(c.scheduler.batch->name()) + "'");
    }
  }
  check_workload_lora(top, c);
  if (top.has("workload")) c.request_classes = request_class_names(top.at("workload"));
  if (auto s = top.find("slo")) parse_slo(*s, c);
  check_deadline_queue(c);
  check_async_scheduling(c);
  check_chunking_keys(top, c);
  if (auto o = top.find("outputs")) parse_outputs(*o, c);
  if (auto m = top.find("cost_model")) parse_cost_model(*m, c);
  if (auto cl = top.find("cluster")) parse_cluster(*cl, c);
  if (auto pc = top.find("prefix_cache")) {
    c.prefix_cache = parse_prefix_cache_section(*pc);
    check_pinned_prefixes(top, c.prefix_cache);
    // Only whole blocks are cached: a prefix shorter than one would pin nothing, yet its prefill
    // would be charged.
    for (const PinnedPrefixConfig& p : c.prefix_cache.pinned) {
      const std::size_t length =
          p.shared_prefix ? static_cast<std::size_t>(p.length) : p.tokens.size();
      if (length < static_cast<std::size_t>(c.scheduler.block_size)) {
        throw ConfigError(p.location + ": " + std::to_string(length) +
                          " tokens, shorter than one KV block (serving.block_size " +
                          std::to_string(c.scheduler.block_size) +
                          "): only whole blocks are cached, so it would pin nothing");
      }
    }
  }
  if (auto ko = top.find("kv_offload")) c.kv_offload = parse_kv_offload(*ko);
  if (c.kv_offload.idle_offload_s > 0 && top.has("workload") && !has_sessions(top.at("workload"))) {
    // Only a session's requests are ever offloaded for being idle: it would do nothing.
    throw ConfigError(c.kv_offload.idle_location +
                      ": idle-session offload needs sessions (a multiturn or sessions workload); "
                      "this workload has none, so nothing would be offloaded");
  }
  if (c.cluster.set && (!c.prefix_cache.pinned.empty() || c.kv_offload.set)) {
    top.at(c.kv_offload.set ? "kv_offload" : "prefix_cache")
        .fail_message(
            "pinned prefixes and KV offload are for one replica; a cluster: run does "
            "not support them yet");
  }
  if ((!c.prefix_cache.pinned.empty() || c.kv_offload.set) &&
      c.policies.allocation.name == "contiguous") {
    top.at(c.kv_offload.set ? "kv_offload" : "prefix_cache")
        .fail_message(
            "needs prefix caching, which policies.allocation: contiguous turns off (contiguous "
            "KV shares no blocks); use the paged allocation");
  }
  if ((!c.prefix_cache.pinned.empty() || c.kv_offload.set) && !c.scheduler.enable_prefix_caching) {
    top.at(c.kv_offload.set ? "kv_offload" : "prefix_cache")
        .fail_message("needs prefix caching (policies.prefix_cache: hash)");
  }
  if (c.kv_offload.set && c.policies.prefix_cache.name != "hash") {
    top.at("kv_offload").fail_message("needs the hash prefix cache (policies.prefix_cache: hash)");
  }
  parse_parallel_section(top, c.parallel);
  if (c.scheduler.async_scheduling) {
    const std::string at = c.async_scheduling_location + ": key 'serving.async_scheduling': ";
    // vLLM: "Async scheduling is not yet compatible with pipeline_parallel_size > 1".
    if (c.parallel.pipeline > 1) {
      throw ConfigError(at + "async scheduling is not compatible with pipeline parallelism (" +
                        c.parallel.pipeline_where + " is " + std::to_string(c.parallel.pipeline) +
                        "; vLLM refuses pipeline_parallel_size > 1 with it)");
    }
    for (const PoolConfig& pool : c.cluster.pools) {
      if (pool.parallel.pipeline > 1) {
        throw ConfigError(at + "async scheduling is not compatible with pipeline parallelism (" +
                          pool.parallel.pipeline_where + " is " +
                          std::to_string(pool.parallel.pipeline) +
                          "; vLLM refuses pipeline_parallel_size > 1 with it)");
      }
    }
  }
  if (c.cluster.set && (c.parallel.set || c.parallel.topology)) {
    // Each pool states its own parallelism; the cluster's machine is cluster.topology.
    (c.parallel.set ? top.at("parallel") : top.at("topology"))
        .fail_message(
            "a cluster: section takes its parallelism per pool (cluster.pools[i].parallel and "
            "cluster.pools[i].topology); top-level parallel: and topology: are for one replica");
  }
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
  // A mix's parts are checked one by one (their sum is checked as the workload is read).
  const auto check_size = [&c](const ConfigNode& w) {
    if (w.is_map() && w.has("num_requests") && w.at("num_requests").is_scalar()) {
      const ConfigNode n = w.at("num_requests");
      const double v = n.as_double();
      if (v > static_cast<double>(c.max_requests)) {
        n.fail("at most limits.max_requests (" + std::to_string(c.max_requests) +
               "); raise limits.max_requests to run more");
      }
    }
    // multiturn builds its sessions' requests up front: refuse before that when even every
    // session's fewest turns (a fixed count, or the distribution's min) pass the limit, a
    // fan-out's turns counting `width` requests each.
    if (w.is_map() && w.has("num_sessions") && w.at("num_sessions").is_scalar() && w.has("turns") &&
        w.at("turns").is_map()) {
      const ConfigNode turns = w.at("turns");
      const char* fewest = turns.has("value") ? "value" : turns.has("min") ? "min" : nullptr;
      const double min_turns = std::max(
          fewest != nullptr && turns.at(fewest).is_scalar() ? turns.at(fewest).as_double() : 1.0,
          1.0);
      double per_session = min_turns;
      std::string fanned;
      if (w.has("fanout") && w.at("fanout").is_map()) {
        const ConfigNode f = w.at("fanout");
        const auto number = [&f](const char* key) {
          return f.has(key) && f.at(key).is_scalar() ? std::max(f.at(key).as_double(), 1.0) : 1.0;
        };
        const double every = number("every"), width = number("width");
        // Turns 1 .. min_turns - 1 that are multiples of `every` fan out `width` ways.
        per_session += (width - 1) * std::floor((min_turns - 1) / every);
        if (per_session > min_turns) fanned = format_text(" (%g with the fan-outs)", per_session);
      }
      const ConfigNode n = w.at("num_sessions");
      if (n.as_double() * per_session > static_cast<double>(c.max_requests)) {
        n.fail_message("sessions of at least " + format_text("%g", min_turns) + " turns each" +
                       fanned + " make more requests than limits.max_requests (" +
                       std::to_string(c.max_requests) + "); raise limits.max_requests to run more");
      }
    }
    if (w.is_map() && w.has("duration_s") && w.at("duration_s").is_scalar()) {
      const ConfigNode d = w.at("duration_s");
      if (d.as_double() > ns_to_s(c.max_duration_ns)) {
        d.fail("at most limits.max_duration_s (" + std::to_string(ns_to_s(c.max_duration_ns)) +
               " s); raise limits.max_duration_s to simulate longer");
      }
    }
  };
  const ConfigNode w = top.at("workload");
  check_size(w);
  if (!c.request_classes.empty()) {
    for (const ConfigNode& part : w.at("parts").elements()) {
      if (part.is_map() && part.has("workload")) check_size(part.at("workload"));
    }
  }
  // serving.max_model_len unset: its default, or the fewest positions of a model the
  // experiment serves when that is less (vLLM derives the length from the model; a key the user
  // did not write must not refuse a small model). A cluster serves its pools' models only (the
  // top-level model is their default, counted through the pools that leave theirs out). A model
  // that does not load is reported where the run loads it.
  if (!(top.has("serving") && top.at("serving").is_map() &&
        top.at("serving").has("max_model_len"))) {
    std::vector<std::string> models;
    if (!c.cluster.set || c.cluster.pools.empty()) models.push_back(c.model);
    for (const PoolConfig& pool : c.cluster.pools) models.push_back(pool.model);
    for (const std::string& m : models) {
      try {
        const std::int64_t positions = load_model(m, default_catalog_dir()).max_position_embeddings;
        c.scheduler.max_model_len = static_cast<std::int32_t>(
            std::clamp<std::int64_t>(positions, 2, c.scheduler.max_model_len));
      } catch (const ConfigError&) {
      }
    }
  }
  c.root = root;
  return c;
}

}  // namespace

namespace {

std::string pools_joined(const ExperimentConfig& config, std::string PoolConfig::*field,
                         const std::string& single) {
  if (!config.cluster.set || config.cluster.pools.empty()) return single;
  std::vector<std::string> seen;
  for (const PoolConfig& p : config.cluster.pools) {
    if (std::find(seen.begin(), seen.end(), p.*field) == seen.end()) seen.push_back(p.*field);
  }
  std::string out;
  for (const std::string& s : seen) out += (out.empty() ? "" : " + ") + s;
  return out;
}

}  // namespace

std::string served_model(const ExperimentConfig& config) {
  return pools_joined(config, &PoolConfig::model, config.model);
}

std::string served_hardware(const ExperimentConfig& config) {
  return pools_joined(config, &PoolConfig::hardware, config.hardware);
}

std::vector<TimeNs> ttft_targets_ns(const ExperimentConfig& config) {
  const auto target = [](const SloTargets& t) {
    if (!t.ttft_ms) return kNoTtftTarget;
    return static_cast<TimeNs>(std::llround(*t.ttft_ms * static_cast<double>(kNsPerMs)));
  };
  if (config.request_classes.empty()) return {target(config.slo)};
  std::vector<TimeNs> out;
  for (const std::string& name : config.request_classes) {
    out.push_back(target(slo_for_class(config.slo, name)));
  }
  return out;
}

void apply_model_storage(const ExperimentConfig& config, ModelConfig& model) {
  if (config.kv_cache_dtype) model.kv_cache_dtype = *config.kv_cache_dtype;
  if (config.quantization) model.quantization = *config.quantization;
  if (const std::string problem = config.quantization ? awq_problem(model) : ""; !problem.empty()) {
    throw ConfigError((config.quantization_where.empty()
                           ? config.file + ": key 'model.quantization'"
                           : config.quantization_where) +
                      ": " + problem);
  }
  if (config.router_skew) {
    if (!model.is_moe()) {
      throw ConfigError(config.router_skew_where + ": model " + model.name +
                        " is dense (no num_experts): a router skew needs a mixture of experts");
    }
    model.router_skew = *config.router_skew;
  }
}

std::string resolve_experiment_file(const std::string& path) {
  namespace fs = std::filesystem;
  // A relative path that is not there from the current folder is looked up in the ServeLab home,
  // as an experiment's data files are (resolve_data_path); messages then name the file read.
  std::error_code ec;
  if (path.empty() || fs::exists(path, ec) || !fs::path(path).is_relative()) return path;
  if (std::optional<std::string> found = resolve_data_path(path, ".")) return *found;
  std::string where = "not in the current folder";
  try {
    where += " nor in the ServeLab home " + servelab_home().string();
  } catch (const HomeError&) {
  }
  throw ConfigError(path + ": cannot open file (" + where + ")");
}

ExperimentConfig load_experiment(const std::string& path, const std::vector<std::string>& overrides,
                                 std::optional<std::uint64_t> seed) {
  namespace fs = std::filesystem;
  const std::string file = resolve_experiment_file(path);
  const ConfigNode doc = ConfigNode::load_file(file);
  // Absolute: its data files get one name however the experiment's path was spelled
  // (traces/workload.cc data_file).
  std::error_code ec;
  std::string base_dir = fs::absolute(file, ec).lexically_normal().parent_path().string();
  if (ec || base_dir.empty()) base_dir = fs::path(file).parent_path().string();
  if (base_dir.empty()) base_dir.push_back('.');  // (not = ".": GCC 12 -Wrestrict false positive)
  return experiment_from_document(doc, file, std::move(base_dir), fs::path(file).stem().string(),
                                  overrides, seed);
}

ExperimentConfig load_experiment_text(const std::string& text, const std::string& name,
                                      const std::string& base_dir, const std::string& default_name,
                                      const std::vector<std::string>& overrides,
                                      std::optional<std::uint64_t> seed) {
  const ConfigNode doc = ConfigNode::load_string(text, name);
  return experiment_from_document(doc, name, base_dir, default_name, overrides, seed);
}

std::string resolved_config_yaml(const ExperimentConfig& c,
                                 const std::vector<std::pair<std::string, std::string>>& extra) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << c.name;
  if (!c.description.empty()) e << YAML::Key << "description" << YAML::Value << c.description;
  e << YAML::Key << "seed" << YAML::Value << c.seed;
  if (c.kv_cache_dtype || c.quantization || c.router_skew) {
    e << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "name" << YAML::Value << c.model;
    if (c.kv_cache_dtype) e << YAML::Key << "kv_cache_dtype" << YAML::Value << *c.kv_cache_dtype;
    if (c.quantization) e << YAML::Key << "quantization" << YAML::Value << *c.quantization;
    if (c.router_skew) e << YAML::Key << "router_skew" << YAML::Value << *c.router_skew;
    e << YAML::EndMap;
  } else {
    e << YAML::Key << "model" << YAML::Value << c.model;
  }
  e << YAML::Key << "hardware" << YAML::Value << c.hardware;
  e << YAML::Key << "serving" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "block_size" << YAML::Value << c.scheduler.block_size;
  e << YAML::Key << "max_num_batched_tokens" << YAML::Value << c.scheduler.max_num_batched_tokens;
  e << YAML::Key << "max_num_seqs" << YAML::Value << c.scheduler.max_num_seqs;
  e << YAML::Key << "max_model_len" << YAML::Value << c.scheduler.max_model_len;
  if (uses_vllm_chunking(c.scheduler)) {  // other formations refuse the keys (check_chunking_keys)
    e << YAML::Key << "long_prefill_token_threshold" << YAML::Value
      << c.scheduler.long_prefill_token_threshold;
    e << YAML::Key << "enable_chunked_prefill" << YAML::Value << c.scheduler.enable_chunked_prefill;
  }
  if (c.scheduler.num_scheduler_steps != 1) {
    e << YAML::Key << "num_scheduler_steps" << YAML::Value << c.scheduler.num_scheduler_steps;
  }
  if (c.scheduler.async_scheduling) e << YAML::Key << "async_scheduling" << YAML::Value << true;
  e << YAML::Key << "gpu_memory_utilization" << YAML::Value << c.gpu_memory_utilization;
  if (c.num_gpu_blocks) e << YAML::Key << "num_gpu_blocks" << YAML::Value << *c.num_gpu_blocks;
  if (c.activation_reserve_gb) {
    e << YAML::Key << "activation_reserve_gb" << YAML::Value << *c.activation_reserve_gb;
  }
  e << YAML::Key << "swap_space_gb" << YAML::Value << c.swap_space_gb;
  if (c.scheduler.speculative.enabled()) {
    const SpeculativeConfig& sp = c.scheduler.speculative;
    e << YAML::Key << "speculative_config" << YAML::Value << YAML::Flow << YAML::BeginMap;
    e << YAML::Key << "method" << YAML::Value << to_string(sp.method);
    e << YAML::Key << "num_speculative_tokens" << YAML::Value << sp.num_speculative_tokens;
    if (sp.method == SpecMethod::kNgram) {
      e << YAML::Key << "prompt_lookup_min" << YAML::Value << sp.prompt_lookup_min;
      e << YAML::Key << "prompt_lookup_max" << YAML::Value << sp.prompt_lookup_max;
    }
    if (!sp.draft_model.empty()) e << YAML::Key << "model" << YAML::Value << sp.draft_model;
    if (!sp.acceptance_rates.empty()) {
      e << YAML::Key << "acceptance_rate" << YAML::Value << YAML::Flow << sp.acceptance_rates;
    }
    e << YAML::EndMap;
  }
  if (c.scheduler.lora.enabled()) {
    e << YAML::Key << "lora" << YAML::Value << YAML::Flow << YAML::BeginMap;
    e << YAML::Key << "max_loras" << YAML::Value << c.scheduler.lora.max_loras;
    e << YAML::Key << "max_lora_rank" << YAML::Value << c.scheduler.lora.max_lora_rank;
    e << YAML::EndMap;
  }
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
  if (c.policies.admission.name != "admit-all") emit_policy(e, "admission", c.policies.admission);
  if (c.policies.length_cap.name != "off") emit_policy(e, "length_cap", c.policies.length_cap);
  e << YAML::EndMap;
  e << YAML::Key << "workload" << YAML::Value
    << with_absolute_data_paths(without_override_marks(c.root["workload"]), c.base_dir);
  e << YAML::Key << "slo" << YAML::Value << YAML::BeginMap;
  if (c.slo.ttft_ms) e << YAML::Key << "ttft_ms" << YAML::Value << *c.slo.ttft_ms;
  if (c.slo.tpot_ms) e << YAML::Key << "tpot_ms" << YAML::Value << *c.slo.tpot_ms;
  if (c.slo.e2e_ms) e << YAML::Key << "e2e_ms" << YAML::Value << *c.slo.e2e_ms;
  if (!c.slo.classes.empty()) {
    e << YAML::Key << "classes" << YAML::Value << YAML::BeginMap;
    for (const std::string& name : c.request_classes) {
      const auto it = c.slo.classes.find(name);
      if (it == c.slo.classes.end()) continue;
      const SloTargets& t = it->second;
      e << YAML::Key << name << YAML::Value << YAML::Flow << YAML::BeginMap;
      if (t.ttft_ms) e << YAML::Key << "ttft_ms" << YAML::Value << *t.ttft_ms;
      if (t.tpot_ms) e << YAML::Key << "tpot_ms" << YAML::Value << *t.tpot_ms;
      if (t.e2e_ms) e << YAML::Key << "e2e_ms" << YAML::Value << *t.e2e_ms;
      e << YAML::EndMap;
    }
    e << YAML::EndMap;
  }
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
  } else if (c.cost_model.step_overhead_us || c.cost_model.sequence_overhead_us ||
             c.cost_model.block_indirection_ns) {
    e << YAML::Key << "cost_model" << YAML::Value << YAML::BeginMap;
    e << YAML::Key << "type" << YAML::Value << "roofline";
    if (c.cost_model.step_overhead_us) {
      e << YAML::Key << "step_overhead_us" << YAML::Value << *c.cost_model.step_overhead_us;
    }
    if (c.cost_model.sequence_overhead_us) {
      e << YAML::Key << "sequence_overhead_us" << YAML::Value << *c.cost_model.sequence_overhead_us;
    }
    if (c.cost_model.block_indirection_ns) {
      e << YAML::Key << "block_indirection_ns" << YAML::Value << *c.cost_model.block_indirection_ns;
    }
    e << YAML::EndMap;
  }
  if (c.cluster.set) emit_cluster(e, c.cluster);
  emit_parallel(e, c.parallel);
  if (c.root["prefix_cache"]) {
    e << YAML::Key << "prefix_cache" << YAML::Value
      << without_override_marks(c.root["prefix_cache"]);
  }
  if (c.root["kv_offload"]) {
    e << YAML::Key << "kv_offload" << YAML::Value << without_override_marks(c.root["kv_offload"]);
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
