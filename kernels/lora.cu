// The gather kernels of kernels/lora.h: one CTA per (row, target) for the shrink (its input
// columns split over the CTA's threads), one per (row, 128 output columns) for the expand.
#include <cuda_bf16.h>

#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/lora.h"

namespace servelab::kernels {

namespace {

constexpr int kShrinkThreads = 256;
constexpr int kExpandThreads = 128;

// A group's dimensions resolved on the host, as scalars (an array in a kernel parameter indexed
// at run time would be copied to local memory first): the input width, each target's output
// width and the element offset of its A in a rank-1 adapter (unit offset of the target in its
// layer), and the layer's units.
struct GroupDims {
  const LoraRow* rows;
  std::int32_t num_targets, in, out0, out1, out2;
  std::int64_t a0, a1, a2;  // layer * layer_units + unit_offset(target)
  float* tmp;
  std::int32_t max_rank;
};

template <typename T>
__device__ __forceinline__ T pick(int i, T a, T b, T c) {
  return i == 0 ? a : (i == 1 ? b : c);
}

// Ranks a shrink thread accumulates at once (a block of A's rows; larger ranks loop over blocks).
constexpr int kShrinkRankBlock = 8;

// The input row is split over the CTA: thread t takes columns 8 (t + 256 i) .. + 8 (i = 0, 1, ...;
// one 16-byte load of x each, read once per rank block) and accumulates, for each of a block of
// kShrinkRankBlock ranks, the dot of those columns with A_j's (16-byte loads, all independent, so
// a thread keeps many in flight where the former kernel walked each rank's row in a chain of
// dependent loads); then each rank's 256 partial sums are added in a fixed order: a warp sum, then
// the 8 warps' sums in shared memory, warp 0 first (deterministic).
__global__ void __launch_bounds__(kShrinkThreads)
    lora_shrink_kernel(const GroupDims d, const __nv_bfloat16* in, std::int32_t ld_in) {
  __shared__ float part[kShrinkThreads / 32][kShrinkRankBlock];
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const LoraRow r = d.rows[blockIdx.x];
  const int gi = static_cast<int>(blockIdx.y);
  const __nv_bfloat16* x = in + std::int64_t{r.row} * ld_in;
  const __nv_bfloat16* a = detail::bf(r.weights) + r.rank * pick(gi, d.a0, d.a1, d.a2);
  float* dst = d.tmp + (std::int64_t{blockIdx.x} * d.num_targets + gi) * d.max_rank;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (int j0 = 0; j0 < r.rank; j0 += kShrinkRankBlock) {
    const int nj = min(kShrinkRankBlock, r.rank - j0);
    float s[kShrinkRankBlock];
#pragma unroll
    for (int j = 0; j < kShrinkRankBlock; ++j) s[j] = 0.0f;
    for (int k = 8 * static_cast<int>(threadIdx.x); k < d.in; k += 8 * kShrinkThreads) {
      float xf[8];
      detail::unpack8(detail::load16(x + k), xf);
#pragma unroll
      for (int j = 0; j < kShrinkRankBlock; ++j) {
        if (j < nj) {
          float af[8];
          detail::unpack8(detail::load16(a + std::int64_t{j0 + j} * d.in + k), af);
#pragma unroll
          for (int e = 0; e < 8; ++e) s[j] = fmaf(xf[e], af[e], s[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kShrinkRankBlock; ++j) {
      const float w = detail::warp_sum(s[j]);
      if (lane == 0) part[warp][j] = w;
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < nj) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kShrinkThreads / 32; ++w) total += part[w][threadIdx.x];
      dst[j0 + static_cast<int>(threadIdx.x)] = total;
    }
    __syncthreads();  // part is rewritten by the next rank block
  }
}

// Thread c of the group's output columns: its target, the row of B_t, the dot with the row's
// shrink (staged in shared memory), added into out.
__global__ void __launch_bounds__(kExpandThreads)
    lora_expand_kernel(const GroupDims d, void* out, bool out_f32, std::int32_t ld_out,
                       std::int32_t col0) {
  __shared__ float v[kLoraMaxGroupTargets * kLoraMaxGatherRank];
  detail::wait_for_predecessor();
  detail::allow_dependents();
  const LoraRow r = d.rows[blockIdx.x];
  const float* src = d.tmp + std::int64_t{blockIdx.x} * d.num_targets * d.max_rank;
  for (int i = static_cast<int>(threadIdx.x); i < d.num_targets * d.max_rank; i += kExpandThreads) {
    if (i % d.max_rank < r.rank) v[i] = src[i];  // the rest of the row's tmp is never written
  }
  __syncthreads();
  if (r.rank == 0) return;  // an unadapted row
  const std::int32_t c = static_cast<std::int32_t>(blockIdx.y) * kExpandThreads +
                         static_cast<std::int32_t>(threadIdx.x);
  // The target of column c and its row n of B.
  const int gi = c < d.out0 ? 0 : (c < d.out0 + d.out1 ? 1 : 2);
  const std::int32_t n = c - pick(gi, 0, d.out0, d.out0 + d.out1);
  if (gi >= d.num_targets || n >= pick(gi, d.out0, d.out1, d.out2)) return;
  // B_t follows A_t (rank x in) in the packed adapter.
  const std::int64_t b_off = r.rank * (pick(gi, d.a0, d.a1, d.a2) + d.in);
  const __nv_bfloat16* b = detail::bf(r.weights) + b_off + std::int64_t{n} * r.rank;
  const float* vt = v + gi * d.max_rank;
  float s = 0.0f;
  if (r.rank % 8 == 0) {  // B rows start 16-byte aligned (lora_kernel.h)
    for (int j = 0; j < r.rank; j += 8) {
      float bf[8];
      detail::unpack8(detail::load16(b + j), bf);
#pragma unroll
      for (int e = 0; e < 8; ++e) s = fmaf(vt[j + e], bf[e], s);
    }
  } else {
    for (int j = 0; j < r.rank; ++j) s = fmaf(vt[j], __bfloat162float(b[j]), s);
  }
  const std::int64_t at = std::int64_t{r.row} * ld_out + col0 + c;
  if (out_f32) {
    float* o = static_cast<float*>(out) + at;
    *o += s;
  } else {
    __nv_bfloat16* o = static_cast<__nv_bfloat16*>(out) + at;
    *o = __float2bfloat16(__bfloat162float(*o) + s);
  }
}

GroupDims group_dims(const LoraGroupArgs& g) {
  GroupDims d{};
  d.rows = g.rows;
  d.num_targets = g.num_targets;
  d.in = g.shape.in[g.first_target];
  std::int32_t* outs[kLoraMaxGroupTargets] = {&d.out0, &d.out1, &d.out2};
  std::int64_t* as[kLoraMaxGroupTargets] = {&d.a0, &d.a1, &d.a2};
  for (int i = 0; i < g.num_targets; ++i) {
    const int t = g.first_target + i;
    *outs[i] = g.shape.out[t];
    *as[i] = std::int64_t{g.layer} * g.shape.layer_units() + g.shape.unit_offset(t);
  }
  d.tmp = g.tmp;
  d.max_rank = g.max_rank;
  return d;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The checks lora.h lists; `width` is the widest input (shrink) or the group's output columns.
void check_group(const LoraGroupArgs& g, const char* what) {
  const std::string w(what);
  if (g.num_targets < 1 || g.num_targets > kLoraMaxGroupTargets || g.first_target < 0 ||
      g.first_target + g.num_targets > kLoraTargets) {
    throw std::invalid_argument(w + ": needs 1 to 3 consecutive targets of the 7 (got " +
                                std::to_string(g.num_targets) + " from " +
                                std::to_string(g.first_target) + ")");
  }
  if (g.max_rank < 1 || g.max_rank > kLoraMaxGatherRank) {
    throw std::invalid_argument(w + ": max_rank must be 1.." + std::to_string(kLoraMaxGatherRank) +
                                " (got " + std::to_string(g.max_rank) + ")");
  }
  for (int i = g.first_target; i < g.first_target + g.num_targets; ++i) {
    if (g.shape.in[i] < 8 || g.shape.in[i] % 8 != 0 || g.shape.out[i] < 8 ||
        g.shape.out[i] % 8 != 0) {
      throw std::invalid_argument(w + ": target " + std::to_string(i) +
                                  "'s dimensions must be positive multiples of 8 (in " +
                                  std::to_string(g.shape.in[i]) + ", out " +
                                  std::to_string(g.shape.out[i]) + ")");
    }
  }
  if (g.num_rows < 0) throw std::invalid_argument(w + ": negative row count");
}

}  // namespace

void lora_shrink(const LoraGroupArgs& g, const Bf16* in, std::int32_t ld_in, Stream stream) {
  check_group(g, "lora_shrink");
  for (int i = g.first_target; i < g.first_target + g.num_targets; ++i) {
    if (g.shape.in[i] != g.shape.in[g.first_target]) {
      throw std::invalid_argument("lora_shrink: a group's targets must read the same input");
    }
  }
  if (ld_in % 8 != 0 || ld_in < g.shape.in[g.first_target] || !aligned16(in)) {
    throw std::invalid_argument(
        "lora_shrink: the input must be 16-byte aligned with ld_in a "
        "multiple of 8 and at least its width (ld_in " +
        std::to_string(ld_in) + ")");
  }
  if (g.num_rows == 0) return;
  const dim3 grid(static_cast<unsigned>(g.num_rows), static_cast<unsigned>(g.num_targets));
  SERVELAB_LAUNCH_PDL(lora_shrink_kernel, grid, kShrinkThreads, 0, detail::as_stream(stream))
  (group_dims(g), detail::bf(in), ld_in);
  detail::check_launch("lora_shrink");
}

void lora_expand(const LoraGroupArgs& g, void* out, bool out_f32, std::int32_t ld_out,
                 std::int32_t col0, Stream stream) {
  check_group(g, "lora_expand");
  std::int32_t total = 0;
  for (int i = g.first_target; i < g.first_target + g.num_targets; ++i) total += g.shape.out[i];
  if (col0 < 0 || ld_out % 8 != 0 || ld_out < col0 + total || !aligned16(out)) {
    throw std::invalid_argument(
        "lora_expand: the output must be 16-byte aligned with ld_out a "
        "multiple of 8 and at least col0 + the group's columns (ld_out " +
        std::to_string(ld_out) + ", col0 " + std::to_string(col0) + ", columns " +
        std::to_string(total) + ")");
  }
  if (g.num_rows == 0) return;
  const dim3 grid(static_cast<unsigned>(g.num_rows),
                  static_cast<unsigned>((total + kExpandThreads - 1) / kExpandThreads));
  SERVELAB_LAUNCH_PDL(lora_expand_kernel, grid, kExpandThreads, 0, detail::as_stream(stream))
  (group_dims(g), out, out_f32, ld_out, col0);
  detail::check_launch("lora_expand");
}

}  // namespace servelab::kernels
