// SyntheticWorkload: requests generated from an arrival process and length distributions.
//
// YAML (the `workload:` section; every key is checked, unknown keys are errors):
//
//   workload:
//     type: synthetic
//     num_requests: 2000        # stop after this many requests (integer >= 1)
//     duration_s: 60            # and/or stop at the first arrival >= start_s + duration_s (> 0);
//                               # at least one of num_requests, duration_s is required
//     start_s: 0                # optional (>= 0, default 0): arrival time of the first request
//     arrival: {process: gamma, rate: 20.0, cv: 3.0}
//     prompt_len: {dist: lognormal, mean: 800, stddev: 400, min: 16, max: 4096}
//     output_len: {dist: uniform, min: 16, max: 512}
//     shared_prefix: {num_prefixes: 4, length: 256, fraction: 0.5}   # optional
//
// arrival (rates in requests/s, all > 0). The first request arrives at start_s, each later one
// a random gap after the one before:
//   {process: poisson, rate}      exponential gaps
//   {process: gamma, rate, cv}    gamma gaps with mean 1/rate and coefficient of variation cv
//                                 (> 0; cv > 1 is burstier than Poisson, cv = 1 is Poisson)
//   {process: fixed, rate}        every 1/rate seconds exactly
//   {process: onoff, rate, on_s, off_s}
//                                 Poisson at `rate` during on periods of on_s seconds (> 0),
//                                 nothing during off periods of off_s seconds (>= 0); the first
//                                 on period starts at start_s. Mean rate = rate*on_s/(on_s+off_s).
//
// prompt_len, output_len (token counts, integers in [1, 10,000,000]). min and max clamp every
// draw (a draw below min becomes min, not a redraw); where optional they default to 1 and
// 10,000,000. Continuous draws are rounded to the nearest integer before clamping.
//   {dist: fixed, value}
//   {dist: uniform, min, max}               integers in [min, max], both inclusive (required)
//   {dist: normal, mean, stddev, min, max}
//   {dist: lognormal, mean, stddev, min, max}
//                                           mean and stddev of the lengths themselves (not of
//                                           their logarithm): mu and sigma are derived from them
//   {dist: table, file, column, min, max}   a uniformly chosen row of a length table (see
//                                           length_table.h); column: prefill or decode, default
//                                           prefill for prompt_len and decode for output_len.
//                                           prompt_len and output_len draw rows independently.
// lengths (instead of prompt_len and output_len): prompt and output from the same table row, so
// the real correlation between them is kept:
//   lengths: {table: traces/lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv,
//             prompt_min: 1, prompt_max: 4096, output_min: 1, output_max: 2048}   # clamps optional
//
// shared_prefix (optional): a `fraction` (in [0, 1]) of requests begin with one of
// `num_prefixes` (>= 1) system prompts of `length` (>= 1) tokens, chosen uniformly. prompt_len is
// the TOTAL prompt length, so the length distribution means the same with or without prefixes:
// a request with a prefix gets max(prompt_len - length, 1) tokens of its own after it (so its
// prompt has at least length + 1 tokens).
//
// Content: a request's own tokens are the stream unique_content_id(seed, id); prefix p is the
// stream shared_prefix_content_id(seed, p), so requests with the same prefix share their first
// `length` tokens exactly and prefix caching can find them.
//
// Randomness: separate Rng streams "arrivals", "prompt_len", "output_len" and "prefix", so
// changing one distribution never changes what the others draw.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/request.h"
#include "core/rng.h"
#include "core/time.h"
#include "traces/length_table.h"
#include "traces/workload.h"

