// The CUDA emulator: runs the project's own CUDA sources (kernels/*.cu, kernels/device.cc,
// kernels/gemm.cc, kernels/cuda_graph.cc) on the CPU, so that the GPU tests execute on a machine
// without a GPU (docs/testing.md "The CUDA emulator"). A GPU window is short and rare: every
// indexing, masking, pipelining or synchronisation mistake found here is one fewer found there.
//
// How it is used: the sources are compiled as C++ with -DSERVELAB_CUDA_EMU and this folder
// (tests/emu/include) first on the include path, where cuda_runtime.h, cuda_bf16.h, mma.h and
// cublas_v2.h stand in for NVIDIA's. Nothing of CUDA is needed to build or run it.
//
// What it models, and how faithfully:
//   - A launch runs its blocks one after another; a block's threads are fibers (cooperative,
//     one OS thread, switched only at __syncthreads and warp collectives), so a kernel computes
//     what it computes on a GPU for any race-free program. Blocks are independent by CUDA's rules.
//   - __syncthreads waits for every thread of the block that has not exited; warp collectives
//     (__shfl_xor_sync, __syncwarp, ldmatrix, mma.sync, wmma) need all 32 lanes (a full mask),
//     else the launch fails with a message. A block whose threads wait forever (a barrier in
//     divergent code) fails the launch ("deadlock").
//   - Dynamic shared memory is a fresh heap buffer of exactly the launch's size per block, filled
//     with 0xff (NaN in bf16 and fp32), so reading what was never written shows up as NaN and an
//     access past its end is an AddressSanitizer error in sanitizer builds.
//   - cp.async copies land only when the issuing thread's cp.async.wait_group retires their group:
//     data read before the wait (or before the barrier after it) is stale, as it may be on a GPU.
//   - ldmatrix and mma.sync m16n8k16 follow the PTX ISA's fragment layouts (written from the ISA,
//     independently of kernels/decode_fragments.h and kernels/mma_fragments.h, which they check).
//     Address alignment and shared-memory bounds are checked.
//   - Launch configuration is checked as the driver would: block size, grid limits, dynamic
//     shared memory above 48 KB only after cudaFuncSetAttribute, at most 227 KB.
//   - Streams are synchronous (every operation completes before the call returns) except while a
//     stream is being captured: then launches, copies and fills are recorded into the graph and
//     run by cudaGraphLaunch; a synchronising call on a capturing stream fails the capture, as
//     CUDA's does.
//   - One device of 4 GiB (cudaMemGetInfo, cudaGetDeviceProperties: H200-shaped, 132 SMs).
//     Device memory, kernel attributes and stream captures belong to the process, as in CUDA (an
//     attribute set on one host thread holds for launches from another); the last error is per
//     host thread; a launch runs on the thread that makes it.
//   - The schedule is one legal GPU schedule among many, and others can be chosen (Schedule
//     below, SERVELAB_EMU_SCHEDULE): a race-free kernel computes the same under every one, so
//     a result that changes with the schedule is a race (a missing barrier or wait), found
//     without a GPU's racecheck.
// Not modelled: timing, memory ordering between blocks, occupancy beyond a formula, warp
// divergence inside a collective-free region (lanes run to their next collective in turn).
//
// Header-only declarations; tests/emu/cuda_emu.cc holds the runtime.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- keywords ------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __restrict__ __restrict
// A block's threads are fibers of one OS thread and blocks run one at a time: a function-local
// static is exactly one block's shared array.
#define __shared__ static

// ---- vector types --------------------------------------------------------------------------
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }

// ---- built-in variables (set by the emulator for the running fiber) -------------------------
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
inline constexpr int warpSize = 32;

// ---- bf16 ----------------------------------------------------------------------------------
struct __nv_bfloat16 {
  unsigned short __x;
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  const unsigned u = __float_as_uint(f);
  if (std::isnan(f)) return {static_cast<unsigned short>((u >> 16) | 0x40u)};  // quiet NaN
  const unsigned rounded = u + 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return {static_cast<unsigned short>(rounded >> 16)};
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float(unsigned{h.__x} << 16); }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }

