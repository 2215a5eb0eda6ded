#include "engine/gemm_lt_file.h"

#include <filesystem>
#include <stdexcept>
#include <string>

#include "core/config_error.h"
#include "engine/gpu_switches.h"
#if SERVELAB_HAVE_CUDA
#include "kernels/gemm_lt.h"
#endif

namespace servelab {

#if SERVELAB_HAVE_CUDA

namespace {

// The file, when the kernel is lt and the variable names one; empty otherwise.
std::string lt_file(kernels::GemmKernel kernel) {
  if (!kernels::gemm_kernel_tunes(kernel)) return "";
  return cuda_switches_from_env().gemm_lt_file.value_or("");
}

std::string where(const std::string& file) {
  return std::string(kCudaGemmLtFileEnv) + "=" + file + ": ";
}

}  // namespace

void load_gemm_lt_file(kernels::GemmKernel kernel) {
  const std::string file = lt_file(kernel);
  std::error_code ec;
  if (file.empty() || !std::filesystem::exists(file, ec)) return;  // made by the first run
  try {
    kernels::LtGemm::load_decisions(file);
  } catch (const std::exception& e) {
    throw ConfigError(where(file) + e.what());
  }
}

void save_gemm_lt_file(kernels::GemmKernel kernel) {
  const std::string file = lt_file(kernel);
  if (file.empty()) return;
  try {
    kernels::LtGemm::save_decisions(file);
  } catch (const std::exception& e) {
    throw ConfigError(where(file) + e.what());
  }
}

#else
// A build without CUDA runs no CUDA executor: nothing to read or write.
void load_gemm_lt_file(kernels::GemmKernel) {}
void save_gemm_lt_file(kernels::GemmKernel) {}
#endif

}  // namespace servelab
