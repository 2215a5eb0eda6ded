#include "kernels/prefill_kernel.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace servelab::kernels {

const char* prefill_kernel_name(PrefillKernel kernel) {
  return kernel == PrefillKernel::kWmma ? "wmma" : "fa2";
}

PrefillKernel parse_prefill_kernel(std::string_view text, std::string_view what) {
  if (text == "fa2") return PrefillKernel::kFa2;
  if (text == "wmma") return PrefillKernel::kWmma;
  throw std::invalid_argument(std::string(what) + ": expected one of fa2, wmma, got '" +
                              std::string(text) + "'");
}

PrefillKernel prefill_kernel_from_env(PrefillKernel fallback) {
  const char* env = std::getenv(kPrefillKernelEnv);
  if (env == nullptr) return fallback;
  return parse_prefill_kernel(env, kPrefillKernelEnv);
}

}  // namespace servelab::kernels
