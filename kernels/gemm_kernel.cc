#include "kernels/gemm_kernel.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace servelab::kernels {

const char* gemm_kernel_name(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::kSkinny:
      return "skinny";
    case GemmKernel::kCublasLt:
      return "lt";
    case GemmKernel::kAuto:
      return "auto";
    case GemmKernel::kCublas:
      break;
  }
  return "cublas";
}

GemmKernel parse_gemm_kernel(std::string_view text, std::string_view what) {
  if (text == "cublas") return GemmKernel::kCublas;
  if (text == "skinny") return GemmKernel::kSkinny;
  if (text == "lt") return GemmKernel::kCublasLt;
  if (text == "auto") return GemmKernel::kAuto;
  throw std::invalid_argument(std::string(what) +
                              ": expected one of cublas, skinny, lt, auto, got '" +
                              std::string(text) + "'");
}

GemmKernel gemm_kernel_from_env(GemmKernel fallback) {
  const char* env = std::getenv(kGemmKernelEnv);
  if (env == nullptr) return fallback;
  return parse_gemm_kernel(env, kGemmKernelEnv);
}

}  // namespace servelab::kernels
