// Which kernel runs the linear layers of a step with few tokens (kernels/gemm.h Gemm::linear):
// cuBLAS (the default), the skinny mma.sync kernel (kernels/gemm_skinny.h) for steps of at most
// kSkinnyMaxTokens tokens (the decode steps up to batch 32), cuBLASLt with an algorithm timed
// per shape (kernels/gemm_lt.h) for the token counts the caller names (the engine: its decode
// graph buckets), or, for those same counts, whichever of the three ran the shape fastest when
// timed (auto: cuBLAS, every cuBLASLt candidate, the skinny kernel at several split counts).
// Other steps always go to cuBLAS. The engine takes the choice from $SERVELAB_CUDA_GEMM
// (docs/gpu-todo.md); gpu-check bench times all four and the modes after it run the fastest.
// Plain C++, in servelab_kernels_host.
#pragma once

#include <cstdint>
#include <string_view>

namespace servelab::kernels {

enum class GemmKernel {
  kCublas,    // cublasGemmEx for every shape
  kSkinny,    // gemm_skinny.cu for 1..kSkinnyMaxTokens tokens (in % 32 == 0), cuBLAS otherwise
  kCublasLt,  // cublasLtMatmul with the fastest of cuBLASLt's heuristic candidates, timed once
              // per shape (kernels/gemm_lt.h), for the tuned token counts; cuBLAS otherwise
  kAuto,      // per shape of the tuned token counts, the fastest of cuBLAS, cuBLASLt's candidates
              // and the skinny kernel's split counts, timed once (kernels/gemm_lt.h); cuBLAS
              // otherwise
};

inline constexpr std::int32_t kSkinnyMaxTokens = 32;

// True for the kernels chosen by timing per shape (kCublasLt, kAuto): they keep process-wide
// decisions (kernels/gemm_lt.h), a decisions file and timing buffers; the others none.
constexpr bool gemm_kernel_tunes(GemmKernel kernel) {
  return kernel == GemmKernel::kCublasLt || kernel == GemmKernel::kAuto;
}
inline constexpr const char* kGemmKernelEnv = "SERVELAB_CUDA_GEMM";

// "cublas", "skinny", "lt" or "auto".
const char* gemm_kernel_name(GemmKernel kernel);

// The kernel named `text` (exactly "cublas", "skinny", "lt" or "auto"). Throws
// std::invalid_argument "<what>: expected one of cublas, skinny, lt, auto, got '<text>'" otherwise
// (empty included).
GemmKernel parse_gemm_kernel(std::string_view text, std::string_view what);

// $SERVELAB_CUDA_GEMM parsed by parse_gemm_kernel (its name as `what`) when the variable is set,
// `fallback` when it is not. Throws std::invalid_argument for a set but bad value.
GemmKernel gemm_kernel_from_env(GemmKernel fallback);

}  // namespace servelab::kernels
