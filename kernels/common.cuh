// Internal helpers shared by the .cu files (never included by host-only code).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/device.h"
#include "kernels/float_formats.h"
#include "kernels/programmatic_launch.h"

// One spelling of a launch and of the dynamic shared-memory array for the real build and the CUDA
// emulator (tests/emu/): SERVELAB_LAUNCH(kernel, grid, block, smem_bytes, stream)(args...) and,
// inside a kernel, SERVELAB_DYNAMIC_SMEM(name); (a 128-byte aligned unsigned char array).
// `kernel` is one macro argument: name a template instance with a comma through a local pointer.
// SERVELAB_LAUNCH_PDL(...)(args...) is the same launch with programmatic dependent launch when
// the launching thread is inside kernels::ProgrammaticLaunch(true) (programmatic_launch.h: the
// kernel's contract); such a kernel calls detail::wait_for_predecessor() in every thread.
#if defined(SERVELAB_CUDA_EMU)
#define SERVELAB_LAUNCH(kernel, grid, block, smem, stream) \
  ::servelab_emu::make_launcher(kernel, #kernel, grid, block, smem, stream)
#define SERVELAB_LAUNCH_PDL(kernel, grid, block, smem, stream)              \
  ::servelab_emu::make_launcher(kernel, #kernel, grid, block, smem, stream, \
                                ::servelab::kernels::ProgrammaticLaunch::active())
#define SERVELAB_DYNAMIC_SMEM(name) unsigned char* const name = ::servelab_emu::dynamic_smem()
#else
#define SERVELAB_LAUNCH(kernel, grid, block, smem, stream) kernel<<<grid, block, smem, stream>>>
#define SERVELAB_LAUNCH_PDL(kernel, grid, block, smem, stream) \
  ::servelab::kernels::detail::make_pdl_launcher(kernel, grid, block, smem, stream)
#define SERVELAB_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

namespace servelab::kernels::detail {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
  }
}
inline void check_launch(const char* what) { check_cuda(cudaGetLastError(), what); }
inline cudaStream_t as_stream(Stream s) { return static_cast<cudaStream_t>(s); }

#if !defined(SERVELAB_CUDA_EMU)
// What SERVELAB_LAUNCH_PDL builds in a CUDA build: cudaLaunchKernelEx with the
// programmatic-stream-serialization attribute when ProgrammaticLaunch::active(), none otherwise
// (then it is an ordinary launch). A launch error throws here; check_launch after it as usual.
template <typename... P>
struct PdlLauncher {
  void (*kernel)(P...);
  dim3 grid, block;
  std::size_t smem;
  cudaStream_t stream;
  template <typename... A>
  void operator()(A&&... args) const {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = ProgrammaticLaunch::active() ? 1 : 0;
    check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<A>(args)...), "cudaLaunchKernelEx");
  }
};
template <typename... P>
PdlLauncher<P...> make_pdl_launcher(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t smem,
                                    cudaStream_t stream) {
  return {kernel, grid, block, smem, stream};
}
#endif

// The device side of programmatic dependent launch (programmatic_launch.h). Every thread of a
// kernel launched through SERVELAB_LAUNCH_PDL calls wait_for_predecessor() (griddepcontrol.wait)
// before touching what other kernels write or read, then allow_dependents()
// (griddepcontrol.launch_dependents: the next kernel's CTAs may be scheduled once every CTA of
// this one has called it or exited; it waits for this kernel's completion all the same). Both
// return at once in a kernel launched without the attribute.
__device__ __forceinline__ void wait_for_predecessor() {
#if defined(SERVELAB_CUDA_EMU)
  ::servelab_emu::griddep_wait();
#else
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependents() {
#if !defined(SERVELAB_CUDA_EMU)
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__host__ __device__ inline const __nv_bfloat16* bf(const Bf16* p) {
  return reinterpret_cast<const __nv_bfloat16*>(p);
}
__host__ __device__ inline __nv_bfloat16* bf(Bf16* p) {
  return reinterpret_cast<__nv_bfloat16*>(p);
}
// A bf16 KV-cache plane (PagedKv::k, v with format kBf16).
__host__ __device__ inline const __nv_bfloat16* kv_bf16(const void* p) {
  return static_cast<const __nv_bfloat16*>(p);
}
// True for the fp8 formats of a KV cache (kernels/kv_layout.h kv_elem_bytes 1).
__host__ __device__ inline bool is_fp8(FloatFormat f) {
  return f == FloatFormat::kFp8E4m3 || f == FloatFormat::kFp8E5m2;
}

// One 16-byte global load (ld.global.v4.u32 / LDG.E.128) of 8 bf16 values into registers.
// REQUIRES: p is 16-byte aligned. Load through this, then unpack8 the register copy: handing
// unpack8 a reference into global memory let the compiler read it as four 4-byte loads
// (issue 14; kernels/README.md "Checking the loads" shows how to see it in the PTX).
__device__ __forceinline__ uint4 load16(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint4*>(p);
}

// 8 bf16 values (a register copy, e.g. from load16) to fp32, and back. A bf16 is the top half
// of an fp32, so the conversion is two shifts/masks per 32-bit word and reads nothing in memory.
__device__ __forceinline__ void unpack8(const uint4 raw, float* f) {
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);              // low half: the even element
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);  // high half: the odd element
  }
}
__device__ __forceinline__ uint4 pack8(const float* f) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return raw;
}

// SwiGLU of one element, silu(g) * u = g / (1 + e^-g) * u in fp32: silu_mul (elementwise.cu) and
// the skinny GEMM's fused input (gemm_skinny.cu) both use this, so they produce the same bits.
__device__ __forceinline__ float silu_times(float g, float u) {
  return g / (1.0f + __expf(-g)) * u;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Deterministic block-wide sum (fixed tree order). `scratch` holds >= 32 floats; every thread
// of the block must call it; all get the result.
__device__ __forceinline__ float block_sum(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  x = warp_sum(x);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(x);
}
__device__ __forceinline__ float block_max(float x, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(x);
}

// log2(e): the attention kernels work with exp2 of scores pre-multiplied by it.
inline constexpr float kLog2e = 1.4426950408889634f;

}  // namespace servelab::kernels::detail
