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
    case PrefillKernel::kWgmma:
      return "wgmma";
    case PrefillKernel::kFa2Gqa:
      return "fa2_gqa";
    case PrefillKernel::kFa2:
      break;
  }
  return "fa2";
}

bool prefill_reads_fp8(PrefillKernel kernel) { return kernel != PrefillKernel::kWmma; }

bool prefill_splits_keys(PrefillKernel kernel) { return kernel != PrefillKernel::kWmma; }

PrefillKernel parse_prefill_kernel(std::string_view text, std::string_view what) {
  std::string names;
  for (PrefillKernel kernel : kPrefillKernels) {
    if (text == prefill_kernel_name(kernel)) return kernel;
    names += names.empty() ? "" : ", ";
    names += prefill_kernel_name(kernel);
  }
  throw std::invalid_argument(std::string(what) + ": expected one of " + names + ", got '" +
                              std::string(text) + "'");
}

PrefillKernel prefill_kernel_from_env(PrefillKernel fallback) {
  const char* env = std::getenv(kPrefillKernelEnv);
  if (env == nullptr) return fallback;
  return parse_prefill_kernel(env, kPrefillKernelEnv);
}

}  // namespace servelab::kernels
