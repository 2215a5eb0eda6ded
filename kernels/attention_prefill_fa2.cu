// Paged prefill attention, FlashAttention-2 style (PrefillKernel::kFa2, the default; the WMMA
// kernel of attention_prefill.cu stays selectable as kWmma). Same contract as
// paged_prefill_attention (kernels/attention.h): chunked prefill over a cached prefix, causal,
// GQA, head_dim 64/128, any block size. Instances: head_dim {64, 128} x KV {bf16, e4m3, e5m2}
// (kKv, fp8.cuh: the code format is a template argument, so each widening is one conversion with
// no branch on a run-time flag) x {64 query rows of one head, 128 rows of one head, 16 rows of
// each of 4 query heads of one GQA group}.
//
// One CTA = 64 x kMB query rows of one sequence and one query head, 4 warps; warp w owns the
// 16-row blocks w, 4 + w (kMB = 2: PrefillKernel::kFa2Wide, FlashAttention-2's tiling for
// head_dim 128, where each K/V fragment read from shared memory feeds both blocks' MMAs); CTAs
// take the tile list back to front (a sequence's last tiles, the longest, first). Per CTA:
//   - Q (64 kMB x HD) arrives by cp.async; with kMB = 1 each warp keeps its 16 rows as mma A
//     fragments in registers (ldmatrix x4) for the whole kernel, with kMB = 2 (no registers to
//     spare: O alone takes 128 per lane at head_dim 128) it re-reads them per K/V tile, one
//     16-dim block at a time;
//   - K/V are walked in 64-key tiles up to the CTA's last query position (tiles wholly above the
//     diagonal are never loaded). Per tile, 64 threads stage the tile's per-key global offsets
//     (block id from the block table x block stride + slot) in shared memory, then every thread
//     issues 16-byte cp.async copies of K and V rows (keys past the last position: zero-filled,
//     src-size 0). Two buffers: tile t + 1 is in flight while tile t is computed; one barrier per
//     tile;
//   - a row block skips a tile wholly above its diagonal (and a block past the tile's last query
//     skips them all); otherwise S = Q K^T (16 x 64, fp32) with mma.sync m16n8k16 bf16 into
//     registers, B fragments by ldmatrix x4 from K; every S element sums its 16-dim blocks in
//     the same order whatever kMB, so both variants give bit-identical outputs;
//   - the causal mask is applied only on a tile that reaches past the block's first position;
//   - online softmax in fp32 on the registers: row max over the 4 lanes of a group (shuffles),
//     P = 2^(S * scale * log2 e - m) with ex2.approx, alpha = 2^(m_old - m) rescales O and the
//     per-lane partial row sums (reduced across the group once, at the end);
//   - P's accumulators are repacked as bf16 A fragments in registers (kernels/mma_fragments.h:
//     the C fragments of two 8-key tiles are one A fragment) and O += P V runs on mma.sync with V's
//     B fragments from ldmatrix x4 .trans;
//   - O lives in registers (HD / 8 x 4 floats per lane) and is written once, divided by the row
//     sum, as bf16 pairs.
// Shared memory rows are padded to HD + 8 bf16 (a 16-byte pad: the 8 row addresses of an
// ldmatrix phase land in 8 different 16-byte bank groups). fp8 KV (kKv e4m3 or e5m2):
// cp.async brings the tile's one-byte codes into their own double buffer; after the tile has
// landed all threads widen it to bf16 (exact) into a single bf16 K/V buffer, one more barrier, and
// the MMAs run as for bf16; k_scale is folded into the score scale (prefill_params), v_scale into
// the output. Deterministic: fixed order, no atomics.
// Head packing (kHeads = 4: PrefillKernel::kFa2Gqa, for launches of short chunks): the CTA takes
// 16 query rows (a tile of 16) of each of 4 consecutive query heads of one GQA group, warp w the
// rows of head 4 y + w. The four heads read the same K/V, so a tile of K/V is loaded once for
// 64 rows of work where the one-head CTA of a 16-token chunk (a chunk after a cached prefix, a
// speculative verify entry) loads it for 16 valid rows of 64, once per head. Every row's S and
// O sum the same products in the same order as kFa2's, so the outputs are kFa2's bit for bit.
// Resources (ptxas, sm_90): kernels/README.md.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/common.cuh"
#include "kernels/fp8.cuh"
#include "kernels/mma_fragments.h"
#include "kernels/prefill_params.cuh"
#include "kernels/prefill_shared.cuh"
#include "kernels/ptx.cuh"
#include "kernels/softmax_merge.h"