namespace servelab {

// Largest prompt or output length a synthetic distribution may produce.
inline constexpr std::int32_t kMaxSyntheticLength = 10'000'000;

enum class ArrivalProcess { kPoisson, kGamma, kFixed, kOnOff };

struct ArrivalConfig {
  ArrivalProcess process = ArrivalProcess::kPoisson;
  double rate = 1.0;   // requests/s (during on periods for kOnOff); > 0
  double cv = 1.0;     // kGamma: coefficient of variation of the gaps; > 0
  double on_s = 1.0;   // kOnOff: > 0
  double off_s = 0.0;  // kOnOff: >= 0
};

enum class LengthDistKind { kFixed, kUniform, kNormal, kLognormal, kTable };
enum class TableColumn { kPrefill, kDecode };

struct LengthDist {
  LengthDistKind kind = LengthDistKind::kFixed;
  std::int32_t value = 1;  // kFixed
  std::int32_t min = 1;    // clamps; the range of kUniform
  std::int32_t max = kMaxSyntheticLength;
  double mean = 1.0, stddev = 0.0;           // kNormal, kLognormal; for kLognormal mean > 0
  std::shared_ptr<const LengthTable> table;  // kTable
  TableColumn column = TableColumn::kPrefill;

  std::string describe() const;
};

struct SharedPrefixConfig {
  std::int32_t num_prefixes = 1;  // >= 1
  std::int32_t length = 1;        // >= 1
  double fraction = 0.0;          // in [0, 1]
};

struct SyntheticConfig {
  std::optional<std::int64_t> num_requests;  // at least one of num_requests, duration_ns
  std::optional<TimeNs> duration_ns;
  TimeNs start_ns = 0;
  ArrivalConfig arrival;
  LengthDist prompt_len;
  LengthDist output_len;
  // True: both lengths come from one row, drawn for the prompt. REQUIRES: both dists are kTable
  // over the same table.
  bool paired_rows = false;
  std::optional<SharedPrefixConfig> shared_prefix;
  std::int32_t n = 1;  // parallel samples per request (RequestSpec::n), in [1, kMaxSamples]
  // Where the arrival process was configured ("FILE:LINE:COL: key 'workload.arrival'"), for the
  // error when arrival times would overflow (a tiny rate without duration_s).
  std::string arrival_location = "workload.arrival";
};

// The content stream of shared system prompt `prefix` (distinct from every unique_content_id).
inline constexpr std::uint64_t shared_prefix_content_id(std::uint64_t seed, std::uint64_t prefix) {
  return mix64(mix64(seed ^ 0x7072656669787321ULL) ^ prefix);  // "prefixs!"
}

class SyntheticWorkload : public Workload {
 public:
  // Throws std::invalid_argument when `config` breaks a documented range (make_workload checks
  // the YAML first, with messages that name the key).
  SyntheticWorkload(SyntheticConfig config, std::uint64_t seed);

  // Throws ConfigError (naming config.arrival_location) when the next arrival time would
  // overflow TimeNs (about 292 years) and no duration_s ends the workload first.
  std::optional<RequestSpec> next() override;
  std::string describe() const override;

  const SyntheticConfig& config() const { return config_; }

 private:
  // The next gap of the arrival process in "active" time (time spent in on periods); nullopt
  // when it overflows TimeNs.
  std::optional<TimeNs> draw_gap();
  // Active time to wall time since start: skips the off periods of kOnOff (nullopt: overflow).
  std::optional<TimeNs> wall_time(TimeNs active_ns) const;

  SyntheticConfig config_;
  std::uint64_t seed_;
  Rng arrival_rng_, prompt_rng_, output_rng_, prefix_rng_;
  double gamma_shape_ = 1.0, gamma_scale_s_ = 1.0;
  double lognormal_mu_[2] = {0, 0}, lognormal_sigma_[2] = {0, 0};  // prompt, output
  TimeNs on_ns_ = 0, off_ns_ = 0;
  TimeNs active_ns_ = 0;   // arrival of the next request in active time
  bool overflow_ = false;  // active_ns_ would have overflowed: no representable next arrival
  RequestId next_id_ = 0;
  bool done_ = false;
};

}  // namespace servelab
