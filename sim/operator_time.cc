#include "sim/operator_time.h"

namespace servelab {

namespace {

double or_memory(double efficiency, const HardwareConfig& hw) {
  return efficiency > 0 ? efficiency : hw.memory_bandwidth_efficiency;
}

}  // namespace

OperatorTime::OperatorTime(const HardwareConfig& hw, std::string_view dtype)
    : s_per_gemm_flop_(1.0 / (hw.peak_flops_for(dtype) * hw.gemm_flops_efficiency)),
      s_per_fp8_gemm_flop_(
          hw.has_fp8_tensor_cores() ? 1.0 / (hw.peak_flops_fp8 * hw.gemm_flops_efficiency) : 0),
      s_per_gemm_byte_(1.0 / (hw.hbm_bandwidth * or_memory(hw.gemm_bandwidth_efficiency, hw))),
      gemm_overlap_(hw.gemm_overlap),
      gemm_min_s_(hw.gemm_min_s),
      elementwise_min_s_(hw.elementwise_min_s),
      elementwise_overlap_(hw.elementwise_overlap) {
  const double per_kind[4] = {hw.norm_bandwidth_efficiency, hw.rope_bandwidth_efficiency,
                              hw.activation_bandwidth_efficiency, hw.residual_bandwidth_efficiency};
  for (int i = 0; i < 4; ++i)
    s_per_ew_byte_[i] = 1.0 / (hw.hbm_bandwidth * or_memory(per_kind[i], hw));
}

}  // namespace servelab
