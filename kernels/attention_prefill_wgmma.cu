// Paged prefill attention on Hopper's warpgroup MMA (PrefillKernel::kWgmma, sm_90a). Same
// contract as paged_prefill_attention (kernels/attention.h): chunked prefill over a cached
// prefix, causal, GQA, head_dim 64/128, any block size, split-KV; bf16 or fp8 (e4m3, e5m2) KV.
// Instances: head_dim {64, 128} x KV {bf16, e4m3, e5m2}.
//
// One CTA = 128 query rows of one sequence and one query head, two warpgroups of 4 warps; warp
// group w owns rows 64 w .. 64 w + 63, its warp w' % 4 the 16 rows 16 (w' % 4) .. of them. Per
// CTA:
//   - Q (128 x HD) arrives by cp.async into shared memory and stays there (wgmma reads A from
//     shared memory, so it costs no registers);
//   - K/V are walked in 64-key tiles up to the CTA's last query position, staged as in the fa2
//     kernel (per-key global offsets in shared memory, 16-byte cp.async copies, keys past the
//     end zero-filled, two buffers: tile t + 1 in flight while tile t is computed, one barrier
//     per tile);
//   - Q, K and V sit in shared memory in the no-swizzle canonical layout of the PTX ISA: 8-row x
//     16-byte core matrices of 128 contiguous bytes, row r, chunk c (dims 8 c .. 8 c + 7) at
//     (r / 8) 16 HD + 128 c + 16 (r % 8). Eight threads in a row fill one core matrix, so the
//     cp.async stores are conflict-free, and the same bytes are a K-major operand (rows = M/N,
//     LBO 128 along the dims, SBO 16 HD along the rows) and, for V, an MN-major one (dims = N:
//     SBO 128, keys = K: LBO 16 HD);
//   - a warpgroup skips a tile wholly above its 64 rows' diagonal (and every tile if it has no
//     valid row); otherwise S = Q K^T (64 x 64 fp32 per warpgroup, 32 per thread) is HD / 16
//     wgmma.m64n64k16 with both operands from shared memory; S's accumulators are per warp the
//     mma.m16n8 C layout of the fa2 kernel, so the mask, the online softmax, P's repacking as
//     A fragments and the output are kernels/prefill_shared.cuh's, shared with it;
//   - O += P V is 4 wgmma.m64n{HD}k16 with P from registers and V from shared memory, MN-major
//     (imm-trans-b): O stays in registers (HD / 2 floats per thread);
//   - each batch of wgmma is fenced (wgmma.fence), committed and waited for before its
//     accumulators are read; the thread's cp.async data is fenced into the async proxy
//     (fence.proxy.async) before the barrier that publishes it.
// fp8 KV (kKv e4m3 or e5m2), as the fa2 kernel does it: cp.async brings a tile's one-byte codes
// into their own double buffer (laid out in core matrices of 8 rows x 16 codes, so the copies,
// the widening's reads and its 16-byte bf16 stores are all conflict-free); once tile t has
// landed, every thread widens its codes (exactly) into the single bf16 K/V tile in the wgmma
// layout above, fences them into the async proxy, and a second barrier publishes them; k_scale
// is folded into the score scale (prefill_params), v_scale into the output. The bf16 tile is
// rewritten only after the first barrier of the next tile, which every warpgroup reaches after
// waiting for its wgmma. Same 97 KB of shared memory at head_dim 128: the code buffers take the
// second bf16 buffer's place.
// Every S and O element sums its 16-element k blocks in the fa2 kernel's order: on the CUDA
// emulator the outputs are fa2_128's bit for bit; a GPU's wgmma may round its internal sums
// otherwise. Deterministic: fixed order, no atomics.
// __launch_bounds__(256, 2): at most 128 registers (ptxas: 127 at head_dim 128, 122 at 64, no
// spills) and 97 KB of shared memory at head_dim 128, so two CTAs (four warpgroups) share an SM
// and one's softmax overlaps another's MMAs.
// Built only where nvcc targets sm_90a (SERVELAB_CUDA_SM90A, CMakeLists.txt) and on the
// emulator; elsewhere the launcher refuses. Resources (ptxas): kernels/README.md.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kernels/attention.h"
#include "kernels/common.cuh"
#include "kernels/fp8.cuh"
#include "kernels/prefill_params.cuh"
#include "kernels/prefill_shared.cuh"
#include "kernels/ptx.cuh"

