// Paged prefill attention (kernels/attention.h): the launcher (argument checks, then the kernel
// PrefillAttentionArgs::kernel names) and the WMMA kernel (PrefillKernel::kWmma; the default
// kFa2 kernel is kernels/attention_prefill_fa2.cu). The WMMA kernel: chunked prefill over a
// cached prefix, causal, on tensor cores through WMMA (bf16 16x16x16 fragments, fp32 accumulators).
// Templated on head_dim (64, 128): 2 instantiations.
//
// One CTA = 64 query rows of one sequence and one query head; warp w owns rows 16w .. 16w + 15.
// For each 64-key tile up to the tile's last query position:
//   - K and V rows are gathered through the block table into shared memory (keys past the last
//     query position are zero-filled, so masked columns never multiply garbage);
//   - S = Q K^T (warp: 16 x 64, 4 x head_dim/16 MMAs) -> shared memory;
//   - online softmax per row in fp32 (2 lanes per row): causal mask key > query position, new
//     max, P = 2^(S - m) rounded to bf16 (the row sum uses the rounded values, so the
//     normalisation matches what the MMA multiplies), alpha = 2^(m_old - m);
//   - O (fp32, shared memory) *= alpha row-wise, then O += P V by loading O into accumulator
//     fragments, head_dim/16 x 4 MMAs, storing back. Keeping O in shared memory sidesteps the
//     opaque accumulator layout of WMMA at the cost of shared-memory traffic; an mma.sync/wgmma
//     version with register-resident O is the step for speed: attention_prefill_fa2.cu.
// Only K and V are shared between warps, so two barriers per tile suffice.
#include <cuda_bf16.h>
#include <mma.h>

#include <stdexcept>
#include <string>

#include "kernels/attention.h"
#include "kernels/common.cuh"
#include "kernels/prefill_params.cuh"

