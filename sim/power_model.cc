#include "sim/power_model.h"

#include <algorithm>
#include <stdexcept>

namespace servelab {

PowerModel::PowerModel(const PowerSpec& spec, double peak_flops, double hbm_bandwidth,
                       std::int32_t gpus)
    : spec_(spec),
      peak_flops_(peak_flops),
      hbm_bandwidth_(hbm_bandwidth),
      gpus_(static_cast<double>(gpus)) {
  if (!(peak_flops > 0) || !(hbm_bandwidth > 0) || gpus < 1) {
    throw std::invalid_argument("PowerModel: needs positive peaks and at least one GPU");
  }
}

PowerModel PowerModel::of(const HardwareConfig& hardware, const ModelConfig& model,
                          const ParallelConfig& parallel) {
  return PowerModel(hardware.power, hardware.peak_flops_for(model.dtype), hardware.hbm_bandwidth,
                    parallel.num_gpus());
}

double PowerModel::watts_at(const PowerSpec& spec, double u_flops, double u_bytes) {
  return std::min(spec.max_w, spec.idle_w + spec.compute_w * u_flops + spec.memory_w * u_bytes);
}

PowerModel::Rates PowerModel::rates(double flops, double bytes, double seconds) const {
  return {std::min(1.0, flops / (gpus_ * peak_flops_ * seconds)),
          std::min(1.0, bytes / (gpus_ * hbm_bandwidth_ * seconds))};
}

double PowerModel::step_watts(double flops, double bytes, double seconds) const {
  if (!known()) return 0.0;
  if (!(seconds > 0)) return idle_watts();
  const Rates u = rates(flops, bytes, seconds);
  return watts_at(spec_, u.flops, u.bytes) * gpus_;
}

double PowerModel::step_joules(double flops, double bytes, double seconds) const {
  return seconds > 0 ? step_watts(flops, bytes, seconds) * seconds : 0.0;
}

}  // namespace servelab
