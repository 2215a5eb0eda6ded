// The per-token kernels of the forward pass, one translation unit to keep nvcc time down:
// embedding lookup (embedding.h), RMSNorm with fused residual add (norm.h), QKV bias + RoPE
// (rope.h) and its fused form with the KV write, SiLU-and-multiply (activation.h).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "kernels/activation.h"
#include "kernels/common.cuh"
#include "kernels/embedding.h"
#include "kernels/fp8.cuh"
#include "kernels/kv_layout.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

namespace servelab::kernels {

namespace {

__global__ void embedding_kernel(const std::int32_t* tokens, const __nv_bfloat16* table,
                                 std::int32_t vocab, std::int32_t hidden, float* residual) {
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const int t = blockIdx.x;
  const std::int32_t id = tokens[t];
  float* out = residual + std::int64_t{t} * hidden;
  const bool ok = id >= 0 && id < vocab;
  const __nv_bfloat16* row = table + std::int64_t{ok ? id : 0} * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    out[i] = ok ? __bfloat162float(row[i]) : 0.0f;
  }
}

// rms_norm: one CTA per row (the row's sum of squares is a block reduction), in one of two
// kernels.
// rms_norm_regs_kernel (hidden a multiple of 4 and at most kThreads * kGroups * 4; instances in
// rms_norm below): thread t owns the 4-value groups g = t + k * kThreads (k < kGroups) of its
// row, so a warp's accesses are contiguous. Every load of a thread (residual, delta, weight) is
// issued before any value is used; the values stay in registers through the add, the residual
// store, the reduction and the output. With kVector each group is one access (float4 for the
// fp32 residual and weight, 8 bytes for the bf16 delta and out); without it (a pointer not
// aligned for those) the same groups are accessed element by element with the same arithmetic
// in the same order, so the bits do not depend on the pointers' alignment. The sum of squares
// runs over a thread's groups in order, then block_sum's fixed tree: deterministic.
// rms_norm_kernel (any other hidden): the original loop, thread t owning columns t + k * 256,
// reading the residual twice.
template <int kThreads, int kGroups, bool kVector>
__global__ void __launch_bounds__(kThreads) rms_norm_regs_kernel(const RmsNormArgs a) {
  __shared__ float scratch[32];
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const int i = blockIdx.x;
  const std::int64_t r = a.rows != nullptr ? a.rows[i] : i;
  const int groups = a.hidden / 4;
  float* __restrict__ x = a.residual + r * a.hidden;
  const __nv_bfloat16* __restrict__ delta =
      a.delta != nullptr ? detail::bf(a.delta) + r * a.hidden : nullptr;
  const float* __restrict__ weight = a.weight;
  __nv_bfloat16* __restrict__ out = detail::bf(a.out) + std::int64_t{i} * a.hidden;
  float v[kGroups][4], w[kGroups][4];
  uint2 d[kGroups];  // 4 bf16 of the delta: element 2j in the low half of word j
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const int g = threadIdx.x + k * kThreads;
    if (g >= groups) continue;
    if constexpr (kVector) {
      const float4 xv = reinterpret_cast<const float4*>(x)[g];
      const float4 wv = reinterpret_cast<const float4*>(weight)[g];
      v[k][0] = xv.x, v[k][1] = xv.y, v[k][2] = xv.z, v[k][3] = xv.w;
      w[k][0] = wv.x, w[k][1] = wv.y, w[k][2] = wv.z, w[k][3] = wv.w;
      if (delta != nullptr) d[k] = reinterpret_cast<const uint2*>(delta)[g];
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        v[k][e] = x[4 * g + e];
        w[k][e] = weight[4 * g + e];
      }
      if (delta != nullptr) {
        const auto* h = reinterpret_cast<const unsigned short*>(delta) + 4 * g;
        d[k] = make_uint2(h[0] | (unsigned{h[1]} << 16), h[2] | (unsigned{h[3]} << 16));
      }
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const int g = threadIdx.x + k * kThreads;
    if (g >= groups) continue;
    if (delta != nullptr) {
      v[k][0] += __uint_as_float(d[k].x << 16);  // bf16 -> fp32: the top half of the word
      v[k][1] += __uint_as_float(d[k].x & 0xffff0000u);
      v[k][2] += __uint_as_float(d[k].y << 16);
      v[k][3] += __uint_as_float(d[k].y & 0xffff0000u);
      if constexpr (kVector) {
        reinterpret_cast<float4*>(x)[g] = make_float4(v[k][0], v[k][1], v[k][2], v[k][3]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) x[4 * g + e] = v[k][e];
      }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) ss = fmaf(v[k][e], v[k][e], ss);
  }
  ss = detail::block_sum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(a.hidden) + a.eps);
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const int g = threadIdx.x + k * kThreads;
    if (g >= groups) continue;
    const __nv_bfloat162 lo =
        __floats2bfloat162_rn(v[k][0] * inv * w[k][0], v[k][1] * inv * w[k][1]);
    const __nv_bfloat162 hi =
        __floats2bfloat162_rn(v[k][2] * inv * w[k][2], v[k][3] * inv * w[k][3]);
    if constexpr (kVector) {
      uint2 raw;
      reinterpret_cast<__nv_bfloat162*>(&raw)[0] = lo;
      reinterpret_cast<__nv_bfloat162*>(&raw)[1] = hi;
      reinterpret_cast<uint2*>(out)[g] = raw;
    } else {
      out[4 * g] = lo.x;
      out[4 * g + 1] = lo.y;
      out[4 * g + 2] = hi.x;
      out[4 * g + 3] = hi.y;
    }
  }
}

