// Host-side planning of CUDA-graph decode steps (engine/cuda_executor.cc): which batch-size
// bucket a decode-only step runs in, how its metadata is padded to that bucket, and the key of
// the graph that can replay it. Plain C++ with no CUDA types, unit-tested on the CPU
// (tests/decode_graph_plan_test.cc).
//
// A captured graph bakes in every kernel argument of the step: pointers, the number of rows
// (the bucket), the block-table stride and the decode split-K plan (grid.z, partition). Its
// inputs (token ids, positions, slots, context lengths, block tables) are read from device
// buffers that the executor refills before each replay. So a decode step of B sequences runs in
// the graph of the smallest bucket >= B, with rows B .. bucket - 1 padding that writes nothing to
// the KV cache (slot -1) and attends to one key (context 1) of a dummy block; their outputs are
// garbage no one reads. Invariant: a step replays a graph only when its DecodeGraphKey equals the
// key the graph was captured with.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention_plan.h"

namespace servelab::kernels {

// vLLM's capture sizes, cut at max_num_seqs: 1, 2, 4, then multiples of 8 up to the first one
// >= max_num_seqs (so the last bucket holds the largest batch). REQUIRES: max_num_seqs >= 1
// (throws std::invalid_argument otherwise).
std::vector<std::int32_t> decode_graph_buckets(std::int32_t max_num_seqs);

// The smallest bucket >= batch, or 0 when batch exceeds the largest (the step runs eagerly).
// REQUIRES: buckets ascending; batch >= 1.
std::int32_t decode_graph_bucket(const std::vector<std::int32_t>& buckets, std::int32_t batch);

// The block-table stride a graph is captured with: the smallest power of two >= needed, at most
// max_width (so a growing context re-captures O(log) times, not once per block). REQUIRES:
// 1 <= needed <= max_width.
std::int32_t decode_graph_table_width(std::int32_t needed, std::int32_t max_width);

// How many bytes of block table (bucket rows x width int32 ids) a decode graph step may stage and
// copy to the device so that its width need not follow the contexts: with this many, a bucket of
// 32 sequences takes 256 ids a row (4,096 tokens of 16-token blocks) and a bucket of 1 the whole
// of any max_model_len up to 131,072 tokens. The host fills and copies them before every replay
// (a few microseconds against a step of milliseconds); a capture costs about a step.
inline constexpr std::int64_t kDecodeGraphTableBytes = 32 * 1024;

// The narrowest table a bucket's unsplit graphs are captured with (decode_graph_shape): max_width
// when bucket x max_width ids fit in table_bytes, else the widest power of two that fits, at
// least 1 (table_bytes 0: 1, every width follows the contexts). REQUIRES: bucket >= 1,
// max_width >= 1, table_bytes >= 0 (std::invalid_argument otherwise).
std::int32_t decode_graph_min_table_width(std::int32_t bucket, std::int32_t max_width,
                                          std::int64_t table_bytes);

// The split-K plan a graph bakes in for a batch padded to a bucket, a function of the table
// width and of plan_decode_splits' choice coarsened so that it changes rarely while contexts
// grow (each change is a new graph: a capture costs about two steps):
//  - unsplit (plan_decode_splits does not split): one partition of table_width * block_size
//    (rounded up to the tile), which covers every context the table can hold;
//  - split: plan_decode_splits' partition rounded up to 2^k or 3 * 2^k tiles (less than 3/2
//    of it, so more than 2/3 of its parallelism on the longest row), and max_splits covering the
//    whole table, ceil(table_width * block_size / partition); splits past a row's context are
//    empty CTAs that return at once (the merge reads ceil(context / partition) of them).
// The result satisfies validate_decode_plan for any context of at most table_width * block_size.
DecodeSplitPlan decode_graph_split_plan(const std::vector<std::int32_t>& padded_context_lens,
                                        std::int32_t ctas_per_seq, std::int32_t max_ctas,
                                        std::int32_t table_width, std::int32_t block_size);

// The most splits decode_graph_split_plan can give a table of table_width blocks: partitions of
// at least kMinDecodePartition keys (rounded up to whole tiles) covering it, at most
// kMaxDecodeSplits. For sizing a graph's split workspace once per width rather than per plan.
// REQUIRES: table_width >= 1, block_size >= 1 (std::invalid_argument otherwise).
std::int32_t decode_graph_max_splits(std::int32_t table_width, std::int32_t block_size);

// The table width and split plan of a decode graph step (both part of its DecodeGraphKey). When
// plan_decode_splits does not split the padded batch, the width is at least min_width
// (decode_graph_min_table_width), so the graph captured for a bucket at its first step (the
// engine's warm-up, engine/warm_up.h) serves every context up to min_width blocks and a run
// re-captures only past it; a split batch keeps the power of two >= needed, since its split
// count covers the whole table (a wider one would add empty splits and workspace).
// REQUIRES: as decode_graph_table_width and decode_graph_split_plan; min_width >= 0.
struct DecodeGraphShape {
  std::int32_t table_width = 0;
  DecodeSplitPlan plan;
};
DecodeGraphShape decode_graph_shape(const std::vector<std::int32_t>& padded_context_lens,
                                    std::int32_t needed, std::int32_t max_width,
                                    std::int32_t min_width, std::int32_t ctas_per_seq,
                                    std::int32_t max_ctas, std::int32_t block_size);

// What a decode graph's launches bake in besides buffer addresses (which stay fixed while
// `buffers_generation`, bumped whenever the executor reallocates a buffer, is unchanged).
struct DecodeGraphKey {
  std::int32_t bucket = 0;
  std::int32_t table_width = 0;
  std::int32_t partition_tokens = 0;
  std::int32_t max_splits = 1;
  std::uint64_t buffers_generation = 0;
  // The graph applies LoRA deltas: the gather kernels over one row table entry per bucket row
  // (kernels/lora.h), so it holds their launches and the materialised SiLU; the table's contents
  // (which rows, which adapters) are inputs, not baked in.
  bool lora = false;
  friend bool operator==(const DecodeGraphKey&, const DecodeGraphKey&) = default;
  friend auto operator<=>(const DecodeGraphKey&, const DecodeGraphKey&) = default;
};

// A decode-only step's inputs padded to `bucket` rows, in the order the graph reads them.
// Row i < batch is sequence i (token, position, slot, context length, block-table row cut or
// zero-filled to table_width); a padding row has token 0, position 0, slot -1, context 1 and a
// table of `dummy_block`. q_rows is the identity (row i's query and output are row i).
struct PaddedDecodeInputs {
  std::vector<std::int32_t> tokens, positions, q_rows, context_lens, block_tables;
  std::vector<std::int64_t> slots;
};

// REQUIRES: tokens, positions, slots, context_lens of equal size batch <= bucket; tables holds
// batch rows of `stride` ids; every context_lens[i] <= table_width * block_size is the caller's
// job (the table row is cut at table_width). Throws std::invalid_argument on size mismatches.
PaddedDecodeInputs pad_decode_inputs(const std::vector<std::int32_t>& tokens,
                                     const std::vector<std::int32_t>& positions,
                                     const std::vector<std::int64_t>& slots,
                                     const std::vector<std::int32_t>& context_lens,
                                     const std::vector<std::int32_t>& tables, std::int32_t stride,
                                     std::int32_t bucket, std::int32_t table_width,
                                     std::int32_t dummy_block);

}  // namespace servelab::kernels
