// How the skinny decode GEMM (kernels/gemm_skinny.cu) splits a linear layer over the GPU: plain
// C++, no CUDA types, unit-tested on the CPU (tests/skinny_plan_test.cc).
//
// The kernel's work: y[T][out] = x[T][in] w[out][in]^T for T <= 32 tokens, where the time is the
// weights' bytes over the memory bandwidth. A CTA owns kSkinnyCtaRows output rows and a range of
// `in` (its split); `splits` CTAs share a row block, each streaming rows x (in / splits) weights,
// and the last of them to finish sums their fp32 partial tiles in split order (so the result does
// not depend on which finished last) and writes y. One split needs no partials.
//
// Why split at all: a layer with few output rows (Llama-3-8B's o_proj: 4,096 rows = 32 row
// blocks) leaves most SMs idle, and one SM cannot keep enough bytes in flight to read its share
// of the weights at the device's bandwidth. Why not split much: the last CTA of a row block reads
// every split's partial tile (splits x rows x T x 4 bytes) after the others finished, a tail that
// grows with T and the splits. plan_skinny weighs the two with the model below and takes the
// cheapest split count (the smallest among equals):
//   stream(S) = max(weights / bandwidth,
//                   ceil(R S / sms) x cta_bytes(S) / (min(ceil(R S / sms), ctas_per_sm) x
//                                                      kSkinnyCtaInflightBytes / latency))
//   tail(S)   = 0 for S = 1, else latency + (S + 1) x rows x T x 4 / l2_bytes_per_sm_us
// with R row blocks, cta_bytes(S) = rows x ceil(chunks / S) x 64 (a chunk is 32 columns). The
// machine constants (SkinnyMachine) are an H200's, estimates to be checked against
// `BM_DecodeGemm` in a GPU window; the plan only ranks split counts with them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace servelab::kernels {

inline constexpr std::int32_t kSkinnyCtaRows = 128;  // 8 warps x one 16-row MMA tile
inline constexpr std::int32_t kSkinnyChunk = 32;     // columns per pipeline stage
inline constexpr std::int32_t kSkinnyMaxSplits = 32;
// Weight bytes a CTA keeps in flight: 5 stages ahead x 128 rows x 64 bytes (gemm_skinny.cu).
inline constexpr double kSkinnyCtaInflightBytes = 5.0 * kSkinnyCtaRows * 64.0;

struct SkinnyMachine {
  std::int32_t sms = 132;
  std::int32_t ctas_per_sm = 2;    // resident CTAs of the kernel instance (occupancy)
  double bandwidth_gbps = 4200.0;  // the D2D copy an H200 measured (docs/performance.md)
  double latency_us = 1.5;         // a loaded HBM round trip (idle: under 1 us), an atomic
  double l2_gbps_per_sm = 100.0;   // one SM reading partials from L2
};

struct SkinnyPlan {
  std::int32_t row_blocks = 0;  // ceil(out / kSkinnyCtaRows)
  std::int32_t chunks = 0;      // in / kSkinnyChunk
  std::int32_t splits = 1;      // CTAs per row block; 1 <= splits <= min(chunks, kSkinnyMaxSplits)
  std::size_t partial_bytes = 0;  // splits x row_blocks x tokens x rows x 4 (0 for one split)
  double predicted_us = 0.0;      // the model's time, for tests and the benchmark's label
};

// The plan of one call: `partial_capacity` bytes of workspace for the fp32 partials and
// `counters` row-block counters (a split plan needs row_blocks <= counters and its partials to
// fit; with neither, one split). REQUIRES 1 <= tokens <= kSkinnyMaxTokens (32, gemm_kernel.h), in a
// positive multiple of kSkinnyChunk, out > 0, machine.sms > 0 and machine.ctas_per_sm > 0 (throws
// std::invalid_argument otherwise).
// forced_splits > 0 takes that many (clamped to the chunks and kSkinnyMaxSplits; still one when
// the workspace cannot hold them), for tests and benchmarks.
SkinnyPlan plan_skinny(std::int32_t tokens, std::int32_t in, std::int32_t out,
                       const SkinnyMachine& machine, std::size_t partial_capacity,
                       std::int32_t counters, std::int32_t forced_splits = 0);

}  // namespace servelab::kernels