constexpr int kNormThreads = 256;

__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const RmsNormArgs a) {
  __shared__ float scratch[32];
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const int i = blockIdx.x;
  const std::int64_t r = a.rows != nullptr ? a.rows[i] : i;
  float* x = a.residual + r * a.hidden;
  const __nv_bfloat16* delta = a.delta != nullptr ? detail::bf(a.delta) + r * a.hidden : nullptr;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < a.hidden; c += kNormThreads) {
    float v = x[c];
    if (delta != nullptr) {
      v += __bfloat162float(delta[c]);
      x[c] = v;
    }
    ss = fmaf(v, v, ss);
  }
  ss = detail::block_sum(ss, scratch);
  const float inv = rsqrtf(ss / static_cast<float>(a.hidden) + a.eps);
  __nv_bfloat16* out = detail::bf(a.out) + std::int64_t{i} * a.hidden;
  for (int c = threadIdx.x; c < a.hidden; c += kNormThreads) {
    out[c] = __float2bfloat16(x[c] * inv * a.weight[c]);
  }
}

// Bias add and rotate-half RoPE of one (x1, x2) = (x[j], x[j + d/2]) pair, with every fp32
// operation explicitly rounded (no contraction left to the compiler), so that qkv_rope_kernel
// and qkv_rope_kv_write_kernel produce the same bits.
__device__ __forceinline__ void rope_pair(float x1, float x2, const float* bias, int c1, int c2,
                                          float c, float s, float& y1, float& y2) {
  if (bias != nullptr) {
    x1 = __fadd_rn(x1, bias[c1]);
    x2 = __fadd_rn(x2, bias[c2]);
  }
  y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}
__device__ __forceinline__ float v_value(float x, const float* bias, int c) {
  return bias != nullptr ? __fadd_rn(x, bias[c]) : x;
}

// qkv_rope_kernel and qkv_rope_kv_write_kernel: a token's work is one index space of items, its
// RoPE pairs (item h * d/2 + j: the pair (j, j + d/2) of head h, Q heads then K heads), then its
// V values (item pairs + c: column c of the token's V row), one item per thread. Grid: (tokens,
// ceil(items / kRopeThreads)), grid.y at most 65,535 with the threads striding over further
// chunks (never at real shapes: Llama-3-8B has 3,584 items, 28 chunks).
constexpr int kRopeThreads = 128;