namespace servelab::kernels::detail {

void launch_prefill_fa2(const PrefillAttentionArgs& a, cudaStream_t stream);
void launch_prefill_merge(const PrefillParams& pp, const PrefillAttentionArgs& a, int tile_rows,
                          cudaStream_t stream);
std::int32_t wgmma_resident_ctas(std::int32_t head_dim);

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kKeys = kPrefillKeyTile;  // keys per K/V tile
static_assert(kPrefillTileRows == 16 * kWarps, "kFa2: one m16 row block per warp");

// Query rows per CTA: kMB row blocks of 16 per warp, over all of the CTA's heads.
constexpr int rows_per_cta(int mb) { return 16 * kWarps * mb; }
// Query rows of a tile (per head): a CTA of kHeads heads takes rows_per_cta / kHeads of each.
constexpr int tile_rows_of(int mb, int heads) { return rows_per_cta(mb) / heads; }
// Query heads per CTA of the head-packing instance (PrefillKernel::kFa2Gqa).
constexpr int kPackedHeads = prefill_heads_per_cta(PrefillKernel::kFa2Gqa);
static_assert(tile_rows_of(1, kPackedHeads) == prefill_tile_rows(PrefillKernel::kFa2Gqa) &&
                  tile_rows_of(1, 1) == prefill_tile_rows(PrefillKernel::kFa2) &&
                  tile_rows_of(2, 1) == prefill_tile_rows(PrefillKernel::kFa2Wide),
              "the instances' tiles are prefill_tile_rows'");

template <int HD, bool kFp8, int kMB>
struct Fa2Smem {
  static constexpr int kRows = rows_per_cta(kMB);
  static constexpr int kLd = HD + 8;         // bf16 per row (16-byte pad)
  static constexpr int kTile = kKeys * kLd;  // bf16 per K or V buffer
  // bf16 K/V buffers: two (cp.async double buffer) for bf16; one for fp8, whose double buffer
  // holds the codes and whose bf16 tile is rewritten only after the barrier that ends its reads.
  static constexpr int kBufs = kFp8 ? 1 : 2;
  static constexpr int kQ = 0;                         // [kRows][kLd] bf16
  static constexpr int kK = kQ + kRows * kLd * 2;      // [kBufs][kKeys][kLd] bf16
  static constexpr int kV = kK + kBufs * kTile * 2;    // [kBufs][kKeys][kLd] bf16
  static constexpr int kOff = kV + kBufs * kTile * 2;  // [2][kKeys] int64 element offsets
  static constexpr int kF8 = kOff + 2 * kKeys * 8;     // fp8: [2][K, V][kKeys][HD] codes
  static constexpr int kF8Tile = kKeys * HD;           // bytes of one K or V code tile
  static constexpr int kBytes = kF8 + (kFp8 ? 4 * kF8Tile : 0);
  static_assert(kK % 16 == 0 && kV % 16 == 0 && kOff % 16 == 0 && kF8 % 16 == 0 &&
                    (kLd * 2) % 16 == 0,
                "cp.async and ldmatrix need 16-byte aligned rows");
};

template <int HD, int kKv, int kMB, int kHeads>
__global__ void __launch_bounds__(kThreads) prefill_fa2_kernel(const PrefillParams p) {
  static_assert(kHeads == 1 || (kMB == 1 && kWarps % kHeads == 0), "packing: one block a warp");
  constexpr bool kFp8 = kKv != kKvBf16;
  using L = Fa2Smem<HD, kFp8, kMB>;
  constexpr int kRows = L::kRows;                       // rows of the CTA, every head's
  constexpr int kTileRows = tile_rows_of(kMB, kHeads);  // rows of a tile (per head)
  constexpr bool kQInRegs = kMB == 1;
  constexpr int kChunks = HD / 8;  // 16-byte chunks per bf16 row
  constexpr int kElemBytes = kFp8 ? 1 : 2;
  constexpr int kKvChunks = HD * kElemBytes / 16;  // 16-byte chunks per K/V row of the cache
  constexpr int kDimBlocks = HD / 16;
  constexpr int kKeyBlocks = kKeys / 16;
  SERVELAB_DYNAMIC_SMEM(smem);
  __nv_bfloat16* sq = reinterpret_cast<__nv_bfloat16*>(smem + L::kQ);
  __nv_bfloat16* sk = reinterpret_cast<__nv_bfloat16*>(smem + L::kK);
  __nv_bfloat16* sv = reinterpret_cast<__nv_bfloat16*>(smem + L::kV);
  std::int64_t* soff = reinterpret_cast<std::int64_t*>(smem + L::kOff);

  const PrefillCta cta = prefill_cta(p, kTileRows, kHeads);
  const int head = cta.head, rows = cta.rows, pos0 = cta.pos0;
  const std::int64_t row0 = cta.row0;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // The warp's head slot and its first row of that head's tile (CTA row warp_slot * kTileRows +
  // warp_row = 16 warp: shared-memory row r holds row r % kTileRows of head r / kTileRows).
  const int warp_slot = warp / (kWarps / kHeads);
  const int warp_row = (warp % (kWarps / kHeads)) * 16;
  if (cta.key_begin >= cta.key_end) {  // past every row's position
    prefill_store_empty<HD>(p, cta, tid, kThreads);
    return;
  }

  // Q: rows past `rows` are zero (their results are never written).
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const int slot = r / kTileRows, tr = r % kTileRows;
    const bool valid = tr < rows;
    const __nv_bfloat16* src =
        valid ? p.q + ((row0 + tr) * p.num_q_heads + head + slot) * HD + c : p.q;
    cp_async16(smem_u32(sq + r * L::kLd + c), src, valid);
  }
  cp_async_commit();

