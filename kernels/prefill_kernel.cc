#include "kernels/prefill_kernel.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace servelab::kernels {

const char* prefill_kernel_name(PrefillKernel kernel) {
  switch (kernel) {
    case PrefillKernel::kWmma:
      return "wmma";
    case PrefillKernel::kFa2Wide:
      return "fa2_128";
    case PrefillKernel::kFa2:
      break;
  }
  return "fa2";
}

std::int32_t prefill_tile_rows(PrefillKernel kernel) {
  return kernel == PrefillKernel::kFa2Wide ? 128 : 64;
}

bool is_fa2(PrefillKernel kernel) {
  return kernel == PrefillKernel::kFa2 || kernel == PrefillKernel::kFa2Wide;
}

PrefillKernel parse_prefill_kernel(std::string_view text, std::string_view what) {
  if (text == "fa2") return PrefillKernel::kFa2;
  if (text == "wmma") return PrefillKernel::kWmma;
  if (text == "fa2_128") return PrefillKernel::kFa2Wide;
  throw std::invalid_argument(std::string(what) + ": expected one of fa2, wmma, fa2_128, got '" +
                              std::string(text) + "'");
}

PrefillKernel prefill_kernel_from_env(PrefillKernel fallback) {
  const char* env = std::getenv(kPrefillKernelEnv);
  if (env == nullptr) return fallback;
  return parse_prefill_kernel(env, kPrefillKernelEnv);
}

}  // namespace servelab::kernels
