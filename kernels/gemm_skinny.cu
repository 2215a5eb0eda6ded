// The skinny linear layer (contract: kernels/gemm_skinny.h; split plan: kernels/skinny_plan.h).
//
// Work split: CTA (b, s) owns output rows [128 b, 128 b + 128), warp w the 16-row MMA tile
// 128 b + 16 w .., and the 32-column chunks [C s / S, C (s + 1) / S) of `in` (C = in / 32, S the
// splits); every warp of the CTA walks the same chunks, so a chunk's token values are copied once
// into shared memory and read by all 8 warps (from L2 a row block reads T x 64 bytes of tokens
// per 128 x 64 bytes of weights).
//
// Fragments. mma.sync m16n8k16 (kernels/mma_fragments.h) has lane (g, t) = (lane / 4, lane % 4)
// hold A row g and g + 8 at columns {2t, 2t + 1} (registers 0, 1) and {2t + 8, 2t + 9}
// (registers 2, 3), and B column (token) g at the same k. The order of the k terms in a dot
// product is free as long as A and B agree, so a 32-column chunk is two MMAs whose logical
// columns map to memory column 8t + 4j + e (MMA j, e = 0..3 over the lane's pairs): lane (g, t)
// needs memory columns [8t, 8t + 8) of rows g and g + 8 of its tile and of its tokens, 16 bytes
// each, whose 32-bit word 2j feeds MMA j's A register pair {0, 1} / b0 and word 2j + 1 the pair
// {2, 3} / b1. A warp's weight copy is 8 rows x 64 contiguous bytes per half tile, every byte
// used.
//
// Pipeline: kStages shared-memory slots, kStages - 1 chunks in flight. A lane copies its own two
// 16-byte weight pieces of a chunk into its own slots (cp.async, so only its own wait_group orders
// them), and threads 0 .. kXUnits - 1 copy one 16-byte piece each of the chunk's token values
// (gate and up halves with swiglu); a barrier per chunk makes those visible to every warp and
// frees the slot the next copy overwrites (the one read in the previous iteration). With swiglu,
// threads 0 .. NT x 32 - 1 then turn each gate piece into silu(gate) * up in place, and a second
// barrier publishes it. The weight copies of the first stages are issued before
// wait_for_predecessor (no kernel writes weights); the token copies after it.
//
// Epilogue: the warps' tiles go to a shared [token][row] array (padded rows: conflict-free), then
// one split writes y (coalesced along rows, four rows a thread), several write their tile to
// partials[s][b] (16-byte stores) and bump counters[b]; the CTA that bumps it to S sums the S
// tiles in split order (16-byte loads through L2, two splits' loads in flight), writes y
// and resets the counter. Rows past `out` are copied as zeros and not written; tokens past
// `tokens` are zeros.
#include <cuda_bf16.h>

#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/gemm_kernel.h"
#include "kernels/gemm_skinny.h"
#include "kernels/ptx.cuh"