  const unsigned char* kbase = static_cast<const unsigned char*>(p.kv.k);
  const unsigned char* vbase = static_cast<const unsigned char*>(p.kv.v);
  constexpr bool e5m2 = kKv == kKvE5m2;
  const int t_first = cta.key_begin / kKeys, t_end = (cta.key_end - 1) / kKeys + 1;
  auto stage_offsets = [&](int t, int buf) {
    prefill_stage_offsets<HD>(p, cta, soff + buf * kKeys, t, tid);
  };

  // K and V rows of the staged tile into buffer `buf` (bf16: the MMAs' buffers; fp8: the code
  // buffers), as one cp.async group.
  auto issue_kv = [&](int buf) {
    for (int i = tid; i < kKeys * kKvChunks; i += kThreads) {
      const int r = i / kKvChunks, c = (i % kKvChunks) * 16;  // c: bytes
      const std::int64_t off = soff[buf * kKeys + r];
      const bool valid = off >= 0;
      const std::int64_t src = off * kElemBytes + c;
      const std::uint32_t dst =
          kFp8 ? smem_u32(smem + L::kF8 + 2 * buf * L::kF8Tile + r * HD + c)
               : smem_u32(sk + buf * L::kTile + r * L::kLd) + static_cast<std::uint32_t>(c);
      const std::uint32_t v_dst =
          kFp8 ? dst + L::kF8Tile
               : smem_u32(sv + buf * L::kTile + r * L::kLd) + static_cast<std::uint32_t>(c);
      cp_async16(dst, valid ? kbase + src : kbase, valid);
      cp_async16(v_dst, valid ? vbase + src : vbase, valid);
    }
    cp_async_commit();
  };

  stage_offsets(t_first, 0);
  __syncthreads();
  issue_kv(0);
  cp_async_wait<1>();  // Q landed (tile 0 may still be in flight)
  __syncthreads();