namespace servelab::kernels::detail {

void launch_prefill_merge(const PrefillParams& pp, const PrefillAttentionArgs& a, int tile_rows,
                          cudaStream_t stream);
void launch_prefill_wgmma(const PrefillAttentionArgs& a, cudaStream_t stream);
std::int32_t wgmma_resident_ctas(std::int32_t head_dim);

namespace {

constexpr int kGroups = 2;  // warpgroups per CTA
constexpr int kThreads = 128 * kGroups;
constexpr int kRows = 64 * kGroups;  // query rows per CTA: prefill_tile_rows(kWgmma)
static_assert(kRows == prefill_tile_rows(PrefillKernel::kWgmma), "the tile is prefill_tile_rows'");
constexpr int kKeys = kPrefillKeyTile;

template <int HD, bool kFp8>
struct WgmmaSmem {
  static constexpr int kRowBytes = HD * 2;
  static constexpr int kTile = kKeys * kRowBytes;  // bytes of one K or V buffer
  // bf16 K/V buffers: two (the cp.async double buffer) for bf16; one for fp8, whose double
  // buffer holds the codes.
  static constexpr int kBufs = kFp8 ? 1 : 2;
  static constexpr int kQ = 0;                                   // [kRows] rows
  static constexpr int kK = kQ + kRows * kRowBytes;              // [kBufs][kKeys] rows
  static constexpr int kV = kK + kBufs * kTile;                  // [kBufs][kKeys] rows
  static constexpr int kOff = kV + kBufs * kTile;                // [2][kKeys] int64 element offsets
  static constexpr int kF8 = kOff + 2 * kKeys * 8;               // fp8: [2][K, V][kKeys x HD] codes
  static constexpr int kF8Tile = kKeys * HD;                     // bytes of one K or V code tile
  static constexpr int kBytes = kF8 + (kFp8 ? 4 * kF8Tile : 0);  // 97 KB at head_dim 128
  static_assert(kK % 128 == 0 && kV % 128 == 0 && kOff % 16 == 0 && kF8 % 128 == 0,
                "core matrices are aligned");
  static_assert(kOff < (1 << 18), "descriptor start addresses have 14 bits of 16 bytes");
};

template <int HD, int kKv>
__global__ void __launch_bounds__(kThreads, 2) prefill_wgmma_kernel(const PrefillParams p) {
#if SERVELAB_WGMMA
  constexpr bool kFp8 = kKv != kKvBf16;
  using L = WgmmaSmem<HD, kFp8>;
  constexpr int kChunks = HD / 8;          // 16-byte chunks per row
  constexpr std::uint32_t kSbo = HD * 16;  // bytes between 8-row groups
  constexpr std::uint32_t kLbo = 128;      // bytes between 8-column chunks
  SERVELAB_DYNAMIC_SMEM(smem);
  std::int64_t* soff = reinterpret_cast<std::int64_t*>(smem + L::kOff);
  const std::uint32_t base = smem_u32(smem);

  const PrefillCta cta = prefill_cta(p, kRows);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
  if (cta.key_begin >= cta.key_end) {  // past every row's position
    prefill_store_empty<HD>(p, cta, tid, kThreads);
    return;
  }

  // Chunk i of a tile's rows x kChunks in the order that gives 8 threads in a row one core
  // matrix: row (i / (8 kChunks)) 8 + i % 8, chunk (i / 8) % kChunks. The fp8 code tiles use
  // the same order over their kCodeChunks 16-code chunks a row.
  constexpr int kCodeChunks = HD / 16;
  auto chunk_row = [](int i, int chunks) { return (i / (8 * chunks)) * 8 + i % 8; };
  auto chunk_col = [](int i, int chunks) { return (i / 8) % chunks; };

  // Q: rows past `rows` are zero (their results are never written).
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = chunk_row(i, kChunks), c = chunk_col(i, kChunks);
    const bool valid = r < cta.rows;
    const __nv_bfloat16* src =
        valid ? p.q + ((cta.row0 + r) * p.num_q_heads + cta.head) * HD + c * 8 : p.q;
    cp_async16(base + L::kQ + core_matrix_offset<HD>(r, c), src, valid);
  }
  cp_async_commit();

