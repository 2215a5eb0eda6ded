// Host-side planning for the paged attention kernels (kernels/attention.h): how a decode batch
// is split along the context (split-K, "flash-decoding") and how a prefill batch is cut into
// query tiles. Pure arithmetic, unit-tested on the CPU (tests/kernels_host_test.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/prefill_launch.h"

namespace servelab::kernels {

// Decode attention processes keys in tiles of this many tokens; split partitions are whole
// tiles.
inline constexpr std::int32_t kDecodeTileTokens = 64;
// plan_decode_splits' default least partition (keys a split covers).
inline constexpr std::int32_t kMinDecodePartition = 128;
// Prefill attention: query rows and key columns per tile.
inline constexpr std::int32_t kPrefillTileRows = 64;

// The decode attention kernels (kernels/attention.h), selectable at run time so that a GPU
// session whose new kernel fails can fall back without rebuilding:
//   kTiled      kernels/attention_decode.cu: CUDA cores, up to 8 query heads per CTA, K/V rows
//               read straight from global memory (the first kernel, kept as the fallback);
//   kPipelined  kernels/attention_decode_pipelined.cu: tensor cores (mma.sync m16n8k16), every
//               query head of a GQA group in one CTA (up to kPipelinedMaxHeads), the block table
//               staged in shared memory, K/V tiles streamed by a 3-stage (fp8: 4) cp.async
//               pipeline, split-K merged through kernels/softmax_merge.h. The default.
enum class DecodeKernel { kTiled, kPipelined };
inline constexpr DecodeKernel kDefaultDecodeKernel = DecodeKernel::kPipelined;
// The environment variable that overrides the executor's choice (docs/gpu-todo.md).
inline constexpr const char* kDecodeKernelEnv = "SERVELAB_CUDA_DECODE";

// "tiled" / "pipelined".
const char* decode_kernel_name(DecodeKernel kernel);
// The kernel called `name` (exact, lower case), or nullopt.
std::optional<DecodeKernel> decode_kernel_from_name(std::string_view name);
// kDecodeKernelEnv's value when it is set and not empty, else `fallback`. Throws
// std::invalid_argument("SERVELAB_CUDA_DECODE=<value>: expected one of tiled, pipelined") for
// any other value.
DecodeKernel decode_kernel_from_env(DecodeKernel fallback);

// Query heads one tiled decode CTA handles (they share one KV head): the largest of 8, 4, 2, 1
// that divides num_q_heads / num_kv_heads. REQUIRES: num_kv_heads divides num_q_heads.
std::int32_t decode_heads_per_cta(std::int32_t num_q_heads, std::int32_t num_kv_heads);

// The pipelined kernel's query heads per CTA at most (the 16 rows of one MMA tile; a GQA group
// of more heads takes ceil(group / 16) CTAs per KV head).
inline constexpr std::int32_t kPipelinedMaxHeads = 16;
// Block-table entries the pipelined kernel stages in shared memory at once.
inline constexpr std::int32_t kDecodeTableEntries = 1024;

// CTAs per sequence and split of `kernel` (grid.x; the ctas_per_seq of plan_decode_splits):
// tiled num_q_heads / decode_heads_per_cta, pipelined num_kv_heads * ceil(group / 16).
// REQUIRES: num_kv_heads >= 1 divides num_q_heads.
std::int32_t decode_ctas_per_seq(DecodeKernel kernel, std::int32_t num_q_heads,
                                 std::int32_t num_kv_heads);

// Tokens of the pipelined kernel's table window: the largest multiple of kDecodeTileTokens whose
// blocks, wherever the window starts, fit in kDecodeTableEntries entries (a window of W tokens
// touches at most ceil(W / block_size) + 1 blocks). The kernel walks its key range window by
// window, restaging the table between windows (16,320 tokens at block size 16, 960 at 1).
// REQUIRES: 1 <= block_size <= 2^20.
std::int32_t decode_table_window_tokens(std::int32_t block_size);

// Invariants (validate_decode_plan): partition_tokens > 0 and a multiple of kDecodeTileTokens;
// 1 <= max_splits <= kMaxDecodeSplits; max_splits * partition_tokens >= the longest context of
// the batch (every key is in some split). A default-constructed plan is invalid: it must come
// from plan_decode_splits or be filled in by hand.
struct DecodeSplitPlan {
  std::int32_t partition_tokens = 0;  // keys per split; a multiple of kDecodeTileTokens
  std::int32_t max_splits = 1;        // grid z: ceil(max context / partition_tokens)
  bool split() const { return max_splits > 1; }
};

// The most splits a launch can have (CUDA's grid.z limit, core/prefill_launch.h).
inline constexpr std::int32_t kMaxDecodeSplits = kMaxKvSplits;

// Empty when `plan` satisfies the invariants above for a batch whose longest context is
// longest_context, else a sentence saying which one fails (for an error message).
std::string decode_plan_error(const DecodeSplitPlan& plan, std::int64_t longest_context);
// Throws std::invalid_argument("<who>: invalid decode split plan: <reason>") when
// decode_plan_error(plan, longest_context) is not empty.
void validate_decode_plan(const DecodeSplitPlan& plan, std::int64_t longest_context,
                          const char* who);

// Chooses the split-K partition for a decode batch (FlashInfer's planner, simplified): no split
// when the batch alone fills the device (num_seqs * ctas_per_seq >= max_ctas) or the longest
// context is at most min_partition; otherwise the smallest partition (a multiple of the tile,
// at least min_partition) with sum_i ceil(ctx_i / partition) * ctas_per_seq <= max_ctas (and
// at most kMaxDecodeSplits splits).
// The result always satisfies validate_decode_plan for the longest of context_lens.
// Throws std::invalid_argument when context_lens is empty or a length is < 1, ctas_per_seq < 1,
// max_ctas < 1 or min_partition < 1.
DecodeSplitPlan plan_decode_splits(const std::vector<std::int32_t>& context_lens,
                                   std::int32_t ctas_per_seq, std::int32_t max_ctas,
                                   std::int32_t min_partition = kMinDecodePartition);

// Floats of split-K workspace: partial outputs [seq][q_head][split][head_dim] then the
// (max, sum) pairs [seq][q_head][split][2].
std::int64_t decode_workspace_floats(std::int32_t num_seqs, std::int32_t num_q_heads,
                                     std::int32_t head_dim, std::int32_t max_splits);

// One prefill CTA's work: tile_rows (kPrefillTileRows, or the kernel's prefill_tile_rows) query
// rows of sequence `seq` starting at its query `q_begin` (so rows q_begin ..
// min(q_begin + tile_rows, num_queries) - 1).
struct PrefillTile {
  std::int32_t seq = 0;
  std::int32_t q_begin = 0;
};

// Tiles of tile_rows queries covering every query of every sequence, sequences in order. A
// sequence with 0 queries gets none. Throws std::invalid_argument when tile_rows < 1.
std::vector<PrefillTile> plan_prefill_tiles(const std::vector<std::int32_t>& num_queries,
                                            std::int32_t tile_rows = kPrefillTileRows);

// Split-KV prefill (FlashDecoding's split applied to query tiles): when a prefill step's
// (tile, head) CTAs are too few to fill the device (a short chunk after a long cached prefix:
// one tile, 32 heads, 132 SMs), each tile's key range [0, its last position] is cut into
// kv_splits ranges of split_tokens keys, one CTA each (grid.z); they write normalised partial
// softmax states (kernels/softmax_merge.h) to a workspace that a merge kernel combines. The plan
// (PrefillSplitPlan, plan_prefill_splits, prefill_plan_error, kPrefillKeyTile) is plain
// arithmetic in core/prefill_launch.h, where the calibrated cost model computes the same plans.
using servelab::kPrefillKeyTile;
using servelab::plan_prefill_splits;
using servelab::prefill_plan_error;
using servelab::PrefillSplitPlan;

// Rows of a tile one CTA of the split-KV merge kernel combines (grid (tiles, heads,
// ceil(tile_rows / kPrefillMergeRows)), one (row, dim) a thread): a PrefillLaunch's merge_rows.
inline constexpr std::int32_t kPrefillMergeRows = 8;

// Floats of split-KV prefill workspace: partial outputs [tile][q_head][row][split][head_dim]
// then the (max, sum) pairs [tile][q_head][row][split][2], row < tile_rows.
std::int64_t prefill_workspace_floats(std::int32_t num_tiles, std::int32_t num_q_heads,
                                      std::int32_t head_dim, std::int32_t kv_splits,
                                      std::int32_t tile_rows = kPrefillTileRows);

}  // namespace servelab::kernels