  // Row block m of this warp: CTA rows 64 m + 16 warp .. + 15.
  const frag::Rc qa_addr = frag::q_ldmatrix_addr(lane);
  auto q_frag = [&](unsigned(&f)[4], int m, int kk) {
    ldmatrix_x4(f,
                smem_u32(sq + (m * 64 + warp * 16 + qa_addr.row) * L::kLd + kk * 16 + qa_addr.col));
  };
  unsigned qf[kQInRegs ? kDimBlocks : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < kDimBlocks; ++kk) q_frag(qf[kk], 0, kk);
  }

  float o[kMB][HD / 8][4];
#pragma unroll
  for (int m = 0; m < kMB; ++m) {
#pragma unroll
    for (int d = 0; d < HD / 8; ++d) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[m][d][i] = 0.0f;
    }
  }
  // This lane's two rows of each block: running max and partial sum (prefill_shared.cuh).
  RowState st[kMB];
  int blk_pos0[kMB];
  bool blk_rows[kMB];  // the block has a query row of the tile
#pragma unroll
  for (int m = 0; m < kMB; ++m) {
    blk_pos0[m] = pos0 + m * 64 + warp_row;
    blk_rows[m] = m * 64 + warp_row < rows;
  }
  const frag::Rc ka = frag::k_ldmatrix_addr(lane);
  const frag::Rc va = frag::v_ldmatrix_addr(lane);

  for (int t = t_first; t < t_end; ++t) {
    const int buf = (t - t_first) & 1;
    const bool more = t + 1 < t_end;
    if (more) stage_offsets(t + 1, buf ^ 1);
    cp_async_wait<0>();
    __syncthreads();  // tile t landed for everyone; buffer buf ^ 1 is free; offsets visible
    if (more) issue_kv(buf ^ 1);
    const int mma_buf = kFp8 ? 0 : buf;  // the bf16 K/V buffer the MMAs read
    if constexpr (kFp8) {
      // Widen tile t's codes to bf16 (the bf16 tile was last read before the barrier above).
      const unsigned char* codes = smem + L::kF8 + 2 * buf * L::kF8Tile;
      for (int i = tid; i < kKeys * (HD / 8); i += kThreads) {
        const int r = i / (HD / 8), c = (i % (HD / 8)) * 8;
        const int dst = r * L::kLd + c;
        *reinterpret_cast<uint4*>(sk + dst) =
            fp8x8_to_bf16x8(*reinterpret_cast<const uint2*>(codes + r * HD + c), e5m2);
        *reinterpret_cast<uint4*>(sv + dst) =
            fp8x8_to_bf16x8(*reinterpret_cast<const uint2*>(codes + L::kF8Tile + r * HD + c), e5m2);
      }
      __syncthreads();
    }

    const int kt = t * kKeys;
    bool live[kMB];  // the block has a row at or past the tile's first key
    bool any = false;
#pragma unroll
    for (int m = 0; m < kMB; ++m) {
      live[m] = blk_rows[m] && kt <= blk_pos0[m] + 15;
      any = any || live[m];
    }
    if (!any) continue;  // wholly above this warp's diagonals
    const __nv_bfloat16* tk = sk + mma_buf * L::kTile;
    const __nv_bfloat16* tv = sv + mma_buf * L::kTile;

    // S = Q K^T: per block 16 rows x 64 keys, 8 n-tiles of 8 keys.
    float s[kMB][kKeys / 8][4];
#pragma unroll
    for (int m = 0; m < kMB; ++m) {
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) s[m][n][i] = 0.0f;
      }
    }
    if constexpr (kQInRegs) {
#pragma unroll
      for (int kb = 0; kb < kKeyBlocks; ++kb) {
#pragma unroll
        for (int kk = 0; kk < kDimBlocks; ++kk) {
          unsigned b[4];
          ldmatrix_x4(b, smem_u32(tk + (kb * 16 + ka.row) * L::kLd + kk * 16 + ka.col));
          mma_bf16(s[0][2 * kb], qf[kk], b[0], b[1]);
          mma_bf16(s[0][2 * kb + 1], qf[kk], b[2], b[3]);
        }
      }
    } else {
      // One 16-dim block of Q (both row blocks) at a time; each K fragment feeds both blocks.
#pragma unroll
      for (int kk = 0; kk < kDimBlocks; ++kk) {
        unsigned qa[kMB][4];
#pragma unroll
        for (int m = 0; m < kMB; ++m) {
          if (live[m]) q_frag(qa[m], m, kk);
        }
#pragma unroll
        for (int kb = 0; kb < kKeyBlocks; ++kb) {
          unsigned b[4];
          ldmatrix_x4(b, smem_u32(tk + (kb * 16 + ka.row) * L::kLd + kk * 16 + ka.col));
#pragma unroll
          for (int m = 0; m < kMB; ++m) {
            if (!live[m]) continue;
            mma_bf16(s[m][2 * kb], qa[m], b[0], b[1]);
            mma_bf16(s[m][2 * kb + 1], qa[m], b[2], b[3]);
          }
        }
      }
    }

    // Per live block: the causal mask and the online softmax (log2 domain); P stays in s.
