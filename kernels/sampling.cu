// Greedy and top-p sampling (kernels/sampling.h), one CTA of 1024 threads per row.
//
// top_p_sample and sample_rows mirror sample_bisect (kernels/sampling_ref.cc) step for step:
// probabilities 2^((l - max) / T * log2 e) are written to `scratch` once; then each bisection
// step is one deterministic block-wide sum over the row of the probabilities (or, for top_k,
// the count) of the tokens whose key (bits(p) << 32 | ~id) is >= the candidate key. About 62
// steps per bisection, two bisections (three with top_k): O(124 * vocab) reads per row from L2,
// no sort and no atomics (so results are reproducible).
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/sampling.h"

namespace servelab::kernels {

namespace {

constexpr int kThreads = 1024;

__global__ void mask_kernel(float* logits, std::int32_t vocab, const std::int32_t* rows,
                            const std::int32_t* tokens, std::int32_t n) {
  const std::int32_t i = static_cast<std::int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const std::int32_t t = tokens[i];
  if (t >= 0 && t < vocab) logits[std::int64_t{rows[i]} * vocab + t] = -INFINITY;
}

// keep_allowed_logits: CTA (i, c) takes tokens c kKeepTokens .. (c + 1) kKeepTokens - 1 of row
// rows[i], each thread every kKeepThreads-th; a warp's 32 consecutive tokens share one mask word.
constexpr int kKeepThreads = 256;
constexpr std::int32_t kKeepTokens = 4096;
__global__ void keep_allowed_kernel(float* logits, std::int32_t vocab, const std::int32_t* rows,
                                    const std::uint32_t* masks, std::int32_t words) {
  float* row = logits + std::int64_t{rows[blockIdx.x]} * vocab;
  const std::uint32_t* mask = masks + std::int64_t{blockIdx.x} * words;
  const std::int32_t first = static_cast<std::int32_t>(blockIdx.y) * kKeepTokens;
  const std::int32_t end = vocab - first < kKeepTokens ? vocab : first + kKeepTokens;
  for (std::int32_t t = first + static_cast<std::int32_t>(threadIdx.x); t < end;
       t += kKeepThreads) {
    const std::int32_t w = t / 32;
    if (w >= words || ((mask[w] >> (t % 32)) & 1u) == 0) row[t] = -INFINITY;
  }
}

// The argmax of `row` into *out (thread 0 of warp 0 writes it).
__device__ void greedy_row(const float* row, std::int32_t vocab, std::int32_t* out) {
  __shared__ float s_val[32];
  __shared__ std::int32_t s_idx[32];
  float best = -INFINITY;
  std::int32_t idx = 0x7fffffff;
  for (std::int32_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = row[i];
    if (v > best) {  // strided in increasing i: keeps the lowest index of equal values
      best = v;
      idx = i;
    }
  }
  auto better = [](float v, std::int32_t i, float bv, std::int32_t bi) {
    return v > bv || (v == bv && i < bi);
  };
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best, o);
    const std::int32_t i = __shfl_xor_sync(0xffffffffu, idx, o);
    if (better(v, i, best, idx)) {
      best = v;
      idx = i;
    }
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    s_val[warp] = best;
    s_idx[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    best = s_val[lane];
    idx = s_idx[lane];
    for (int o = 16; o > 0; o >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, best, o);
      const std::int32_t i = __shfl_xor_sync(0xffffffffu, idx, o);
      if (better(v, i, best, idx)) {
        best = v;
        idx = i;
      }
    }
    if (lane == 0) *out = idx == 0x7fffffff ? 0 : idx;
  }
}

__global__ void adjust_kernel(float* logits, std::int32_t vocab, const std::int32_t* rows,
                              const std::int32_t* tokens, const float* adjust, std::int32_t n) {
  const std::int32_t i = static_cast<std::int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const std::int32_t t = tokens[i];
  if (t < 0 || t >= vocab) return;
  float& l = logits[std::int64_t{rows[i]} * vocab + t];
  // Rounded as the host's adjust_logit: no fused multiply-add.
  const float x = __fadd_rn(l, adjust[3 * i]);
  const float f = adjust[3 * i + 1];
  l = __fadd_rn(x > 0.0f ? __fdiv_rn(x, f) : __fmul_rn(x, f), adjust[3 * i + 2]);
}

