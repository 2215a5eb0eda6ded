// The skinny linear layer (contract: kernels/gemm_skinny.h).
//
// Work split: CTA b owns output rows [32 b, 32 b + 32) (two 16-row MMA tiles); its 8 warps split
// the `in` columns into 32-column chunks (warp w takes chunks [C w / 8, C (w + 1) / 8), C = in /
// 32), each accumulating a 32-row x 8 NT-token tile in registers; the CTA sums the 8 tiles in
// shared memory, warp 0's first, and writes y.
//
// Fragments without shared memory. mma.sync m16n8k16 (kernels/mma_fragments.h) has lane (g, t)
// = (lane / 4, lane % 4) hold A row g and g + 8 at columns {2t, 2t + 1} (registers 0, 1) and
// {2t + 8, 2t + 9} (registers 2, 3), and B column (token) g at the same k. The order of the k
// terms in a dot product is free as long as A and B agree, so a 32-column chunk is two MMAs whose
// logical columns map to memory column 8t + 4j + e (MMA j, e = 0..3 over the lane's pairs): lane
// (g, t) then needs memory columns [8t, 8t + 8) of its two rows of each tile and of its token,
// which are one 16-byte load each, whose 32-bit word 2j feeds MMA j's register pair {0, 1} (A) /
// b0 (B) and word 2j + 1 the pair {2, 3} / b1. A warp's weight load is 8 rows x 64 contiguous
// bytes, every byte used.
//
// Pipelining: kStages chunks of weights in flight per lane (4 x 16 bytes each), the token values
// (L2-resident, tokens x in x 2 bytes) one chunk ahead. Rows past `out` read row 0 and are not
// written; tokens past `tokens` are zeros.
#include <cuda_bf16.h>

#include <stdexcept>

#include "kernels/common.cuh"
#include "kernels/gemm_kernel.h"
#include "kernels/gemm_skinny.h"
#include "kernels/ptx.cuh"

