// The environment switches of the CUDA executor: fallbacks a GPU session can flip without
// rebuilding when a new path misbehaves on the device (docs/gpu-todo.md).
//   SERVELAB_CUDA_GRAPHS=0|1                decode-only steps as CUDA graphs (cuda_graphs)
//   SERVELAB_CUDA_FUSED_QKV=0|1             bias + RoPE + KV write in one kernel (fused_qkv_rope)
//   SERVELAB_CUDA_DECODE=tiled|pipelined    decode attention kernel (decode_kernel)
//   SERVELAB_CUDA_PREFILL=fa2|wmma|fa2_128|wgmma|fa2_gqa  prefill attention kernel
//                                           (prefill_kernel; wgmma: Hopper wgmma, 128 rows a
//                                           CTA; fa2_gqa: 4 heads a CTA)
//   SERVELAB_CUDA_PREFILL_PACK=0|1          launches of short chunks on fa2_gqa
//                                           (prefill_pack_heads)
//   SERVELAB_CUDA_GEMM=cublas|skinny|lt|auto  linear layers of small steps (gemm_kernel;
//                                           skinny: <= 32 tokens; lt: cuBLASLt timed per decode
//                                           graph bucket; auto: the fastest of all, timed so)
//   SERVELAB_CUDA_PDL=0|1                   programmatic dependent launch (programmatic_launch)
//   SERVELAB_CUDA_LORA=gather|cublas        LoRA deltas of short segments (lora_kernel)
//   SERVELAB_CUDA_GEMM_LT_FILE=PATH         with SERVELAB_CUDA_GEMM=lt or auto: the decisions
//                                           read before and written after the run
//                                           (engine/gemm_lt_file.h); no effect otherwise
// Unset leaves the option as it is (defaults: graphs, fusion and head packing on, the pipelined
// decode kernel, wgmma prefill over bf16 KV (fa2 over fp8), cuBLAS, PDL off, LoRA gather). The
// engine commands (engine run, serve, profile) apply them; the CudaExecutor itself does not read
// the environment, so tests choose their variants explicitly. Plain C++, compiled in every build so
// that the parsing is tested without CUDA (tests/cuda_switches_test.cc).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kernels/attention_plan.h"
#include "kernels/float_formats.h"
#include "kernels/gemm_kernel.h"
#include "kernels/lora_kernel.h"
#include "kernels/prefill_kernel.h"

namespace servelab {

inline constexpr const char* kCudaGraphsEnv = "SERVELAB_CUDA_GRAPHS";
inline constexpr const char* kCudaFusedQkvEnv = "SERVELAB_CUDA_FUSED_QKV";
inline constexpr const char* kCudaPdlEnv = "SERVELAB_CUDA_PDL";
inline constexpr const char* kCudaPrefillPackEnv = "SERVELAB_CUDA_PREFILL_PACK";
inline constexpr const char* kCudaGemmLtFileEnv = "SERVELAB_CUDA_GEMM_LT_FILE";

// The value of switch `name`: "1" is true, "0" false (surrounding blanks ignored); nullptr (unset)
// is nullopt. Anything else throws ConfigError naming the variable, the value and the accepted
// values.
std::optional<bool> parse_switch(std::string_view name, const char* value);

struct CudaSwitches {
  std::optional<bool> cuda_graphs;
  std::optional<bool> fused_qkv_rope;
  std::optional<bool> programmatic_launch;
  std::optional<bool> prefill_pack_heads;
  std::optional<kernels::DecodeKernel> decode_kernel;
  std::optional<kernels::PrefillKernel> prefill_kernel;
  std::optional<kernels::GemmKernel> gemm_kernel;
  std::optional<kernels::LoraKernel> lora_kernel;
  std::optional<std::string> gemm_lt_file;  // set and not empty (an empty value is an error)
};
// Every switch from the process environment (parse_switch on the booleans; the kernels by
// name). Throws ConfigError naming the variable, the value and the accepted values.
CudaSwitches cuda_switches_from_env();

// Sets the options that the environment switches set. Opt is CudaExecutorOptions (a template so
// that this header needs no CUDA build).
template <typename Opt>
void apply_cuda_switches(const CudaSwitches& sw, Opt& options) {
  if (sw.cuda_graphs) options.cuda_graphs = *sw.cuda_graphs;
  if (sw.fused_qkv_rope) options.fused_qkv_rope = *sw.fused_qkv_rope;
  if (sw.programmatic_launch) options.programmatic_launch = *sw.programmatic_launch;
  if (sw.prefill_pack_heads) options.prefill_pack_heads = *sw.prefill_pack_heads;
  if (sw.decode_kernel) options.decode_kernel = *sw.decode_kernel;
  if (sw.prefill_kernel) options.prefill_kernel = *sw.prefill_kernel;
  if (sw.gemm_kernel) options.gemm_kernel = *sw.gemm_kernel;
  if (sw.lora_kernel) options.lora_kernel = *sw.lora_kernel;
}

// Why the CUDA executor cannot read a KV cache in `kv_format` with the decode kernel `decode` and
// the prefill kernel `prefill`, or "" when it can. bf16 (and any format that is not fp8: the
// format itself is check_kv_format's business) is read by every kernel; an fp8 cache (e4m3 or
// e5m2) only by the pipelined decode kernel and the prefill kernels of
// kernels::prefill_reads_fp8. The reason names the kernels that read fp8, the switches and the
// kernels they chose, and the ways out, for example
//   "an fp8_e4m3 KV cache is read by the pipelined decode kernel and the fa2 and fa2_128 prefill
//   kernels only, and SERVELAB_CUDA_DECODE / SERVELAB_CUDA_PREFILL chose tiled / fa2; unset
//   them, or use a bf16 KV cache"
// The CUDA executor throws it as std::invalid_argument, the engine driver as a ConfigError
// naming the config file and key.
std::string cuda_kv_kernels_refusal(kernels::FloatFormat kv_format, kernels::DecodeKernel decode,
                                    kernels::PrefillKernel prefill);

// Why the prefill kernel `prefill` (SERVELAB_CUDA_PREFILL's choice, or the default) cannot run a
// model whose GQA group (num_heads / num_kv_heads) is `gqa_group` in this build, or "" when it
// can. `built` is kernels::prefill_kernel_built(prefill) (a parameter so that this check needs
// no CUDA build): wgmma exists only in builds with sm_90a. fa2_gqa packs
// kernels::prefill_heads_per_cta query heads of a group per CTA, so the group must be a multiple
// of them. The engine driver (`engine run`, `serve`) and `engine profile` throw it as a
// ConfigError (exit code 2) before any weights are made; the CUDA executor's own checks are
// std::invalid_argument.
std::string cuda_prefill_refusal(kernels::PrefillKernel prefill, std::int32_t gqa_group,
                                 bool built);

}  // namespace servelab
