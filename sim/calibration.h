// Calibration: fits CalibratedCostModel's coefficients to the step times of an engine profile
// (`engine profile` writes it, `sim calibrate` runs this). Formats and the method are in
// docs/validation.md.
//
// Profile CSV: `# key: value` header lines (model, device, machine_kind, machine_name,
// machine_threads, date_utc, engine_version, block_size, block_bytes, ...), then a CSV header and
// one row per step shape:
//   family, num_tokens, prefill_tokens, prefill_pairs, prefill_context_tokens, decode_tokens,
//   decode_pairs, decode_context_tokens, num_sampled, num_entries, swap_out_blocks,
//   swap_in_blocks, copy_blocks, reps, median_ns, min_ns, max_ns
// (columns are found by name; reps, min_ns and max_ns are informational).
//
// The fit: minimise the sum over shapes of ((predicted - measured) / measured)^2, i.e. least
// squares on rows scaled by 1 / measured, subject to every coefficient >= 0 (NNLS, sim/nnls.h).
// The squares are Huber-weighted (iteratively reweighted NNLS, threshold 1.345 x the robust
// scale 1.4826 x MAD of the first fit's relative residuals, at least 1.345 %), so a shape whose
// median a scheduling hiccup inflated pulls the fit linearly rather than quadratically.
// Columns are normalised before the solve and the coefficients scaled back. The GEMM knee is
// chosen by trying every distinct token count of the profile (and no knee) and keeping the one
// with the smallest objective, if that is at least 25 % below the no-knee objective; then the
// decode-context knee (the step's KV outgrowing a cache) the same way, given the GEMM knee. Terms
// the profile never exercises (a column of zeros) get 0. A profile with LoRA rows adds two terms,
// lora_tokens x R and num_loras x R (R its lora_rank), fitted with the rest; the result has
// lora_set then (cost.yaml's lora_token_rank_s and lora_adapter_rank_s). A profile with a
// prefill launch (EngineProfile::prefill_launch: a CUDA profile) adds the launch's two
// critical paths (core/prefill_launch.h), computed for each row from its alike prefill entries;
// the result has prefill_launch set then (cost.yaml's prefill_critical_key_s,
// prefill_merge_step_s and prefill_launch).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/calibrated_cost_model.h"

