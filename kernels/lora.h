// LoRA deltas for the rows of a step under any mix of adapters (kernels/lora.cu), in two launches
// per group of projections that share an input, whatever the number of adapters: Punica's BGMV
// form, where each row reads its own adapter's weights (L2 serves the rows of one adapter).
//
// The rows: `rows[i]` names a row of the step's activations and its adapter (packed as
// kernels/lora_kernel.h LoraShape describes, B already scaled). A group is `num_targets`
// consecutive targets from `first_target` that read the same input and write consecutive column
// slices of one output: q, k, v (the fused QKV output), gate, up (the fused gate/up output), o or
// down alone (the residual). For row i and the group's g-th target t:
//   lora_shrink:  tmp[i][g][j] = sum_k in[row][k] * A_t[j][k]          (j < rank; fp32)
//   lora_expand:  out[row][col0 + c_t + n] += sum_j tmp[i][g][j] * B_t[n][j]   (n < out_t)
// where c_t is the sum of out over the group's targets before t. Sums in fp32 in a fixed order
// (deterministic; another order than cuBLAS's). An fp32 output adds the delta; a bf16 output is
// replaced by bf16(its value + delta), as a cuBLAS GEMM with beta 1 computes it. Rows absent from
// `rows`, and rows listed with rank 0 (weights unused: a CUDA graph's table lists every row of
// its bucket, unadapted and padding rows with rank 0), are untouched; a row may appear at most
// once.
//
// REQUIRES (not checkable on the host, so undefined behaviour if broken): every row index inside
// `in` and `out`, 0 <= rank <= max_rank, weights 16-byte aligned (DeviceBuffer's are), `tmp`
// holding num_rows * num_targets * max_rank floats. Checked (std::invalid_argument): 1 <=
// num_targets <= 3 with first_target + num_targets <= kLoraTargets, 1 <= max_rank <=
// kLoraMaxGatherRank, the group's in and out dimensions positive multiples of 8, ld_in and
// ld_out multiples of 8 and >= the widths they hold, in and out 16-byte aligned. A launch error
// throws std::runtime_error. Both kernels launch with programmatic dependent launch when the
// caller asks for it (kernels/programmatic_launch.h).
#pragma once

#include <cstdint>

#include "kernels/device.h"
#include "kernels/gemm.h"
#include "kernels/lora_kernel.h"

namespace servelab::kernels {

struct LoraRow {
  const Bf16* weights = nullptr;  // the row's adapter, packed (device memory)
  std::int32_t row = 0;           // the row of `in` and `out`
  std::int32_t rank = 0;          // the adapter's rank; 0: the row is skipped
};

struct LoraGroupArgs {
  const LoraRow* rows = nullptr;  // device memory, num_rows entries
  std::int32_t num_rows = 0;
  LoraShape shape;
  std::int32_t layer = 0;
  std::int32_t first_target = 0;
  std::int32_t num_targets = 1;
  float* tmp = nullptr;  // [num_rows][num_targets][max_rank]
  std::int32_t max_rank = 0;
};

// tmp = in A^T for the group's targets. in: [tokens][ld_in] bf16, the group's input.
void lora_shrink(const LoraGroupArgs& g, const Bf16* in, std::int32_t ld_in, Stream stream);

// out[:, col0 ..] += tmp B^T for the group's targets. out: [tokens][ld_out], fp32 (out_f32) or
// bf16.
void lora_expand(const LoraGroupArgs& g, void* out, bool out_f32, std::int32_t ld_out,
                 std::int32_t col0, Stream stream);

// The cuBLAS form (kernels/lora_cublas.cc), for segments of consecutive rows under one adapter
// where the weights are worth reusing across rows (prefill chunks): for each of the group's
// targets and each segment, a shrink GEMM into `tmp` (bf16, at least the longest segment's rows x
// its rank) and an expand GEMM with beta 1 onto the target's column slice of `out` (from column
// 0). The same contract as lora_shrink + lora_expand but for the shrink's rounding to bf16;
// 2 x targets x segments GEMMs.
struct LoraSegment {
  const Bf16* weights = nullptr;  // the adapter, packed
  std::int32_t row0 = 0, rows = 0, rank = 0;
};
void lora_cublas(Gemm& gemm, const LoraSegment* segments, std::int32_t num_segments,
                 const LoraShape& shape, std::int32_t layer, std::int32_t first_target,
                 std::int32_t num_targets, const Bf16* in, std::int32_t ld_in, void* out,
                 Gemm::Out out_type, std::int32_t ld_out, Bf16* tmp, Stream stream);

}  // namespace servelab::kernels