std::int32_t rope_items(std::int32_t q_heads, std::int32_t kv_heads, std::int32_t head_dim) {
  return (q_heads + kv_heads) * (head_dim / 2) + kv_heads * head_dim;
}
dim3 rope_grid(std::int32_t tokens, std::int32_t items) {
  const std::int32_t chunks = (items + kRopeThreads - 1) / kRopeThreads;
  return dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(std::min(chunks, 65535)));
}

__global__ void __launch_bounds__(kRopeThreads) qkv_rope_kernel(const RopeArgs a) {
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const int t = blockIdx.x;
  const int hd = a.head_dim, half = hd / 2;
  const int pairs = (a.num_q_heads + a.num_kv_heads) * half, kv_width = a.num_kv_heads * hd;
  const int items = pairs + kv_width;
  int i = blockIdx.y * blockDim.x + threadIdx.x;
  if (i >= items) return;
  const int width = (a.num_q_heads + 2 * a.num_kv_heads) * hd;
  const float* __restrict__ in = a.qkv + std::int64_t{t} * width;
  for (; i < items; i += gridDim.y * blockDim.x) {
    if (i >= pairs) {  // V
      const int c = i - pairs, col = pairs * 2 + c;
      detail::bf(a.v)[std::int64_t{t} * kv_width + c] =
          __float2bfloat16(v_value(in[col], a.bias, col));
      continue;
    }
    const int h = i / half, j = i % half;
    const int c1 = h * hd + j, c2 = c1 + half;
    const float* cs = a.cos_sin + std::int64_t{a.positions[t]} * hd;
    float y1, y2;
    rope_pair(in[c1], in[c2], a.bias, c1, c2, cs[j], cs[half + j], y1, y2);
    __nv_bfloat16* out =
        h < a.num_q_heads ? detail::bf(a.q) + std::int64_t{t} * a.num_q_heads * hd + h * hd
                          : detail::bf(a.k) + std::int64_t{t} * kv_width + (h - a.num_q_heads) * hd;
    out[j] = __float2bfloat16(y1);
    out[j + half] = __float2bfloat16(y2);
  }
}

// qkv_rope_kernel with K and V stored into the token's cache slot instead of scratch rows. A
// padding or skipped token (slot < 0) still rotates its Q (the decode kernel reads its row): its
// items are the Q pairs only.
__global__ void __launch_bounds__(kRopeThreads)
    qkv_rope_kv_write_kernel(const QkvRopeKvWriteArgs a) {
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const int t = blockIdx.x;
  const int hd = a.head_dim, half = hd / 2;
  const int pairs = (a.num_q_heads + a.num_kv_heads) * half, kv_width = a.num_kv_heads * hd;
  const std::int64_t slot = a.slot_mapping[t];
  const int items = slot < 0 ? a.num_q_heads * half : pairs + kv_width;
  int i = blockIdx.y * blockDim.x + threadIdx.x;
  if (i >= items) return;
  const int width = (a.num_q_heads + 2 * a.num_kv_heads) * hd;
  const float* __restrict__ in = a.qkv + std::int64_t{t} * width;
  // The slot's row in this layer's K and V planes (kv_layout.h), when the token has one.
  const std::int64_t dst =
      slot < 0 ? -1 : (slot / a.block_size) * a.block_stride + (slot % a.block_size) * kv_width;
  const bool fp8 = detail::is_fp8(a.format), e5m2 = a.format == FloatFormat::kFp8E5m2;
  for (; i < items; i += gridDim.y * blockDim.x) {
    if (i >= pairs) {  // V (only when slot >= 0)
      const int c = i - pairs, col = pairs * 2 + c;
      const float x = v_value(in[col], a.bias, col);
      if (fp8) {
        static_cast<unsigned char*>(a.v_cache)[dst + c] = detail::fp8_encode(x, a.v_scale, e5m2);
      } else {
        detail::bf(static_cast<Bf16*>(a.v_cache))[dst + c] = __float2bfloat16(x);
      }
      continue;
    }
    const int h = i / half, j = i % half;
    const int c1 = h * hd + j, c2 = c1 + half;
    const float* cs = a.cos_sin + std::int64_t{a.positions[t]} * hd;
    float y1, y2;
    rope_pair(in[c1], in[c2], a.bias, c1, c2, cs[j], cs[half + j], y1, y2);
    if (h >= a.num_q_heads && fp8) {  // K into an fp8 cache: rounded once, from fp32
      unsigned char* out = static_cast<unsigned char*>(a.k_cache) + dst + (h - a.num_q_heads) * hd;
      out[j] = detail::fp8_encode(y1, a.k_scale, e5m2);
      out[j + half] = detail::fp8_encode(y2, a.k_scale, e5m2);
      continue;
    }
    __nv_bfloat16* out =
        h < a.num_q_heads
            ? detail::bf(a.q) + std::int64_t{t} * a.num_q_heads * hd + h * hd
            : detail::bf(static_cast<Bf16*>(a.k_cache)) + dst + (h - a.num_q_heads) * hd;
    out[j] = __float2bfloat16(y1);
    out[j + half] = __float2bfloat16(y2);
  }
}

