// KvCacheLayout: where every K/V element of the GPU executor's paged cache lives.
//
// The cache is ONE device allocation of num_blocks blocks, block-major across layers:
//
//   cache[num_blocks][num_layers][2 (K, V)][block_size][num_kv_heads][head_dim]
//
// of bf16 elements, or of one-byte fp8 codes for an fp8 KV cache (elem_bytes 1: twice the blocks
// in the same memory),
//
// so one logical block (the unit the scheduler moves, swaps and copies-on-write) is one
// contiguous run of block_bytes() bytes: a swap or a copy of N blocks is N contiguous copies,
// batched into one kernel launch (kernels/cache_ops.h), instead of 2 * num_layers small ones.
// Within a (block, layer, K|V) the layout is NHD, [slot][kv_head][head_dim], the same order as
// CpuExecutor's per-layer blocks, so a token's K (or V) for all heads is one contiguous row.
//
// Kernels see one layer at a time through a base pointer (layer_base(layer, kv)) plus
// block_stride() elements between consecutive blocks. Host swap space uses the same layout with
// its own block count. Pure host arithmetic: unit-tested on the CPU (tests/kernels_host_test.cc).
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/float_formats.h"

namespace servelab::kernels {

struct KvCacheLayout {
  std::int32_t num_layers = 0;
  std::int32_t block_size = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t elem_bytes = 2;  // bf16; 1 for fp8 (kv_elem_bytes)

  // Elements of one (block, layer, K or V): block_size * num_kv_heads * head_dim.
  std::int64_t plane_elems() const { return std::int64_t{block_size} * num_kv_heads * head_dim; }
  // Elements between consecutive blocks (all layers, K and V).
  std::int64_t block_stride() const { return plane_elems() * 2 * num_layers; }
  std::int64_t block_bytes() const { return block_stride() * elem_bytes; }
  // Offset of layer `layer`'s K (kv = 0) or V (kv = 1) plane within block 0.
  std::int64_t layer_base(std::int32_t layer, std::int32_t kv) const {
    return (std::int64_t{layer} * 2 + kv) * plane_elems();
  }
  // Offset of element (block, layer, kv, slot, head, d) from the start of the cache.
  std::int64_t offset(std::int64_t block, std::int32_t layer, std::int32_t kv, std::int32_t slot,
                      std::int32_t head, std::int32_t d) const {
    return block * block_stride() + layer_base(layer, kv) +
           (std::int64_t{slot} * num_kv_heads + head) * head_dim + d;
  }
  // The global slot index of token position `pos` in a request whose block table is `table`:
  // block_table[pos / block_size] * block_size + pos % block_size (what kv_write consumes).
  std::int64_t slot_of(const std::int32_t* table, std::int64_t pos) const {
    return std::int64_t{table[pos / block_size]} * block_size + pos % block_size;
  }
};

// Bytes of one K or V element of the GPU cache in `format`: 2 (kBf16) or 1 (kFp8E4m3,
// kFp8E5m2). Throws std::invalid_argument for a format the cache does not take (fp32, fp16).
int kv_elem_bytes(FloatFormat format);
// Throws std::invalid_argument "<what>: ..." unless `format` is one kv_elem_bytes takes and, for
// fp8, both per-tensor scales are positive and finite.
void check_kv_format(FloatFormat format, float k_scale, float v_scale, std::string_view what);

// vLLM-style KV sizing: the blocks that fit in total * utilization minus what the process
// already holds (total - free, measured after weights and activation buffers are allocated).
// Returns 0 when nothing fits. REQUIRES: block_bytes > 0, 0 < utilization <= 1.
std::int64_t kv_blocks_for_memory(std::int64_t total_bytes, std::int64_t free_bytes,
                                  double utilization, std::int64_t block_bytes);

}  // namespace servelab::kernels