namespace servelab::kernels {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = kSkinnyCtaRows;  // 8 warps x 16 rows
constexpr int kChunk = kSkinnyChunk;   // columns per pipeline stage: two k16 MMAs
constexpr int kStages = 6;             // kStages - 1 in flight: skinny_plan.h's in-flight bytes
constexpr int kRedStride = kRows + 4;  // floats per token of the epilogue's tile (bank spread)
static_assert(kRows == 16 * kWarps, "a 16-row MMA tile per warp");
static_assert(kSkinnyCtaInflightBytes == (kStages - 1) * kRows * 64.0,
              "skinny_plan.h models this pipeline's depth");

// Shared memory of one CTA: weight slots [stage][half][warp][lane] x 16 B, then token slots
// [stage][unit] x 16 B (unit n x 32 + lane: token 8n + lane / 4, columns 8 (lane % 4) ..; with
// swiglu the up halves follow at NT x 32 + unit); the epilogue's [8 NT][kRedStride] floats reuse
// the front.
template <int NT, bool kSwiglu>
struct SkinnySmem {
  static constexpr int kXUnits = NT * 32 * (kSwiglu ? 2 : 1);
  static constexpr int kWBytes = kStages * 2 * kWarps * 32 * 16;
  static constexpr int kXBytes = kStages * kXUnits * 16;
  static constexpr int kRedBytes = 8 * NT * kRedStride * 4;
  static constexpr int kBytes = kWBytes + kXBytes > kRedBytes ? kWBytes + kXBytes : kRedBytes;
};

__device__ __forceinline__ std::uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ void store_y(const SkinnyGemmArgs& a, std::int64_t at, float v) {
  if (a.y_f32) {
    float* y = static_cast<float*>(a.y);
    if (a.beta != 0.0f) v += a.beta * y[at];
    y[at] = v;
  } else {
    __nv_bfloat16* y = detail::bf(static_cast<Bf16*>(a.y));
    if (a.beta != 0.0f) v += a.beta * __bfloat162float(y[at]);
    y[at] = __float2bfloat16(v);
  }
}

// NT: 8-token MMA column tiles (tokens <= 8 NT).
template <int NT, bool kSwiglu>
__global__ void __launch_bounds__(kThreads, 2)
    skinny_gemm_kernel(const SkinnyGemmArgs a, const int splits, const int row_blocks) {
  using L = SkinnySmem<NT, kSwiglu>;
  SERVELAB_DYNAMIC_SMEM(smem);
  __shared__ int is_last;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int block = blockIdx.x, split = blockIdx.y;
  const std::int64_t row0 = std::int64_t{block} * kRows;
  const std::int32_t chunks = a.in / kChunk;
  const std::int32_t c_begin = static_cast<std::int32_t>(std::int64_t{chunks} * split / splits);
  const std::int32_t n_chunks =
      static_cast<std::int32_t>(std::int64_t{chunks} * (split + 1) / splits) - c_begin;
  const std::uint32_t w_base = detail::smem_u32(smem);
  const std::uint32_t x_base = w_base + L::kWBytes;

  // This lane's weight rows (half h: row 16 warp + 8 h + g of the block).
  const __nv_bfloat16* wrow[2];
  bool wok[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const std::int64_t row = row0 + 16 * warp + 8 * h + g;
    wok[h] = row < a.out;
    wrow[h] = detail::bf(a.w) + (wok[h] ? row : 0) * a.in + 8 * t + std::int64_t{c_begin} * kChunk;
  }
  // The token piece this thread copies, if any (unit tid; the up half from NT x 32 on).
  const bool x_copier = tid < L::kXUnits;
  const int unit = tid % (NT * 32);
  const int x_token = 8 * (unit / 32) + (unit % 32) / 4;
  const bool xok = x_copier && x_token < a.tokens;
  const std::int64_t x_stride = kSwiglu ? 2 * std::int64_t{a.in} : a.in;
  const __nv_bfloat16* xsrc = detail::bf(a.x) + (xok ? x_token : 0) * x_stride + 8 * (unit % 4) +
                              (kSwiglu && tid >= NT * 32 ? a.in : 0) +
                              std::int64_t{c_begin} * kChunk;

  const auto copy_weights = [&](int i) {
    const int slot = i % kStages;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      detail::cp_async16(w_base + (((slot * 2 + h) * kWarps + warp) * 32 + lane) * 16,
                         wrow[h] + std::int64_t{i} * kChunk, wok[h]);
    }
  };
  const auto copy_tokens = [&](int i) {
    if (x_copier) {
      detail::cp_async16(x_base + ((i % kStages) * L::kXUnits + tid) * 16,
                         xsrc + std::int64_t{i} * kChunk, xok);
    }
  };

