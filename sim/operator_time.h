// OperatorTime: the time of one GPU kernel launch on the roofline, as the roofline cost model
// and the Vidur-profile fit (sim/vidur_fit.h) both price it. One definition, so the fitted
// parameters mean the same thing wherever they are used. Formulas and the evidence behind their
// form are in docs/cost-model.md ("GEMMs", "Elementwise kernels").
//
//   combine(a, b, k) = (a^k + b^k)^(1/k)  for k >= 1, max(a, b) for k = 0
//   gemm(M, N, K)    = combine(2MNK / (F e_g), (NK + M(N + K)) b / (B e_gb), k_g) + t_g
//   elementwise(x)   = combine(t_e, x / (B e_kind), k_e)        x = bytes moved by the launch
//
// k = 1 adds compute and memory time (no overlap), larger k overlaps them more, and 0 is the
// hard max of the classic roofline. t_g is a per-launch minimum added to every GEMM; t_e is a
// floor that a small elementwise launch cannot go below. Immutable; safe to share.
#pragma once

#include <cmath>
#include <string_view>

#include "serving/hardware_config.h"

namespace servelab {

enum class ElementwiseKind {
  kNorm,        // RMSNorm (vLLM fuses the residual add into it: fused_add_rms_norm)
  kRope,        // rotary embedding of q and k, in place
  kActivation,  // SiLU(gate) * up
  kResidual,    // a plain residual add or copy (unfused; also the embedding gather)
};

inline double combine_times(double a, double b, double k) {
  if (k <= 0) return std::max(a, b);
  if (k == 1) return a + b;
  const double hi = std::max(a, b);
  if (hi <= 0) return 0;
  // Scaled so that large ratios neither overflow nor lose the smaller term entirely.
  return hi * std::pow(std::pow(a / hi, k) + std::pow(b / hi, k), 1.0 / k);
}

class OperatorTime {
 public:
  // Resolves the hardware's efficiencies (a 0 bandwidth efficiency means memory_bandwidth's) for
  // a model of `dtype` (fp32 uses the FP32 peak).
  OperatorTime(const HardwareConfig& hw, std::string_view dtype);

  // One GEMM launch: an (M x K) by (K x N) product of `dtype_bytes` elements, reading the weights
  // once and the activations in, writing M x N out. 0 when M == 0.
  double gemm(double m, double n, double k, double dtype_bytes) const {
    if (m <= 0) return 0;
    return combine_times(gemm_compute(m, n, k), gemm_memory(m, n, k, dtype_bytes), gemm_overlap_) +
           gemm_min_s_;
  }
  // Its two parts: compute time at the GEMM rate, memory time at the GEMM bandwidth.
  double gemm_compute(double m, double n, double k) const {
    return 2.0 * m * n * k * s_per_gemm_flop_;
  }
  // The compute part of an FP8 x FP8 product (W8A8) at the hardware's FP8 tensor-core rate and
  // the same GEMM efficiency. REQUIRES: hw.has_fp8_tensor_cores().
  double gemm_compute_fp8(double m, double n, double k) const {
    return 2.0 * m * n * k * s_per_fp8_gemm_flop_;
  }
  double gemm_memory(double m, double n, double k, double dtype_bytes) const {
    return (n * k + m * (n + k)) * dtype_bytes * s_per_gemm_byte_;
  }
  // A GEMM launch from its two parts (compute and memory seconds), overlapped and with the
  // per-launch time added as gemm() does: for launches whose bytes gemm_memory cannot state
  // (quantized weights, RooflineCostModel).
  double gemm_from_parts(double compute_s, double memory_s) const {
    return combine_times(compute_s, memory_s, gemm_overlap_) + gemm_min_s_;
  }
  // Seconds to move `bytes` at the GEMM bandwidth.
  double gemm_bytes_time(double bytes) const { return bytes * s_per_gemm_byte_; }
  // The hard max with no per-launch time: the classic roofline, under which several launches
  // may be priced as one operator (RooflineCostModel prices a layer's GEMMs so).
  bool classic_gemm() const { return gemm_overlap_ <= 0 && gemm_min_s_ == 0; }
  // One elementwise launch moving `bytes` (read + written). 0 when bytes == 0.
  double elementwise(double bytes, ElementwiseKind kind) const {
    if (bytes <= 0) return 0;
    return combine_times(elementwise_min_s_, bytes * s_per_ew_byte_[static_cast<int>(kind)],
                         elementwise_overlap_);
  }

 private:
  double s_per_gemm_flop_;
  double s_per_fp8_gemm_flop_;  // 0 without FP8 tensor cores
  double s_per_gemm_byte_;
  double gemm_overlap_;
  double gemm_min_s_;
  double s_per_ew_byte_[4];
  double elementwise_min_s_;
  double elementwise_overlap_;
};

}  // namespace servelab
