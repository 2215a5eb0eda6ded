// What the tests that need a GPU share (tests/gpu_kernels_test.cc, tests/gpu_executor_test.cc,
// tests/calibration_e2e_test.cc): whether a GPU is usable and why not, the skip where none is,
// and the reduced case lists of a slow run.
//
// REQUIRE_GPU() skips the calling test (GTEST_SKIP, with "no CUDA device: " and the reason) when
// this build has no CUDA support or the CUDA runtime reports no usable device (on a machine
// without a GPU, "driver version is insufficient"): GPU-only tests always compile and skip
// cleanly. ReducedRun(): SERVELAB_SANITIZER_RUN is set, as gpu-check sets it under
// compute-sanitizer and tests/emu/CMakeLists.txt for the CUDA emulator's ctest entries (both about
// a hundredfold slower than the GPU); the long tests then run fewer cases.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#if SERVELAB_HAVE_CUDA
#include "kernels/device.h"
#endif

namespace servelab {

inline bool GpuAvailable(std::string* reason) {
#if SERVELAB_HAVE_CUDA
  return kernels::cuda_device_available(reason);
#else
  *reason = "this build has no CUDA support (configured without nvcc)";
  return false;
#endif
}

inline bool ReducedRun() { return std::getenv("SERVELAB_SANITIZER_RUN") != nullptr; }

}  // namespace servelab

#define REQUIRE_GPU()                                                               \
  do {                                                                              \
    std::string why;                                                                \
    if (!::servelab::GpuAvailable(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)