__global__ void __launch_bounds__(kThreads)
    greedy_kernel(const float* logits, std::int32_t vocab, std::int32_t* out) {
  greedy_row(logits + std::int64_t{blockIdx.x} * vocab, vocab, out + blockIdx.x);
}

__device__ __forceinline__ std::uint64_t key_of(float p, std::int32_t id) {
  return (static_cast<std::uint64_t>(__float_as_uint(p)) << 32) |
         (0xffffffffull - static_cast<std::uint32_t>(id));
}

// Mass (kCount: number, exact in fp32 below 2^24 tokens) of the row's tokens whose key is >= k;
// the same value in every thread.
template <bool kCount = false>
__device__ float sum_ge(const float* prob, std::int32_t vocab, std::uint64_t k, float* scratch) {
  float m = 0.0f;
  for (std::int32_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float p = prob[i];
    if (key_of(p, i) >= k) m += kCount ? 1.0f : p;
  }
  return detail::block_sum(m, scratch);
}

// The draw of `row` with uniform `u` from the tokens min_p, top_k (0: all) and top_p keep, into
// *out (thread 0 writes it); `prob`: the row's scratch.
__device__ void top_p_row(const float* row, std::int32_t vocab, float inv_temp_log2, float top_p,
                          std::int32_t top_k, float min_p, float u, float* prob,
                          std::int32_t* out) {
  __shared__ float scratch[32];
  float mx = -INFINITY;
  for (std::int32_t i = threadIdx.x; i < vocab; i += kThreads) mx = fmaxf(mx, row[i]);
  mx = detail::block_max(mx, scratch);
  if (mx == -INFINITY) {  // every token masked (the same in every thread)
    if (threadIdx.x == 0) *out = 0;
    return;
  }
  float total = 0.0f;
  for (std::int32_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float p = exp2f((row[i] - mx) * inv_temp_log2);
    prob[i] = p;
    total += p;
  }
  total = detail::block_sum(total, scratch);  // its barriers also publish prob[]

  const std::uint64_t hi_key = key_of(1.0f, 0);
  // 1. The lowest key min_p (the largest probability is exp2(0) = 1) and top_k allow.
  std::uint64_t lowest = static_cast<std::uint64_t>(__float_as_uint(min_p)) << 32;
  std::uint64_t lo = 0, hi = hi_key;
  if (top_k > 0 && top_k < vocab) {
    const auto k = static_cast<float>(top_k);
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2 + 1;
      if (sum_ge<true>(prob, vocab, mid, scratch) >= k) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    if (lo > lowest) lowest = lo;
  }
  if (lowest > hi_key) lowest = hi_key;
  if (lowest > 0) total = sum_ge(prob, vocab, lowest, scratch);
  // 2. The nucleus: the largest key K >= lowest with mass(>= K) >= top_p * mass(>= lowest).
  const float target = top_p * total;
  lo = lowest;
  hi = hi_key;
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2 + 1;
    if (sum_ge(prob, vocab, mid, scratch) >= target) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const std::uint64_t last = lo;
  const float x = u * sum_ge(prob, vocab, last, scratch);
  // 3. The draw: the largest key K >= last with mass(>= K) > x (else the nucleus's last token).
  hi = hi_key;
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2 + 1;
    if (sum_ge(prob, vocab, mid, scratch) > x) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  if (threadIdx.x == 0) *out = static_cast<std::int32_t>(0xffffffffull - (lo & 0xffffffffull));
}

__global__ void __launch_bounds__(kThreads)
    top_p_kernel(const float* logits, std::int32_t vocab, float inv_temp_log2, float top_p,
                 const float* u, float* scratch_prob, std::int32_t* out) {
  const std::int64_t r = blockIdx.x;
  top_p_row(logits + r * vocab, vocab, inv_temp_log2, top_p, 0, 0.0f, u[r],
            scratch_prob + r * vocab, out + r);
}

