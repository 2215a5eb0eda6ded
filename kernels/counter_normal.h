// Counter-based, approximately normal random numbers: element `index` of a random tensor is a
// pure function of (key, index), so any host thread or GPU thread computes any element without
// a sequential stream. LlamaWeights::random (engine/llama_weights.cc, host threads) and the CUDA
// weight generator (kernels/random_fill.h) both evaluate counter_normal() from this header and
// must agree bit for bit (a GPU test checks it element by element).
//
// Construction: h = element `index` of the SplitMix64 stream that starts at `key`; its four
// 16-bit quarters are summed (Irwin-Hall of four discrete uniforms, exact integer arithmetic) and
// centred: k in [-131070, 131070], mean 0, standard deviation exactly kIrwinHall4Std, kurtosis
// 2.7 (a normal's is 3), |k / kIrwinHall4Std| <= 3.46. The value is mean + step * k, with
// step = scale / kIrwinHall4Std rounded to float, computed in double: step * k is exact (24-bit
// times 18-bit significands), so the sum is the only rounding before the final conversion to
// float, and a fused multiply-add gives the same bits as separate operations. That is why this is
// not Box-Muller: log and cos differ in the last ulp between glibc and CUDA's libdevice, and one
// ulp moves a bf16 rounding now and then; integer arithmetic and one correctly rounded double
// operation do not.
//
// Plain C++17 (kernels/*.cu include it); the functions are __host__ __device__ under nvcc.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace servelab::kernels {

// sqrt((65536^2 - 1) / 3): the standard deviation of a sum of four independent uniform integers
// in [0, 65535].
inline constexpr double kIrwinHall4Std = 37837.22723720648;

// One random tensor: element i is counter_normal(params, i).
struct CounterNormal {
  std::uint64_t key = 0;  // the tensor's stream (seed and tensor name mixed by the caller)
  float mean = 0.0f;
  float step = 0.0f;  // the value of one integer unit: scale / kIrwinHall4Std
};

// Parameters for a tensor of the given mean and standard deviation `scale`.
inline CounterNormal counter_normal_params(std::uint64_t key, double mean, double scale) {
  return {key, static_cast<float>(mean), static_cast<float>(scale / kIrwinHall4Std)};
}

// Element `index` of the SplitMix64 stream whose state starts at `key` (state += golden gamma,
// then the SplitMix64 finaliser; core/rng.h mix64(key + index * gamma) is the same number).
SERVELAB_HOST_DEVICE inline std::uint64_t counter_hash(std::uint64_t key, std::uint64_t index) {
  std::uint64_t x = key + (index + 1) * 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The sum of the four 16-bit quarters of h, centred: in [-131070, 131070].
SERVELAB_HOST_DEVICE inline std::int32_t irwin_hall4(std::uint64_t h) {
  const auto sum = (h & 0xffffU) + ((h >> 16) & 0xffffU) + ((h >> 32) & 0xffffU) + (h >> 48);
  return static_cast<std::int32_t>(sum) - 2 * 65535;
}

SERVELAB_HOST_DEVICE inline float counter_normal(const CounterNormal& p, std::uint64_t index) {
  const std::int32_t k = irwin_hall4(counter_hash(p.key, index));
  return static_cast<float>(static_cast<double>(p.mean) + static_cast<double>(p.step) * k);
}

}  // namespace servelab::kernels
