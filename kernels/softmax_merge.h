// Online-softmax states and their merge: the arithmetic decode attention uses to combine the
// partial results of disjoint key ranges (the warps of a pipelined CTA, the splits of split-K).
// Shared by kernels/attention_decode_pipelined.cu and the CPU test that checks it against a
// direct softmax (tests/kernels_host_test.cc).
//
// A state over a set of keys with scores s_k (base 2: already multiplied by log2 e) and values
// v_k is m = max s_k (-inf for an empty set), l = sum 2^(s_k - m) and the normalised output
// o = sum 2^(s_k - m) v_k / l (any finite value, e.g. 0, for an empty set). Two states of
// disjoint sets merge into max m, sum l_j 2^(m_j - m) and the l-weighted average of the o_j.
//
// Plain C++17; the functions are __host__ __device__ under nvcc. On the host exp2 is
// std::exp2, on the device exp2f: results agree to float rounding, not bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace servelab::kernels {

// 2^(x - m) with 2^(-inf - m) = 0 for every m, including m = -inf (where the plain formula gives
// NaN): the weight of a score x (or of a state whose max is x) under a running max m >= x. Both
// the online update (p = shifted_exp2(s, m), alpha = shifted_exp2(m_old, m_new)) and the merge
// use it, so an empty range or a fully masked tile contributes exactly 0.
SERVELAB_HOST_DEVICE inline float shifted_exp2(float x, float m) {
#if defined(__CUDA_ARCH__)
  return x == -INFINITY ? 0.0f : exp2f(x - m);
#else
  return x == -INFINITY ? 0.0f : std::exp2(x - m);
#endif
}

struct SoftmaxState {
  float m = -INFINITY;  // max score
  float l = 0.0f;       // sum of 2^(s - m)
  float o = 0.0f;       // normalised output (one dimension)
};

// Merges n states of disjoint key ranges, state j being (ml[2 j], ml[2 j + 1]) = (m_j, l_j) and
// o_j = o[j * o_stride] (normalised). The result's o is the softmax-weighted output over the
// union. REQUIRES: n >= 1 and at least one l_j > 0; every o_j finite.
SERVELAB_HOST_DEVICE inline SoftmaxState merge_softmax_states(const float* ml, const float* o,
                                                              int n, std::int64_t o_stride) {
  SoftmaxState r;
  for (int j = 0; j < n; ++j) {
    if (ml[2 * j] > r.m) r.m = ml[2 * j];
  }
  float acc = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float w = ml[2 * j + 1] * shifted_exp2(ml[2 * j], r.m);
    r.l += w;
    acc += w * o[j * o_stride];
  }
  r.o = acc / r.l;
  return r;
}

}  // namespace servelab::kernels
