// How the engine's prefill attention launch is cut into CTAs, as plain arithmetic both the kernels
// and the cost models use (one definition: kernels/attention_plan.h re-exports the split plan,
// engine/cuda_executor.cc plans every prefill launch with it, and the calibrated cost model's
// critical-path terms, sim/calibrated_cost_model.h, are computed from the same plan).
//
// A step's entries of two or more tokens run in one prefill attention launch (the engine runs a
// one-token entry in decode attention): tile_rows query rows of one entry and one query head per
// CTA, grid (tiles, heads, kv_splits). When every entry of the launch is short (at most
// packed_rows queries: a chunk after a cached prefix, a speculative verify entry) and the model's
// GQA group allows it, the launch packs instead: packed_heads query heads of one GQA group per CTA
// (which read the same K/V once), packed_rows rows of each, grid (tiles, heads / packed_heads,
// kv_splits) (prefill_launch_shape). When those CTAs are too few to fill the device (a short
// chunk after a long cached prefix), the key range of each tile is split across kv_splits CTAs
// (FlashDecoding's split applied to query tiles) whose partial softmax states a merge kernel
// combines. Plain C++17: the CUDA sources include it through kernels/attention_plan.h.
#pragma once

#include <cstdint>
#include <string>

namespace servelab {

// Keys per K/V tile of the split prefill kernels (a split's key range is a multiple of it).
inline constexpr std::int32_t kPrefillKeyTile = 64;
// The most key splits a launch can have (CUDA's grid.z limit; decode's split-K shares it).
inline constexpr std::int32_t kMaxKvSplits = 65535;
// A split holds at least this many keys (plan_prefill_splits' default, the executor's choice).
inline constexpr std::int32_t kPrefillMinSplitTokens = 512;

// Invariants (prefill_plan_error): 1 <= kv_splits <= kMaxKvSplits; when kv_splits > 1,
// split_tokens > 0 is a multiple of kPrefillKeyTile and kv_splits * split_tokens covers the
// longest key range of the step. A default-constructed plan is the unsplit one.
struct PrefillSplitPlan {
  std::int32_t split_tokens = 0;  // keys per split (0 when unsplit)
  std::int32_t kv_splits = 1;     // grid z
  bool split() const { return kv_splits > 1; }
};

// No split when num_tiles * num_q_heads CTAs already fill half of max_ctas (the device's
// resident CTA slots) or the longest key range is at most 2 * min_split_tokens; otherwise
// kv_splits = min(max_ctas / (num_tiles * num_q_heads), ceil(longest / min_split_tokens)),
// split_tokens = ceil(longest / kv_splits) rounded up to the key tile, and kv_splits recomputed
// as ceil(longest / split_tokens) (so no split is empty for the longest range). The result
// satisfies prefill_plan_error for longest_keys. Throws std::invalid_argument when a count is
// < 1 (num_tiles may be 0: no split).
PrefillSplitPlan plan_prefill_splits(std::int32_t num_tiles, std::int32_t num_q_heads,
                                     std::int64_t longest_keys, std::int32_t max_ctas,
                                     std::int32_t min_split_tokens = kPrefillMinSplitTokens);

// Empty when `plan` satisfies the invariants above for a step whose longest key range (its
// largest first position + queries) is longest_keys, else a sentence saying which one fails.
std::string prefill_plan_error(const PrefillSplitPlan& plan, std::int64_t longest_keys);

// What a prefill launch's CTAs look like on one device and model: the figures `engine profile`
// records (`# prefill_launch:`) and a calibrated cost.yaml carries (coefficients.prefill_launch).
struct PrefillLaunch {
  std::int32_t query_heads = 0;       // the model's query heads (grid y)
  std::int32_t tile_rows = 0;         // query rows per CTA (kernels::prefill_tile_rows)
  std::int32_t max_ctas = 0;          // resident CTA slots (SMs x occupancy)
  std::int32_t min_split_tokens = 0;  // plan_prefill_splits' argument; 0: the kernel never splits
  std::int32_t merge_rows = 0;        // rows of a tile one merge CTA walks, one after another
  // Head packing: all three 0 (never packs; profiles written before 2026-12-05) or all >= 1, with
  // packed_heads dividing query_heads: the launches whose entries have at most packed_rows queries
  // run packed_heads query heads per CTA, packed_rows rows of each, on packed_max_ctas slots.
  std::int32_t packed_heads = 0;
  std::int32_t packed_rows = 0;
  std::int32_t packed_max_ctas = 0;
  bool packs() const { return packed_heads > 0; }
};

// Empty when every figure is in range (query_heads, tile_rows, max_ctas, merge_rows >= 1,
// min_split_tokens >= 0; the packing figures all 0, or all >= 1 with packed_heads dividing
// query_heads), else a sentence naming the first that is not.
std::string prefill_launch_error(const PrefillLaunch& launch);

// One launch's CTA grid: its kernel packs heads or not, the query rows of a tile, the CTAs per
// tile along grid y (query heads / heads per CTA) and the resident slots of its kernel.
struct PrefillLaunchShape {
  bool packed = false;
  std::int32_t tile_rows = 0;
  std::int32_t head_ctas = 0;
  std::int32_t max_ctas = 0;
};
// The shape of a launch whose longest entry has most_queries queries: packed when `launch` packs
// and most_queries <= packed_rows, else its tile_rows, query_heads and max_ctas.
// REQUIRES: prefill_launch_error(launch) is empty.
PrefillLaunchShape prefill_launch_shape(const PrefillLaunch& launch, std::int64_t most_queries);

// The two critical paths of a launch, in the units the calibrated cost model prices:
//   keys         the keys on the attention kernel's critical path: the larger of the longest CTA's
//                key range (a split's split_tokens, or the longest entry's range unsplit) and
//                the keys per CTA slot were every CTA's keys spread over the max_ctas slots
//                (a lower bound of any schedule's length). A short chunk after a long prefix runs
//                few CTAs, so its keys are its longest range's split while its pairs are few; a
//                long prefill runs waves of CTAs and its keys grow with its pairs.
//   merge_steps  split launches only: the dependent (row, split) steps of one merge thread,
//                kv_splits x min(the most queries of a tile, merge_rows); 0 unsplit.
// Both over the launch's shape (prefill_launch_shape: a packed launch's CTAs, tiles and slots).
struct PrefillCriticalPath {
  std::int64_t keys = 0;
  std::int64_t merge_steps = 0;
};

// Sums a launch's entries, one at a time (no allocation), then gives its critical paths.
class PrefillLaunchCost {
 public:
  // REQUIRES: prefill_launch_error(launch) is empty.
  explicit PrefillLaunchCost(const PrefillLaunch& launch) : launch_(launch) {}

  // `copies` entries of num_tokens queries after first_token cached keys each. An entry of fewer
  // than two tokens adds nothing (the engine runs it in decode attention).
  // REQUIRES: first_token >= 0, copies >= 0.
  void add(std::int64_t first_token, std::int64_t num_tokens, std::int64_t copies = 1);

  // The launch's critical paths (both 0 for a launch without entries).
  PrefillCriticalPath critical_path() const;

 private:
  // Tiles of `rows` queries: their count and their key ranges' sum (a range: the tile's last
  // query's position + 1).
  struct Tiles {
    std::int64_t count = 0;
    std::int64_t keys = 0;
    void add(std::int64_t rows, std::int64_t first_token, std::int64_t num_tokens,
             std::int64_t copies);
  };
  PrefillLaunch launch_;
  Tiles tiles_;                    // of tile_rows
  Tiles packed_;                   // of packed_rows (when the launch packs)
  std::int64_t longest_ = 0;       // the largest first_token + num_tokens
  std::int64_t most_queries_ = 0;  // the most queries of one entry
};

}  // namespace servelab
