// The pipelined paged decode attention kernel (kernels/attention.h, DecodeKernel::kPipelined):
// tensor cores, every query head of a GQA group in one CTA, the block table staged in shared
// memory, K/V tiles streamed through a cp.async pipeline of 3 stages (4 over fp8). Templated on
// head_dim only (64, 128): 2 instantiations of the kernel, 1 merge kernel.
//
// CTA = (KV head, up to 16 of its query heads, sequence, split), 128 threads (4 warps). The
// query heads are the 16 rows of an m16n8k16 MMA tile (rows past the group are zero and never
// written), so K and V are read once per group whatever its size.
//   - The key range [begin, end) is walked in windows of decode_table_window_tokens(block_size)
//     tokens; each window's block ids are loaded into shared memory once, and every token's
//     (block, slot) comes from a multiply-high (FastDivmod) and a shared-memory read: no global
//     table load and no integer division per row.
//   - A window is a sequence of 64-token tiles. Tile t + 2 is requested with cp.async (16 bytes
//     per request, 8 requests per thread at head_dim 64, 16 at 128, zero-filled past the end)
//     while tile t is computed, so two tiles (64 KB at head_dim 128) are in flight per CTA.
//     Rows are stored with their 16-byte chunks XOR-swizzled by (row mod 8), so the ldmatrix
//     reads below are free of bank conflicts.
//   - Warp w owns tokens 16w .. 16w + 15 of every tile and keeps its own online-softmax state
//     (no barrier between warps inside a tile): S = Q K^T (2 x head_dim/16 MMAs, K through
//     ldmatrix), scale and mask in fp32, quad-shuffle row max, P = 2^(S - m) rounded to bf16 (the
//     row sum adds the rounded values, as the MMA multiplies them), O = alpha O + P V (head_dim/8
//     MMAs, V through ldmatrix.trans), O in registers (fp32 accumulators).
//   - At the end the 4 warps' states go to shared memory (row stride head_dim + 8 floats: the
//     float2 stores are conflict-free) and merge_softmax_states (kernels/softmax_merge.h)
//     combines them in a fixed order; the CTA writes bf16 o, or when split the normalised partial
//     (o, m, l) to the workspace for pipelined_merge_kernel, which uses the same function.
// fp8 KV (PagedKv::format kFp8E4m3/kFp8E5m2; the instantiations with kKv = kKvE4m3, kKvE5m2:
// the code format is a template parameter so that each widening is one conversion instruction,
// not a branch on a run-time flag): the stages hold the
// one-byte codes as they are in the cache (cp.async, half the bytes of bf16; swizzled by
// decode_frag::fp8_tile_offset), and each lane reads its MMA operands' codes straight from the
// stage into registers and widens them there to bf16 (exact), with no ldmatrix and no bf16 copy
// in shared memory: so that a lane's codes are contiguous, the head dims are permuted in both
// products (decode_fragments.h fp8_qk_dim, fp8_pv_dim; Q is loaded and O written permuted to
// match). Half the shared memory of bf16 (more CTAs per SM), no widening pass and no warp
// barrier. k_scale is folded into the score scale, v_scale into the output.
// Deterministic: no atomics, every sum in a fixed order. Instances: head_dim {64, 128} x KV
// {bf16, e4m3, e5m2}.
#include <cuda_bf16.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "kernels/attention.h"
#include "kernels/attention_decode_pipelined.h"
#include "kernels/common.cuh"
#include "kernels/decode_fragments.h"
#include "kernels/fast_divmod.h"
#include "kernels/fp8.cuh"
#include "kernels/ptx.cuh"
#include "kernels/softmax_merge.h"