namespace servelab {

struct ProfileRow {
  std::string family;  // prefill, prefill_batch, chunk, decode, mixed, swap, copy, ...
  CalibrationFeatures features;
  std::int64_t median_ns = 0;
  std::int64_t line = 0;  // in the file, for messages
  // The board's mean watts while the shape ran (profile_power_columns: a CUDA profile read
  // through NVML); 0 when the profile has no power column or the shape no reading.
  double power_w = 0;
};

// The launch assumed for a CUDA profile without a `# prefill_launch:` line (written before
// `engine profile` recorded it; its `# device:` line names the SMs): the wgmma prefill kernel's
// 128-row tiles and its two resident CTAs per SM at head_dim 128 (97 KB of shared memory,
// __launch_bounds__(256, 2)), the default kernel over bf16 KV since 2026-12-04.
inline constexpr std::int32_t kDefaultProfileTileRows = 128;
inline constexpr std::int32_t kDefaultProfileCtasPerSm = 2;

struct EngineProfile {
  std::string file;
  std::map<std::string, std::string> header;  // the `# key: value` lines
  // From `# machine_kind:` (cpu or cuda), `# machine_name:` and `# machine_threads:` (>= 1): all
  // three or none (profiles written before the machine was recorded have none).
  std::optional<MachineRecord> machine;
  std::int32_t block_size = 0;
  std::int64_t block_bytes = 0;
  // `# lora_rank: R` (engine profile --lora-rank): the rank of the adapters its LoRA rows ran
  // under; 0 for a profile without LoRA rows.
  std::int32_t lora_rank = 0;
  // `# kv_cache_dtype:` (one of kProfileKvDtypes) and `# quantization:` (one of kQuantizations):
  // how the engine stored the model; empty for profiles written before they were recorded.
  std::string kv_cache_dtype;
  std::string quantization;
  // The prefill attention launch the rows ran (core/prefill_launch.h): `# prefill_launch:
  // query_heads=H tile_rows=R max_ctas=M min_split_tokens=S merge_rows=G` (`engine profile` on
  // CUDA writes it); for a CUDA profile without it whose `# device:` line names its SMs ("...,
  // 132 SMs)") and whose model is in the catalogue: the model's query heads,
  // kDefaultProfileTileRows, kDefaultProfileCtasPerSm x SMs, kPrefillMinSplitTokens, and merge
  // rows = tile rows (the merge kernel before 2026-12-04's, one CTA per (tile, head)); else none
  // (a CPU profile: no critical-path terms). With a launch, each row's features carry its
  // critical paths. prefill_launch_source says which ("from the profile's header", or "defaults,
  // ...").
  std::optional<PrefillLaunch> prefill_launch;
  std::string prefill_launch_source;
  std::vector<ProfileRow> rows;
};

// Throws ConfigError naming the file (and line) for a missing or unreadable file, a missing
// column or header key, a malformed row, a non-positive duration, no rows at all, or machine
// lines that are incomplete or malformed (a kind other than cpu or cuda, an empty name, a thread
// count that is not an integer >= 1), or a kv_cache_dtype or quantization line naming no known
// format. The LoRA columns (profile_lora_columns) are optional; rows
// with tokens under an adapter need the `# lora_rank:` line (an integer in [1, 512]), and a row's
// adapters must not outnumber its tokens under them. A malformed `# prefill_launch:` line, or
// with a launch a row whose prefill entries are not alike (its prefill tokens, context tokens
// and pairs not k equal entries, k = num_entries - decode_tokens), is an error too.
EngineProfile read_profile(const std::string& path);

struct FamilyError {
  std::int64_t shapes = 0;
  double mape = 0;       // mean of |predicted - measured| / measured, a fraction
  double max_error = 0;  // the largest of those
};

// Errors on shapes the fit never saw (`sim calibrate --holdout N`).
struct HoldoutErrors {
  int every = 0;                                // every N-th shape of each family was held out
  std::map<std::string, FamilyError> families;  // by family name
  FamilyError overall;
};

struct CalibrationResult {
  CalibratedProfile profile;                    // coefficients + provenance, ready to write
  std::map<std::string, FamilyError> families;  // by family name, on the shapes fitted
  FamilyError overall;
  std::vector<double> predicted_s;    // per profile row (of the profile fitted)
  std::int32_t lora_rank = 0;         // the profile's (its LoRA rows' adapter rank; 0: none)
  std::string prefill_launch_source;  // the profile's (EngineProfile::prefill_launch_source)
  bool converged = true;
  std::optional<HoldoutErrors> holdout;  // set by fit_profile_holdout
};

// Fits the coefficients. Throws ConfigError when the profile cannot determine a fit (fewer
// shapes than the terms it exercises).
CalibrationResult fit_profile(const EngineProfile& profile);

// A profile split for an honest error: within each family, in file order, the every-th,
// 2 x every-th, ... shape is held out, the others are for fitting (so each family keeps its
// first shape, and held-out shapes lie between fitted ones). Both parts keep the header.
// Throws ConfigError when every < 2 or when no family has `every` shapes (nothing held out).
struct ProfileSplit {
  EngineProfile fit, held_out;
};
ProfileSplit split_profile(const EngineProfile& profile, int every);

// fit_profile on split_profile(profile, every).fit, with `holdout` set to the errors of the
// fitted coefficients on the held-out shapes. The coefficients describe the fitted part only.
CalibrationResult fit_profile_holdout(const EngineProfile& profile, int every);

// Per-family errors of `coefficients` on `profile` (the same arithmetic the fit reports).
std::map<std::string, FamilyError> profile_errors(const EngineProfile& profile,
                                                  const CalibratedCoefficients& coefficients,
                                                  FamilyError* overall = nullptr);

// Host overhead the profile cannot see (the engine loop's scheduling and bookkeeping around
// execute()), fitted over an engine run's steps by fit_host_overhead (sim/validate.h).
struct HostOverhead {
  std::string engine_run;  // the engine run folder it was fitted on
  std::int64_t steps = 0;
  double step_s = 0, per_sequence_s = 0;
  // Taken from an earlier calibration's cost.yaml (`sim calibrate --host-overhead-from`), so
  // fitted against that calibration's predictions, not this one's.
  bool carried = false;
  // Fitted to step periods (`sim calibrate --between-steps`): each step's duration plus the
  // engine's time before the next step when the next continues one of its requests (the loop's
  // work after a step), so that simulated latencies carry that time too.
  bool between_steps = false;
  // The engine's idle wake-ups in the run (sim/latency_attribution.h idle_wake_ups) and their
  // median, which becomes the coefficients' wake_up_s (0 when the run has none).
  std::int64_t wake_ups = 0;
  double wake_up_s = 0;
};

// The cost.yaml text, written with yaml-cpp's emitter (deterministic: fixed key order, numbers
// as "%.9g", strings double-quoted and escaped), plus a `host_overhead` section when `host` is
// given and `fit.holdout` when the result has one. Loads back with load_calibrated_profile.
std::string calibration_yaml(const CalibrationResult& result, const std::string& profile_path,
                             const HostOverhead* host = nullptr);

// The fit report `sim calibrate` prints.
void print_calibration(std::FILE* out, const CalibrationResult& result);

}  // namespace servelab