#pragma unroll
    for (int m = 0; m < kMB; ++m) {
      if (live[m]) prefill_softmax_step<HD>(s[m], o[m], st[m], kt, blk_pos0[m], p.scale_log2, lane);
    }

    // O += P V: P's accumulators repacked as bf16 A fragments, one per 16 keys; each V fragment
    // feeds every live block.
#pragma unroll
    for (int kb = 0; kb < kKeyBlocks; ++kb) {
      unsigned pa[kMB][4];
#pragma unroll
      for (int m = 0; m < kMB; ++m) prefill_p_fragment(pa[m], s[m], kb);
#pragma unroll
      for (int db = 0; db < kDimBlocks; ++db) {
        unsigned b[4];
        ldmatrix_x4_trans(b, smem_u32(tv + (kb * 16 + va.row) * L::kLd + db * 16 + va.col));
#pragma unroll
        for (int m = 0; m < kMB; ++m) {
          if (!live[m]) continue;
          mma_bf16(o[m][2 * db], pa[m], b[0], b[1]);
          mma_bf16(o[m][2 * db + 1], pa[m], b[2], b[3]);
        }
      }
    }
  }

  const PrefillCta mine = prefill_cta_head(cta, warp_slot);
#pragma unroll
  for (int m = 0; m < kMB; ++m) {
    prefill_store_rows<HD, kFp8>(p, mine, o[m], st[m], m * 64 + warp_row, lane);
  }
}

// Split-KV: one CTA per (tile, query head, kMergeRows rows of the tile) merges each row's
// kv_splits partial states in split order (merge_softmax_states) and writes the bf16 output row,
// one (row, dim) a thread. (One CTA per (tile, head) walking all its rows was 144 us a layer
// for a 256-token chunk on the H200: 64 CTAs, 128 dependent iterations a thread.) The row count
// is kernels/attention_plan.h's, which `engine profile` records for the calibrated cost model.
constexpr int kMergeRows = kPrefillMergeRows;

__global__ void __launch_bounds__(kThreads)
    prefill_merge_kernel(const PrefillParams p, int head_dim, int kv_splits, int tile_rows) {
  const PrefillTile tile = p.tiles[blockIdx.x];
  const int head = blockIdx.y;
  const int r0 = blockIdx.z * kMergeRows;
  const int rows = min(tile_rows, p.num_queries[tile.seq] - tile.q_begin) - r0;
  if (rows <= 0) return;  // past a short tile's last query
  const std::int64_t row0 = std::int64_t{p.q_row_begin[tile.seq]} + tile.q_begin + r0;
  const std::int64_t n_parts = std::int64_t{gridDim.x} * p.num_q_heads * tile_rows * kv_splits;
  for (int i = threadIdx.x; i < min(rows, kMergeRows) * head_dim; i += blockDim.x) {
    const int r = i / head_dim, d = i % head_dim;
    const std::int64_t first =
        ((std::int64_t{blockIdx.x} * p.num_q_heads + head) * tile_rows + r0 + r) * kv_splits;
    const SoftmaxState st =
        merge_softmax_states(p.workspace + n_parts * head_dim + 2 * first,
                             p.workspace + first * head_dim + d, kv_splits, head_dim);
    p.out[((row0 + r) * p.num_q_heads + head) * head_dim + d] = __float2bfloat16(st.o);
  }
}

