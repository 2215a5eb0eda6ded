// One warpgroup MMA on its own (kernels/wgmma_probe.cu): the GPU check of the PTX reading that the
// wgmma prefill kernel (attention_prefill_wgmma.cu) and the CUDA emulator share.
//
// D (64 x n, fp32) = A (64 x 16) B (16 x n), bf16 operands, one CTA of one warpgroup (128
// threads). The operands sit in shared memory in the no-swizzle core-matrix layout the prefill
// kernel uses (8 rows x 16 bytes, 128 contiguous bytes per core matrix), are described to the
// instruction with the caller's LBO and SBO (kernels/ptx.cuh wgmma_desc), and D comes back
// through ptx.cuh's accumulator mapping. With the strides of wgmma_probe_kernel_strides the probe
// computes what the prefill kernel's S = Q K^T (kSs) and O += P V (kRsBmn) compute; if the GPU
// disagrees with A B there, running it with other strides tells which field was misread
// (GpuKernels.WgmmaOperandLayoutsMatchTheProduct does that and names the fix).
//
// Placement (bytes from each operand's start; a "chunk" is 8 consecutive bf16 of a row):
//   A, 64 rows (m) x 2 chunks (k):               (m / 8) 256 + 128 c + 16 (m % 8)
//   B for kSs, K-major: n rows x 2 chunks (k):    (n / 8) 256 + 128 c + 16 (n % 8)
//   B for kRsBmn, MN-major: 16 rows (k) x n / 8 chunks (n): (k / 8) 16 n + 128 c + 16 (k % 8)
// With kRsBmn, A is not in shared memory: each warp passes rows 16 (warp % 4) .. as mma.m16n8k16
// A fragments (kernels/mma_fragments.h).
#pragma once

#include <cstdint>

#include "kernels/device.h"

namespace servelab::kernels {

enum class WgmmaProbeForm {
  kSs,     // A and B from shared memory, both K-major (the prefill kernel's S = Q K^T)
  kRsBmn,  // A from registers, B from shared memory MN-major (imm-trans-b 1; its O += P V)
};

struct WgmmaStrides {
  std::uint32_t lbo = 0, sbo = 0;  // bytes, multiples of 16
};

struct WgmmaProbeArgs {
  WgmmaProbeForm form = WgmmaProbeForm::kSs;
  std::int32_t n = 64;      // 64 or 128
  const Bf16* a = nullptr;  // [64][16] row-major, 4-byte aligned
  const Bf16* b = nullptr;  // [16][n] row-major: B(k, j) at b[k * n + j]
  float* d = nullptr;       // [64][n] row-major
  WgmmaStrides a_strides;   // kSs only
  WgmmaStrides b_strides;
};

// The strides the prefill kernel passes for these operands (its reading of the PTX ISA: LBO
// along K, SBO along M/N, for either major-ness): kSs A and B {128, 256}; kRsBmn B {16 n, 128}.
WgmmaStrides wgmma_probe_kernel_strides(WgmmaProbeForm form, bool operand_b, std::int32_t n);

// Whether this build has the probe's code (as prefill_kernel_built(PrefillKernel::kWgmma)).
bool wgmma_probe_built();

// Launches the probe on `stream`. Throws std::invalid_argument when the build lacks it, n is not
// 64 or 128, or a stride is not a positive multiple of 16 or lets an operand reach past the
// probe's shared memory under either reading of LBO and SBO (so that no assignment a test tries
// can fault the device); std::runtime_error on a launch error.
void wgmma_probe(const WgmmaProbeArgs& args, Stream stream);

}  // namespace servelab::kernels
