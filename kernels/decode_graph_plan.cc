#include "kernels/decode_graph_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace servelab::kernels {

std::vector<std::int32_t> decode_graph_buckets(std::int32_t max_num_seqs) {
  if (max_num_seqs < 1) {
    throw std::invalid_argument("decode_graph_buckets: max_num_seqs must be >= 1, got " +
                                std::to_string(max_num_seqs));
  }
  std::vector<std::int32_t> b;
  for (std::int32_t s : {1, 2, 4}) {
    b.push_back(s);
    if (s >= max_num_seqs) return b;
  }
  for (std::int32_t s = 8;; s += 8) {
    b.push_back(s);
    if (s >= max_num_seqs) return b;
  }
}

std::int32_t decode_graph_bucket(const std::vector<std::int32_t>& buckets, std::int32_t batch) {
  const auto it = std::lower_bound(buckets.begin(), buckets.end(), batch);
  return it == buckets.end() ? 0 : *it;
}

std::int32_t decode_graph_table_width(std::int32_t needed, std::int32_t max_width) {
  if (needed < 1 || needed > max_width) {
    throw std::invalid_argument("decode_graph_table_width: needed " + std::to_string(needed) +
                                " outside [1, " + std::to_string(max_width) + "]");
  }
  std::int64_t w = 1;
  while (w < needed) w *= 2;
  return static_cast<std::int32_t>(std::min<std::int64_t>(w, max_width));
}

std::int32_t decode_graph_min_table_width(std::int32_t bucket, std::int32_t max_width,
                                          std::int64_t table_bytes) {
  if (bucket < 1 || max_width < 1 || table_bytes < 0) {
    throw std::invalid_argument("decode_graph_min_table_width: needs bucket >= 1 (got " +
                                std::to_string(bucket) + "), max_width >= 1 (got " +
                                std::to_string(max_width) + ") and table_bytes >= 0 (got " +
                                std::to_string(table_bytes) + ")");
  }
  const std::int64_t row_bytes = std::int64_t{bucket} * std::int64_t{sizeof(std::int32_t)};
  const std::int64_t fits = table_bytes / row_bytes;  // ids a row the budget holds
  if (fits >= max_width) return max_width;
  std::int64_t w = 1;
  while (w * 2 <= fits) w *= 2;
  return static_cast<std::int32_t>(w);
}

std::int32_t decode_graph_max_splits(std::int32_t table_width, std::int32_t block_size) {
  if (table_width < 1 || block_size < 1) {
    throw std::invalid_argument("decode_graph_max_splits: table_width and block_size must be >= 1");
  }
  const std::int64_t tile = kDecodeTileTokens;
  const std::int64_t cover_tiles = (std::int64_t{table_width} * block_size + tile - 1) / tile;
  const std::int64_t least = std::max<std::int64_t>((kMinDecodePartition + tile - 1) / tile, 1);
  return static_cast<std::int32_t>(
      std::min<std::int64_t>((cover_tiles + least - 1) / least, kMaxDecodeSplits));
}

namespace {

// The smallest of 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (2^k and 3 * 2^k) that is >= n (n >= 1):
// less than 3/2 of n, and few enough values that a drifting n rarely changes it.
std::int64_t quantize_tiles_up(std::int64_t n) {
  std::int64_t p = 1;
  while (true) {
    if (p >= n) return p;
    if (p >= 2 && p / 2 * 3 >= n) return p / 2 * 3;
    p *= 2;
  }
}

// decode_graph_split_plan from the eager planner's plan for the same batch.
DecodeSplitPlan graph_split_plan(const DecodeSplitPlan& eager, std::int32_t table_width,
                                 std::int32_t block_size) {
  const std::int64_t tile = kDecodeTileTokens;
  const std::int64_t cover_tiles = (std::int64_t{table_width} * block_size + tile - 1) / tile;
  const DecodeSplitPlan whole{static_cast<std::int32_t>(cover_tiles * tile), 1};
  if (!eager.split()) return whole;
  std::int64_t part = quantize_tiles_up(eager.partition_tokens / tile);
  if ((cover_tiles + part - 1) / part > kMaxDecodeSplits) {
    part = (cover_tiles + kMaxDecodeSplits - 1) / kMaxDecodeSplits;
  }
  const std::int64_t splits = (cover_tiles + part - 1) / part;
  if (splits <= 1) return whole;
  return {static_cast<std::int32_t>(part * tile), static_cast<std::int32_t>(splits)};
}

}  // namespace

