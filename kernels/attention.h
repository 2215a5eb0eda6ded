// Paged attention over the KV cache of kernels/kv_layout.h, bf16 Q/output, bf16 or fp8 K/V
// (PagedKv::format), fp32 softmax and accumulation, grouped-query heads (query head h reads KV head
// h / (num_q_heads / num_kv_heads)), head_dim 64 or 128, any block size (tested 1..256). Scores are
// scaled by `scale` (1/sqrt(head_dim) for Llama). Query position p attends to key positions [0, p];
// the K/V of every position read must already be in the cache (kv_write first, as CpuExecutor
// does). Implementation: kernels/attention_decode.cu, kernels/attention_prefill.cu (launcher, WMMA
// kernel), kernels/attention_prefill_fa2.cu (FlashAttention-2-style kernel).
#pragma once

#include <cstdint>

#include "kernels/attention_plan.h"
#include "kernels/device.h"
#include "kernels/float_formats.h"
#include "kernels/kv_layout.h"
#include "kernels/prefill_kernel.h"

namespace servelab::kernels {

// One layer's view of the paged cache: element (block b, slot s, kv head h, dim d) of K is
// k[b * block_stride + (s * num_kv_heads + h) * head_dim + d] (V likewise), an element being a
// bf16 or, for the fp8 formats, one byte (kv_layout.h with elem_bytes 1). Block tables are a
// device array [num_seqs][block_table_stride] of int32 block ids.
// fp8 (format kFp8E4m3 or kFp8E5m2): the cache holds fp8(x / scale) as the KV write stores it
// (cache_ops.h), and attention reads k = code * k_scale, v = code * v_scale (vLLM's per-tensor
// scales): codes are widened to bf16 exactly, k_scale folds into the score scale and v_scale into
// the output. The default kernels read fp8 (DecodeKernel::kPipelined; every prefill kernel but
// the WMMA fallback: prefill_reads_fp8); the others throw std::invalid_argument.
struct PagedKv {
  const void* k = nullptr;
  const void* v = nullptr;
  std::int64_t block_stride = 0;
  std::int32_t block_size = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  const std::int32_t* block_tables = nullptr;
  std::int32_t block_table_stride = 0;
  FloatFormat format = FloatFormat::kBf16;  // kBf16, kFp8E4m3 or kFp8E5m2
  float k_scale = 1.0f;                     // fp8 only: positive and finite
  float v_scale = 1.0f;
};

// Decode: one query token per sequence. Sequence i's query is row q_rows[i] of q
// ([rows][num_q_heads][head_dim]) at position context_lens[i] - 1, and its output goes to the
// same row of `out`. Split-K along the context per `plan` (plan_decode_splits); when
// plan.split(), `workspace` must hold decode_workspace_floats(num_seqs, num_q_heads, head_dim,
// plan.max_splits) floats and a merge kernel combines the partial results.
// Two kernels (DecodeKernel, kernels/attention_plan.h), both 128 threads a CTA, same workspace:
//   kTiled (attention_decode.cu): grid (num_q_heads / decode_heads_per_cta, num_seqs,
//     plan.max_splits); each CTA keeps its heads' queries in registers, scores a 64-token tile
//     into shared memory, updates the running (max, sum) once per tile, accumulates P*V in
//     registers.
//   kPipelined (attention_decode_pipelined.cu, the default): grid (decode_ctas_per_seq, num_seqs,
//     plan.max_splits); a CTA holds all query heads of a GQA group (up to 16) as the rows of
//     m16n8k16 MMAs, stages the block table in shared memory and streams 64-token K/V tiles
//     through a cp.async pipeline of 3 stages (4 over an fp8 cache).
// Both are deterministic (same inputs, same bits) and share the plan rules (plan_decode_splits
// with the variant's decode_ctas_per_seq and decode_max_resident_ctas).
struct DecodeAttentionArgs {
  PagedKv kv;
  const Bf16* q = nullptr;
  Bf16* out = nullptr;
  const std::int32_t* q_rows = nullptr;        // device [num_seqs]
  const std::int32_t* context_lens = nullptr;  // device [num_seqs], each >= 1
  std::int32_t num_seqs = 0;
  std::int32_t num_q_heads = 0;
  float scale = 0;
  DecodeSplitPlan plan;
  float* workspace = nullptr;
  // The host's copy of max_i context_lens[i]: the launcher checks the plan against it
  // (validate_decode_plan), since context_lens lives on the device. REQUIRES: >= every
  // context_lens[i] (a key past max_splits * partition_tokens would be silently dropped).
  std::int32_t max_context_len = 0;
  DecodeKernel kernel = kDefaultDecodeKernel;
};
// Throws std::invalid_argument for head_dim not 64/128, num_kv_heads not dividing num_q_heads,
// num_seqs > 65535 (grid.y), max_context_len < 1, a plan failing validate_decode_plan for
// max_context_len, or a split plan without workspace; std::runtime_error on a launch error.
void paged_decode_attention(const DecodeAttentionArgs& args, Stream stream);

// CTAs of the tiled decode kernel that fit on the device at once (SMs x occupancy): the max_ctas
// of plan_decode_splits.
std::int32_t decode_max_resident_ctas(std::int32_t head_dim, std::int32_t heads_per_cta);
// The same for either kernel, for the shape (num_q_heads, num_kv_heads, head_dim) and the cache's
// element format: the pipelined kernel's fp8 instances hold half the shared memory of bf16 and
// fit more CTAs per SM (kernels/README.md); the tiled kernel reads bf16 only.
std::int32_t decode_max_resident_ctas(DecodeKernel kernel, std::int32_t head_dim,
                                      std::int32_t num_q_heads, std::int32_t num_kv_heads,
                                      FloatFormat format = FloatFormat::kBf16);

// Prefill (chunked, over a cached prefix): sequence i has num_queries[i] query tokens at rows
// q_row_begin[i] .. + num_queries[i] - 1 of q and out, at positions first_pos[i] .. ; they attend
// causally to [0, own position]. Work is the tile list of plan_prefill_tiles with the kernel's
// prefill_tile_rows (a device array of {seq, q_begin} int32 pairs). Grid: (num_tiles,
// num_q_heads), 128 threads (4 warps) for the fa2 and wmma kernels, 64-key tiles gathered through
// the block table, online softmax in fp32, P rounded to bf16 for the tensor cores, fp32
// accumulation. Kernels (`kernel`):
//   kFa2 (default): 64 query rows per CTA, 16 per warp; mma.sync m16n8k16 with S, P and O in
//     registers, K/V tiles by cp.async double buffered, causal tile skipping per warp
//     (kernels/attention_prefill_fa2.cu);
//   kFa2Wide: the same kernel with 128 query rows per CTA, two 16-row blocks per warp (rows
//     16 w and 64 + 16 w) sharing each K/V fragment, Q re-read from shared memory per tile;
//   kWgmma: Hopper wgmma m64nNk16 from shared-memory descriptors, S and O in registers; 128 query
//     rows per CTA, two warpgroups of 64 rows; an fp8 cache's codes widened into its bf16 tile
//     in shared memory as fa2 does; needs a build with sm_90a
//     (kernels/attention_prefill_wgmma.cu);
//   kFa2Gqa: the fa2 kernel over 16 query rows of each of 4 query heads of one GQA group per CTA
//     (grid y num_q_heads / 4; tiles of 16 rows, prefill_tile_rows), K/V read once for the 4; the
//     GQA group must be a multiple of 4. What the CUDA executor runs for launches of short
//     entries (core/prefill_launch.h prefill_launch_shape);
//   kWmma: WMMA 16x16x16 with S, P and O in shared memory, synchronous gathers
//     (kernels/attention_prefill.cu).
// All are deterministic (same inputs: bit-identical outputs); kFa2Wide's and kFa2Gqa's outputs
// are kFa2's bit for bit (the same products in the same order per row).
// Split-KV (kFa2, kFa2Wide, kWgmma: prefill_splits_keys; `split` from plan_prefill_splits,
// kernels/attention_plan.h): grid
// (num_tiles, num_q_heads, kv_splits); CTA z takes keys [z * split_tokens, (z + 1) *
// split_tokens) of its tile's causal range and writes its rows' normalised partial states
// (o / l, m, l; empty ranges m = -inf, l = 0, o = 0) to `workspace`
// (prefill_workspace_floats with the kernel's tile rows), then one merge CTA per (tile, head)
// combines the splits in order with merge_softmax_states and writes `out`. Deterministic too; not
// bit-identical to the unsplit kernel (another summation order), within the same tolerance.
struct PrefillAttentionArgs {
  PagedKv kv;
  const Bf16* q = nullptr;
  Bf16* out = nullptr;
  const std::int32_t* q_row_begin = nullptr;  // device [num_seqs]
  const std::int32_t* num_queries = nullptr;  // device [num_seqs]
  const std::int32_t* first_pos = nullptr;    // device [num_seqs]
  const PrefillTile* tiles = nullptr;         // device [num_tiles]
  std::int32_t num_tiles = 0;
  std::int32_t num_q_heads = 0;
  float scale = 0;
  PrefillKernel kernel = PrefillKernel::kFa2;
  PrefillSplitPlan split;         // default: unsplit
  float* workspace = nullptr;     // device, prefill_workspace_floats(...) floats when split
  std::int64_t longest_keys = 0;  // the step's largest first_pos + num_queries (split only)
};
// Throws std::invalid_argument for head_dim not 64/128, num_kv_heads not dividing num_q_heads,
// a GQA group that is no multiple of the kernel's prefill_heads_per_cta, or a split plan with the
// wmma kernel, without workspace, or failing prefill_plan_error for
// longest_keys; std::runtime_error on a launch error.
void paged_prefill_attention(const PrefillAttentionArgs& args, Stream stream);

// Whether this build has `kernel`'s code: every kernel but kWgmma always; kWgmma where nvcc
// targets sm_90a (SERVELAB_CUDA_SM90A, the default) and on the CUDA emulator. A launch of a
// kernel that is not built throws std::invalid_argument.
bool prefill_kernel_built(PrefillKernel kernel);

// The prefill kernel an executor runs unless told otherwise: kWgmma over a bf16 KV cache where it
// is built (0.81x SDPA at 8k on the H200 against fa2's 0.63x, docs/performance.md), kFa2 over
// an fp8 cache (where wgmma over fp8 has not been timed on a GPU yet: `gpu-check bench` picks
// the faster of the two by their fp8 rows) or where wgmma is not built.
PrefillKernel default_prefill_kernel(FloatFormat kv_format);

// Prefill CTAs of a kernel that splits keys (prefill_splits_keys: kFa2, kFa2Wide, kWgmma) that
// fit on the device at once (SMs x occupancy of its bf16 instance for head_dim): the max_ctas of
// plan_prefill_splits.
std::int32_t prefill_max_resident_ctas(std::int32_t head_dim,
                                       PrefillKernel kernel = PrefillKernel::kFa2);

}  // namespace servelab::kernels