namespace servelab::kernels::detail {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = kDecodeTileTokens;  // tokens per pipeline stage
constexpr int kWarpTokens = kTile / kWarps;
constexpr int kRows = kPipelinedMaxHeads;  // MMA rows = query heads per CTA
static_assert(kWarpTokens == 16, "one k16 step of P V per warp and tile");
static_assert(kRows == 16, "the query heads are the rows of one m16n8k16 tile");

// Shared memory layout (bytes). The stage buffers are reused for the warp merge at the end.
template <int HD, bool kFp8 = false>
struct PipeSmem {
  static constexpr int kRowBytes = HD * 2;              // a bf16 row (the MMAs' tiles)
  static constexpr int kTileBytes = kTile * kRowBytes;  // one bf16 K (or V) tile
  static constexpr int kStageRowBytes = kFp8 ? HD : HD * 2;
  static constexpr int kStageTileBytes = kTile * kStageRowBytes;
  static constexpr int kStageBytes = 2 * kStageTileBytes;  // K then V, as in the cache
  // Tiles in the pipeline: bf16 3 (2 in flight, 32 KB each at head_dim 128; 2 CTAs an SM by
  // shared memory), fp8 4 (3 in flight, 16 KB each; 3 CTAs an SM by registers, 68 KB each), so
  // that an SM has about as many bytes in flight over fp8 (144 KB) as over bf16 (128 KB): with
  // 3 stages fp8 had 96 KB and read at 0.59-0.67 of the copy bandwidth where bf16 reached 1.0.
  static constexpr int kStages = kFp8 ? 4 : 3;
  static constexpr int kTable = kStages * kStageBytes;  // int32 block ids
  static constexpr int kBytes = kTable + kDecodeTableEntries * 4;
  static constexpr int kLdo = decode_frag::merge_row_floats(HD);  // floats per row of a warp's O
  static constexpr int kMergeO = 0;                               // [kWarps][kRows][kLdo] floats
  static constexpr int kMergeMl = kMergeO + kWarps * kRows * kLdo * 4;  // [kRows][kWarps][2]
  static_assert(kMergeMl + kRows * kWarps * 2 * 4 <= kTable, "the merge fits in the stages");
};

struct PipeParams {
  const unsigned char* k;  // the layer's K plane (bf16 or fp8 elements)
  const unsigned char* v;
  std::int64_t block_stride;
  std::int32_t block_size;
  std::int32_t num_kv_heads;
  const std::int32_t* block_tables;
  std::int32_t block_table_stride;
  FastDivmod block_div;
  const __nv_bfloat16* q;
  __nv_bfloat16* out;
  const std::int32_t* q_rows;
  const std::int32_t* context_lens;
  std::int32_t num_q_heads;
  std::int32_t group;       // query heads per KV head
  std::int32_t chunks;      // CTAs per KV head: ceil(group / kRows)
  std::int32_t partition;   // keys per split
  std::int32_t max_splits;  // grid.z
  std::int32_t window;      // tokens per staged table window
  float scale_log2;         // score scale x log2(e) x k_scale
  float v_scale;            // fp8: the output's factor; 1 for bf16
  float* workspace;
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a K or V tile (XOR swizzle).
template <int HD>
__device__ __forceinline__ std::uint32_t tile_offset(int row, int chunk) {
  return decode_frag::tile_offset(row, chunk, PipeSmem<HD>::kRowBytes);
}
template <int HD>
__device__ __forceinline__ std::uint32_t tile_offset(decode_frag::RowCol rc) {
  return tile_offset<HD>(rc.row, rc.col);
}

template <int HD, int kKv>
__global__ void __launch_bounds__(kThreads) pipelined_decode_kernel(const PipeParams p) {
  detail::wait_for_predecessor();
  detail::allow_dependents();
  constexpr bool kFp8 = kKv != kKvBf16, kE5m2 = kKv == kKvE5m2;
  using L = PipeSmem<HD, kFp8>;
  constexpr int kElemBytes = kFp8 ? 1 : 2;
  constexpr int kChunks = HD * kElemBytes / 16;  // 16-byte chunks per K/V row of the cache
  constexpr int kRowsPerPass = kThreads / kChunks;
  SERVELAB_DYNAMIC_SMEM(smem);

  const int seq = blockIdx.y, split = blockIdx.z;
  const int ctx = p.context_lens[seq];
  const int begin = split * p.partition;
  const int end = min(ctx, begin + p.partition);
  if (begin >= end) return;  // past this sequence's context: the merge ignores this split
  const int kv_head = blockIdx.x / p.chunks;
  const int first_in_group = (blockIdx.x % p.chunks) * kRows;
  const int heads = min(kRows, p.group - first_in_group);  // real rows of the MMA tile
  const int q_head0 = kv_head * p.group + first_in_group;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // Q as the A operand, one fragment per 16 dims; rows >= heads are zero.
  const std::int64_t q_row = p.q_rows[seq];
  const __nv_bfloat16* qbase = p.q + (q_row * p.num_q_heads + q_head0) * HD;
  // fp8: k-step kk holds dims fp8_qk_dim instead of 16 kk .. 16 kk + 15.
  std::uint32_t qa[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const decode_frag::RowCol rc = decode_frag::a_frag(lane, r);
      const int dim = kFp8 ? decode_frag::fp8_qk_dim(lane % 4, kk, r >> 1, HD) : kk * 16 + rc.col;
      qa[kk][r] =
          rc.row < heads ? *reinterpret_cast<const std::uint32_t*>(qbase + rc.row * HD + dim) : 0u;
    }
  }