  const unsigned char* kbase = static_cast<const unsigned char*>(p.kv.k);
  const unsigned char* vbase = static_cast<const unsigned char*>(p.kv.v);
  const int t_first = cta.key_begin / kKeys, t_end = (cta.key_end - 1) / kKeys + 1;
  // K and V rows of the staged tile into buffer `buf` (bf16: the wgmma buffers; fp8: the code
  // buffers, core matrices of 8 rows x 16 codes), as one cp.async group.
  auto issue_kv = [&](int buf) {
    if constexpr (kFp8) {
#pragma unroll 1  // as widen: no per-iteration addresses held across the tile loop
      for (int i = tid; i < kKeys * kCodeChunks; i += kThreads) {
        const int r = chunk_row(i, kCodeChunks), c = chunk_col(i, kCodeChunks);
        const std::int64_t off = soff[buf * kKeys + r];
        const bool valid = off >= 0;
        const std::int64_t src = off + c * 16;
        const std::uint32_t at = L::kF8 + 2 * buf * L::kF8Tile + core_matrix_offset<HD / 2>(r, c);
        cp_async16(base + at, valid ? kbase + src : kbase, valid);
        cp_async16(base + at + L::kF8Tile, valid ? vbase + src : vbase, valid);
      }
    } else {
      for (int i = tid; i < kKeys * kChunks; i += kThreads) {
        const int r = chunk_row(i, kChunks), c = chunk_col(i, kChunks);
        const std::int64_t off = soff[buf * kKeys + r];
        const bool valid = off >= 0;
        const std::int64_t src = off * 2 + c * 16;
        const std::uint32_t at = buf * L::kTile + core_matrix_offset<HD>(r, c);
        cp_async16(base + L::kK + at, valid ? kbase + src : kbase, valid);
        cp_async16(base + L::kV + at, valid ? vbase + src : vbase, valid);
      }
    }
    cp_async_commit();
  };
  // fp8: tile t's codes (code buffer `buf`) widened into the bf16 K/V tile, each 16-code chunk
  // into its two 8-dim core-matrix chunks; 8 consecutive threads take 8 consecutive rows of one
  // chunk, so both the 16-byte loads and the stores are conflict-free.
  constexpr bool e5m2 = kKv == kKvE5m2;
  auto widen = [&](int buf) {
    const unsigned char* codes = smem + L::kF8 + 2 * buf * L::kF8Tile;
#pragma unroll 1  // few registers to spare beside O: one chunk of one tile at a time
    for (int i = tid; i < 2 * kKeys * kCodeChunks; i += kThreads) {
      const int kv = i / (kKeys * kCodeChunks), j = i % (kKeys * kCodeChunks);
      const int r = chunk_row(j, kCodeChunks), c = chunk_col(j, kCodeChunks);
      const uint4 x = *reinterpret_cast<const uint4*>(codes + kv * L::kF8Tile +
                                                      core_matrix_offset<HD / 2>(r, c));
      unsigned char* bf = smem + (kv == 0 ? L::kK : L::kV);
      *reinterpret_cast<uint4*>(bf + core_matrix_offset<HD>(r, 2 * c)) =
          fp8x8_to_bf16x8(make_uint2(x.x, x.y), e5m2);
      *reinterpret_cast<uint4*>(bf + core_matrix_offset<HD>(r, 2 * c + 1)) =
          fp8x8_to_bf16x8(make_uint2(x.z, x.w), e5m2);
    }
  };

  prefill_stage_offsets<HD>(p, cta, soff, t_first, tid);
  __syncthreads();
  issue_kv(0);

  float o[HD / 8][4];
#pragma unroll
  for (int d = 0; d < HD / 8; ++d) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[d][i] = 0.0f;
  }
  RowState st;
  const int wg_pos0 = cta.pos0 + 64 * wg;  // position of the warpgroup's first row
  const int warp_row0 = 64 * wg + 16 * (warp % 4);
  const bool wg_rows = 64 * wg < cta.rows;  // the warpgroup has a valid row
  const std::uint32_t q_at = base + L::kQ + (64 * wg / 8) * kSbo;