// Token rows on grid.x, grid-strided (any token count; grid.y would stop at 65,535), a row's
// 8-value groups on grid.y x the block's threads, one group per thread (threads striding over
// further groups only past 65,535 chunks).
constexpr int kSiluThreads = 128;

__global__ void __launch_bounds__(kSiluThreads)
    silu_mul_kernel(const __nv_bfloat16* __restrict__ gate_up, __nv_bfloat16* __restrict__ out,
                    std::int32_t num_tokens, std::int32_t width) {
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const int vecs = width / 8;
  const int first = blockIdx.y * blockDim.x + threadIdx.x;
  if (first >= vecs) return;
  for (std::int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const __nv_bfloat16* g = gate_up + t * 2 * width;
    const __nv_bfloat16* u = g + width;
    uint4* o = reinterpret_cast<uint4*>(out + t * width);
    for (int i = first; i < vecs; i += gridDim.y * blockDim.x) {
      float gf[8], uf[8], r[8];
      detail::unpack8(detail::load16(g + 8 * i), gf);
      detail::unpack8(detail::load16(u + 8 * i), uf);
#pragma unroll
      for (int k = 0; k < 8; ++k) r[k] = detail::silu_times(gf[k], uf[k]);
      o[i] = detail::pack8(r);
    }
  }
}

}  // namespace

void embedding_lookup(const std::int32_t* tokens, std::int32_t num_tokens, const Bf16* table,
                      std::int32_t vocab, std::int32_t hidden, float* residual, Stream stream) {
  if (num_tokens == 0) return;
  SERVELAB_LAUNCH_PDL(embedding_kernel, num_tokens, 256, 0, detail::as_stream(stream))
  (tokens, detail::bf(table), vocab, hidden, residual);
  detail::check_launch("embedding_lookup");
}