// ---- arithmetic intrinsics -----------------------------------------------------------------
// The _rn forms are single IEEE operations in round-to-nearest; the project's C++ is compiled
// without floating-point contraction on x86-64 (no FMA in the baseline ISA), so a plain
// operation is exactly that.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __expf(float x) { return std::exp(x); }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((std::uint64_t{a} * b) >> 32);
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

// ---- synchronisation and warp collectives ----------------------------------------------------
void __syncthreads();
void __syncwarp(unsigned mask = 0xffffffffu);
namespace servelab_emu {
// Every lane of the warp posts `value`; lane l gets the value of lane l ^ lane_mask.
std::uint32_t shfl_xor(unsigned mask, std::uint32_t value, int lane_mask, int width);
}  // namespace servelab_emu
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  static_assert(sizeof(T) == 4, "the emulator shuffles 32-bit values");
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits = servelab_emu::shfl_xor(mask, bits, lane_mask, width);
  std::memcpy(&value, &bits, 4);
  return value;
}

// ---- global-memory atomics, fences and cache-hinted loads ------------------------------------
// Blocks run one at a time and a block's threads switch only at collectives, so an atomic is a
// plain read-modify-write, a fence orders nothing that is not already ordered, and __ldcg (a load
// that bypasses L1) is a load. Device memory persists between launches as on a GPU: a counter a
// launch leaves nonzero is nonzero for the next one (the skinny GEMM's tests rely on that).
inline unsigned atomicAdd(unsigned* address, unsigned value) {
  const unsigned old = *address;
  *address = old + value;
  return old;
}
inline void __threadfence() {}
template <typename T>
T __ldcg(const T* p) {
  return *p;
}

// ---- shared-memory addresses and the PTX instructions of kernels/ptx.cuh ----------------------
// A shared-state-space address is the byte offset in the block's dynamic shared memory.
std::size_t __cvta_generic_to_shared(const void* p);
namespace servelab_emu {
// cp.async.cg.shared.global [dst], [src], 16, src_bytes (src_bytes 0 or 16; 0 zero-fills).
void cp_async16(std::uint32_t dst, const void* src, int src_bytes);
void cp_async_commit();
void cp_async_wait(int pending_groups);
// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane l gives the address of row l % 8 of
// matrix l / 8.
void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr, bool trans);
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 with d = c.
void mma_m16n8k16_bf16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                       std::uint32_t b1);
// The block's dynamic shared memory (the `extern __shared__` array).
unsigned char* dynamic_smem();

