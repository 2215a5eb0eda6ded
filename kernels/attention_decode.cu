// Paged decode attention (kernels/attention.h): the launcher (argument checks shared by both
// kernels, dispatch on DecodeKernel) and the tiled kernel, DecodeKernel::kTiled (the pipelined
// one is kernels/attention_decode_pipelined.cu). One query token per sequence, split-K along the
// context with a merge kernel. Templated on head_dim (64, 128) and the query heads per CTA
// (1, 2, 4, 8): 8 instantiations.
//
// Per CTA (128 threads): the G query heads of one KV head for one sequence and one partition.
// Threads form "teams" of head_dim / 8 lanes, each lane owning 8 dims (one 16-byte load of a K
// or V row). A 64-token tile is processed in three phases:
//   1. scores: each team takes tokens t, t + teams, ...; lanes dot their 8 dims with the G
//      queries (held in registers, pre-scaled by scale * log2 e), a shuffle sum within the team;
//      scores go to shared memory;
//   2. softmax update: warp w takes heads w, w + 4: tile max, new running max m, p = 2^(s - m)
//      written back over the scores, running sum l = l * alpha + sum p, alpha = 2^(m_old - m);
//   3. P V: teams again take tokens; each lane accumulates G x 8 fp32 outputs in registers after
//      scaling them by alpha.
// At the end the teams' accumulators are summed in shared memory in a fixed order; the CTA writes o
// / l (bf16) or, when split, the partial (o / l, m, l) to the workspace for decode_merge_kernel.
#include <cuda_bf16.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/attention.h"
#include "kernels/attention_decode_pipelined.h"
#include "kernels/common.cuh"

namespace servelab::kernels {

namespace {

using detail::kLog2e;

constexpr int kThreads = 128;
constexpr int kTile = kDecodeTileTokens;

struct DecodeParams {
  PagedKv kv;
  const __nv_bfloat16* q;
  __nv_bfloat16* out;
  const std::int32_t* q_rows;
  const std::int32_t* context_lens;
  std::int32_t num_q_heads;
  std::int32_t partition;
  std::int32_t max_splits;
  float scale_log2;
  float* workspace;
};

template <int HD, int G>
__global__ void __launch_bounds__(kThreads) decode_kernel(const DecodeParams p) {
  constexpr int kVec = 8;
  constexpr int kTeam = HD / kVec;          // lanes per K/V row
  constexpr int kTeams = kThreads / kTeam;  // rows in flight per CTA
  static_assert(kTile % kTeams == 0, "uniform trip counts keep the team shuffles converged");
  __shared__ float s_p[G][kTile];
  __shared__ float s_red[kTeams][G][HD];  // per-team outputs, summed in a fixed order
  __shared__ float s_m[G], s_l[G], s_alpha[G];

  const int seq = blockIdx.y, split = blockIdx.z;
  const int ctx = p.context_lens[seq];
  const int begin = split * p.partition;
  const int end = min(ctx, begin + p.partition);
  if (begin >= end) return;  // past this sequence's context: the merge ignores this split
  const int q_head0 = blockIdx.x * G;
  const int kv_head = q_head0 / (p.num_q_heads / p.kv.num_kv_heads);
  const int tid = threadIdx.x, lane = tid % kTeam, team = tid / kTeam;

  float q[G][kVec];
  const std::int64_t q_row = p.q_rows[seq];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    detail::unpack8(detail::load16(p.q + (q_row * p.num_q_heads + q_head0 + g) * HD + lane * kVec),
                    q[g]);
#pragma unroll
    for (int i = 0; i < kVec; ++i) q[g][i] *= p.scale_log2;
  }
  if (tid < G) {
    s_m[tid] = -INFINITY;
    s_l[tid] = 0.0f;
  }
  float acc[G][kVec];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[g][i] = 0.0f;

  const std::int32_t* table = p.kv.block_tables + std::int64_t{seq} * p.kv.block_table_stride;
  const int bs = p.kv.block_size;
  const std::int64_t row_elems = std::int64_t{p.kv.num_kv_heads} * HD;
  const std::int64_t head_off = std::int64_t{kv_head} * HD + lane * kVec;
  const __nv_bfloat16* kbase = detail::kv_bf16(p.kv.k);
  const __nv_bfloat16* vbase = detail::kv_bf16(p.kv.v);
  __syncthreads();

