// fit_power: the power model's coefficients (sim/power_model.h) fitted to the board power a CUDA
// `engine profile` read through NVML (its `power_w` column; docs/validation.md, "Power").
//
// For every profiled shape with a reading, the roofline of the profile's model on `hardware`
// gives the step's FLOPs and device-memory bytes, and the shape's median time their rates
//   u_flops = FLOPs / (peak_flops x median),  u_bytes = bytes / (hbm_bandwidth x median)
// (one GPU: profiles are single-device). The measured watts are fitted as
//   P = idle_w + compute_w x u_flops + memory_w x u_bytes
// by non-negative least squares, on every shape but each family's every `holdout`-th (in file
// order), on which the error is reported, beside the error of the entry's own coefficients on
// the same shapes. Shapes measured within 3 % of the entry's max_w are left out of the fit (the
// board was at its limit, where the formula's cap applies, not the line); max_w is the
// entry's, kept.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "serving/hardware_config.h"
#include "serving/model_config.h"
#include "sim/calibration.h"
#include "sim/error_stats.h"

namespace servelab {

struct PowerFitRow {
  std::string family;
  std::int64_t line = 0;  // in the profile
  double u_flops = 0, u_bytes = 0;
  double measured_w = 0;
  bool held_out = false;
  bool at_limit = false;  // within 3 % of max_w: not fitted
};

struct PowerFit {
  std::string profile;  // its path
  PowerSpec assumed;    // the hardware entry's (unknown when it has none)
  PowerSpec fitted;     // max_w: the entry's, or the largest reading when it has none
  std::vector<PowerFitRow> rows;
  // Relative errors (predicted - measured) / measured of the fitted coefficients on the fitted
  // and the held-out rows, and of the entry's on the held-out rows (count 0 without power:).
  ErrorStats fit_error, held_out_error, assumed_held_out_error;
  // Readings above 1.05 x the entry's max_w (a board cannot draw them: NVML's energy counter
  // stepping over a short window), left out of the fit and of the errors; 0 without power:.
  std::int64_t over_limit = 0;
};

// Throws ConfigError naming the profile when it has no power readings (a CPU profile, or NVML
// was not available: no `power_w` column), or fewer than 4 rows to fit or 1 to hold out.
// REQUIRES: holdout >= 2.
PowerFit fit_power(const EngineProfile& profile, const ModelConfig& model,
                   const HardwareConfig& hardware, int holdout);

// The hardware entry `entry_text` (its YAML file's text) with its `power:` mapping replaced by
// the fitted one (appended when it has none), its comments naming the profile and the errors.
std::string power_hardware_yaml(const PowerFit& fit, const std::string& entry_text);

void print_power_fit(std::FILE* out, const PowerFit& fit);

}  // namespace servelab
