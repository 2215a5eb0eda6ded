// Host-side planning for the paged attention kernels (kernels/attention.h): how a decode batch
// is split along the context (split-K, "flash-decoding") and how a prefill batch is cut into
// query tiles. Pure arithmetic, unit-tested on the CPU (tests/kernels_host_test.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace servelab::kernels {

// Decode attention processes keys in tiles of this many tokens; split partitions are whole
// tiles.
inline constexpr std::int32_t kDecodeTileTokens = 64;
// Prefill attention: query rows and key columns per tile.
inline constexpr std::int32_t kPrefillTileRows = 64;

// Query heads one decode CTA handles (they share one KV head): the largest of 8, 4, 2, 1 that
// divides num_q_heads / num_kv_heads. REQUIRES: num_kv_heads divides num_q_heads.
std::int32_t decode_heads_per_cta(std::int32_t num_q_heads, std::int32_t num_kv_heads);

// Invariants (validate_decode_plan): partition_tokens > 0 and a multiple of kDecodeTileTokens;
// 1 <= max_splits <= kMaxDecodeSplits; max_splits * partition_tokens >= the longest context of
// the batch (every key is in some split). A default-constructed plan is invalid: it must come
// from plan_decode_splits or be filled in by hand.
struct DecodeSplitPlan {
  std::int32_t partition_tokens = 0;  // keys per split; a multiple of kDecodeTileTokens
  std::int32_t max_splits = 1;        // grid z: ceil(max context / partition_tokens)
  bool split() const { return max_splits > 1; }
};

// The most splits a launch can have (CUDA's grid.z limit).
inline constexpr std::int32_t kMaxDecodeSplits = 65535;

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
                                   std::int32_t min_partition = 128);

// Floats of split-K workspace: partial outputs [seq][q_head][split][head_dim] then the
// (max, sum) pairs [seq][q_head][split][2].
std::int64_t decode_workspace_floats(std::int32_t num_seqs, std::int32_t num_q_heads,
                                     std::int32_t head_dim, std::int32_t max_splits);

// One prefill CTA's work: kPrefillTileRows query rows of sequence `seq` starting at its query
// `q_begin` (so rows q_begin .. min(q_begin + rows, num_queries) - 1).
struct PrefillTile {
  std::int32_t seq = 0;
  std::int32_t q_begin = 0;
};

// Tiles covering every query of every sequence, sequences in order. A sequence with 0 queries
// gets none.
std::vector<PrefillTile> plan_prefill_tiles(const std::vector<std::int32_t>& num_queries);

}  // namespace servelab::kernels
