// Which paged prefill attention kernel runs (kernels/attention.h, PrefillAttentionArgs::kernel):
// the FlashAttention-2-style mma.sync kernel (the default) or the older WMMA kernel, kept so that
// a GPU session whose new kernel fails can switch back without rebuilding. The engine takes the
// choice from $SERVELAB_CUDA_PREFILL (docs/gpu-todo.md). Plain C++, in servelab_kernels_host.
#pragma once

#include <string_view>

namespace servelab::kernels {

enum class PrefillKernel {
  kFa2,   // kernels/attention_prefill_fa2.cu: register-resident S, P, O; cp.async double buffer
  kWmma,  // kernels/attention_prefill.cu: WMMA, S, P and O in shared memory
};

inline constexpr const char* kPrefillKernelEnv = "SERVELAB_CUDA_PREFILL";

// "fa2" or "wmma".
const char* prefill_kernel_name(PrefillKernel kernel);

// The kernel named `text` (exactly "fa2" or "wmma"). Throws std::invalid_argument
// "<what>: expected one of fa2, wmma, got '<text>'" otherwise (empty included).
PrefillKernel parse_prefill_kernel(std::string_view text, std::string_view what);

// $SERVELAB_CUDA_PREFILL parsed by parse_prefill_kernel (its name as `what`) when the variable
// is set, `fallback` when it is not. Throws std::invalid_argument for a set but bad value.
PrefillKernel prefill_kernel_from_env(PrefillKernel fallback);

}  // namespace servelab::kernels
