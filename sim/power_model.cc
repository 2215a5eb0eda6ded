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

double PowerModel::step_watts(double flops, double bytes, double seconds) const {
  if (!known()) return 0.0;
  if (!(seconds > 0)) return idle_watts();
  const double u_flops = std::min(1.0, flops / (gpus_ * peak_flops_ * seconds));
  const double u_bytes = std::min(1.0, bytes / (gpus_ * hbm_bandwidth_ * seconds));
  const double per_gpu =
      std::min(spec_.max_w, spec_.idle_w + spec_.compute_w * u_flops + spec_.memory_w * u_bytes);
  return per_gpu * gpus_;
}

double PowerModel::step_joules(double flops, double bytes, double seconds) const {
  return seconds > 0 ? step_watts(flops, bytes, seconds) * seconds : 0.0;
}

}  // namespace servelab