DecodeSplitPlan decode_graph_split_plan(const std::vector<std::int32_t>& padded_context_lens,
                                        std::int32_t ctas_per_seq, std::int32_t max_ctas,
                                        std::int32_t table_width, std::int32_t block_size) {
  return graph_split_plan(plan_decode_splits(padded_context_lens, ctas_per_seq, max_ctas),
                          table_width, block_size);
}

DecodeGraphShape decode_graph_shape(const std::vector<std::int32_t>& padded_context_lens,
                                    std::int32_t needed, std::int32_t max_width,
                                    std::int32_t min_width, std::int32_t ctas_per_seq,
                                    std::int32_t max_ctas, std::int32_t block_size) {
  if (min_width < 0) {
    throw std::invalid_argument("decode_graph_shape: min_width must be >= 0, got " +
                                std::to_string(min_width));
  }
  const DecodeSplitPlan eager = plan_decode_splits(padded_context_lens, ctas_per_seq, max_ctas);
  DecodeGraphShape shape;
  shape.table_width = decode_graph_table_width(needed, max_width);
  if (!eager.split()) {
    shape.table_width = std::max(shape.table_width, std::min(min_width, max_width));
  }
  shape.plan = graph_split_plan(eager, shape.table_width, block_size);
  return shape;
}

PaddedDecodeInputs pad_decode_inputs(const std::vector<std::int32_t>& tokens,
                                     const std::vector<std::int32_t>& positions,
                                     const std::vector<std::int64_t>& slots,
                                     const std::vector<std::int32_t>& context_lens,
                                     const std::vector<std::int32_t>& tables, std::int32_t stride,
                                     std::int32_t bucket, std::int32_t table_width,
                                     std::int32_t dummy_block) {
  const std::size_t n = tokens.size();
  if (positions.size() != n || slots.size() != n || context_lens.size() != n ||
      static_cast<std::int64_t>(n) > bucket || stride < 0 ||
      tables.size() != n * static_cast<std::size_t>(stride) || table_width < 1) {
    throw std::invalid_argument(
        "pad_decode_inputs: tokens, positions, slots and context lengths must have one entry per "
        "sequence, at most `bucket`, and tables one row of `stride` ids per sequence");
  }
  PaddedDecodeInputs p;
  const auto b = static_cast<std::size_t>(bucket);
  const auto w = static_cast<std::size_t>(table_width);
  p.tokens.assign(b, 0);
  p.positions.assign(b, 0);
  p.slots.assign(b, -1);
  p.context_lens.assign(b, 1);
  p.q_rows.resize(b);
  p.block_tables.assign(b * w, dummy_block);
  for (std::size_t i = 0; i < b; ++i) p.q_rows[i] = static_cast<std::int32_t>(i);
  for (std::size_t i = 0; i < n; ++i) {
    p.tokens[i] = tokens[i];
    p.positions[i] = positions[i];
    p.slots[i] = slots[i];
    p.context_lens[i] = context_lens[i];
    for (std::size_t c = 0; c < w; ++c) {
      p.block_tables[i * w + c] = c < static_cast<std::size_t>(stride)
                                      ? tables[i * static_cast<std::size_t>(stride) + c]
                                      : 0;
    }
  }
  return p;
}

}  // namespace servelab::kernels