namespace servelab::kernels {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 32;   // output rows per CTA: two 16-row MMA tiles
constexpr int kChunk = 32;  // columns per pipeline step: two k16 MMAs
constexpr int kStages = 4;  // weight chunks in flight (even: the token buffer alternates)

// The 8 bf16 words of the lane's token at one chunk: a plain 16-byte load, or silu(gate) * up
// rounded to bf16 from the gate and up halves of a gate_up row.
template <bool kSwiglu>
__device__ __forceinline__ uint4 load_token(const __nv_bfloat16* row, std::int32_t in) {
  if constexpr (kSwiglu) {
    float g[8], u[8], r[8];
    detail::unpack8(detail::load16(row), g);
    detail::unpack8(detail::load16(row + in), u);
#pragma unroll
    for (int i = 0; i < 8; ++i) r[i] = detail::silu_times(g[i], u[i]);
    return detail::pack8(r);
  } else {
    return detail::load16(row);
  }
}

__device__ __forceinline__ std::uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// NT: 8-token MMA column tiles (tokens <= 8 NT).
template <int NT, bool kSwiglu>
__global__ void __launch_bounds__(kThreads) skinny_gemm_kernel(const SkinnyGemmArgs a) {
  __shared__ float red[kWarps][2][NT][4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const std::int64_t row0 = std::int64_t{blockIdx.x} * kRows;
  const std::int32_t chunks = a.in / kChunk;
  const std::int32_t c_begin = chunks * warp / kWarps, c_end = chunks * (warp + 1) / kWarps;

  // Weight rows of this lane: tile m, half h -> row0 + 16 m + 8 h + g (index 2 m + h).
  const __nv_bfloat16* wrow[4];
  bool wok[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const std::int64_t row = row0 + 16 * (r / 2) + 8 * (r % 2) + g;
    wok[r] = row < a.out;
    wrow[r] = detail::bf(a.w) + (wok[r] ? row : 0) * a.in + 8 * t;
  }
  const std::int64_t x_stride = kSwiglu ? 2 * std::int64_t{a.in} : a.in;
  const __nv_bfloat16* xrow[NT];
  bool xok[NT];
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int token = 8 * n + g;
    xok[n] = token < a.tokens;
    xrow[n] = detail::bf(a.x) + (xok[n] ? token : 0) * x_stride + 8 * t;
  }
  const uint4 zero = make_uint4(0, 0, 0, 0);

  float acc[2][NT][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[m][n][i] = 0.0f;

  uint4 wb[kStages][4];
  uint4 xb[2][NT];
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (c_begin + s < c_end) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        wb[s][r] = wok[r] ? detail::ld_stream16(wrow[r] + (c_begin + s) * kChunk) : zero;
      }
    }
  }
  // The weights no kernel writes are in flight before the wait; the tokens come from the
  // previous kernel (programmatic_launch.h).
  detail::wait_for_predecessor();
  detail::allow_dependents();
  if (c_begin < c_end) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      xb[0][n] = xok[n] ? load_token<kSwiglu>(xrow[n] + c_begin * kChunk, a.in) : zero;
    }
  }

  for (std::int32_t c = c_begin; c < c_end; c += kStages) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      const std::int32_t cs = c + s;
      if (cs < c_end) {
        // The next chunk's token values, then this chunk's MMAs, then its weight slot refilled.
        if (cs + 1 < c_end) {
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            xb[(s + 1) % 2][n] =
                xok[n] ? load_token<kSwiglu>(xrow[n] + (cs + 1) * kChunk, a.in) : zero;
          }
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            const std::uint32_t af[4] = {word(wb[s][2 * m], 2 * j), word(wb[s][2 * m + 1], 2 * j),
                                         word(wb[s][2 * m], 2 * j + 1),
                                         word(wb[s][2 * m + 1], 2 * j + 1)};
#pragma unroll
            for (int n = 0; n < NT; ++n) {
              detail::mma_bf16(acc[m][n], af, word(xb[s % 2][n], 2 * j),
                               word(xb[s % 2][n], 2 * j + 1));
            }
          }
        }
        if (cs + kStages < c_end) {
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            wb[s][r] = wok[r] ? detail::ld_stream16(wrow[r] + (cs + kStages) * kChunk) : zero;
          }
        }
      }
    }
  }

  // C element i of a tile: row g + 8 (i / 2), token 2t + i % 2.
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp][m][n][i][lane] = acc[m][n][i];
  __syncthreads();
  // Cell (token, row): rows fastest, so a warp writes 32 consecutive outputs of one token.
  for (int cell = threadIdx.x; cell < kRows * 8 * NT; cell += kThreads) {
    const int f = cell % kRows, token = cell / kRows;
    const std::int64_t row = row0 + f;
    if (token >= a.tokens || row >= a.out) continue;
    const int m = f / 16, h = (f % 16) / 8, n = token / 8;
    const int ln = 4 * (f % 8) + (token % 8) / 2, i = 2 * h + token % 2;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red[w][m][n][i][ln];
    const std::int64_t at = std::int64_t{token} * a.out + row;
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
}

template <int NT, bool kSwiglu>
void launch(const SkinnyGemmArgs& a, Stream stream) {
  const unsigned blocks = static_cast<unsigned>((std::int64_t{a.out} + kRows - 1) / kRows);
  void (*kernel)(SkinnyGemmArgs) = skinny_gemm_kernel<NT, kSwiglu>;
  SERVELAB_LAUNCH_PDL(kernel, blocks, kThreads, 0, detail::as_stream(stream))(a);
}

template <bool kSwiglu>
void launch_tiles(const SkinnyGemmArgs& a, Stream stream) {
  if (a.tokens <= 8) {
    launch<1, kSwiglu>(a, stream);
  } else if (a.tokens <= 16) {
    launch<2, kSwiglu>(a, stream);
  } else {
    launch<4, kSwiglu>(a, stream);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

bool skinny_gemm_fits(const SkinnyGemmArgs& a) {
  return a.tokens >= 1 && a.tokens <= kSkinnyMaxTokens && a.in > 0 && a.in % kChunk == 0 &&
         a.out > 0 && aligned16(a.x) && aligned16(a.w);
}

void skinny_linear(const SkinnyGemmArgs& a, Stream stream) {
  if (!skinny_gemm_fits(a)) {
    throw std::invalid_argument(
        "skinny_linear: needs 1..32 tokens, in a positive multiple of 32, out > 0 and 16-byte "
        "aligned x and w (got tokens " +
        std::to_string(a.tokens) + ", in " + std::to_string(a.in) + ", out " +
        std::to_string(a.out) + ")");
  }
  if (a.swiglu) {
    launch_tiles<true>(a, stream);
  } else {
    launch_tiles<false>(a, stream);
  }
  detail::check_launch("skinny_linear");
}

}  // namespace servelab::kernels
