// The per-warp register arithmetic the tensor-core prefill kernels share (attention_prefill_fa2.cu
// on mma.sync, attention_prefill_wgmma.cu on wgmma): one warp owns 16 query rows, and S (16 x 64
// keys) and O (16 x head_dim) sit in its registers in the mma.m16n8 C layout, float[n / 8][4]
// per lane (kernels/mma_fragments.h c_elem: element i of 8-column tile j is row g + 8 (i / 2),
// column 8 j + 2 t + i % 2, g = lane / 4, t = lane % 4). wgmma's m64nN accumulators give each
// warp of a warpgroup exactly this layout for its 16 rows, so both kernels call the same code
// and compute the same bits from the same S. Internal to the .cu files.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/common.cuh"
#include "kernels/mma_fragments.h"
#include "kernels/prefill_params.cuh"
#include "kernels/ptx.cuh"

namespace servelab::kernels::detail {

constexpr int kSoftmaxKeys = kPrefillKeyTile;  // keys per K/V tile (S's columns)

// Two floats as one .b32 of bf16 (lo in the low half: the even column of a fragment pair).
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&h);
}

// The warp's running softmax state: per lane its two rows' (C elements 0, 1 and 2, 3) running
// max (log2 units) and partial row sum (the sum over the lane's columns only; prefill_store_rows
// reduces it across the 4 lanes of a row).
struct RowState {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
};

// One K/V tile's step of the online softmax for the warp's 16 rows: masks the keys after each
// row's position (only when the tile `kt` .. kt + 63 reaches past the warp's first position
// `pos0`; row r of the lane is at pos0 + g + 8 r), turns S into P = 2^(S scale - m) in place,
// and rescales O and the partial sums by 2^(m_old - m). A row with no valid key so far keeps
// m = -inf and P = 0.
template <int HD>
__device__ __forceinline__ void prefill_softmax_step(float (&s)[kSoftmaxKeys / 8][4],
                                                     float (&o)[HD / 8][4], RowState& st, int kt,
                                                     int pos0, float scale_log2, int lane) {
  const int row_pos[2] = {pos0 + frag::group(lane), pos0 + frag::group(lane) + 8};
  if (kt + kSoftmaxKeys - 1 > pos0) {
#pragma unroll
    for (int n = 0; n < kSoftmaxKeys / 8; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const frag::Rc c = frag::c_elem(lane, i);
        if (kt + n * 8 + c.col > row_pos[i / 2]) s[n][i] = -INFINITY;
      }
    }
  }
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kSoftmaxKeys / 8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) mx[i / 2] = fmaxf(mx[i / 2], s[n][i]);
  }
  float alpha[2], m_use[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = fmaxf(st.m[r], mx[r] * scale_log2);
    // A row with no valid key yet keeps m = -inf: subtract 0 instead (no inf - inf).
    m_use[r] = m_new == -INFINITY ? 0.0f : m_new;
    alpha[r] = ex2(st.m[r] - m_use[r]);  // m = -inf: 0, nothing accumulated yet
    st.m[r] = m_new;
  }
  float rs[2] = {0.0f, 0.0f};
#pragma unroll
  for (int n = 0; n < kSoftmaxKeys / 8; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s[n][i] = ex2(fmaf(s[n][i], scale_log2, -m_use[i / 2]));
      rs[i / 2] += s[n][i];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) st.l[r] = st.l[r] * alpha[r] + rs[r];
#pragma unroll
  for (int d = 0; d < HD / 8; ++d) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[d][i] *= alpha[i / 2];
  }
}

// P of keys 16 kb .. 16 kb + 15 as the bf16 A fragment of O += P V: the C fragments of 8-key
// tiles 2 kb and 2 kb + 1 are one A fragment (frag::p_from_c_*).
__device__ __forceinline__ void prefill_p_fragment(unsigned (&pa)[4],
                                                   const float (&s)[kSoftmaxKeys / 8][4], int kb) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int e0 = 2 * j, e1 = 2 * j + 1;
    pa[j] = pack_bf16x2(s[2 * kb + frag::p_from_c_tile(e0)][frag::p_from_c_elem(e0)],
                        s[2 * kb + frag::p_from_c_tile(e1)][frag::p_from_c_elem(e1)]);
  }
}

// A prefill CTA's work (blockIdx.x: its tile, taken back to front so that a sequence's longest
// tiles start first; blockIdx.y: its query heads, `heads` consecutive ones of one GQA group
// (one but for the head-packing fa2 kernel, PrefillKernel::kFa2Gqa); blockIdx.z: its split of
// the key range) and where its rows go: the output rows, or with split-KV its split's partial
// states in the workspace (row r of the tile and head `head` is part part0 + r kv_splits; O at
// part * HD, (m, l) at n_parts * HD + 2 part; the CTA's other heads: prefill_cta_head).
struct PrefillCta {
  PrefillTile tile;
  int head, kv_head;  // head: the CTA's first query head
  int heads;          // query heads of the CTA: head .. head + heads - 1
  int tile_rows;      // query rows of a tile (per head)
  int rows;           // the tile's valid query rows (at most tile_rows)
  std::int64_t row0;  // the CTA's first query row in q / out
  int pos0;           // position of the CTA's row 0
  bool splitting;
  int key_begin, key_end;  // the CTA's keys: key_begin a multiple of the key tile, key_end too
                           // unless it is the last row's position + 1 (later keys are masked)
  std::int64_t part0, n_parts;
  const std::int32_t* table;  // the sequence's block table
};