  float acc[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // rows lane / 4, + 8

  std::int32_t* s_table = reinterpret_cast<std::int32_t*>(smem + L::kTable);
  const std::int32_t* table = p.block_tables + std::int64_t{seq} * p.block_table_stride;
  const std::int64_t row_elems = std::int64_t{p.num_kv_heads} * HD;
  const unsigned char* kbase = p.k + std::int64_t{kv_head} * HD * kElemBytes;
  const unsigned char* vbase = p.v + std::int64_t{kv_head} * HD * kElemBytes;
  const std::uint32_t sbase = smem_u32(smem);

  for (int w0 = begin; w0 < end; w0 += p.window) {
    const int w_end = min(end, w0 + p.window);
    const int first_block = static_cast<int>(p.block_div.div(w0));
    const int n_blocks = static_cast<int>(p.block_div.div(w_end - 1)) - first_block + 1;
    __syncthreads();  // the previous window's requests and reads are done
    for (int i = tid; i < n_blocks; i += kThreads) s_table[i] = table[first_block + i];
    __syncthreads();
    const int n_tiles = (w_end - w0 + kTile - 1) / kTile;

    // Requests tile t of the window into stage `stage`: a thread owns one chunk column and the
    // rows tid / kChunks + kRowsPerPass i.
    auto request = [&](int t, int stage) {
      const int tile0 = w0 + t * kTile;
      const int chunk = tid % kChunks;
      const std::uint32_t kdst = sbase + stage * L::kStageBytes;
#pragma unroll
      for (int i = 0; i < kTile / kRowsPerPass; ++i) {
        const int row = tid / kChunks + i * kRowsPerPass;
        const int pos = tile0 + row;
        const bool live = pos < w_end;
        std::int64_t off = chunk * (16 / kElemBytes);  // elements
        if (live) {
          const std::uint32_t b = p.block_div.div(static_cast<std::uint32_t>(pos));
          const int slot = static_cast<int>(p.block_div.mod(static_cast<std::uint32_t>(pos), b));
          off += std::int64_t{s_table[b - first_block]} * p.block_stride + slot * row_elems;
        }
        const std::uint32_t dst = kdst + (kFp8 ? decode_frag::fp8_tile_offset(row, chunk, HD)
                                               : tile_offset<HD>(row, chunk));
        cp_async16(dst, kbase + off * kElemBytes, live);
        cp_async16(dst + L::kStageTileBytes, vbase + off * kElemBytes, live);
      }
    };

#pragma unroll
    for (int s = 0; s < L::kStages - 1; ++s) {
      if (s < n_tiles) request(s, s);
      cp_async_commit();
    }
    for (int t = 0; t < n_tiles; ++t) {
      cp_async_wait<L::kStages - 2>();  // tile t has landed (this thread's part)
      __syncthreads();                  // ... everyone's; and stage (t - 1) % kStages is free
      if (t + L::kStages - 1 < n_tiles) {
        request(t + L::kStages - 1, (t + L::kStages - 1) % L::kStages);
      }
      cp_async_commit();  // possibly empty: keeps the group count in step

      const int stage = t % L::kStages;
      const int tok0 = warp * kWarpTokens;  // the warp's tokens within the tile
      const int pos0 = w0 + t * kTile + tok0;
      const unsigned char* kst = smem + stage * L::kStageBytes;  // fp8: the codes
      const std::uint32_t ks = sbase + stage * L::kStageBytes;   // bf16: ldmatrix addresses
      const std::uint32_t vs = ks + L::kTileBytes;

      // S = Q K^T for the warp's 16 tokens (two n8 halves).
      float s[2][4];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
        if constexpr (kFp8) {
          // Row 8 j + g: this lane's head_dim / 4 codes, 4 k-steps per 16-byte chunk.
          const int row = tok0 + 8 * j + lane / 4;
#pragma unroll
          for (int i = 0; i < HD / 64; ++i) {
            const uint4 w = *reinterpret_cast<const uint4*>(
                kst +
                decode_frag::fp8_tile_offset(row, decode_frag::fp8_k_chunk(lane % 4, i, HD), HD));
            const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              mma_bf16(s[j], qa[4 * i + u], fp8x2_to_bf16x2(words[u], kE5m2),
                       fp8x2_to_bf16x2(words[u] >> 16, kE5m2));
            }
          }
        } else {
#pragma unroll
          for (int kk = 0; kk < HD / 32; ++kk) {
            std::uint32_t b[4];
            ldmatrix_x4(b, ks + tile_offset<HD>(decode_frag::k_ldmatrix_row(lane, tok0, j, kk)));
            mma_bf16(s[j], qa[2 * kk], b[0], b[1]);
            mma_bf16(s[j], qa[2 * kk + 1], b[2], b[3]);
          }
        }
      }
      // Scale, mask, online softmax per row (a row's 16 columns live in one quad).
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int pos = pos0 + j * 8 + decode_frag::c_frag(lane, e).col;
          s[j][e] = pos < w_end ? s[j][e] * p.scale_log2 : -INFINITY;
          mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
        }
      }
      float alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        const float m_new = fmaxf(m_run[h], mx[h]);
        alpha[h] = shifted_exp2(m_run[h], m_new);
        m_run[h] = m_new;
      }
      // P as the A operand (C elements 2 h, 2 h + 1 of half j: row lane / 4 + 8 h).
      std::uint32_t pa[4];
      float row_sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const __nv_bfloat162 pp = __floats2bfloat162_rn(shifted_exp2(s[j][2 * h], m_run[h]),
                                                          shifted_exp2(s[j][2 * h + 1], m_run[h]));
          row_sum[h] += __low2float(pp) + __high2float(pp);
          pa[decode_frag::p_register(j, h)] = *reinterpret_cast<const std::uint32_t*>(&pp);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * alpha[h] + row_sum[h];
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        acc[n][0] *= alpha[0];
        acc[n][1] *= alpha[0];
        acc[n][2] *= alpha[1];
        acc[n][3] *= alpha[1];
      }
      if constexpr (kFp8) {
        // O += P V: this lane's head_dim / 8 dims (those of g = lane / 4) of tokens 2 t, 2 t + 1
        // (B register 0) and 2 t + 8, 2 t + 9 (register 1); n-tile nt is dim g head_dim / 8 + nt.
        constexpr int kWords = HD / 32;  // 4-byte words of a row's dims per lane
        const int g = lane / 4, t = lane % 4;
        unsigned vw[4][kWords];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int row = tok0 + 2 * t + (r & 1) + 8 * (r >> 1);
          if constexpr (HD == 128) {
            const uint4 w = *reinterpret_cast<const uint4*>(
                kst + L::kStageTileBytes + decode_frag::fp8_tile_offset(row, g, HD));
            vw[r][0] = w.x;
            vw[r][1] = w.y;
            vw[r][2] = w.z;
            vw[r][3] = w.w;
          } else {
            const uint2 w = *reinterpret_cast<const uint2*>(
                kst + L::kStageTileBytes + decode_frag::fp8_tile_offset(row, g / 2, HD) +
                8 * (g % 2));
            vw[r][0] = w.x;
            vw[r][1] = w.y;
          }
        }