  // Group 0 holds the first stages' weights and stage 0's tokens, group i stage i's tokens.
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_chunks) copy_weights(i);
  }
  detail::wait_for_predecessor();
  detail::allow_dependents();
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_chunks) copy_tokens(i);
    detail::cp_async_commit();
  }

  float acc[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;

  for (int i = 0; i < n_chunks; ++i) {
    detail::cp_async_wait<kStages - 2>();  // chunk i's group has landed (one group per chunk)
    __syncthreads();
    const int slot = i % kStages;
    unsigned char* xs = smem + L::kWBytes + slot * L::kXUnits * 16;
    if constexpr (kSwiglu) {
      if (tid < NT * 32) {
        float gf[8], uf[8], r[8];
        detail::unpack8(reinterpret_cast<const uint4*>(xs)[tid], gf);
        detail::unpack8(reinterpret_cast<const uint4*>(xs)[NT * 32 + tid], uf);
#pragma unroll
        for (int e = 0; e < 8; ++e) r[e] = detail::silu_times(gf[e], uf[e]);
        reinterpret_cast<uint4*>(xs)[tid] = detail::pack8(r);
      }
      __syncthreads();
    }
    uint4 wa[2], xb[NT];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      wa[h] = reinterpret_cast<const uint4*>(smem)[((slot * 2 + h) * kWarps + warp) * 32 + lane];
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) xb[n] = reinterpret_cast<const uint4*>(xs)[n * 32 + lane];
    // Refill the slot read in the previous iteration (every thread is past it: the barrier).
    if (i + kStages - 1 < n_chunks) {
      copy_weights(i + kStages - 1);
      copy_tokens(i + kStages - 1);
    }
    detail::cp_async_commit();
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const std::uint32_t af[4] = {word(wa[0], 2 * j), word(wa[1], 2 * j), word(wa[0], 2 * j + 1),
                                   word(wa[1], 2 * j + 1)};
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        detail::mma_bf16(acc[n], af, word(xb[n], 2 * j), word(xb[n], 2 * j + 1));
      }
    }
  }
  detail::cp_async_wait<0>();
  __syncthreads();

  // C element e of tile n: row 16 warp + g + 8 (e / 2), token 8 n + 2 t + e % 2.
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      red[(8 * n + 2 * t + e % 2) * kRedStride + 16 * warp + g + 8 * (e / 2)] = acc[n][e];
    }
  __syncthreads();
  // Quads of cells (token, 4 consecutive rows), rows fastest: thread tid takes quads tid,
  // tid + 256, ..., so a warp touches 128 consecutive outputs of one token, 16 bytes a lane.
  constexpr int kQuads = 8 * NT * kRows / 4 / kThreads;  // the most a thread takes
  const int quads = a.tokens * kRows / 4;
  const auto quad_red = [&](int q) {
    const int cell = 4 * q;
    return *reinterpret_cast<const float4*>(red + (cell / kRows) * kRedStride + cell % kRows);
  };
  const auto store_quad = [&](int q, const float4& v) {
    const int cell = 4 * q, f = cell % kRows, token = cell / kRows;
    const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (row0 + f + i < a.out) store_y(a, std::int64_t{token} * a.out + row0 + f + i, e[i]);
    }
  };
  if (splits == 1) {
#pragma unroll
    for (int k = 0; k < kQuads; ++k) {
      const int q = tid + k * kThreads;
      if (q < quads) store_quad(q, quad_red(q));
    }
    return;
  }
  const std::int64_t tile = std::int64_t{a.tokens} * kRows;
  float4* mine =
      reinterpret_cast<float4*>(a.partials + (std::int64_t{split} * row_blocks + block) * tile);
#pragma unroll
  for (int k = 0; k < kQuads; ++k) {
    const int q = tid + k * kThreads;
    if (q < quads) mine[q] = quad_red(q);
  }
  __threadfence();  // the tile is visible device-wide before the counter says so
  __syncthreads();
  if (tid == 0) is_last = atomicAdd(&a.counters[block], 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!is_last) return;
  __threadfence();  // every other split's tile is visible to the loads below
  // Split order, whichever CTA this is: the same bits from any finishing order. The loads of a
  // split are independent of the sums before it, so several splits' loads are in flight at once.
  const float4* tiles = reinterpret_cast<const float4*>(a.partials + std::int64_t{block} * tile);
  const std::int64_t split_stride = std::int64_t{row_blocks} * tile / 4;
  float4 sum[kQuads];
