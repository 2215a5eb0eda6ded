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
//   Warpgroup MMA (sm_90a only: compiled where SERVELAB_WGMMA is 1, see below; a warpgroup is
//   128 consecutive threads of the block, 128 w ..; every function is reached by all of them):
//   wgmma_fence()           wgmma.fence: before the first wgmma_* after the thread touched the
//                           accumulators or A fragments (in practice: before each batch);
//   wgmma_ss<N>(d, da, db, acc)     d = A B (+ d if acc): d 64 x N fp32 (float[N / 8][4] per
//                           thread), A 64 x 16 and B 16 x N bf16 from shared memory through
//                           descriptors (wgmma_desc), both K-major; N = 64 or 128;
//   wgmma_rs_bmn<N>(d, a, db, acc)  the same with A from registers (the thread's mma.m16n8k16 A
//                           fragment of rows 16 (warp % 4) ..) and B MN-major (imm-trans-b 1);
//   wgmma_commit()          closes the thread's group of wgmma operations;
//   wgmma_wait<K>(regs...)  waits until at most K groups are pending; then the accumulators and
//                           A registers of the retired groups may be read or reused. Every
//                           register array passed is fenced (an empty asm that reads and writes
//                           it), so the compiler cannot move their uses across the wait;
//   wgmma_desc(addr, lbo, sbo)      the no-swizzle descriptor of a canonical layout at shared
//                           address addr (16-byte aligned): 8 rows of 16 bytes per core matrix,
//                           lbo the byte stride of core matrices along K, sbo along M/N (K-major;
//                           MN-major: lbo along K, sbo along M/N too, per the PTX ISA);
//   fence_proxy_async()     fence.proxy.async.shared::cta: this thread's generic-proxy writes to
//                           shared memory (cp.async included) become visible to wgmma reads.
//   The accumulator element i of a thread of warp w, lane l is row 16 (w % 4) + l / 4 +
//   8 ((i / 2) % 2), column 8 (i / 4) + 2 (l % 4) + i % 2: per warp, mma.m16n8's C fragment of
//   each 8-column tile in turn (so float[N / 8][4] views it as mma.sync C tiles).
// Every function with .sync in its instruction must be reached by all 32 lanes of the warp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace servelab::kernels::detail {

// Warpgroup MMA compiled: on the CUDA emulator, and on the GPU where nvcc targets sm_90a.
#if defined(SERVELAB_CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SERVELAB_WGMMA 1
#else
#define SERVELAB_WGMMA 0
#endif

// The host side of the same question: whether this build has the sm_90a code (the emulator, or
// servelab_kernels configured with SERVELAB_CUDA_SM90A); the wgmma launchers refuse otherwise.
inline constexpr bool kWgmmaBuilt =
#if defined(SERVELAB_CUDA_EMU) || defined(SERVELAB_CUDA_SM90A)
    true;
#else
    false;
#endif

// Byte offset of row r, 16-byte chunk c (elements 8 c .. 8 c + 7) of a tile whose rows hold
// kRowElems bf16, in the no-swizzle core-matrix layout the wgmma kernels use: 8-row x 16-byte core
// matrices of 128 contiguous bytes, chunks of a row group 128 bytes apart (LBO along the chunks),
// row groups 16 kRowElems bytes apart.
template <int kRowElems>
__host__ __device__ __forceinline__ std::uint32_t core_matrix_offset(int r, int c) {
  return static_cast<std::uint32_t>((r / 8) * (kRowElems * 16) + c * 128 + (r % 8) * 16);
}

__device__ __forceinline__ std::uint64_t wgmma_desc(std::uint32_t addr, std::uint32_t lbo,
                                                    std::uint32_t sbo) {
  return (std::uint64_t{(addr >> 4) & 0x3fffu}) | (std::uint64_t{(lbo >> 4) & 0x3fffu} << 16) |
         (std::uint64_t{(sbo >> 4) & 0x3fffu} << 32);
}

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
__device__ __forceinline__ void wgmma_fence() { servelab_emu::wgmma_fence(); }
__device__ __forceinline__ void wgmma_commit() { servelab_emu::wgmma_commit(); }
template <int K, typename... R>
__device__ __forceinline__ void wgmma_wait(R&...) {
  servelab_emu::wgmma_wait(K);
}
template <int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], std::uint64_t da, std::uint64_t db,
                                         bool acc) {
  servelab_emu::wgmma_bf16(&d[0][0], N, nullptr, da, db, acc, false);
}
template <int N>
__device__ __forceinline__ void wgmma_rs_bmn(float (&d)[N / 8][4], const std::uint32_t (&a)[4],
                                             std::uint64_t db, bool acc) {
  servelab_emu::wgmma_bf16(&d[0][0], N, a, 0, db, acc, true);
}
__device__ __forceinline__ void fence_proxy_async() { servelab_emu::fence_proxy_async(); }

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

#if SERVELAB_WGMMA
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void fence_regs() {}
template <typename... R>
__device__ __forceinline__ void fence_regs(float& x, R&... rest);
template <typename... R>
__device__ __forceinline__ void fence_regs(std::uint32_t& x, R&... rest);
template <typename T, int M, typename... R>
__device__ __forceinline__ void fence_regs(T (&x)[M], R&... rest) {
#pragma unroll
  for (int i = 0; i < M; ++i) fence_regs(x[i]);
  fence_regs(rest...);
}
template <typename... R>
__device__ __forceinline__ void fence_regs(float& x, R&... rest) {
  asm volatile("" : "+f"(x)::"memory");
  fence_regs(rest...);
}
template <typename... R>
__device__ __forceinline__ void fence_regs(std::uint32_t& x, R&... rest) {
  asm volatile("" : "+r"(x)::"memory");
  fence_regs(rest...);
}
template <int K, typename... R>
__device__ __forceinline__ void wgmma_wait(R&... regs) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(K) : "memory");
  fence_regs(regs...);
}
template <int N>
__device__ void wgmma_ss(float (&d)[N / 8][4], std::uint64_t da, std::uint64_t db, bool acc);
template <int N>
__device__ void wgmma_rs_bmn(float (&d)[N / 8][4], const std::uint32_t (&a)[4], std::uint64_t db,
                             bool acc);
template <>
__device__ __forceinline__ void wgmma_ss<64>(float (&d)[8][4], std::uint64_t da, std::uint64_t db,
                                             bool acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3])
      : "l"(da), "l"(db), "r"(static_cast<int>(acc)));
}
template <>
__device__ __forceinline__ void wgmma_rs_bmn<64>(float (&d)[8][4], const std::uint32_t (&a)[4],
                                                 std::uint64_t db, bool acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(static_cast<int>(acc)));
}
template <>
__device__ __forceinline__ void wgmma_ss<128>(float (&d)[16][4], std::uint64_t da, std::uint64_t db,
                                              bool acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
        "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]),
        "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]),
        "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]),
        "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(da), "l"(db), "r"(static_cast<int>(acc)));
}
template <>
__device__ __forceinline__ void wgmma_rs_bmn<128>(float (&d)[16][4], const std::uint32_t (&a)[4],
                                                  std::uint64_t db, bool acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
        "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]),
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]),
        "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]),
        "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]),
        "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]),
        "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]),
        "+f"(d[15][2]), "+f"(d[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(static_cast<int>(acc)));
}
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#endif
#endif

}  // namespace servelab::kernels::detail