#pragma unroll
        for (int w = 0; w < kWords; ++w) {
#pragma unroll
          for (int hi = 0; hi < 2; ++hi) {
            const unsigned lo_tokens = decode_frag::interleave_bytes(vw[0][w], vw[1][w], hi);
            const unsigned hi_tokens = decode_frag::interleave_bytes(vw[2][w], vw[3][w], hi);
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              mma_bf16(acc[4 * w + 2 * hi + e], pa, fp8x2_to_bf16x2(lo_tokens >> (16 * e), kE5m2),
                       fp8x2_to_bf16x2(hi_tokens >> (16 * e), kE5m2));
            }
          }
        }
      } else {
        // O += P V: V^T fragments through ldmatrix.trans, two n8 dim tiles per load.
#pragma unroll
        for (int n2 = 0; n2 < HD / 16; ++n2) {
          std::uint32_t b[4];
          ldmatrix_x4_trans(b, vs + tile_offset<HD>(decode_frag::v_ldmatrix_row(lane, tok0, n2)));
          mma_bf16(acc[2 * n2], pa, b[0], b[1]);
          mma_bf16(acc[2 * n2 + 1], pa, b[2], b[3]);
        }
      }
    }
    cp_async_wait<0>();
  }

  // The 4 warps' states -> shared memory (normalised; an empty warp writes o = 0, l = 0).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  __syncthreads();  // every warp is done with the stage buffers
  float* s_o = reinterpret_cast<float*>(smem + L::kMergeO);
  float* s_ml = reinterpret_cast<float*>(smem + L::kMergeMl);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const decode_frag::RowCol rc = decode_frag::c_frag(lane, 2 * h);
    const int row = rc.row;
    float inv = l_run[h] > 0.0f ? 1.0f / l_run[h] : 0.0f;
    if constexpr (kFp8) inv *= p.v_scale;
    float* dst = s_o + (warp * kRows + row) * L::kLdo;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      if constexpr (kFp8) {  // n-tile n, column c is dim fp8_pv_dim(c, n)
        dst[decode_frag::fp8_pv_dim(rc.col, n, HD)] = acc[n][2 * h] * inv;
        dst[decode_frag::fp8_pv_dim(rc.col + 1, n, HD)] = acc[n][2 * h + 1] * inv;
      } else {
        *reinterpret_cast<float2*>(dst + rc.col + n * 8) =
            make_float2(acc[n][2 * h] * inv, acc[n][2 * h + 1] * inv);
      }
    }
    if (rc.col == 0) {
      s_ml[(row * kWarps + warp) * 2] = m_run[h];
      s_ml[(row * kWarps + warp) * 2 + 1] = l_run[h];
    }
  }
  __syncthreads();
  const std::int64_t n_parts = std::int64_t{gridDim.y} * p.num_q_heads * p.max_splits;
  for (int i = tid; i < heads * HD; i += kThreads) {
    const int row = i / HD, d = i % HD;
    const SoftmaxState r = merge_softmax_states(s_ml + row * kWarps * 2, s_o + row * L::kLdo + d,
                                                kWarps, std::int64_t{kRows} * L::kLdo);
    if (p.max_splits == 1) {
      p.out[(q_row * p.num_q_heads + q_head0 + row) * HD + d] = __float2bfloat16(r.o);
    } else {
      const std::int64_t part =
          (std::int64_t{seq} * p.num_q_heads + q_head0 + row) * p.max_splits + split;
      p.workspace[part * HD + d] = r.o;
      if (d == 0) {
        p.workspace[n_parts * HD + 2 * part] = r.m;
        p.workspace[n_parts * HD + 2 * part + 1] = r.l;
      }
    }
  }
}

