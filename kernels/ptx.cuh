// The PTX instructions of the tensor-core attention kernels (attention_decode_pipelined.cu,
// attention_prefill_fa2.cu), one definition each. Under the CUDA emulator (SERVELAB_CUDA_EMU,
// tests/emu/) the same functions run its models of the instructions, so the kernels' own code is
// what the emulated GPU tests execute.
//
// Contracts (PTX ISA):
//   smem_u32(p)             the shared-state-space address of p (p in the block's shared memory);
//   cp_async16(dst, src, f) 16 bytes global -> shared, asynchronously, bypassing L1; f = false
//                           reads nothing and zero-fills the 16 bytes. dst and src 16-byte aligned;
//   cp_async_commit()       closes this thread's group of cp.async requests;
//   cp_async_wait<N>()      waits until at most N of this thread's groups are outstanding (their
//                           data is visible to this thread; other threads need a barrier after);
//   ldmatrix_x4(_trans)     four 8x8 b16 matrices from shared memory, lane l giving the address of
//                           row l % 8 of matrix l / 8 (16-byte aligned); .trans transposes each;
//   mma_bf16(d, a, b0, b1)  d += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulate;
//   ex2(x)                  2^x (ex2.approx.ftz: about 2 ulp, denormals flushed);
//   ld_stream16(p)          16 bytes from global memory read once (ld.global.nc.L1::no_allocate:
//                           the non-coherent path, not kept in L1); p 16-byte aligned and not
//                           written by any thread while the kernel runs (weights).
// Every function with .sync in its instruction must be reached by all 32 lanes of the warp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::kernels::detail {

#if defined(SERVELAB_CUDA_EMU)

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(std::uint32_t dst, const void* src, bool full) {
  servelab_emu::cp_async16(dst, src, full ? 16 : 0);
}
__device__ __forceinline__ void cp_async_commit() { servelab_emu::cp_async_commit(); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  servelab_emu::cp_async_wait(N);
}
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  servelab_emu::ldmatrix_x4(r, addr, false);
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  servelab_emu::ldmatrix_x4(r, addr, true);
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  servelab_emu::mma_m16n8k16_bf16(d, a, b0, b1);
}
__device__ __forceinline__ float ex2(float x) { return exp2f(x); }
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  return *static_cast<const uint4*>(p);
}

#else

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(std::uint32_t dst, const void* src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(full ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

#endif

}  // namespace servelab::kernels::detail
