// PowerModel: the power a replica's GPUs draw, and so the energy of a simulated run
// (docs/cost-model.md, "Power and energy").
//
// A replica of `gpus` GPUs of one hardware entry: its peaks (for MFU and MBU) and, when the
// entry's PowerSpec is known, its power. A step that lasts
// `seconds` and does `flops` FLOPs and moves `bytes` bytes of device memory (all its GPUs
// together: the cost model's StepCostBreakdown::flops and ::bytes) keeps each GPU at
//   P = min(max_w, idle_w + compute_w * u_flops + memory_w * u_bytes)
//   u_flops = min(1, flops / (gpus * peak_flops * seconds))
//   u_bytes = min(1, bytes / (gpus * hbm_bandwidth * seconds))
// for its whole duration (host time, swaps and loads inside the step lower the rates, so they
// are priced near idle), and its energy is P * gpus * seconds. Between steps every GPU draws
// idle_w. peak_flops is the model dtype's tensor-core peak (HardwareConfig::peak_flops_for).
//
// Immutable after construction; pure.
#pragma once

#include <cstdint>

#include "serving/hardware_config.h"
#include "serving/model_config.h"
#include "serving/parallel_config.h"

namespace servelab {

class PowerModel {
 public:
  // REQUIRES: peak_flops > 0, hbm_bandwidth > 0, gpus >= 1 (std::invalid_argument).
  PowerModel(const PowerSpec& spec, double peak_flops, double hbm_bandwidth, std::int32_t gpus);
  // The replica of `parallel.num_gpus()` GPUs of `hardware` serving `model` (peak FLOP/s of the
  // model's dtype).
  static PowerModel of(const HardwareConfig& hardware, const ModelConfig& model,
                       const ParallelConfig& parallel);
  // Whether the power is known (the entry has `power:`); without, every watt and joule is 0.
  bool known() const { return spec_.known(); }
  // One GPU's watts at these rates of its peaks (each clamped to [0, 1] by the caller):
  // min(max_w, idle_w + compute_w * u_flops + memory_w * u_bytes). The formula, for every user.
  static double watts_at(const PowerSpec& spec, double u_flops, double u_bytes);
  // A step's rates: FLOPs and bytes over the replica's peaks for `seconds`, each at most 1.
  // REQUIRES: seconds > 0.
  struct Rates {
    double flops = 0, bytes = 0;
  };
  Rates rates(double flops, double bytes, double seconds) const;
  // Watts of the whole replica during a step of these totals; idle power for seconds <= 0.
  double step_watts(double flops, double bytes, double seconds) const;
  // Joules of that step: step_watts * seconds (0 for seconds <= 0).
  double step_joules(double flops, double bytes, double seconds) const;
  // Watts of the whole replica between steps.
  double idle_watts() const { return spec_.idle_w * gpus_; }
  std::int32_t gpus() const { return static_cast<std::int32_t>(gpus_); }
  // The replica's peaks, all GPUs together (the denominators of MFU and MBU).
  double peak_flops() const { return peak_flops_ * gpus_; }
  double peak_bytes_per_s() const { return hbm_bandwidth_ * gpus_; }

 private:
  PowerSpec spec_;
  double peak_flops_;
  double hbm_bandwidth_;
  double gpus_;
};

}  // namespace servelab
