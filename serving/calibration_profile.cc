#include "serving/calibration_profile.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <string_view>
#include <utility>

#include "serving/config_node.h"

namespace servelab {

CalibrationFeatures CalibrationFeatures::from_plan(const StepPlan& plan,
                                                   const PrefillLaunch* launch) {
  CalibrationFeatures f;
  f.step = StepFeatures::from_plan(plan);
  f.num_entries = static_cast<std::int64_t>(plan.requests.size());
  if (launch != nullptr && f.step.num_tokens > f.num_entries) {  // some entry has 2+ tokens
    PrefillLaunchCost cost(*launch);
    for (const ScheduledRequest& r : plan.requests) cost.add(r.first_token, r.num_tokens);
    const PrefillCriticalPath c = cost.critical_path();
    f.prefill_critical_keys = c.keys;
    f.prefill_merge_steps = c.merge_steps;
  }
  return f;
}

const std::vector<std::string>& profile_columns() {
  static const std::vector<std::string> cols = {"family",
                                                "num_tokens",
                                                "prefill_tokens",
                                                "prefill_pairs",
                                                "prefill_context_tokens",
                                                "decode_tokens",
                                                "decode_pairs",
                                                "decode_context_tokens",
                                                "num_sampled",
                                                "num_entries",
                                                "swap_out_blocks",
                                                "swap_in_blocks",
                                                "copy_blocks",
                                                "reps",
                                                "median_ns",
                                                "min_ns",
                                                "max_ns"};
  return cols;
}

const std::vector<std::string>& profile_lora_columns() {
  static const std::vector<std::string> cols = {"lora_tokens", "num_loras"};
  return cols;
}

const std::vector<std::string>& profile_power_columns() {
  static const std::vector<std::string> cols = {"power_w", "power_ms"};
  return cols;
}

namespace {

// doc[key] when present, which must be one of `words`; "" when absent.
template <std::size_t N>
std::string optional_word(const ConfigNode& doc, std::string_view key,
                          const std::string_view (&words)[N]) {
  const std::optional<ConfigNode> node = doc.find(key);
  if (!node) return "";
  const std::string value = node->is_scalar() ? node->as_string() : "";
  if (const std::string why = unknown_storage_word(value, words); !why.empty()) {
    node->fail_message(why);
  }
  return value;
}

}  // namespace

CalibratedProfile load_calibrated_profile(const std::string& path) {
  const ConfigNode doc = ConfigNode::load_file(path);
  doc.allow_keys({"type", "format_version", "model", "device", "machine", "date_utc",
                  "engine_version", "profile", "block_size", "block_bytes", "kv_cache_dtype",
                  "quantization", "coefficients", "fit", "host_overhead"});
  const ConfigNode type = doc.at("type");
  if (type.as_string() != "calibrated") type.fail("'calibrated'");
  if (doc.has("format_version")) doc.get_int("format_version", 1, 1);
  CalibratedProfile p;
  p.file = path;
  p.model = doc.get_string("model");
  if (p.model.empty()) doc.at("model").fail("the name of the model it was calibrated for");
  p.device = doc.get_string("device", "");
  if (const std::optional<ConfigNode> m = doc.find("machine")) {
    m->allow_keys({"kind", "name", "threads"});
    MachineRecord r;
    r.kind = m->at("kind").as_choice({"cpu", "cuda"});
    const ConfigNode name = m->at("name");
    r.name = name.as_string();
    if (r.name.empty()) name.fail("a non-empty device name");
    r.threads = m->get_int("threads", 1, INT64_MAX);
    p.machine = std::move(r);
  }
  p.date_utc = doc.get_string("date_utc", "");
  p.engine_version = doc.get_string("engine_version", "");
  if (doc.has("profile")) doc.get_string("profile");
  p.block_size = static_cast<std::int32_t>(doc.get_int("block_size", 1, 256));
  p.block_bytes = doc.get_int("block_bytes", 1, INT64_MAX);
  p.kv_cache_dtype = optional_word(doc, "kv_cache_dtype", kProfileKvDtypes);
  p.quantization = optional_word(doc, "quantization", kQuantizations);
  const ConfigNode c = doc.at("coefficients");
  c.allow_keys({"step_s", "per_sequence_s", "per_token_s", "per_token_above_knee_s", "knee_tokens",
                "prefill_pair_s", "decode_context_token_s", "decode_context_token_above_knee_s",
                "decode_context_knee_tokens", "sampled_sequence_s", "swap_byte_s", "copy_byte_s",
                "lora_token_rank_s", "lora_adapter_rank_s", "prefill_critical_key_s",
                "prefill_merge_step_s", "prefill_launch", "wake_up_s"});
  CalibratedCoefficients& k = p.coefficients;
  // Every coefficient is required (a file missing one is not what `sim calibrate` writes), but
  // for the decode-context knee, which is optional.
  k.step_s = c.get_double("step_s", 0.0, 1e6);
  k.per_sequence_s = c.get_double("per_sequence_s", 0.0, 1e6);
  k.per_token_s = c.get_double("per_token_s", 0.0, 1e6);
  k.per_token_above_knee_s = c.get_double("per_token_above_knee_s", 0.0, 1e6);
  k.knee_tokens = c.get_int("knee_tokens", 0, 1 << 30);
  k.prefill_pair_s = c.get_double("prefill_pair_s", 0.0, 1e6);
  k.decode_context_token_s = c.get_double("decode_context_token_s", 0.0, 1e6);
  // The decode-context knee came later: optional, 0 (no knee) when absent.
  k.decode_context_token_above_knee_s =
      c.get_double("decode_context_token_above_knee_s", 0.0, 0.0, 1e6);
  k.decode_context_knee_tokens = c.get_int("decode_context_knee_tokens", 0, 0, INT64_MAX);
  k.sampled_sequence_s = c.get_double("sampled_sequence_s", 0.0, 1e6);
  // The engine's idle wake-up came later: optional, 0 (a step starts at its arrival) when absent.
  k.wake_up_s = c.get_double("wake_up_s", 0.0, 0.0, 1.0);
  k.swap_byte_s = c.get_double("swap_byte_s", 0.0, 1e6);
  k.copy_byte_s = c.get_double("copy_byte_s", 0.0, 1e6);
  // LoRA: optional, both or neither (a profile without them cannot price adapters).
  if (c.has("lora_token_rank_s") || c.has("lora_adapter_rank_s")) {
    k.lora_token_rank_s = c.get_double("lora_token_rank_s", 0.0, 1e6);
    k.lora_adapter_rank_s = c.get_double("lora_adapter_rank_s", 0.0, 1e6);
    k.lora_set = true;
  }
  // The prefill launch's critical paths: optional, the two coefficients and the launch together
  // (a file without them prices as before they existed).
  const char* const launch_keys[] = {"prefill_critical_key_s", "prefill_merge_step_s",
                                     "prefill_launch"};
  const auto given = std::find_if(std::begin(launch_keys), std::end(launch_keys),
                                  [&c](const char* key) { return c.has(key); });
  if (given != std::end(launch_keys)) {
    for (const char* other : launch_keys) {
      if (!c.has(other)) {
        c.at(*given).fail_message(std::string("given without '") + other +
                                  "' (prefill_critical_key_s, prefill_merge_step_s and "
                                  "prefill_launch come together)");
      }
    }
    k.prefill_critical_key_s = c.get_double("prefill_critical_key_s", 0.0, 1e6);
    k.prefill_merge_step_s = c.get_double("prefill_merge_step_s", 0.0, 1e6);
    const ConfigNode l = c.at("prefill_launch");
    if (!l.is_map())
      l.fail(
          "a mapping of query_heads, tile_rows, max_ctas, min_split_tokens, merge_rows (and "
          "optionally packed_heads, packed_rows, packed_max_ctas)");
    l.allow_keys({"query_heads", "tile_rows", "max_ctas", "min_split_tokens", "merge_rows",
                  "packed_heads", "packed_rows", "packed_max_ctas"});
    PrefillLaunch launch;
    launch.query_heads = static_cast<std::int32_t>(l.get_int("query_heads", 1, 1 << 20));
    launch.tile_rows = static_cast<std::int32_t>(l.get_int("tile_rows", 1, 1 << 20));
    launch.max_ctas = static_cast<std::int32_t>(l.get_int("max_ctas", 1, 1 << 30));
    launch.min_split_tokens = static_cast<std::int32_t>(l.get_int("min_split_tokens", 0, 1 << 30));
    launch.merge_rows = static_cast<std::int32_t>(l.get_int("merge_rows", 1, 1 << 20));
    const char* packing[] = {"packed_heads", "packed_rows", "packed_max_ctas"};
    for (const char* key : packing) {
      if (!l.has(key)) continue;
      for (const char* other : packing) {
        if (!l.has(other)) {
          l.at(key).fail_message(std::string("given without '") + other +
                                 "' (packed_heads, packed_rows and packed_max_ctas come together)");
        }
      }
    }
    if (l.has("packed_heads")) {
      launch.packed_heads = static_cast<std::int32_t>(l.get_int("packed_heads", 1, 1 << 20));
      launch.packed_rows = static_cast<std::int32_t>(l.get_int("packed_rows", 1, 1 << 20));
      launch.packed_max_ctas = static_cast<std::int32_t>(l.get_int("packed_max_ctas", 1, 1 << 30));
    }
    if (const std::string why = prefill_launch_error(launch); !why.empty()) {
      l.fail_message(why);
    }
    k.prefill_launch = launch;
  }
  for (const char* info : {"fit", "host_overhead"}) {  // informational sections
    if (doc.has(info) && !doc.at(info).is_map()) doc.at(info).fail("a mapping");
  }
  return p;
}

void check_profile_storage(const CalibratedProfile& p, const ModelConfig& model,
                           const std::string& where, const std::string& source) {
  if (p.model != model.name) {
    throw ConfigError(where + ": " + source + ": " + p.file + " was calibrated for model '" +
                      p.model + "', but the experiment runs '" + model.name + "'");
  }
  const std::string measured_q = p.quantization.empty() ? "none" : p.quantization;
  if (model.quantization != measured_q) {
    const std::string measured =
        measured_q == "none" ? "unquantized weights" : measured_q + " weights";
    throw ConfigError(where + ": key 'model.quantization': " + model.quantization +
                      ", but the calibrated cost model " + p.file + " was measured on " + measured +
                      ", so its step times would be theirs; price the run with a profile of " +
                      model.quantization + " weights, or with the roofline (leave out cost_model)");
  }
  if (!p.kv_cache_dtype.empty()) {
    if (model.kv_dtype() != p.kv_cache_dtype) {
      throw ConfigError(where + ": key 'model.kv_cache_dtype': the experiment's KV cache is " +
                        model.kv_dtype() + ", but the calibrated cost model " + p.file +
                        " was measured with a " + p.kv_cache_dtype +
                        " cache (its kv_cache_dtype), so its attention, swap and copy times "
                        "would be that cache's; use the KV dtype it was measured with, profile "
                        "this one (engine profile --kv-cache-dtype), or use the roofline (leave "
                        "out cost_model)");
    }
    return;
  }
  const std::int64_t kv_per_token = model.kv_bytes_per_token();
  if (p.block_bytes > 0 && p.block_bytes != kv_per_token * p.block_size) {
    throw ConfigError(where + ": key 'model.kv_cache_dtype': the experiment's KV cache (" +
                      model.kv_dtype() + ") holds " + std::to_string(kv_per_token) +
                      " bytes per token, but the calibrated cost model " + p.file +
                      " was measured on one of " + std::to_string(p.block_bytes / p.block_size) +
                      " (block_bytes " + std::to_string(p.block_bytes) + " for " +
                      std::to_string(p.block_size) +
                      " tokens), so its attention, swap and copy times would be that cache's; "
                      "use the KV dtype it was measured with, or the roofline (leave out "
                      "cost_model)");
  }
}

}  // namespace servelab
