#include "kernels/lora_kernel.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace servelab::kernels {

const char* lora_kernel_name(LoraKernel kernel) {
  return kernel == LoraKernel::kCublas ? "cublas" : "gather";
}

LoraKernel parse_lora_kernel(std::string_view text, std::string_view what) {
  if (text == "gather") return LoraKernel::kGather;
  if (text == "cublas") return LoraKernel::kCublas;
  throw std::invalid_argument(std::string(what) + ": expected one of gather, cublas, got '" +
                              std::string(text) + "'");
}

LoraKernel lora_kernel_from_env(LoraKernel fallback) {
  const char* env = std::getenv(kLoraKernelEnv);
  if (env == nullptr) return fallback;
  return parse_lora_kernel(env, kLoraKernelEnv);
}

bool lora_gather_fits(const LoraShape& shape) {
  for (int t = 0; t < kLoraTargets; ++t) {
    if (shape.in[t] < 8 || shape.in[t] % 8 != 0 || shape.out[t] < 8 || shape.out[t] % 8 != 0) {
      return false;
    }
  }
  return true;
}

LoraShape llama_lora_shape(std::int32_t hidden, std::int32_t q_size, std::int32_t kv_size,
                           std::int32_t intermediate) {
  LoraShape s;
  const std::int32_t in[kLoraTargets] = {hidden, hidden, hidden,      q_size,
                                         hidden, hidden, intermediate};
  const std::int32_t out[kLoraTargets] = {q_size,       kv_size,      kv_size, hidden,
                                          intermediate, intermediate, hidden};
  for (int t = 0; t < kLoraTargets; ++t) {
    s.in[t] = in[t];
    s.out[t] = out[t];
  }
  return s;
}

}  // namespace servelab::kernels
