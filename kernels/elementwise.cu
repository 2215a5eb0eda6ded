// The per-token kernels of the forward pass, one translation unit to keep nvcc time down:
// embedding lookup (embedding.h), RMSNorm with fused residual add (norm.h), QKV bias + RoPE
// (rope.h) and its fused form with the KV write, SiLU-and-multiply (activation.h).
#include <cuda_bf16.h>

#include <algorithm>
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

// One CTA per token; thread j of a head handles the pair (j, j + d/2).
__global__ void qkv_rope_kernel(const RopeArgs a) {
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const int t = blockIdx.x;
  const int hd = a.head_dim, half = hd / 2;
  const int width = (a.num_q_heads + 2 * a.num_kv_heads) * hd;
  const float* in = a.qkv + std::int64_t{t} * width;
  const float* cs = a.cos_sin + std::int64_t{a.positions[t]} * hd;
  const int rope_heads = a.num_q_heads + a.num_kv_heads;
  for (int i = threadIdx.x; i < rope_heads * half; i += blockDim.x) {
    const int h = i / half, j = i % half;
    const int c1 = h * hd + j, c2 = c1 + half;
    float y1, y2;
    rope_pair(in[c1], in[c2], a.bias, c1, c2, cs[j], cs[half + j], y1, y2);
    if (h < a.num_q_heads) {
      __nv_bfloat16* q = detail::bf(a.q) + std::int64_t{t} * a.num_q_heads * hd + h * hd;
      q[j] = __float2bfloat16(y1);
      q[j + half] = __float2bfloat16(y2);
    } else {
      __nv_bfloat16* k =
          detail::bf(a.k) + std::int64_t{t} * a.num_kv_heads * hd + (h - a.num_q_heads) * hd;
      k[j] = __float2bfloat16(y1);
      k[j + half] = __float2bfloat16(y2);
    }
  }
  const int v_begin = rope_heads * hd, kv_width = a.num_kv_heads * hd;
  __nv_bfloat16* v = detail::bf(a.v) + std::int64_t{t} * kv_width;
  for (int i = threadIdx.x; i < kv_width; i += blockDim.x) {
    v[i] = __float2bfloat16(v_value(in[v_begin + i], a.bias, v_begin + i));
  }
}

// qkv_rope_kernel with K and V stored into the token's cache slot instead of scratch rows. A
// padding or skipped token (slot < 0) still rotates its Q (the decode kernel reads its row).
__global__ void qkv_rope_kv_write_kernel(const QkvRopeKvWriteArgs a) {
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const int t = blockIdx.x;
  const int hd = a.head_dim, half = hd / 2;
  const int width = (a.num_q_heads + 2 * a.num_kv_heads) * hd;
  const float* in = a.qkv + std::int64_t{t} * width;
  const float* cs = a.cos_sin + std::int64_t{a.positions[t]} * hd;
  const std::int64_t slot = a.slot_mapping[t];
  const int kv_width = a.num_kv_heads * hd;
  // The slot's row in this layer's K and V planes (kv_layout.h), when the token has one.
  const std::int64_t dst =
      slot < 0 ? -1 : (slot / a.block_size) * a.block_stride + (slot % a.block_size) * kv_width;
  const int rope_heads = slot < 0 ? a.num_q_heads : a.num_q_heads + a.num_kv_heads;
  const bool fp8 = detail::is_fp8(a.format), e5m2 = a.format == FloatFormat::kFp8E5m2;
  for (int i = threadIdx.x; i < rope_heads * half; i += blockDim.x) {
    const int h = i / half, j = i % half;
    const int c1 = h * hd + j, c2 = c1 + half;
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
  if (slot < 0) return;
  const int v_begin = (a.num_q_heads + a.num_kv_heads) * hd;
  if (fp8) {
    unsigned char* v = static_cast<unsigned char*>(a.v_cache) + dst;
    for (int i = threadIdx.x; i < kv_width; i += blockDim.x) {
      v[i] = detail::fp8_encode(v_value(in[v_begin + i], a.bias, v_begin + i), a.v_scale, e5m2);
    }
    return;
  }
  __nv_bfloat16* v = detail::bf(static_cast<Bf16*>(a.v_cache)) + dst;
  for (int i = threadIdx.x; i < kv_width; i += blockDim.x) {
    v[i] = __float2bfloat16(v_value(in[v_begin + i], a.bias, v_begin + i));
  }
}

// Grid-stride over token rows on grid.x (any token count; grid.y would stop at 65,535), the
// block's threads over a row's 8-value groups.
__global__ void silu_mul_kernel(const __nv_bfloat16* gate_up, __nv_bfloat16* out,
                                std::int32_t num_tokens, std::int32_t width) {
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const int vecs = width / 8;
  for (std::int64_t t = blockIdx.x; t < num_tokens; t += gridDim.x) {
    const __nv_bfloat16* g = gate_up + t * 2 * width;
    const __nv_bfloat16* u = g + width;
    uint4* o = reinterpret_cast<uint4*>(out + t * width);
    for (int i = threadIdx.x; i < vecs; i += blockDim.x) {
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

void rms_norm(const RmsNormArgs& a, Stream stream) {
  if (a.num_rows == 0) return;
  SERVELAB_LAUNCH_PDL(rms_norm_kernel, a.num_rows, kNormThreads, 0, detail::as_stream(stream))(a);
  detail::check_launch("rms_norm");
}

void qkv_rope(const RopeArgs& a, Stream stream) {
  if (a.num_tokens == 0) return;
  if (a.head_dim % 2 != 0) throw std::invalid_argument("qkv_rope: odd head_dim");
  SERVELAB_LAUNCH_PDL(qkv_rope_kernel, a.num_tokens, 256, 0, detail::as_stream(stream))(a);
  detail::check_launch("qkv_rope");
}

void qkv_rope_kv_write(const QkvRopeKvWriteArgs& a, Stream stream) {
  if (a.num_tokens == 0) return;
  if (a.head_dim % 2 != 0) throw std::invalid_argument("qkv_rope_kv_write: odd head_dim");
  if (a.block_size < 1) throw std::invalid_argument("qkv_rope_kv_write: block_size < 1");
  check_kv_format(a.format, a.k_scale, a.v_scale, "qkv_rope_kv_write");
  SERVELAB_LAUNCH_PDL(qkv_rope_kv_write_kernel, a.num_tokens, 256, 0, detail::as_stream(stream))(a);
  detail::check_launch("qkv_rope_kv_write");
}

void silu_mul(const Bf16* gate_up, Bf16* out, std::int32_t num_tokens, std::int32_t width,
              Stream stream) {
  if (num_tokens < 0 || width < 0) {
    throw std::invalid_argument("silu_mul: negative token count or width");
  }
  if (num_tokens == 0 || width == 0) return;
  if (width % 8 != 0) throw std::invalid_argument("silu_mul: width must be a multiple of 8");
  // Threads: the row's 8-value groups rounded up to a warp, at most 256; one CTA per row up to
  // kMaxRowBlocks, then each CTA strides over further rows.
  constexpr int kMaxRowBlocks = 1 << 16;
  const int vecs = width / 8;
  const int threads = std::min(256, (vecs + 31) / 32 * 32);
  const int blocks = std::min(num_tokens, kMaxRowBlocks);
  SERVELAB_LAUNCH_PDL(silu_mul_kernel, blocks, threads, 0, detail::as_stream(stream))
  (detail::bf(gate_up), detail::bf(out), num_tokens, width);
  detail::check_launch("silu_mul");
}

}  // namespace servelab::kernels