// Warpgroup MMA (sm_90a; PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"),
// bf16 inputs, fp32 accumulators, shape m64nNk16 (n a multiple of 8, 8..256). A warpgroup is
// threads 128 w .. 128 w + 127 of the block (the block's size must be a multiple of 128).
//   wgmma_bf16(d, n, a, desc_a, desc_b, accumulate, b_mn_major): this thread's part of
//     wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16: D (64 x n) = A (64 x 16) B (16 x n)
//     (+ D when `accumulate`: scale-d). A from registers when `a` is not null (the thread's four
//     .b32 of the A fragment, the mma.m16n8k16 A layout per warp, warp w % 4 of the group owning
//     rows 16 (w % 4) ..), else from shared memory through `desc_a` (K-major); B through `desc_b`,
//     K-major or, with `b_mn_major` (imm-trans-b = 1), MN-major. `d` holds the thread's n / 2
//     accumulators: element i is row 16 (w % 4) + lane / 4 + 8 ((i / 2) % 2), column
//     8 (i / 4) + 2 (lane % 4) + i % 2.
//     Descriptors: start address >> 4 in bits 0-13, leading byte offset >> 4 in 16-29, stride
//     byte offset >> 4 in 32-45, base offset 49-51, swizzle mode 62-63; only the no-swizzle
//     canonical layouts are modelled (T = 8 bf16 = 16 bytes): K-major element (mn, k) at
//     start + (mn % 8) 16 + (mn / 8) SBO + (k % 8) 2 + (k / 8) LBO, MN-major at
//     start + (mn % 8) 2 + (mn / 8) SBO + (k % 8) 16 + (k / 8) LBO. Anything else fails.
//     Asynchronous as on the GPU: nothing is read or written when it is issued. The operation
//     runs when a wgmma_wait of the whole warpgroup retires its group: then it reads shared
//     memory, the A registers (through `a`: they must still hold the fragment) and `d`, and
//     writes `d`. Reading the accumulators before that wait sees the old values, as it may on a
//     GPU. A wgmma_bf16 without a wgmma_fence since the thread's last wgmma_wait fails.
//     A GPU may read the operands any time from the issue to the wait, so they belong to the
//     operation in between: the shared-memory operands are read when the warpgroup's first
//     thread issues it (checking the proxy fence of their cp.async writers then) and again at
//     the wait, and each thread's A registers and accumulators are kept from its issue; anything
//     that changed fails the launch, naming the element, the registers or the accumulators
//     (an operation's own predecessors in a chain over the same accumulators excepted).
//   wgmma_fence: wgmma.fence.sync.aligned;
//   wgmma_commit: wgmma.commit_group.sync.aligned (closes the thread's group);
//   wgmma_wait(pending): wgmma.wait_group.sync.aligned pending: a warpgroup collective (all 128
//     threads); retires every group but the newest `pending`, in order, checking that every
//     thread issued the same operations (descriptors, shape, flags).
void wgmma_bf16(float* d, int n, const std::uint32_t* a, std::uint64_t desc_a, std::uint64_t desc_b,
                bool accumulate, bool b_mn_major);
void wgmma_fence();
void wgmma_commit();
void wgmma_wait(int pending);
// fence.proxy.async.shared::cta. cp.async writes shared memory through the generic proxy and
// wgmma reads it through the async proxy: a wgmma operand read from a 16-byte granule whose last
// cp.async copy landed for a thread that has not executed this fence since fails the launch,
// naming the writer (plain stores are not tracked: a fence after them is not checked).
void fence_proxy_async();
}  // namespace servelab_emu

// ---- the schedule ----------------------------------------------------------------------------
namespace servelab_emu {
// Between two synchronisation points (barriers, warp collectives, wgmma waits) a block's threads
// run one after another, each to its next one; blocks run one after another. The default
// order: rounds over the threads by index, each runnable thread running to its next
// synchronisation point (so a block's warps advance nearly in step, one collective a round),
// blocks by grid index (x fastest), and a cp.async copy lands when the issuing thread's
// cp.async.wait_group retires it (the latest a GPU may write it). A GPU may run them in any
// order and land a copy any time from its issue to that wait; these choose others:
//   reverse:       threads by decreasing index (so warps, and a warp's lanes, too), blocks by
//                  decreasing grid index;
//   greedy_warps:  a warp runs until all its lanes wait at a block barrier (or a warpgroup's
//                  wgmma wait) or have exited before the next warp starts: the widest skew
//                  between warps a GPU may show;
//   early_copies:  a cp.async copy lands when it is issued (the earliest a GPU may write it).
// A race-free kernel computes the same bits under each. One that reads what another warp writes
// without a barrier between reads it under one of forward and reverse only; one that issues a
// copy into a buffer another warp still reads (a pipeline stage refilled before the barrier
// that ends its reads) overwrites it only with early copies and that warp behind: the GPU
// kernel tests also run under `greedy_warps,early_copies` and `greedy_warps,early_copies,reverse`
// (ctest Emu.Schedule.*, tests/emu/CMakeLists.txt).
struct Schedule {
  bool reverse = false;
  bool early_copies = false;
  bool greedy_warps = false;
};
// The process's schedule: SERVELAB_EMU_SCHEDULE at the first call ("forward", the default, or a
// comma-separated list of reverse, early_copies and greedy_warps; anything else ends the process
// with exit code 2 and a message naming the variable), or what set_schedule set last.
Schedule schedule();
// Sets the schedule of every launch from now on (tests of the emulator itself).
void set_schedule(Schedule s);
// Parses a SERVELAB_EMU_SCHEDULE value; false (and `why` set) for anything else.
bool parse_schedule(const char* text, Schedule* out, const char** why);
}  // namespace servelab_emu