  for (int t = t_first; t < t_end; ++t) {
    const int buf = (t - t_first) & 1;
    const bool more = t + 1 < t_end;
    if (more) prefill_stage_offsets<HD>(p, cta, soff + (buf ^ 1) * kKeys, t + 1, tid);
    cp_async_wait<0>();
    fence_proxy_async();  // this thread's copies (Q, tile t) visible to wgmma
    __syncthreads();      // tile t landed for everyone; buffer buf ^ 1 is free; offsets visible
    if (more) issue_kv(buf ^ 1);
    if constexpr (kFp8) {
      // The bf16 tile's last wgmma reads ended before the barrier above (each warpgroup waits
      // for its wgmma before it reaches it).
      widen(buf);
      fence_proxy_async();  // the widened tile visible to wgmma
      __syncthreads();
    }

    const int kt = t * kKeys;
    if (!wg_rows || kt > wg_pos0 + 63) continue;  // wholly above the warpgroup's diagonal
    const int mma_buf = kFp8 ? 0 : buf;           // the bf16 K/V buffer the wgmma read
    const std::uint32_t k_at = base + L::kK + mma_buf * L::kTile;
    const std::uint32_t v_at = base + L::kV + mma_buf * L::kTile;

    // S = Q K^T: 64 rows x 64 keys per warpgroup, HD / 16 k-steps of 16 dims (two chunks).
    float s[kKeys / 8][4];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      wgmma_ss<kKeys>(s, wgmma_desc(q_at + kk * 2 * kLbo, kLbo, kSbo),
                      wgmma_desc(k_at + kk * 2 * kLbo, kLbo, kSbo), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>(s);

    prefill_softmax_step<HD>(s, o, st, kt, cta.pos0 + warp_row0, p.scale_log2, lane);

    // O += P V: 4 k-steps of 16 keys; V MN-major (dims along N: SBO 128; keys along K: LBO).
    unsigned pa[kKeys / 16][4];
#pragma unroll
    for (int kb = 0; kb < kKeys / 16; ++kb) prefill_p_fragment(pa[kb], s, kb);
    wgmma_fence();
#pragma unroll
    for (int kb = 0; kb < kKeys / 16; ++kb) {
      wgmma_rs_bmn<HD>(o, pa[kb], wgmma_desc(v_at + kb * 2 * kSbo, kSbo, kLbo), true);
    }
    wgmma_commit();
    wgmma_wait<0>(o, pa);
  }

  prefill_store_rows<HD, kFp8>(p, cta, o, st, warp_row0, lane);
#else
  (void)p;
  __trap();  // never launched: launch_prefill_wgmma refuses builds without sm_90a
#endif
}

// The kernel instance with its dynamic shared memory above 48 KB opted into (once).
template <int HD, int kKv>
auto prepared_kernel() {
  const auto kernel = prefill_wgmma_kernel<HD, kKv>;
  static const bool configured = [kernel] {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    WgmmaSmem<HD, kKv != kKvBf16>::kBytes),
               "cudaFuncSetAttribute(prefill wgmma)");
    return true;
  }();
  (void)configured;
  return kernel;
}

template <int HD, int kKv>
void launch(const PrefillParams& pp, const PrefillAttentionArgs& a, cudaStream_t s) {
  const auto kernel = prepared_kernel<HD, kKv>();  // one macro argument
  constexpr int bytes = WgmmaSmem<HD, kKv != kKvBf16>::kBytes;
  const int splits = a.split.split() ? a.split.kv_splits : 1;
  SERVELAB_LAUNCH(kernel, dim3(a.num_tiles, a.num_q_heads, splits), kThreads, bytes, s)(pp);
  if (splits > 1) {
    check_launch("paged_prefill_attention (wgmma, split)");
    launch_prefill_merge(pp, a, kRows, s);
  }
}

void require_built() {
  if (!kWgmmaBuilt) {
    throw std::invalid_argument(
        "paged_prefill_attention: the wgmma kernel needs a build for sm_90a (cmake "
        "-DSERVELAB_CUDA_SM90A=ON); use fa2 or fa2_128");
  }
}

}  // namespace

void launch_prefill_wgmma(const PrefillAttentionArgs& a, cudaStream_t stream) {
  require_built();
  const PrefillParams pp = prefill_params(a);
  with_attention_instance(a.kv.head_dim, a.kv.format, [&](auto hd, auto kv) {
    launch<decltype(hd)::value, decltype(kv)::value>(pp, a, stream);
  });
}

std::int32_t wgmma_resident_ctas(std::int32_t head_dim) {
  require_built();
  int device = 0, sms = 0, per_sm = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
             "cudaDeviceGetAttribute");
  const cudaError_t e =
      head_dim == 64
          ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, prepared_kernel<64, kKvBf16>(),
                                                          kThreads, WgmmaSmem<64, false>::kBytes)
          : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, prepared_kernel<128, kKvBf16>(),
                                                          kThreads, WgmmaSmem<128, false>::kBytes);
  check_cuda(e, "cudaOccupancyMaxActiveBlocksPerMultiprocessor (prefill wgmma)");
  return std::max(1, sms * std::max(1, per_sm));
}

}  // namespace servelab::kernels::detail

namespace servelab::kernels {

bool prefill_kernel_built(PrefillKernel kernel) {
  return kernel != PrefillKernel::kWgmma || detail::kWgmmaBuilt;
}

PrefillKernel default_prefill_kernel(FloatFormat kv_format) {
  return prefill_kernel_built(PrefillKernel::kWgmma) && kv_format == FloatFormat::kBf16
             ? PrefillKernel::kWgmma
             : PrefillKernel::kFa2;
}

}  // namespace servelab::kernels