// One CTA per (query head, sequence), one thread per dim: the sequence's ceil(ctx / partition)
// partial states merged by merge_softmax_states.
__global__ void pipelined_merge_kernel(const PipeParams p, int head_dim) {
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const int head = blockIdx.x, seq = blockIdx.y, d = threadIdx.x;
  const int n = (p.context_lens[seq] + p.partition - 1) / p.partition;
  const std::int64_t n_parts = std::int64_t{gridDim.y} * p.num_q_heads * p.max_splits;
  const std::int64_t first = (std::int64_t{seq} * p.num_q_heads + head) * p.max_splits;
  const SoftmaxState r = merge_softmax_states(p.workspace + n_parts * head_dim + 2 * first,
                                              p.workspace + first * head_dim + d, n, head_dim);
  const std::int64_t q_row = p.q_rows[seq];
  p.out[(q_row * p.num_q_heads + head) * head_dim + d] = __float2bfloat16(r.o);
}

// The dynamic shared memory above 48 KB must be opted into once per kernel.
template <int HD, int kKv>
const void* prepared_kernel() {
  static std::once_flag once;
  const void* fn = reinterpret_cast<const void*>(&pipelined_decode_kernel<HD, kKv>);
  std::call_once(once, [fn] {
    check_cuda(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    PipeSmem<HD, kKv != kKvBf16>::kBytes),
               "cudaFuncSetAttribute (pipelined decode)");
  });
  return fn;
}