  for (int tile0 = begin; tile0 < end; tile0 += kTile) {
    // 1. scores
    for (int t = team; t < kTile; t += kTeams) {
      const int pos = tile0 + t;
      float part[G];
      if (pos < end) {
        const std::int64_t off =
            std::int64_t{table[pos / bs]} * p.kv.block_stride + (pos % bs) * row_elems + head_off;
        float kf[kVec];
        detail::unpack8(detail::load16(kbase + off), kf);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < kVec; ++i) s = fmaf(q[g][i], kf[i], s);
          part[g] = s;
        }
      } else {
#pragma unroll
        for (int g = 0; g < G; ++g) part[g] = 0.0f;
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int o = kTeam / 2; o > 0; o >>= 1) part[g] += __shfl_xor_sync(0xffffffffu, part[g], o);
      }
      if (lane == 0) {
#pragma unroll
        for (int g = 0; g < G; ++g) s_p[g][t] = pos < end ? part[g] : -INFINITY;
      }
    }
    __syncthreads();
    // 2. online softmax, once per (head, tile)
    const int warp = tid / 32, wl = tid % 32;
    for (int g = warp; g < G; g += kThreads / 32) {
      const float m_old = s_m[g], l_old = s_l[g];
      const float s0 = s_p[g][wl], s1 = s_p[g][wl + 32];
      const float m_new = fmaxf(m_old, detail::warp_max(fmaxf(s0, s1)));  // finite: tile0 < end
      const float p0 = exp2f(s0 - m_new), p1 = exp2f(s1 - m_new);
      const float sum = detail::warp_sum(p0 + p1);
      s_p[g][wl] = p0;
      s_p[g][wl + 32] = p1;
      __syncwarp();
      if (wl == 0) {
        const float alpha = exp2f(m_old - m_new);  // 0 on the first tile (m_old = -inf)
        s_alpha[g] = alpha;
        s_l[g] = l_old * alpha + sum;
        s_m[g] = m_new;
      }
    }
    __syncthreads();
    // 3. P V
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float a = s_alpha[g];
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[g][i] *= a;
    }
    for (int t = team; t < kTile; t += kTeams) {
      const int pos = tile0 + t;
      if (pos >= end) break;
      const std::int64_t off =
          std::int64_t{table[pos / bs]} * p.kv.block_stride + (pos % bs) * row_elems + head_off;
      float vf[kVec];
      detail::unpack8(detail::load16(vbase + off), vf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float pg = s_p[g][t];
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[g][i] = fmaf(pg, vf[i], acc[g][i]);
      }
    }
    __syncthreads();  // s_p and s_alpha are rewritten by the next tile
  }

  // Deterministic reduction over teams (no float atomics: same inputs, same bits).
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < kVec; ++i) s_red[team][g][lane * kVec + i] = acc[g][i];
  __syncthreads();
  auto reduced = [&](int g, int d) {
    float o = 0.0f;
#pragma unroll
    for (int t = 0; t < kTeams; ++t) o += s_red[t][g][d];
    return o;
  };

  if (p.max_splits == 1) {
    for (int i = tid; i < G * HD; i += kThreads) {
      const int g = i / HD, d = i % HD;
      p.out[(q_row * p.num_q_heads + q_head0 + g) * HD + d] =
          __float2bfloat16(reduced(g, d) / s_l[g]);
    }
  } else {
    const std::int64_t n_parts = std::int64_t{gridDim.y} * p.num_q_heads * p.max_splits;
    float* o_part = p.workspace;
    float* ml = p.workspace + n_parts * HD;
    for (int i = tid; i < G * HD; i += kThreads) {
      const int g = i / HD, d = i % HD;
      const std::int64_t part =
          (std::int64_t{seq} * p.num_q_heads + q_head0 + g) * p.max_splits + split;
      o_part[part * HD + d] = reduced(g, d) / s_l[g];
    }
    if (tid < G) {
      const std::int64_t part =
          (std::int64_t{seq} * p.num_q_heads + q_head0 + tid) * p.max_splits + split;
      ml[2 * part] = s_m[tid];
      ml[2 * part + 1] = s_l[tid];
    }
  }
}

// One CTA per (query head, sequence), one thread per dim: combines the sequence's
// ceil(ctx / partition) partial results weighted by l_j 2^(m_j - max m).
__global__ void decode_merge_kernel(const DecodeParams p, int head_dim) {
  const int head = blockIdx.x, seq = blockIdx.y, d = threadIdx.x;
  const int n = (p.context_lens[seq] + p.partition - 1) / p.partition;
  const std::int64_t n_parts = std::int64_t{gridDim.y} * p.num_q_heads * p.max_splits;
  const std::int64_t first = (std::int64_t{seq} * p.num_q_heads + head) * p.max_splits;
  const float* o_part = p.workspace;
  const float* ml = p.workspace + n_parts * head_dim;
  float m = -INFINITY;
  for (int j = 0; j < n; ++j) m = fmaxf(m, ml[2 * (first + j)]);
  float total = 0.0f, o = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float w = ml[2 * (first + j) + 1] * exp2f(ml[2 * (first + j)] - m);
    total += w;
    o = fmaf(w, o_part[(first + j) * head_dim + d], o);
  }
  const std::int64_t q_row = p.q_rows[seq];
  p.out[(q_row * p.num_q_heads + head) * head_dim + d] = __float2bfloat16(o / total);
}

