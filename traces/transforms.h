// TransformedWorkload: reshapes any workload's request stream (rate, window, sampling, caps).
//
// YAML: a `transforms:` mapping inside any `workload:` section; make_workload() wraps the
// workload it builds when the key is present. All keys are optional:
//
//   transforms:
//     window_s: [600, 1200]   # keep arrivals in [start, end) of the workload's own times (before
//                             # rate_scale), re-based so the window starts at 0; end > start >= 0
//     sample: 0.25            # keep each request with this probability (in (0, 1]): a
//                             # deterministic Bernoulli draw per request from
//                             # Rng::stream(seed, "sample")
//     rate_scale: 2.0         # (> 0) arrival times divided by k: k = 2 doubles the rate
//     shift_s: 10             # (>= 0) seconds added to every arrival time, after rate_scale
//     max_prompt_tokens: 4096 # (>= 1) longer prompts are cut to their first N tokens (so shared
//                             # prefixes stay shared); a cut never splits an image already in
//                             # the prompt (a mix's parts'): it moves to the image's start (its
//                             # end when the image opens the prompt), images past it dropped
//     max_output_tokens: 512  # (>= 1) output lengths capped at N
//
// Steps apply in the order listed. Surviving requests are renumbered 0, 1, 2, ... so the ids
// contract of Workload holds. Arrival order is preserved (every step is monotone in time).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/rng.h"
#include "serving/config_node.h"
#include "traces/workload.h"

namespace servelab {

struct TransformOptions {
  std::optional<double> window_start_s, window_end_s;  // both or neither
  double sample = 1.0;                                 // in (0, 1]
  double rate_scale = 1.0;                             // > 0
  double shift_s = 0.0;                                // >= 0
  std::optional<std::int32_t> max_prompt_tokens;       // >= 1
  std::optional<std::int32_t> max_output_tokens;       // >= 1
  std::string location;  // "FILE:LINE:COL: key 'workload.transforms'" for errors while reading
};

// Reads the `transforms:` mapping. Throws ConfigError naming the key for any invalid value.
TransformOptions parse_transforms(const ConfigNode& node);

class TransformedWorkload : public Workload {
 public:
  // `seed` is the experiment seed (for `sample`). Throws std::invalid_argument for options out
  // of range.
  TransformedWorkload(std::unique_ptr<Workload> inner, TransformOptions options,
                      std::uint64_t seed);

  std::optional<RequestSpec> next() override;
  std::string describe() const override;
  std::int64_t skipped_rows() const override { return inner_->skipped_rows(); }
  std::int64_t filtered_rows() const override { return inner_->filtered_rows(); }

 private:
  std::unique_ptr<Workload> inner_;
  TransformOptions options_;
  Rng sample_rng_;
  bool done_ = false;
  RequestId next_id_ = 0;
};

}  // namespace servelab
