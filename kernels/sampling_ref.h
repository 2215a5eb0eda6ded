// Host references for the GPU sampling kernels (kernels/sampling.h).
//
// top_p_reference is the one nucleus sampler on the host: CpuExecutor (engine/cpu_executor.cc)
// samples with it, and the GPU kernels are tested against it. Semantics: greedy = argmax, lowest
// token id on exact ties; nucleus = softmax(logits / temperature), tokens in (probability
// descending, id ascending) order, the shortest prefix whose mass reaches top_p * total (at least
// one token), then the first token whose running mass exceeds u * (prefix mass) for one uniform
// draw u in [0, 1). The caller draws u from the request's stream, so GPU and CPU sample the same
// token from the same logits up to rounding at the boundaries.
#pragma once

#include <cstdint>
#include <span>

namespace servelab::kernels {

std::int32_t greedy_reference(std::span<const float> logits);

// Double precision, sorting: the CpuExecutor semantics. REQUIRES: temperature > 0,
// 0 < top_p <= 1, 0 <= u < 1, !logits.empty().
std::int32_t top_p_reference(std::span<const float> logits, double temperature, double top_p,
                             double u);

// The GPU algorithm, in fp32 on the host: no sort; each token gets the 64-bit key
// (float bits of its probability) << 32 | (0xffffffff - id), so key order is exactly the
// (probability descending, id ascending) order, and two bisections over the key space find the
// last token of the nucleus and then the sampled token, each step one pass of sums
// (mass of keys >= K). Used to unit-test the algorithm on the CPU; the kernel does the same
// passes with block-wide reductions.
std::int32_t top_p_bisect(std::span<const float> logits, float temperature, float top_p, float u);

}  // namespace servelab::kernels