// REQUIRES: heads divides the GQA group (the launcher checks it) and gridDim.y is
// num_q_heads / heads.
__device__ __forceinline__ PrefillCta prefill_cta(const PrefillParams& p, int cta_rows,
                                                  int heads = 1) {
  PrefillCta c;
  c.tile = p.tiles[gridDim.x - 1 - blockIdx.x];
  c.head = blockIdx.y * heads;
  c.kv_head = c.head / (p.num_q_heads / p.kv.num_kv_heads);
  c.heads = heads;
  c.tile_rows = cta_rows;
  c.rows = min(cta_rows, p.num_queries[c.tile.seq] - c.tile.q_begin);
  c.row0 = std::int64_t{p.q_row_begin[c.tile.seq]} + c.tile.q_begin;
  c.pos0 = p.first_pos[c.tile.seq] + c.tile.q_begin;
  const int last_pos = c.pos0 + c.rows - 1;
  c.splitting = gridDim.z > 1;
  c.key_begin = c.splitting ? blockIdx.z * p.split_tokens : 0;
  c.key_end = c.splitting ? min(c.key_begin + p.split_tokens, last_pos + 1) : last_pos + 1;
  c.part0 =
      ((std::int64_t{gridDim.x - 1 - blockIdx.x} * p.num_q_heads + c.head) * cta_rows) * gridDim.z +
      blockIdx.z;
  c.n_parts = std::int64_t{gridDim.x} * p.num_q_heads * cta_rows * gridDim.z;
  c.table = p.kv.block_tables + std::int64_t{c.tile.seq} * p.kv.block_table_stride;
  return c;
}

// The CTA's work as seen by its head `slot` (0 .. c.heads - 1): head c.head + slot, whose
// partial states start c.tile_rows x kv_splits parts after the first head's.
__device__ __forceinline__ PrefillCta prefill_cta_head(const PrefillCta& c, int slot) {
  PrefillCta h = c;
  h.head = c.head + slot;
  h.heads = 1;
  h.part0 = c.part0 + std::int64_t{slot} * c.tile_rows * gridDim.z;
  return h;
}

// A split past every row's position (c.key_begin >= c.key_end): an empty state for each row of
// each of the CTA's heads, written by the CTA's `threads` threads.
template <int HD>
__device__ __forceinline__ void prefill_store_empty(const PrefillParams& p, const PrefillCta& c,
                                                    int tid, int threads) {
  for (int i = tid; i < c.heads * c.rows * HD; i += threads) {
    const int slot = i / (c.rows * HD), r = (i / HD) % c.rows, d = i % HD;
    const std::int64_t part = c.part0 + (std::int64_t{slot} * c.tile_rows + r) * gridDim.z;
    p.workspace[part * HD + d] = 0.0f;
    if (d == 0) {
      p.workspace[c.n_parts * HD + 2 * part] = -INFINITY;
      p.workspace[c.n_parts * HD + 2 * part + 1] = 0.0f;
    }
  }
}

// Key tile t's per-key element offsets in the cache (-1: past the CTA's keys) into `soff`
// (kSoftmaxKeys entries; threads 0 .. kSoftmaxKeys - 1 write them).
template <int HD>
__device__ __forceinline__ void prefill_stage_offsets(const PrefillParams& p, const PrefillCta& c,
                                                      std::int64_t* soff, int t, int tid) {
  if (tid < kSoftmaxKeys) {
    const int pos = t * kSoftmaxKeys + tid;
    const int bs = p.kv.block_size;
    soff[tid] = pos < c.key_end ? std::int64_t{c.table[pos / bs]} * p.kv.block_stride +
                                      (pos % bs) * (std::int64_t{p.kv.num_kv_heads} * HD) +
                                      std::int64_t{c.kv_head} * HD
                                : -1;
  }
}

// Writes the warp's 16 rows (CTA rows `first_row` ..; those at or past out.rows are skipped): O
// divided by the row sum (times v_scale with fp8 KV) as bf16, or unnormalised with the state
// when splitting.
template <int HD, bool kFp8>
__device__ __forceinline__ void prefill_store_rows(const PrefillParams& p, const PrefillCta& out,
                                                   const float (&o)[HD / 8][4], const RowState& st,
                                                   int first_row, int lane) {
  float inv[2], l_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = st.l[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    l_row[r] = l;
    inv[r] = l > 0.0f ? 1.0f / l : 0.0f;  // 0: a row with no key in this split (split-KV)
    if constexpr (kFp8) inv[r] *= p.kv.v_scale;
  }
#pragma unroll
  for (int d = 0; d < HD / 8; ++d) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const frag::Rc c = frag::c_elem(lane, 2 * r);
      const int row = first_row + c.row;
      if (row >= out.rows) continue;
      const float o0 = o[d][2 * r] * inv[r], o1 = o[d][2 * r + 1] * inv[r];
      if (!out.splitting) {
        *reinterpret_cast<__nv_bfloat162*>(
            p.out + ((out.row0 + row) * p.num_q_heads + out.head) * HD + d * 8 + c.col) =
            __floats2bfloat162_rn(o0, o1);
      } else {
        const std::int64_t part = out.part0 + std::int64_t{row} * gridDim.z;
        *reinterpret_cast<float2*>(p.workspace + part * HD + d * 8 + c.col) = make_float2(o0, o1);
        if (d == 0 && c.col == 0) {
          p.workspace[out.n_parts * HD + 2 * part] = st.m[r];
          p.workspace[out.n_parts * HD + 2 * part + 1] = l_row[r];
        }
      }
    }
  }
}

}  // namespace servelab::kernels::detail