// ---- runtime API ---------------------------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorCudartUnloading = 4,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
};
using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
using cudaGraph_t = struct CUgraph_st*;
using cudaGraphExec_t = struct CUgraphExec_st*;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrL2CacheSize = 38 };
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
inline constexpr unsigned cudaStreamNonBlocking = 1;
inline constexpr unsigned cudaHostAllocPortable = 1;
inline constexpr unsigned cudaHostAllocMapped = 2;

struct cudaDeviceProp {
  char name[256];
  int major;
  int minor;
  int multiProcessorCount;
  std::size_t totalGlobalMem;
  std::size_t sharedMemPerBlockOptin;
  int maxThreadsPerBlock;
  int maxThreadsPerMultiProcessor;
  int clockRate;
  int memoryClockRate;
  int memoryBusWidth;
  int l2CacheSize;
};

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaDeviceSynchronize();

cudaError_t cudaMalloc(void** p, std::size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaHostAlloc(void** p, std::size_t bytes, unsigned flags);
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned flags);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* dst, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);

cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);
template <typename F>
cudaError_t cudaFuncSetAttribute(F* func, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value);
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func,
                                                          int block_threads,
                                                          std::size_t dynamic_smem);
template <typename F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, F* func, int block_threads,
                                                          std::size_t dynamic_smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, reinterpret_cast<const void*>(func),
                                                       block_threads, dynamic_smem);
}

// ---- launches --------------------------------------------------------------------------------
namespace servelab_emu {

// Runs (or, on a capturing stream, records) one launch of `body` over grid x block. `func`
// identifies the kernel (for its cudaFuncSetAttribute limit); `name` is for messages.
// `programmatic`: launched with programmatic dependent launch (SERVELAB_LAUNCH_PDL under
// kernels::ProgrammaticLaunch): blocks run in order as always, and a thread that exits without
// having called griddep_wait fails the launch.
void launch(const void* func, const char* name, dim3 grid, dim3 block, std::size_t smem,
            cudaStream_t stream, std::function<void()> body, bool programmatic = false);
// Runs `op` now, or records it when `stream` is being captured; false (and the capture
// invalidated) when `op` may not be captured.
bool enqueue(cudaStream_t stream, std::function<void()> op);
// Number of kernel launches executed since the process started (graph replays included), and
// how many of them were programmatic.
std::int64_t launches_executed();
std::int64_t programmatic_launches_executed();
// griddepcontrol.wait: records that the calling thread waited (launches are sequential here,
// so the predecessor has always completed).
void griddep_wait();

// What SERVELAB_LAUNCH(...) builds: kernel, configuration, then the call's arguments, which
// are converted to the kernel's parameter types and copied, as a launch does.
template <typename... P>
struct Launcher {
  void (*kernel)(P...);
  const char* name;
  dim3 grid, block;
  std::size_t smem;
  cudaStream_t stream;
  bool programmatic;
  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel argument count");
    std::tuple<std::decay_t<P>...> params(static_cast<std::decay_t<P>>(std::forward<A>(args))...);
    auto* fn = kernel;
    launch(
        reinterpret_cast<const void*>(fn), name, grid, block, smem, stream,
        [fn, params] { std::apply(fn, params); }, programmatic);
  }
};
template <typename... P>
Launcher<P...> make_launcher(void (*kernel)(P...), const char* name, dim3 grid, dim3 block,
                             std::size_t smem, cudaStream_t stream, bool programmatic = false) {
  return {kernel, name, grid, block, smem, stream, programmatic};
}

}  // namespace servelab_emu