namespace servelab::kernels {

namespace detail {
// kernels/attention_prefill_fa2.cu; REQUIRES: arguments checked by paged_prefill_attention.
void launch_prefill_fa2(const PrefillAttentionArgs& a, cudaStream_t stream);
void launch_prefill_wgmma(const PrefillAttentionArgs& a, cudaStream_t stream);
}  // namespace detail

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kThreads = 128;
constexpr int kRows = kPrefillTileRows;  // query rows per CTA
constexpr int kKeys = 64;                // keys per tile

template <int HD>
struct Smem {
  static constexpr int kLdq = HD + 8;     // bf16 Q/K/V rows (padding against bank conflicts)
  static constexpr int kLds = kKeys + 4;  // fp32 S rows
  static constexpr int kLdp = kKeys + 8;  // bf16 P rows
  static constexpr int kLdo = HD + 4;     // fp32 O rows
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kRows * kLdq * 2;
  static constexpr int kV = kK + kKeys * kLdq * 2;
  static constexpr int kS = kV + kKeys * kLdq * 2;
  static constexpr int kP = kS + kRows * kLds * 4;
  static constexpr int kO = kP + kRows * kLdp * 2;
  static constexpr int kStats = kO + kRows * kLdo * 4;  // m, l, alpha: 3 x kRows floats
  static constexpr int kBytes = kStats + 3 * kRows * 4;
  static_assert(kK % 32 == 0 && kV % 32 == 0 && kS % 32 == 0 && kP % 32 == 0 && kO % 32 == 0,
                "WMMA needs 256-bit aligned tiles");
};

using detail::PrefillParams;

template <int HD>
__global__ void __launch_bounds__(kThreads) prefill_kernel(const PrefillParams p) {
  using L = Smem<HD>;
  SERVELAB_DYNAMIC_SMEM(smem);
  __nv_bfloat16* sq = reinterpret_cast<__nv_bfloat16*>(smem + L::kQ);
  __nv_bfloat16* sk = reinterpret_cast<__nv_bfloat16*>(smem + L::kK);
  __nv_bfloat16* sv = reinterpret_cast<__nv_bfloat16*>(smem + L::kV);
  float* ss = reinterpret_cast<float*>(smem + L::kS);
  __nv_bfloat16* sp = reinterpret_cast<__nv_bfloat16*>(smem + L::kP);
  float* so = reinterpret_cast<float*>(smem + L::kO);
  float* sm = reinterpret_cast<float*>(smem + L::kStats);
  float* sl = sm + kRows;
  float* salpha = sl + kRows;

  const PrefillTile tile = p.tiles[blockIdx.x];
  const int head = blockIdx.y;
  const int kv_head = head / (p.num_q_heads / p.kv.num_kv_heads);
  const int nq = p.num_queries[tile.seq];
  const int rows = min(kRows, nq - tile.q_begin);
  const std::int64_t row0 = std::int64_t{p.q_row_begin[tile.seq]} + tile.q_begin;
  const int pos0 = p.first_pos[tile.seq] + tile.q_begin;  // position of row 0
  const int last_pos = pos0 + rows - 1;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row

  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < rows) {
      val = *reinterpret_cast<const uint4*>(p.q + ((row0 + r) * p.num_q_heads + head) * HD + c);
    }
    *reinterpret_cast<uint4*>(sq + r * L::kLdq + c) = val;
  }
  for (int i = tid; i < kRows * L::kLdo; i += kThreads) so[i] = 0.0f;
  if (tid < kRows) {
    sm[tid] = -INFINITY;
    sl[tid] = 0.0f;
  }

  const std::int32_t* table = p.kv.block_tables + std::int64_t{tile.seq} * p.kv.block_table_stride;
  const int bs = p.kv.block_size;
  const std::int64_t row_elems = std::int64_t{p.kv.num_kv_heads} * HD;
  const __nv_bfloat16* kbase = detail::kv_bf16(p.kv.k);
  const __nv_bfloat16* vbase = detail::kv_bf16(p.kv.v);
  const int r_mine = warp * 16 + lane / 2;  // the row this lane's softmax work belongs to
  const int c_mine = (lane % 2) * 32;       // its 32 columns
  const int qpos = pos0 + r_mine;

  for (int kt = 0; kt <= last_pos; kt += kKeys) {
    __syncthreads();  // the previous tile's MMAs are done with sk / sv
    for (int i = tid; i < kKeys * kChunks; i += kThreads) {
      const int r = i / kChunks, c = (i % kChunks) * 8;
      const int pos = kt + r;
      uint4 kval = make_uint4(0, 0, 0, 0), vval = kval;
      if (pos <= last_pos) {
        const std::int64_t off = std::int64_t{table[pos / bs]} * p.kv.block_stride +
                                 (pos % bs) * row_elems + std::int64_t{kv_head} * HD + c;
        kval = *reinterpret_cast<const uint4*>(kbase + off);
        vval = *reinterpret_cast<const uint4*>(vbase + off);
      }
      *reinterpret_cast<uint4*>(sk + r * L::kLdq + c) = kval;
      *reinterpret_cast<uint4*>(sv + r * L::kLdq + c) = vval;
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows.
#pragma unroll
    for (int n = 0; n < kKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int k = 0; k < HD / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
        wmma::load_matrix_sync(a, sq + warp * 16 * L::kLdq + k * 16, L::kLdq);
        wmma::load_matrix_sync(b, sk + n * 16 * L::kLdq + k * 16, L::kLdq);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(ss + warp * 16 * L::kLds + n * 16, acc, L::kLds, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: lanes 2r, 2r + 1 share row r of the warp.
    {
      float* srow = ss + r_mine * L::kLds + c_mine;
      float mx = -INFINITY;
      for (int c = 0; c < 32; ++c) {
        const bool valid = r_mine < rows && kt + c_mine + c <= qpos;
        const float s = valid ? srow[c] * p.scale_log2 : -INFINITY;
        srow[c] = s;
        mx = fmaxf(mx, s);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_old = sm[r_mine];
      const float m_new = fmaxf(m_old, mx);
      // A row with nothing valid yet (padding rows) keeps m = -inf: use 0 to avoid inf - inf.
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      float sum = 0.0f;
      __nv_bfloat16* prow = sp + r_mine * L::kLdp + c_mine;
      for (int c = 0; c < 32; ++c) {
        const __nv_bfloat16 pb = __float2bfloat16(exp2f(srow[c] - m_use));
        prow[c] = pb;
        sum += __bfloat162float(pb);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      const float alpha = exp2f(m_old - m_use);  // m_old = -inf: 0 (nothing accumulated yet)
      __syncwarp();
      if (lane % 2 == 0) {
        sm[r_mine] = m_new;
        sl[r_mine] = sl[r_mine] * alpha + sum;
        salpha[r_mine] = alpha;
      }
      __syncwarp();
    }
    for (int i = lane; i < 16 * HD; i += 32) {
      const int r = warp * 16 + i / HD;
      so[r * L::kLdo + i % HD] *= salpha[r];
    }
    __syncwarp();

    // O += P V for this warp's rows.
#pragma unroll
    for (int n = 0; n < HD / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      float* optr = so + warp * 16 * L::kLdo + n * 16;
      wmma::load_matrix_sync(acc, optr, L::kLdo, wmma::mem_row_major);
#pragma unroll
      for (int k = 0; k < kKeys / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
        wmma::load_matrix_sync(a, sp + warp * 16 * L::kLdp + k * 16, L::kLdp);
        wmma::load_matrix_sync(b, sv + k * 16 * L::kLdq + n * 16, L::kLdq);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(optr, acc, L::kLdo, wmma::mem_row_major);
    }
    __syncwarp();
  }

  for (int i = lane; i < 16 * HD; i += 32) {
    const int r = warp * 16 + i / HD, d = i % HD;
    if (r < rows) {
      p.out[((row0 + r) * p.num_q_heads + head) * HD + d] =
          __float2bfloat16(so[r * L::kLdo + d] / sl[r]);
    }
  }
}

template <int HD>
void launch(const PrefillParams& pp, const PrefillAttentionArgs& a, cudaStream_t s) {
  constexpr int bytes = Smem<HD>::kBytes;
  static const bool configured = [] {
    detail::check_cuda(cudaFuncSetAttribute(&prefill_kernel<HD>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                       "cudaFuncSetAttribute(prefill)");
    return true;
  }();
  (void)configured;
  SERVELAB_LAUNCH(prefill_kernel<HD>, dim3(a.num_tiles, a.num_q_heads), kThreads, bytes, s)(pp);
}

}  // namespace

void paged_prefill_attention(const PrefillAttentionArgs& a, Stream stream) {
  if (a.num_tiles == 0) return;
  if (a.kv.head_dim != 64 && a.kv.head_dim != 128) {
    throw std::invalid_argument("paged_prefill_attention: head_dim must be 64 or 128");
  }
  if (a.kv.num_kv_heads < 1 || a.num_q_heads % a.kv.num_kv_heads != 0) {
    throw std::invalid_argument("paged_prefill_attention: num_kv_heads must divide num_q_heads");
  }
  if (const std::int32_t heads = prefill_heads_per_cta(a.kernel);
      (a.num_q_heads / a.kv.num_kv_heads) % heads != 0) {
    throw std::invalid_argument(std::string("paged_prefill_attention: the ") +
                                prefill_kernel_name(a.kernel) + " kernel packs " +
                                std::to_string(heads) +
                                " query heads of a GQA group per CTA; the group has " +
                                std::to_string(a.num_q_heads / a.kv.num_kv_heads));
  }
  check_kv_format(a.kv.format, a.kv.k_scale, a.kv.v_scale, "paged_prefill_attention");
  if (detail::is_fp8(a.kv.format) && !prefill_reads_fp8(a.kernel)) {
    throw std::invalid_argument(std::string("paged_prefill_attention: the ") +
                                prefill_kernel_name(a.kernel) + " kernel reads bf16 KV only, not " +
                                std::string(format_name(a.kv.format)) + "; use the fa2 kernel");
  }
  if (a.split.split() || a.split.kv_splits != 1) {
    if (!prefill_splits_keys(a.kernel)) {
      throw std::invalid_argument(std::string("paged_prefill_attention: the ") +
                                  prefill_kernel_name(a.kernel) + " kernel does not split keys");
    }
    if (a.workspace == nullptr) {
      throw std::invalid_argument("paged_prefill_attention: a split plan needs a workspace");
    }
    const std::string why = prefill_plan_error(a.split, a.longest_keys);
    if (!why.empty()) {
      throw std::invalid_argument("paged_prefill_attention: invalid split plan: " + why);
    }
  }
  const cudaStream_t s = detail::as_stream(stream);
  if (a.kernel == PrefillKernel::kWgmma) {
    detail::launch_prefill_wgmma(a, s);
    detail::check_launch("paged_prefill_attention (wgmma)");
    return;
  }
  if (a.kernel != PrefillKernel::kWmma) {  // kFa2, kFa2Wide, kFa2Gqa
    detail::launch_prefill_fa2(a, s);
    detail::check_launch(a.kernel == PrefillKernel::kFa2 ? "paged_prefill_attention (fa2)"
                         : a.kernel == PrefillKernel::kFa2Gqa
                             ? "paged_prefill_attention (fa2_gqa)"
                             : "paged_prefill_attention (fa2_128)");
    return;
  }
  const PrefillParams pp = detail::prefill_params(a);
  if (a.kv.head_dim == 64) {
    launch<64>(pp, a, s);
  } else {
    launch<128>(pp, a, s);
  }
  detail::check_launch("paged_prefill_attention (wmma)");
}

}  // namespace servelab::kernels