template <int HD, int G>
void launch(const DecodeParams& dp, const DecodeAttentionArgs& a, cudaStream_t s) {
  const dim3 grid(a.num_q_heads / G, a.num_seqs, a.plan.max_splits);
  const auto kernel = decode_kernel<HD, G>;  // one macro argument
  SERVELAB_LAUNCH(kernel, grid, kThreads, 0, s)(dp);
}

template <int HD>
void dispatch_group(int g, const DecodeParams& dp, const DecodeAttentionArgs& a, cudaStream_t s) {
  switch (g) {
    case 8:
      launch<HD, 8>(dp, a, s);
      break;
    case 4:
      launch<HD, 4>(dp, a, s);
      break;
    case 2:
      launch<HD, 2>(dp, a, s);
      break;
    default:
      launch<HD, 1>(dp, a, s);
      break;
  }
}

template <int HD>
const void* kernel_ptr(int g) {
  switch (g) {
    case 8:
      return reinterpret_cast<const void*>(&decode_kernel<HD, 8>);
    case 4:
      return reinterpret_cast<const void*>(&decode_kernel<HD, 4>);
    case 2:
      return reinterpret_cast<const void*>(&decode_kernel<HD, 2>);
    default:
      return reinterpret_cast<const void*>(&decode_kernel<HD, 1>);
  }
}

}  // namespace

void paged_decode_attention(const DecodeAttentionArgs& a, Stream stream) {
  if (a.num_seqs == 0) return;
  if (a.kv.head_dim != 64 && a.kv.head_dim != 128) {
    throw std::invalid_argument("paged_decode_attention: head_dim must be 64 or 128");
  }
  if (a.kv.num_kv_heads < 1 || a.num_q_heads % a.kv.num_kv_heads != 0) {
    throw std::invalid_argument("paged_decode_attention: num_kv_heads must divide num_q_heads");
  }
  if (a.num_seqs < 0 || a.num_seqs > 65535) {
    throw std::invalid_argument("paged_decode_attention: num_seqs must be in [0, 65535] (grid.y)");
  }
  if (a.max_context_len < 1) {
    throw std::invalid_argument(
        "paged_decode_attention: max_context_len (the longest context, host side) must be set");
  }
  validate_decode_plan(a.plan, a.max_context_len, "paged_decode_attention");
  check_kv_format(a.kv.format, a.kv.k_scale, a.kv.v_scale, "paged_decode_attention");
  if (detail::is_fp8(a.kv.format) && a.kernel != DecodeKernel::kPipelined) {
    throw std::invalid_argument(std::string("paged_decode_attention: the ") +
                                decode_kernel_name(a.kernel) + " kernel reads bf16 KV only, not " +
                                std::string(format_name(a.kv.format)) +
                                "; use the pipelined kernel");
  }
  if (a.plan.split() && a.workspace == nullptr) {
    throw std::invalid_argument("paged_decode_attention: split plan without workspace");
  }
  const cudaStream_t s = detail::as_stream(stream);
  if (a.kernel == DecodeKernel::kPipelined) {
    detail::launch_pipelined_decode(a, s);
    return;
  }
  DecodeParams dp{
      a.kv,          detail::bf(a.q),         detail::bf(a.out), a.q_rows,         a.context_lens,
      a.num_q_heads, a.plan.partition_tokens, a.plan.max_splits, a.scale * kLog2e, a.workspace};
  const int g = decode_heads_per_cta(a.num_q_heads, a.kv.num_kv_heads);
  if (a.kv.head_dim == 64) {
    dispatch_group<64>(g, dp, a, s);
  } else {
    dispatch_group<128>(g, dp, a, s);
  }
  detail::check_launch("paged_decode_attention");
  if (a.plan.split()) {
    SERVELAB_LAUNCH(decode_merge_kernel, dim3(a.num_q_heads, a.num_seqs), a.kv.head_dim, 0, s)
    (dp, a.kv.head_dim);
    detail::check_launch("paged_decode_attention merge");
  }
}

std::int32_t decode_max_resident_ctas(std::int32_t head_dim, std::int32_t heads_per_cta) {
  int device = 0, sms = 0, per_sm = 0;
  detail::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  detail::check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                     "cudaDeviceGetAttribute");
  const void* fn = head_dim == 64 ? kernel_ptr<64>(heads_per_cta) : kernel_ptr<128>(heads_per_cta);
  detail::check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kThreads, 0),
                     "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return std::max(1, sms * std::max(1, per_sm));
}

std::int32_t decode_max_resident_ctas(DecodeKernel kernel, std::int32_t head_dim,
                                      std::int32_t num_q_heads, std::int32_t num_kv_heads,
                                      FloatFormat format) {
  if (kernel == DecodeKernel::kTiled) {
    return decode_max_resident_ctas(head_dim, decode_heads_per_cta(num_q_heads, num_kv_heads));
  }
  int device = 0, sms = 0;
  detail::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  detail::check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                     "cudaDeviceGetAttribute");
  return std::max(
      1, sms * std::max(1, detail::pipelined_decode_ctas_per_sm(head_dim, detail::is_fp8(format))));
}

}  // namespace servelab::kernels
