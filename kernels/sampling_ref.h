// Host references for the GPU sampling kernels (kernels/sampling.h).
//
// sample_reference is the one sampler on the host: CpuExecutor (engine/cpu_executor.cc) samples
// with it, and the GPU kernels are tested against it. Semantics: greedy = argmax, lowest token id
// on exact ties; otherwise softmax(logits / temperature), tokens in (probability descending, id
// ascending) order, the prefix the Truncation keeps, then the first token whose running mass
// exceeds u * (prefix mass) for one uniform draw u in [0, 1). The caller draws u from the request's
// stream, so GPU and CPU sample the same token from the same logits up to rounding at the
// boundaries.
#pragma once

#include <cstdint>
#include <span>

namespace servelab::kernels {

std::int32_t greedy_reference(std::span<const float> logits);

// Which tokens a draw may land on, after the temperature, in vLLM v1's order: min_p keeps the
// tokens whose probability is at least min_p x the largest; top_k keeps the first k of those in
// (probability descending, id ascending) order (0: all); top_p keeps the shortest prefix of what
// is left whose mass reaches top_p x its mass (at least one token).
struct Truncation {
  double top_p = 1.0;      // (0, 1]
  std::int32_t top_k = 0;  // >= 0
  double min_p = 0.0;      // [0, 1]
};

// Double precision: the CpuExecutor semantics. Never sorts the vocabulary: min_p is a filter,
// top_k a selection, top_p and the draw quickselects that halve the range holding the boundary
// mass (expected O(vocabulary); a walk over the sorted order picks the same token up to the
// rounding of sums taken in another order). REQUIRES: temperature > 0, the truncation in its
// ranges, 0 <= u < 1, !logits.empty().
std::int32_t sample_reference(std::span<const float> logits, double temperature,
                              const Truncation& keep, double u);

// The GPU algorithm, in fp32 on the host: no sort; each token gets the 64-bit key
// (float bits of its probability) << 32 | (0xffffffff - id), so key order is exactly the
// (probability descending, id ascending) order. The truncations become a lowest key: min_p's is
// bits(min_p) << 32 (the largest probability is exp2(0) = 1), top_k's the largest key K with
// at least k keys >= K (a bisection counting keys), top_p's the largest key K with mass(keys >=
// K) >= top_p x mass(keys >= the other two's); a last bisection finds the sampled token. Each
// bisection step is one pass of sums. Used to unit-test the algorithm on the CPU; the kernel
// does the same passes with block-wide reductions.
std::int32_t sample_bisect(std::span<const float> logits, float temperature, const Truncation& keep,
                           float u);

}  // namespace servelab::kernels
