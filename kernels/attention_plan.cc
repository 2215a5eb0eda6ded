#include "kernels/attention_plan.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

namespace servelab::kernels {

const char* decode_kernel_name(DecodeKernel kernel) {
  return kernel == DecodeKernel::kTiled ? "tiled" : "pipelined";
}

std::optional<DecodeKernel> decode_kernel_from_name(std::string_view name) {
  for (DecodeKernel k : {DecodeKernel::kTiled, DecodeKernel::kPipelined}) {
    if (name == decode_kernel_name(k)) return k;
  }
  return std::nullopt;
}

DecodeKernel decode_kernel_from_env(DecodeKernel fallback) {
  const char* value = std::getenv(kDecodeKernelEnv);
  if (value == nullptr || *value == '\0') return fallback;
  if (const std::optional<DecodeKernel> k = decode_kernel_from_name(value)) return *k;
  throw std::invalid_argument(std::string(kDecodeKernelEnv) + "=" + value +
                              ": expected one of tiled, pipelined");
}

std::int32_t decode_ctas_per_seq(DecodeKernel kernel, std::int32_t num_q_heads,
                                 std::int32_t num_kv_heads) {
  if (kernel == DecodeKernel::kTiled) {
    return num_q_heads / decode_heads_per_cta(num_q_heads, num_kv_heads);
  }
  const std::int32_t group = num_q_heads / num_kv_heads;
  return num_kv_heads * ((group + kPipelinedMaxHeads - 1) / kPipelinedMaxHeads);
}

std::int32_t decode_table_window_tokens(std::int32_t block_size) {
  // W <= (entries - 1) * block_size keeps ceil(W / block_size) + 1 <= entries.
  const std::int64_t w = std::int64_t{kDecodeTableEntries - 1} * block_size;
  return static_cast<std::int32_t>(w / kDecodeTileTokens * kDecodeTileTokens);
}

std::int32_t decode_heads_per_cta(std::int32_t num_q_heads, std::int32_t num_kv_heads) {
  const std::int32_t group = num_q_heads / num_kv_heads;
  for (std::int32_t g : {8, 4, 2}) {
    if (group % g == 0) return g;
  }
  return 1;
}

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

std::int64_t ctas_for(const std::vector<std::int32_t>& ctx, std::int64_t partition,
                      std::int64_t per_seq) {
  std::int64_t n = 0;
  for (std::int32_t c : ctx) n += ceil_div(c, partition) * per_seq;
  return n;
}

}  // namespace

std::string decode_plan_error(const DecodeSplitPlan& plan, std::int64_t longest_context) {
  const std::string part = std::to_string(plan.partition_tokens);
  const std::string splits = std::to_string(plan.max_splits);
  if (plan.partition_tokens <= 0) {
    return "partition_tokens is " + part + ", must be > 0 (no split would hold a key)";
  }
  if (plan.partition_tokens % kDecodeTileTokens != 0) {
    return "partition_tokens " + part + " is not a multiple of the " +
           std::to_string(kDecodeTileTokens) + "-token tile";
  }
  if (plan.max_splits < 1 || plan.max_splits > kMaxDecodeSplits) {
    return "max_splits is " + splits + ", must be in [1, " + std::to_string(kMaxDecodeSplits) + "]";
  }
  if (std::int64_t{plan.max_splits} * plan.partition_tokens < longest_context) {
    return splits + " splits x " + part + " tokens do not cover the longest context (" +
           std::to_string(longest_context) + " tokens)";
  }
  return {};
}

void validate_decode_plan(const DecodeSplitPlan& plan, std::int64_t longest_context,
                          const char* who) {
  const std::string e = decode_plan_error(plan, longest_context);
  if (!e.empty())
    throw std::invalid_argument(std::string(who) + ": invalid decode split plan: " + e);
}

DecodeSplitPlan plan_decode_splits(const std::vector<std::int32_t>& context_lens,
                                   std::int32_t ctas_per_seq, std::int32_t max_ctas,
                                   std::int32_t min_partition) {
  if (context_lens.empty() || ctas_per_seq < 1 || max_ctas < 1 || min_partition < 1) {
    throw std::invalid_argument(
        "plan_decode_splits: needs >= 1 sequence, ctas_per_seq, max_ctas and min_partition >= 1");
  }
  for (std::int32_t c : context_lens) {
    if (c < 1) {
      throw std::invalid_argument("plan_decode_splits: context length " + std::to_string(c) +
                                  " (every sequence decodes at least its own token)");
    }
  }
  const std::int64_t tile = kDecodeTileTokens;
  std::int32_t longest = 1;
  for (std::int32_t c : context_lens) longest = std::max(longest, c);
  const std::int64_t whole = ceil_div(longest, tile) * tile;  // one split covers everything
  DecodeSplitPlan plan{static_cast<std::int32_t>(whole), 1};
  const std::int64_t base = static_cast<std::int64_t>(context_lens.size()) * ctas_per_seq;
  const std::int64_t lo_tokens = std::max<std::int64_t>(ceil_div(min_partition, tile) * tile, tile);
  if (base >= max_ctas || whole <= lo_tokens) {
    validate_decode_plan(plan, longest, "plan_decode_splits");
    return plan;
  }
  // Smallest partition (in tiles) that keeps the grid within max_ctas; more splits than that
  // only add merge traffic. ctas_for() is non-increasing in the partition.
  // No more than kMaxDecodeSplits splits, whatever max_ctas allows.
  std::int64_t lo = std::max(lo_tokens / tile, ceil_div(ceil_div(longest, kMaxDecodeSplits), tile));
  std::int64_t hi = whole / tile;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi) / 2;
    if (ctas_for(context_lens, mid * tile, ctas_per_seq) <= max_ctas) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  plan.partition_tokens = static_cast<std::int32_t>(lo * tile);
  plan.max_splits = static_cast<std::int32_t>(ceil_div(longest, plan.partition_tokens));
  validate_decode_plan(plan, longest, "plan_decode_splits");
  return plan;
}

std::int64_t decode_workspace_floats(std::int32_t num_seqs, std::int32_t num_q_heads,
                                     std::int32_t head_dim, std::int32_t max_splits) {
  return std::int64_t{num_seqs} * num_q_heads * max_splits * (head_dim + 2);
}

std::int64_t prefill_workspace_floats(std::int32_t num_tiles, std::int32_t num_q_heads,
                                      std::int32_t head_dim, std::int32_t kv_splits,
                                      std::int32_t tile_rows) {
  return std::int64_t{num_tiles} * num_q_heads * kv_splits * tile_rows * (head_dim + 2);
}

std::vector<PrefillTile> plan_prefill_tiles(const std::vector<std::int32_t>& num_queries,
                                            std::int32_t tile_rows) {
  if (tile_rows < 1) {
    throw std::invalid_argument("plan_prefill_tiles: tile_rows must be >= 1, got " +
                                std::to_string(tile_rows));
  }
  std::vector<PrefillTile> tiles;
  for (std::size_t s = 0; s < num_queries.size(); ++s) {
    for (std::int32_t q = 0; q < num_queries[s]; q += tile_rows) {
      tiles.push_back({static_cast<std::int32_t>(s), q});
    }
  }
  return tiles;
}

}  // namespace servelab::kernels