namespace {

bool aligned(const void* p, std::uintptr_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

template <int kThreads, int kGroups>
void launch_rms_norm_regs(const RmsNormArgs& a, cudaStream_t s) {
  // Vector accesses need the rows' starts aligned: hidden % 4 == 0 here, so the bases decide.
  const bool vector = aligned(a.residual, 16) && aligned(a.weight, 16) && aligned(a.out, 8) &&
                      (a.delta == nullptr || aligned(a.delta, 8));
  const auto kernel = vector ? rms_norm_regs_kernel<kThreads, kGroups, true>
                             : rms_norm_regs_kernel<kThreads, kGroups, false>;
  SERVELAB_LAUNCH_PDL(kernel, a.num_rows, kThreads, 0, s)(a);
}

}  // namespace

void rms_norm(const RmsNormArgs& a, Stream stream) {
  if (a.num_rows == 0) return;
  const cudaStream_t s = detail::as_stream(stream);
  // Register kernels by hidden size (4-value groups per row): up to 1,024 columns at 256 threads
  // x 1 group, 2,048 at 256 x 2, 4,096 (Llama-3-8B) at 512 x 2, 8,192 (70B) at 512 x 4; the
  // scalar loop for anything else (a hidden that is not a multiple of 4, or wider).
  const std::int32_t groups = a.hidden / 4;
  if (a.hidden <= 0 || a.hidden % 4 != 0 || groups > 2048) {
    SERVELAB_LAUNCH_PDL(rms_norm_kernel, a.num_rows, kNormThreads, 0, s)(a);
  } else if (groups <= 256) {
    launch_rms_norm_regs<256, 1>(a, s);
  } else if (groups <= 512) {
    launch_rms_norm_regs<256, 2>(a, s);
  } else if (groups <= 1024) {
    launch_rms_norm_regs<512, 2>(a, s);
  } else {
    launch_rms_norm_regs<512, 4>(a, s);
  }
  detail::check_launch("rms_norm");
}

void qkv_rope(const RopeArgs& a, Stream stream) {
  if (a.num_tokens == 0) return;
  if (a.head_dim % 2 != 0) throw std::invalid_argument("qkv_rope: odd head_dim");
  const dim3 grid = rope_grid(a.num_tokens, rope_items(a.num_q_heads, a.num_kv_heads, a.head_dim));
  SERVELAB_LAUNCH_PDL(qkv_rope_kernel, grid, kRopeThreads, 0, detail::as_stream(stream))(a);
  detail::check_launch("qkv_rope");
}

void qkv_rope_kv_write(const QkvRopeKvWriteArgs& a, Stream stream) {
  if (a.num_tokens == 0) return;
  if (a.head_dim % 2 != 0) throw std::invalid_argument("qkv_rope_kv_write: odd head_dim");
  if (a.block_size < 1) throw std::invalid_argument("qkv_rope_kv_write: block_size < 1");
  check_kv_format(a.format, a.k_scale, a.v_scale, "qkv_rope_kv_write");
  const dim3 grid = rope_grid(a.num_tokens, rope_items(a.num_q_heads, a.num_kv_heads, a.head_dim));
  SERVELAB_LAUNCH_PDL(qkv_rope_kv_write_kernel, grid, kRopeThreads, 0, detail::as_stream(stream))
  (a);
  detail::check_launch("qkv_rope_kv_write");
}

void silu_mul(const Bf16* gate_up, Bf16* out, std::int32_t num_tokens, std::int32_t width,
              Stream stream) {
  if (num_tokens < 0 || width < 0) {
    throw std::invalid_argument("silu_mul: negative token count or width");
  }
  if (num_tokens == 0 || width == 0) return;
  if (width % 8 != 0) throw std::invalid_argument("silu_mul: width must be a multiple of 8");
  // Threads: the row's 8-value groups rounded up to a warp, at most kSiluThreads; grid.y: the
  // row's chunks of that many groups (at most 65,535); grid.x: one row per CTA up to
  // kMaxRowBlocks, then each CTA strides over further rows.
  constexpr int kMaxRowBlocks = 1 << 16;
  const int vecs = width / 8;
  const int threads = std::min(kSiluThreads, (vecs + 31) / 32 * 32);
  const int chunks = std::min((vecs + threads - 1) / threads, 65535);
  const dim3 grid(static_cast<unsigned>(std::min(num_tokens, kMaxRowBlocks)),
                  static_cast<unsigned>(chunks));
  SERVELAB_LAUNCH_PDL(silu_mul_kernel, grid, threads, 0, detail::as_stream(stream))
  (detail::bf(gate_up), detail::bf(out), num_tokens, width);
  detail::check_launch("silu_mul");
}

}  // namespace servelab::kernels