template <int HD, int kKv>
void launch(const PipeParams& pp, const dim3 grid, cudaStream_t s) {
  prepared_kernel<HD, kKv>();
  const auto kernel = pipelined_decode_kernel<HD, kKv>;  // one macro argument
  constexpr int bytes = PipeSmem<HD, kKv != kKvBf16>::kBytes;
  SERVELAB_LAUNCH_PDL(kernel, grid, kThreads, bytes, s)(pp);
}

}  // namespace

void launch_pipelined_decode(const DecodeAttentionArgs& a, cudaStream_t s) {
  const std::int32_t group = a.num_q_heads / a.kv.num_kv_heads;
  const std::int32_t chunks = (group + kRows - 1) / kRows;
  const bool fp8 = is_fp8(a.kv.format);
  const PipeParams pp{static_cast<const unsigned char*>(a.kv.k),
                      static_cast<const unsigned char*>(a.kv.v),
                      a.kv.block_stride,
                      a.kv.block_size,
                      a.kv.num_kv_heads,
                      a.kv.block_tables,
                      a.kv.block_table_stride,
                      FastDivmod::make(static_cast<std::uint32_t>(a.kv.block_size)),
                      bf(a.q),
                      bf(a.out),
                      a.q_rows,
                      a.context_lens,
                      a.num_q_heads,
                      group,
                      chunks,
                      a.plan.partition_tokens,
                      a.plan.max_splits,
                      decode_table_window_tokens(a.kv.block_size),
                      a.scale * kLog2e * (fp8 ? a.kv.k_scale : 1.0f),
                      fp8 ? a.kv.v_scale : 1.0f,
                      a.workspace};
  const dim3 grid(a.kv.num_kv_heads * chunks, a.num_seqs, a.plan.max_splits);
  with_attention_instance(a.kv.head_dim, a.kv.format, [&](auto hd, auto kv) {
    launch<decltype(hd)::value, decltype(kv)::value>(pp, grid, s);
  });
  check_launch("paged_decode_attention (pipelined)");
  if (a.plan.split()) {
    SERVELAB_LAUNCH_PDL(pipelined_merge_kernel, dim3(a.num_q_heads, a.num_seqs), a.kv.head_dim, 0,
                        s)
    (pp, a.kv.head_dim);
    check_launch("paged_decode_attention (pipelined) merge");
  }
}

std::int32_t pipelined_decode_ctas_per_sm(std::int32_t head_dim, bool fp8) {
  // fp8: the e4m3 instance (the e5m2 one has the same shared memory; kernels/README.md).
  const void* fn = head_dim == 64
                       ? (fp8 ? prepared_kernel<64, kKvE4m3>() : prepared_kernel<64, kKvBf16>())
                       : (fp8 ? prepared_kernel<128, kKvE4m3>() : prepared_kernel<128, kKvBf16>());
  const int bytes = head_dim == 64 ? (fp8 ? PipeSmem<64, true>::kBytes : PipeSmem<64>::kBytes)
                                   : (fp8 ? PipeSmem<128, true>::kBytes : PipeSmem<128>::kBytes);
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kThreads, bytes),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor (pipelined decode)");
  return per_sm;
}

}  // namespace servelab::kernels::detail
