#include "engine/weight_quantization.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/float_formats.h"
#include "serving/config_node.h"

namespace servelab {

void quantize_fp8_per_tensor(RowMatrix& w) {
  const float amax = w.size() == 0 ? 0.0f : w.cwiseAbs().maxCoeff();
  if (amax == 0.0f) return;  // all zeros: every code is 0 whatever the scale
  const float scale = amax / kernels::kFp8E4m3Max;
  for (Eigen::Index i = 0; i < w.size(); ++i) {
    float& x = w.data()[i];
    x = kernels::fp8_e4m3_to_float(kernels::float_to_fp8_e4m3(x / scale)) * scale;
  }
}

void quantize_awq_int4(RowMatrix& w) {
  if (w.cols() % kAwqGroupSize != 0) {
    throw std::invalid_argument("AWQ int4: " + std::to_string(w.cols()) +
                                " input columns, expected a multiple of " +
                                std::to_string(kAwqGroupSize));
  }
  auto fp16 = [](float x) { return kernels::round_to_format(x, kernels::FloatFormat::kFp16); };
  for (Eigen::Index r = 0; r < w.rows(); ++r) {
    float* row = w.row(r).data();
    for (Eigen::Index g = 0; g < w.cols(); g += kAwqGroupSize) {
      float* x = row + g;
      const auto [lo, hi] = std::minmax_element(x, x + kAwqGroupSize);
      const float min = std::min(*lo, 0.0f), max = std::max(*hi, 0.0f);
      const float scale = fp16((max - min) / 15.0f);
      if (scale == 0.0f) continue;  // an all-zero group
      const float zero = std::clamp(std::nearbyint(-min / scale), 0.0f, 15.0f);
      for (std::int64_t i = 0; i < kAwqGroupSize; ++i) {
        const float q = std::clamp(std::nearbyint(x[i] / scale) + zero, 0.0f, 15.0f);
        x[i] = (q - zero) * scale;
      }
    }
  }
}

void quantize_weights(LlamaWeights& weights, const std::string& quantization) {
  if (quantization == "none") return;
  if (quantization != "fp8" && !is_awq(quantization)) {
    throw ConfigError("expected one of none, awq, awq_marlin, fp8, got '" + quantization + "'");
  }
  const char* names[] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                         "gate_proj", "up_proj", "down_proj"};
  for (LlamaLayerWeights& l : weights.layers) {
    RowMatrix* matrices[] = {&l.q_proj,    &l.k_proj,  &l.v_proj,   &l.o_proj,
                             &l.gate_proj, &l.up_proj, &l.down_proj};
    for (int i = 0; i < 7; ++i) {
      if (quantization == "fp8") {
        quantize_fp8_per_tensor(*matrices[i]);
      } else if (matrices[i]->cols() % kAwqGroupSize != 0) {
        throw ConfigError(quantization +
                          " needs every projection's input width to be a multiple of " +
                          std::to_string(kAwqGroupSize) + "; model " + weights.config.model.name +
                          "'s " + names[i] + " has " + std::to_string(matrices[i]->cols()));
      } else {
        quantize_awq_int4(*matrices[i]);
      }
    }
  }
}

}  // namespace servelab
