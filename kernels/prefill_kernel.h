// Which paged prefill attention kernel runs (kernels/attention.h, PrefillAttentionArgs::kernel):
// the Hopper wgmma kernel (the default over bf16 KV: attention.h default_prefill_kernel), the
// FlashAttention-2-style mma.sync kernel (the default over fp8 KV), its 128-row variant, its
// head-packing variant (what the executor runs for launches of short chunks, whatever the
// configured kernel: core/prefill_launch.h prefill_launch_shape), or the older WMMA kernel, kept
// so that a GPU session whose new kernel fails can switch back without rebuilding. The engine
// takes the choice from $SERVELAB_CUDA_PREFILL (docs/gpu-todo.md). Plain C++, in
// servelab_kernels_host.
#pragma once

#include <cstdint>
#include <string_view>

namespace servelab::kernels {

enum class PrefillKernel {
  kFa2,      // kernels/attention_prefill_fa2.cu: register-resident S, P, O; cp.async double
             // buffer; 64 query rows per CTA (4 warps x 16)
  kWmma,     // kernels/attention_prefill.cu: WMMA, S, P and O in shared memory
  kFa2Wide,  // the fa2 kernel with 128 query rows per CTA (4 warps x 2 x 16, as FlashAttention-2
             // tiles head_dim 128): each K/V fragment read from shared memory feeds two MMAs
  kWgmma,    // kernels/attention_prefill_wgmma.cu: wgmma m64nNk16 from shared-memory descriptors,
             // S and O in registers; 128 query rows per CTA (2 warpgroups x 64); needs a build
             // with sm_90a
  kFa2Gqa,   // the fa2 kernel over 16 query rows of each of 4 query heads of one GQA group per
             // CTA (a warp per head), K/V read once for the 4; the GQA group must be a multiple
             // of 4. Outputs are kFa2's bit for bit
};

// Every kernel, in the order parse_prefill_kernel's message lists their names.
inline constexpr PrefillKernel kPrefillKernels[] = {PrefillKernel::kFa2, PrefillKernel::kWmma,
                                                    PrefillKernel::kFa2Wide, PrefillKernel::kWgmma,
                                                    PrefillKernel::kFa2Gqa};

inline constexpr const char* kPrefillKernelEnv = "SERVELAB_CUDA_PREFILL";

// "fa2", "wmma", "fa2_128", "wgmma" or "fa2_gqa".
const char* prefill_kernel_name(PrefillKernel kernel);

// Query rows of a tile (one PrefillTile, per query head) of the kernel: 128 for kFa2Wide and
// kWgmma, 16 for kFa2Gqa, 64 otherwise; the tile list (plan_prefill_tiles) and split workspace
// (prefill_workspace_floats) of a launch must use its kernel's figure. constexpr: the kernels
// static_assert their tiling against it.
constexpr std::int32_t prefill_tile_rows(PrefillKernel kernel) {
  if (kernel == PrefillKernel::kFa2Gqa) return 16;
  return kernel == PrefillKernel::kFa2Wide || kernel == PrefillKernel::kWgmma ? 128 : 64;
}
// Query heads of one CTA (grid y is num_q_heads / this): 4 for kFa2Gqa, 1 otherwise. The GQA
// group (num_q_heads / num_kv_heads) must be a multiple of it.
constexpr std::int32_t prefill_heads_per_cta(PrefillKernel kernel) {
  return kernel == PrefillKernel::kFa2Gqa ? 4 : 1;
}
// Whether the kernel reads an fp8 (e4m3 or e5m2) KV cache: every kernel but kWmma (kWgmma since
// 2026-12-05), which takes bf16 KV only; a launch of it on an fp8 cache is refused.
bool prefill_reads_fp8(PrefillKernel kernel);
// Whether the kernel splits the key range of a tile across CTAs (plan_prefill_splits; partial
// states in the prefill workspace, merged by the merge kernel): every kernel but kWmma. For
// kWmma a launch must pass an unsplit plan.
bool prefill_splits_keys(PrefillKernel kernel);

// The kernel named `text` (exactly "fa2", "wmma", "fa2_128", "wgmma" or "fa2_gqa"). Throws
// std::invalid_argument "<what>: expected one of fa2, wmma, fa2_128, wgmma, fa2_gqa, got
// '<text>'" otherwise (empty included).
PrefillKernel parse_prefill_kernel(std::string_view text, std::string_view what);

// $SERVELAB_CUDA_PREFILL parsed by parse_prefill_kernel (its name as `what`) when the variable
// is set, `fallback` when it is not. Throws std::invalid_argument for a set but bad value.
PrefillKernel prefill_kernel_from_env(PrefillKernel fallback);

}  // namespace servelab::kernels
