// Which kernel runs the linear layers of a step with few tokens (kernels/gemm.h Gemm::linear):
// cuBLAS (the default) or the skinny mma.sync kernel (kernels/gemm_skinny.h) for steps of at
// most kSkinnyMaxTokens tokens, which are the decode steps up to batch 32. Larger steps always go
// to cuBLAS. The engine takes the choice from $SERVELAB_CUDA_GEMM (docs/gpu-todo.md); gpu-check
// bench times both and the modes after it run the faster. Plain C++, in servelab_kernels_host.
#pragma once

#include <cstdint>
#include <string_view>

namespace servelab::kernels {

enum class GemmKernel {
  kCublas,  // cublasGemmEx for every shape
  kSkinny,  // gemm_skinny.cu for 1..kSkinnyMaxTokens tokens (in % 32 == 0), cuBLAS otherwise
};

inline constexpr std::int32_t kSkinnyMaxTokens = 32;
inline constexpr const char* kGemmKernelEnv = "SERVELAB_CUDA_GEMM";

// "cublas" or "skinny".
const char* gemm_kernel_name(GemmKernel kernel);

// The kernel named `text` (exactly "cublas" or "skinny"). Throws std::invalid_argument
// "<what>: expected one of cublas, skinny, got '<text>'" otherwise (empty included).
GemmKernel parse_gemm_kernel(std::string_view text, std::string_view what);

// $SERVELAB_CUDA_GEMM parsed by parse_gemm_kernel (its name as `what`) when the variable is set,
// `fallback` when it is not. Throws std::invalid_argument for a set but bad value.
GemmKernel gemm_kernel_from_env(GemmKernel fallback);

}  // namespace servelab::kernels
