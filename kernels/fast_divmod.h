// Division by a run-time constant without a divide instruction: the pipelined decode kernel
// maps every token position to (block, slot) with one multiply-high, one add and one shift
// (Granlund and Montgomery's method for an invariant divisor: for d with 2^(l-1) < d <= 2^l,
// q = (mulhi(n, m) + n) >> l with m = floor(2^32 (2^l - d) / d) + 1). Checked on the CPU against
// `/` for every divisor 1..256 (tests/kernels_host_test.cc).
//
// Plain C++17; the functions are __host__ __device__ under nvcc.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace servelab::kernels {

struct FastDivmod {
  std::uint32_t divisor = 1;
  std::uint32_t mul = 1;
  std::uint32_t shift = 0;

  // REQUIRES: 1 <= d < 2^31.
  static FastDivmod make(std::uint32_t d) {
    FastDivmod f;
    f.divisor = d;
    f.shift = 0;
    while ((std::uint64_t{1} << f.shift) < d) ++f.shift;
    const std::uint64_t excess = (std::uint64_t{1} << f.shift) - d;  // < d
    f.mul = static_cast<std::uint32_t>((excess << 32) / d + 1);
    return f;
  }

  // n / divisor. REQUIRES: n < 2^31 (so that mulhi(n, mul) + n cannot overflow 32 bits).
  SERVELAB_HOST_DEVICE std::uint32_t div(std::uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const std::uint32_t hi = __umulhi(n, mul);
#else
    const std::uint32_t hi = static_cast<std::uint32_t>((std::uint64_t{n} * mul) >> 32);
#endif
    return (hi + n) >> shift;
  }
  // n % divisor given q = div(n).
  SERVELAB_HOST_DEVICE std::uint32_t mod(std::uint32_t n, std::uint32_t q) const {
    return n - q * divisor;
  }
};

}  // namespace servelab::kernels
