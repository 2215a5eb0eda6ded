#include "core/prefill_launch.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace servelab {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

PrefillSplitPlan plan_prefill_splits(std::int32_t num_tiles, std::int32_t num_q_heads,
                                     std::int64_t longest_keys, std::int32_t max_ctas,
                                     std::int32_t min_split_tokens) {
  if (num_tiles < 0 || num_q_heads < 1 || longest_keys < 1 || max_ctas < 1 ||
      min_split_tokens < 1) {
    throw std::invalid_argument(
        "plan_prefill_splits: needs num_tiles >= 0, num_q_heads, longest_keys, max_ctas and "
        "min_split_tokens >= 1");
  }
  const std::int64_t ctas = std::int64_t{num_tiles} * num_q_heads;
  if (ctas == 0 || 2 * ctas > max_ctas || longest_keys <= 2 * std::int64_t{min_split_tokens}) {
    return {};
  }
  std::int64_t splits = std::min(max_ctas / ctas, ceil_div(longest_keys, min_split_tokens));
  splits = std::min<std::int64_t>(splits, kMaxKvSplits);
  if (splits < 2) return {};
  const std::int64_t tile = kPrefillKeyTile;
  const std::int64_t part = ceil_div(ceil_div(longest_keys, splits), tile) * tile;
  splits = ceil_div(longest_keys, part);
  if (splits < 2) return {};
  return {static_cast<std::int32_t>(part), static_cast<std::int32_t>(splits)};
}

std::string prefill_plan_error(const PrefillSplitPlan& plan, std::int64_t longest_keys) {
  if (plan.kv_splits < 1 || plan.kv_splits > kMaxKvSplits) {
    return "kv_splits " + std::to_string(plan.kv_splits) + " outside [1, " +
           std::to_string(kMaxKvSplits) + "]";
  }
  if (!plan.split()) return "";
  if (plan.split_tokens <= 0 || plan.split_tokens % kPrefillKeyTile != 0) {
    return "split_tokens " + std::to_string(plan.split_tokens) + " is not a positive multiple of " +
           std::to_string(kPrefillKeyTile);
  }
  if (std::int64_t{plan.kv_splits} * plan.split_tokens < longest_keys) {
    return std::to_string(plan.kv_splits) + " splits of " + std::to_string(plan.split_tokens) +
           " keys do not cover the longest key range (" + std::to_string(longest_keys) + ")";
  }
  return "";
}

std::string prefill_launch_error(const PrefillLaunch& l) {
  const auto below = [](const char* key, std::int32_t value, int least) {
    return std::string(key) + " is " + std::to_string(value) +
           ", must be >= " + std::to_string(least);
  };
  if (l.query_heads < 1) return below("query_heads", l.query_heads, 1);
  if (l.tile_rows < 1) return below("tile_rows", l.tile_rows, 1);
  if (l.max_ctas < 1) return below("max_ctas", l.max_ctas, 1);
  if (l.min_split_tokens < 0) return below("min_split_tokens", l.min_split_tokens, 0);
  if (l.merge_rows < 1) return below("merge_rows", l.merge_rows, 1);
  if (l.packed_heads == 0 && l.packed_rows == 0 && l.packed_max_ctas == 0) return "";
  if (l.packed_heads < 1) return below("packed_heads", l.packed_heads, 1);
  if (l.packed_rows < 1) return below("packed_rows", l.packed_rows, 1);
  if (l.packed_max_ctas < 1) return below("packed_max_ctas", l.packed_max_ctas, 1);
  if (l.query_heads % l.packed_heads != 0) {
    return "packed_heads " + std::to_string(l.packed_heads) + " does not divide query_heads " +
           std::to_string(l.query_heads);
  }
  return "";
}

PrefillLaunchShape prefill_launch_shape(const PrefillLaunch& l, std::int64_t most_queries) {
  if (l.packs() && most_queries <= l.packed_rows) {
    return {true, l.packed_rows, l.query_heads / l.packed_heads, l.packed_max_ctas};
  }
  return {false, l.tile_rows, l.query_heads, l.max_ctas};
}

void PrefillLaunchCost::Tiles::add(std::int64_t rows, std::int64_t first_token,
                                   std::int64_t num_tokens, std::int64_t copies) {
  const std::int64_t t = ceil_div(num_tokens, rows);
  count += t * copies;
  // Tile i covers queries [i * rows, min((i + 1) * rows, n)) and keys up to its last query:
  // first_token + (i + 1) * rows for every tile but the last, first_token + n for the last.
  keys += (t * first_token + rows * (t - 1) * t / 2 + num_tokens) * copies;
}

void PrefillLaunchCost::add(std::int64_t first_token, std::int64_t num_tokens,
                            std::int64_t copies) {
  if (num_tokens < 2 || copies < 1) return;
  tiles_.add(launch_.tile_rows, first_token, num_tokens, copies);
  if (launch_.packs()) packed_.add(launch_.packed_rows, first_token, num_tokens, copies);
  longest_ = std::max(longest_, first_token + num_tokens);
  most_queries_ = std::max(most_queries_, num_tokens);
}

PrefillCriticalPath PrefillLaunchCost::critical_path() const {
  PrefillCriticalPath c;
  if (tiles_.count == 0) return c;
  const PrefillLaunch& l = launch_;
  const PrefillLaunchShape shape = prefill_launch_shape(l, most_queries_);
  const Tiles& tiles = shape.packed ? packed_ : tiles_;
  PrefillSplitPlan plan;
  if (l.min_split_tokens > 0) {
    const auto n = static_cast<std::int32_t>(
        std::min<std::int64_t>(tiles.count, std::numeric_limits<std::int32_t>::max()));
    plan = plan_prefill_splits(n, shape.head_ctas, longest_, shape.max_ctas, l.min_split_tokens);
  }
  const std::int64_t longest_cta =
      plan.split() ? std::min<std::int64_t>(plan.split_tokens, longest_) : longest_;
  // Every CTA's keys (a split partitions its tile's range, so splitting does not change the sum)
  // over the slots.
  const std::int64_t per_slot = ceil_div(tiles.keys * shape.head_ctas, shape.max_ctas);
  c.keys = std::max(longest_cta, per_slot);
  if (plan.split()) {
    const std::int64_t tile_queries = std::min<std::int64_t>(most_queries_, shape.tile_rows);
    c.merge_steps =
        std::int64_t{plan.kv_splits} * std::min<std::int64_t>(tile_queries, l.merge_rows);
  }
  return c;
}

}  // namespace servelab