// The kernel instance with its dynamic shared memory above 48 KB opted into (once).
template <int HD, int kKv, int kMB, int kHeads>
auto prepared_kernel() {
  constexpr int bytes = Fa2Smem<HD, kKv != kKvBf16, kMB>::kBytes;
  const auto kernel = prefill_fa2_kernel<HD, kKv, kMB, kHeads>;
  static const bool configured = [kernel] {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
               "cudaFuncSetAttribute(prefill fa2)");
    return true;
  }();
  (void)configured;
  return kernel;
}

template <int HD, int kKv, int kMB, int kHeads>
void launch(const PrefillParams& pp, const PrefillAttentionArgs& a, cudaStream_t s) {
  constexpr int bytes = Fa2Smem<HD, kKv != kKvBf16, kMB>::kBytes;
  const auto kernel = prepared_kernel<HD, kKv, kMB, kHeads>();  // one macro argument
  const int splits = a.split.split() ? a.split.kv_splits : 1;
  SERVELAB_LAUNCH(kernel, dim3(a.num_tiles, a.num_q_heads / kHeads, splits), kThreads, bytes, s)
  (pp);
  if (splits > 1) {
    check_launch("paged_prefill_attention (fa2, split)");
    launch_prefill_merge(pp, a, tile_rows_of(kMB, kHeads), s);
  }
}

}  // namespace

void launch_prefill_merge(const PrefillParams& pp, const PrefillAttentionArgs& a, int tile_rows,
                          cudaStream_t stream) {
  const dim3 grid(a.num_tiles, a.num_q_heads, (tile_rows + kMergeRows - 1) / kMergeRows);
  SERVELAB_LAUNCH(prefill_merge_kernel, grid, kThreads, 0, stream)
  (pp, a.kv.head_dim, a.split.kv_splits, tile_rows);
}

template <int kMB, int kHeads>
void launch_rows(const PrefillParams& pp, const PrefillAttentionArgs& a, cudaStream_t stream) {
  with_attention_instance(a.kv.head_dim, a.kv.format, [&](auto hd, auto kv) {
    launch<decltype(hd)::value, decltype(kv)::value, kMB, kHeads>(pp, a, stream);
  });
}

void launch_prefill_fa2(const PrefillAttentionArgs& a, cudaStream_t stream) {
  const PrefillParams pp = prefill_params(a);
  if (a.kernel == PrefillKernel::kFa2Wide) {
    launch_rows<2, 1>(pp, a, stream);
  } else if (a.kernel == PrefillKernel::kFa2Gqa) {
    launch_rows<1, kPackedHeads>(pp, a, stream);
  } else {
    launch_rows<1, 1>(pp, a, stream);
  }
}

template <int HD, int kMB, int kHeads>
std::int32_t resident_ctas() {
  int device = 0, sms = 0, per_sm = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
             "cudaDeviceGetAttribute");
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                 &per_sm, prepared_kernel<HD, kKvBf16, kMB, kHeads>(), kThreads,
                 Fa2Smem<HD, false, kMB>::kBytes),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor (prefill fa2)");
  return std::max(1, sms * std::max(1, per_sm));
}

}  // namespace servelab::kernels::detail

namespace servelab::kernels {

std::int32_t prefill_max_resident_ctas(std::int32_t head_dim, PrefillKernel kernel) {
  if (kernel == PrefillKernel::kWgmma) return detail::wgmma_resident_ctas(head_dim);
  if (kernel == PrefillKernel::kFa2Wide) {
    return head_dim == 64 ? detail::resident_ctas<64, 2, 1>() : detail::resident_ctas<128, 2, 1>();
  }
  if (kernel == PrefillKernel::kFa2Gqa) {
    return head_dim == 64 ? detail::resident_ctas<64, 1, detail::kPackedHeads>()
                          : detail::resident_ctas<128, 1, detail::kPackedHeads>();
  }
  return head_dim == 64 ? detail::resident_ctas<64, 1, 1>() : detail::resident_ctas<128, 1, 1>();
}

}  // namespace servelab::kernels