#pragma unroll
  for (int k = 0; k < kQuads; ++k) sum[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 2
  for (int sp = 0; sp < splits; ++sp) {
#pragma unroll
    for (int k = 0; k < kQuads; ++k) {
      const int q = tid + k * kThreads;
      if (q < quads) {
        const float4 p = __ldcg(tiles + sp * split_stride + q);
        sum[k].x += p.x;
        sum[k].y += p.y;
        sum[k].z += p.z;
        sum[k].w += p.w;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kQuads; ++k) {
    const int q = tid + k * kThreads;
    if (q < quads) store_quad(q, sum[k]);
  }
  if (tid == 0) a.counters[block] = 0u;  // for the next launch (a kernel boundary orders it)
}

// The kernel instance with its dynamic shared memory above 48 KB opted into, and how many of its
// CTAs an SM holds (both once per instance).
template <int NT, bool kSwiglu>
struct Prepared {
  void (*kernel)(SkinnyGemmArgs, int, int);
  std::int32_t ctas_per_sm;
};
template <int NT, bool kSwiglu>
const Prepared<NT, kSwiglu>& prepared() {
  static const Prepared<NT, kSwiglu> p = [] {
    constexpr int bytes = SkinnySmem<NT, kSwiglu>::kBytes;
    const auto kernel = skinny_gemm_kernel<NT, kSwiglu>;
    detail::check_cuda(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        "cudaFuncSetAttribute (skinny GEMM)");
    int per_sm = 0;
    detail::check_cuda(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, bytes),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor (skinny GEMM)");
    return Prepared<NT, kSwiglu>{kernel, per_sm > 0 ? per_sm : 1};
  }();
  return p;
}

SkinnyMachine machine_for(const SkinnyGemmArgs& a, std::int32_t ctas_per_sm);

template <int NT, bool kSwiglu>
SkinnyPlan plan(const SkinnyGemmArgs& a) {
  const SkinnyMachine m = machine_for(a, prepared<NT, kSwiglu>().ctas_per_sm);
  const bool workspace = a.partials != nullptr && a.counters != nullptr;
  return plan_skinny(a.tokens, a.in, a.out, m, workspace ? a.partial_bytes : 0,
                     workspace ? a.counter_count : 0, a.forced_splits);
}

template <int NT, bool kSwiglu>
SkinnyPlan launch(const SkinnyGemmArgs& a, Stream stream) {
  const SkinnyPlan p = plan<NT, kSwiglu>(a);
  const dim3 grid(static_cast<unsigned>(p.row_blocks), static_cast<unsigned>(p.splits));
  constexpr int bytes = SkinnySmem<NT, kSwiglu>::kBytes;
  void (*kernel)(SkinnyGemmArgs, int, int) = prepared<NT, kSwiglu>().kernel;
  SERVELAB_LAUNCH_PDL(kernel, grid, kThreads, bytes, detail::as_stream(stream))
  (a, p.splits, p.row_blocks);
  return p;
}

// Calls F<NT, swiglu>(a, args...) for a's token tiles and swiglu.
template <template <int, bool> class F, typename... Args>
SkinnyPlan dispatch(const SkinnyGemmArgs& a, Args... args) {
  if (a.swiglu) {
    if (a.tokens <= 8) return F<1, true>::run(a, args...);
    if (a.tokens <= 16) return F<2, true>::run(a, args...);
    return F<4, true>::run(a, args...);
  }
  if (a.tokens <= 8) return F<1, false>::run(a, args...);
  if (a.tokens <= 16) return F<2, false>::run(a, args...);
  return F<4, false>::run(a, args...);
}
template <int NT, bool kSwiglu>
struct PlanOf {
  static SkinnyPlan run(const SkinnyGemmArgs& a) { return plan<NT, kSwiglu>(a); }
};
template <int NT, bool kSwiglu>
struct LaunchOf {
  static SkinnyPlan run(const SkinnyGemmArgs& a, Stream stream) {
    return launch<NT, kSwiglu>(a, stream);
  }
};

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

SkinnyMachine machine_for(const SkinnyGemmArgs& a, std::int32_t ctas_per_sm) {
  SkinnyMachine m;
  m.ctas_per_sm = ctas_per_sm;
  if (a.sm_count > 0) {
    m.sms = a.sm_count;
  } else {
    int device = 0, sms = 0;
    detail::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    detail::check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                       "cudaDeviceGetAttribute");
    m.sms = sms;
  }
  return m;
}

}  // namespace

bool skinny_shape_fits(std::int32_t tokens, std::int32_t in, std::int32_t out) {
  return tokens >= 1 && tokens <= kSkinnyMaxTokens && in > 0 && in % kChunk == 0 && out > 0;
}

bool skinny_gemm_fits(const SkinnyGemmArgs& a) {
  return skinny_shape_fits(a.tokens, a.in, a.out) && aligned16(a.x) && aligned16(a.w);
}

SkinnyPlan skinny_plan_for(const SkinnyGemmArgs& a) { return dispatch<PlanOf>(a); }

void skinny_linear(const SkinnyGemmArgs& a, Stream stream) {
  if (!skinny_gemm_fits(a)) {
    throw std::invalid_argument(
        "skinny_linear: needs 1..32 tokens, in a positive multiple of 32, out > 0 and 16-byte "
        "aligned x and w (got tokens " +
        std::to_string(a.tokens) + ", in " + std::to_string(a.in) + ", out " +
        std::to_string(a.out) + ")");
  }
  dispatch<LaunchOf>(a, stream);
  detail::check_launch("skinny_linear");
}

}  // namespace servelab::kernels