// Each row with its own parameters: params[4r .. 4r + 3] = temperature (0: greedy), top_p,
// top_k, min_p. The branch is the same for the whole CTA.
__global__ void __launch_bounds__(kThreads)
    rows_kernel(const float* logits, std::int32_t vocab, const float* params, const float* u,
                float* scratch_prob, std::int32_t* out) {
  const std::int64_t r = blockIdx.x;
  const float* p = params + 4 * r;
  if (p[0] > 0.0f) {
    top_p_row(logits + r * vocab, vocab, detail::kLog2e / p[0], p[1],
              static_cast<std::int32_t>(p[2]), p[3], u[r], scratch_prob + r * vocab, out + r);
  } else {
    greedy_row(logits + r * vocab, vocab, out + r);
  }
}

}  // namespace

void mask_logits(float* logits, std::int32_t vocab, const std::int32_t* rows,
                 const std::int32_t* tokens, std::int32_t n, Stream stream) {
  if (n <= 0) return;
  constexpr int kMaskThreads = 128;
  SERVELAB_LAUNCH(mask_kernel, (n + kMaskThreads - 1) / kMaskThreads, kMaskThreads, 0,
                  detail::as_stream(stream))
  (logits, vocab, rows, tokens, n);
  detail::check_launch("mask_logits");
}

void keep_allowed_logits(float* logits, std::int32_t vocab, const std::int32_t* rows,
                         const std::uint32_t* masks, std::int32_t words, std::int32_t n,
                         Stream stream) {
  if (n <= 0 || vocab <= 0) return;
  const dim3 grid(static_cast<unsigned>(n),
                  static_cast<unsigned>((vocab + kKeepTokens - 1) / kKeepTokens));
  SERVELAB_LAUNCH(keep_allowed_kernel, grid, kKeepThreads, 0, detail::as_stream(stream))
  (logits, vocab, rows, masks, words);
  detail::check_launch("keep_allowed_logits");
}

void adjust_logits(float* logits, std::int32_t vocab, const std::int32_t* rows,
                   const std::int32_t* tokens, const float* adjust, std::int32_t n, Stream stream) {
  if (n <= 0) return;
  constexpr int kAdjustThreads = 128;
  SERVELAB_LAUNCH(adjust_kernel, (n + kAdjustThreads - 1) / kAdjustThreads, kAdjustThreads, 0,
                  detail::as_stream(stream))
  (logits, vocab, rows, tokens, adjust, n);
  detail::check_launch("adjust_logits");
}

void greedy_sample(const float* logits, std::int32_t num_rows, std::int32_t vocab,
                   std::int32_t* out, Stream stream) {
  if (num_rows == 0) return;
  SERVELAB_LAUNCH(greedy_kernel, num_rows, kThreads, 0, detail::as_stream(stream))
  (logits, vocab, out);
  detail::check_launch("greedy_sample");
}

void top_p_sample(const float* logits, std::int32_t num_rows, std::int32_t vocab, float temperature,
                  float top_p, const float* u, float* scratch, std::int32_t* out, Stream stream) {
  if (num_rows == 0) return;
  SERVELAB_LAUNCH(top_p_kernel, num_rows, kThreads, 0, detail::as_stream(stream))
  (logits, vocab, detail::kLog2e / temperature, top_p, u, scratch, out);
  detail::check_launch("top_p_sample");
}

void sample_rows(const float* logits, std::int32_t num_rows, std::int32_t vocab,
                 const float* params, const float* u, float* scratch, std::int32_t* out,
                 Stream stream) {
  if (num_rows == 0) return;
  SERVELAB_LAUNCH(rows_kernel, num_rows, kThreads, 0, detail::as_stream(stream))
  (logits, vocab, params, u, scratch, out);
  detail::check_launch("sample_rows");
}

}  // namespace servelab::kernels
