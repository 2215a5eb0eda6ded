// The calibration files both drivers share. `engine profile` measures steps and writes one CSV
// row per step shape (profile_columns(): the step's CalibrationFeatures, repetitions and times);
// `sim calibrate` fits a CalibratedProfile to it and writes it as cost.yaml; an experiment's
// `cost_model: {type: calibrated, file: ...}` loads it back (load_calibrated_profile) for the
// simulator's CalibratedCostModel (sim/calibrated_cost_model.h, where the formula lives).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/prefill_launch.h"
#include "core/step_features.h"
#include "core/step_plan.h"
#include "serving/machine.h"
#include "serving/model_config.h"

namespace servelab {

// StepFeatures plus the number of plan entries (the per-sequence term) and the critical paths of
// the step's prefill attention launch (core/prefill_launch.h; 0 unless computed for a launch).
struct CalibrationFeatures {
  StepFeatures step;
  std::int64_t num_entries = 0;
  std::int64_t prefill_critical_keys = 0;  // PrefillCriticalPath::keys
  std::int64_t prefill_merge_steps = 0;    // PrefillCriticalPath::merge_steps

  bool empty() const {
    return step.num_tokens == 0 && step.swap_out_blocks == 0 && step.swap_in_blocks == 0 &&
           step.copy_blocks == 0;
  }
  // One pass over the plan; no allocation. With `launch`, a second pass over the entries of two
  // or more tokens fills in the critical paths of their prefill attention launch.
  static CalibrationFeatures from_plan(const StepPlan& plan, const PrefillLaunch* launch = nullptr);
};

// Seconds per unit of each term (see the file comment).
struct CalibratedCoefficients {
  double step_s = 0;
  double per_sequence_s = 0;
  double per_token_s = 0;
  double per_token_above_knee_s = 0;
  std::int64_t knee_tokens = 0;  // 0 with per_token_above_knee_s = 0: a single slope
  double prefill_pair_s = 0;
  double decode_context_token_s = 0;
  double decode_context_token_above_knee_s = 0;
  std::int64_t decode_context_knee_tokens = 0;  // 0: a single slope
  double sampled_sequence_s = 0;
  double swap_byte_s = 0;
  double copy_byte_s = 0;
  // LoRA adapters (optional in cost.yaml; `sim calibrate` fits them from a profile with LoRA
  // rows, `engine profile --lora-rank R`): seconds per token under an adapter per unit of rank
  // (the shrink and expand GEMMs), and per distinct adapter of the step per unit of rank
  // (reading its weights). lora_set: both were given (or fitted).
  double lora_token_rank_s = 0;
  double lora_adapter_rank_s = 0;
  bool lora_set = false;
  // The engine's latency from an arrival at an idle engine to the step that starts on it (its
  // loop's wake-up; optional in cost.yaml, 0 when absent). Not part of any step's time: the
  // simulator starts a step on an idle replica this long after the event that woke it, so
  // arrivals within that window share the step as they do in the engine (sim/simulator.h).
  // `sim calibrate --engine-run` fits it: the median of the run's idle wake-ups
  // (sim/latency_attribution.h idle_wake_ups).
  double wake_up_s = 0;
  // The prefill launch's critical paths (optional in cost.yaml; `sim calibrate` fits them from a
  // CUDA profile, whose launch it reads from the profile's header): seconds per key on the
  // attention kernel's critical path (a short chunk after a long prefix runs few CTAs, so its
  // time follows its longest CTA, not its pairs) and per dependent step of the split-KV merge.
  // Set with the launch they are computed over (`prefill_launch:`); unset, both terms are 0 and
  // the file prices as files written before them did.
  double prefill_critical_key_s = 0;
  double prefill_merge_step_s = 0;
  std::optional<PrefillLaunch> prefill_launch;
};

// A cost.yaml: coefficients plus where they were measured.
struct CalibratedProfile {
  std::string file;    // where it was loaded from ("" when built in memory)
  std::string model;   // the model the profile ran (must match the experiment's)
  std::string device;  // e.g. "cpu: AMD EPYC 7B13 (2 threads)"
  // The machine the profile was measured on (`machine:`); empty for files written before it was
  // recorded, which load as before and are never warned about (serving/machine.h).
  std::optional<MachineRecord> machine;
  std::string date_utc;        // when the engine profile was measured
  std::string engine_version;  // project version and git describe of the profiling engine
  std::int32_t block_size = 16;
  std::int64_t block_bytes = 0;  // K and V of one block, all layers, as the engine stores it
  // How the profiled engine stored the model (`kv_cache_dtype:`, one of kProfileKvDtypes, and
  // `quantization:`, one of kQuantizations); empty for files written before they were recorded
  // (unquantized, with the KV dtype known only through block_bytes).
  std::string kv_cache_dtype;
  std::string quantization;
  CalibratedCoefficients coefficients;
};

// The KV formats a profile records: what ModelConfig::kv_dtype() resolves to (the CPU engine
// rounds K/V to these in fp32 storage; the CUDA engine stores bf16 and fp8).
inline constexpr std::string_view kProfileKvDtypes[] = {"fp32", "bf16", "fp16", "fp8_e4m3",
                                                        "fp8_e5m2"};

// The message for a recorded storage word (a kv_cache_dtype or quantization): "" when `value` is
// one of `words`, else "expected one of W1, W2, ..., got 'VALUE'".
template <std::size_t N>
std::string unknown_storage_word(std::string_view value, const std::string_view (&words)[N]) {
  std::string list;
  for (std::string_view w : words) {
    if (w == value) return "";
    list += (list.empty() ? "" : ", ") + std::string(w);
  }
  return "expected one of " + list + ", got '" + std::string(value) + "'";
}

// Reads and validates a cost.yaml. Throws ConfigError naming the file (and line and key) for a
// missing file, malformed YAML, an unknown or missing key, a wrong type or a negative
// coefficient. The critical-path coefficients (prefill_critical_key_s, prefill_merge_step_s)
// and their `prefill_launch` mapping (query_heads, tile_rows, max_ctas, merge_rows: integers
// >= 1; min_split_tokens: an integer >= 0; optionally packed_heads, packed_rows and
// packed_max_ctas, integers >= 1 given together, packed_heads dividing query_heads) come all
// three or none. `machine:` is optional; when
// present it must be a mapping of exactly `kind` (cpu or cuda), `name` (a non-empty string) and
// `threads` (an integer >= 1). Loading never compares the machine: the users of the file do
// (warn_if_calibrated_elsewhere).
CalibratedProfile load_calibrated_profile(const std::string& path);

// The profile measured this model (its name), stored as the engine stored it: its weight
// quantization (none for a file without `quantization:`) and its KV dtype (`kv_cache_dtype:`;
// for an older file without it, K/V of block_bytes / block_size bytes per token). Throws
// ConfigError, prefixed with `where` (the experiment or run config naming the model), for
// another model, or one stored otherwise (another quantization, another KV dtype, or for an
// older file another number of KV bytes per token): priced by the profile, such a run would
// silently get the measured model's step times. `source`: what named the file (for the
// message; the experiment's key by default, "--cost-model", "the profile").
void check_profile_storage(const CalibratedProfile& profile, const ModelConfig& model,
                           const std::string& where,
                           const std::string& source = "key 'cost_model.file'");

// The CSV columns `engine profile` writes, in order.
const std::vector<std::string>& profile_columns();
// The columns a profile with LoRA rows (`engine profile --lora-rank R`, whose header then has a
// `# lora_rank: R` line) writes after those: the step's tokens under an adapter and its distinct
// adapters (StepFeatures::lora_tokens, num_loras). Optional when reading (0 without them).
const std::vector<std::string>& profile_lora_columns();
// The columns a CUDA profile with NVML writes last (its header then has a `# power:` line): the
// board's mean power while the shape's steps ran back to back, W (empty when no reading
// succeeded), and how long that was measured, ms. Optional when reading.
const std::vector<std::string>& profile_power_columns();

}  // namespace servelab
