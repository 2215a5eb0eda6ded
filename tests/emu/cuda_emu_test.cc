// The CUDA emulator itself (tests/emu/include/servelab_cuda_emu.h): its models of the warp
// collectives and PTX instructions against direct computations, and that the mistakes it exists
// to catch (a missing barrier or wait, a barrier in divergent code, a collective with exited
// lanes, shared memory above the opt-in, a synchronising call during capture) fail loudly.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/common.cuh"
#include "kernels/ptx.cuh"

namespace {

using servelab::kernels::detail::cp_async16;
using servelab::kernels::detail::cp_async_commit;
using servelab::kernels::detail::cp_async_wait;
using servelab::kernels::detail::fence_proxy_async;
using servelab::kernels::detail::ldmatrix_x4;
using servelab::kernels::detail::ldmatrix_x4_trans;
using servelab::kernels::detail::mma_bf16;
using servelab::kernels::detail::smem_u32;
using servelab::kernels::detail::wgmma_commit;
using servelab::kernels::detail::wgmma_desc;
using servelab::kernels::detail::wgmma_fence;
using servelab::kernels::detail::wgmma_rs_bmn;
using servelab::kernels::detail::wgmma_ss;
using servelab::kernels::detail::wgmma_wait;

std::string last_error() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

std::uint16_t bf16(float f) { return __float2bfloat16_rn(f).__x; }
float from_bf16(std::uint16_t b) { return __uint_as_float(std::uint32_t{b} << 16); }

// ---- kernels under test ---------------------------------------------------------------------

__global__ void reverse_kernel(const int* in, int* out, bool barrier) {
  __shared__ int s[256];
  s[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  if (barrier) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

__global__ void shfl_kernel(int* out, int lane_mask) {
  const int v = static_cast<int>(threadIdx.x) * 10;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, lane_mask);
}

__global__ void divergent_barrier_kernel() {
  if (threadIdx.x < 32) __syncthreads();
}

__global__ void deadlock_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
  }
}

__global__ void exited_lane_kernel(int* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

// One warp: every lane copies 16 bytes with cp.async; `wait` decides whether the group is
// waited for before the block reads shared memory back.
__global__ void cp_async_kernel(const std::uint32_t* src, std::uint32_t* out, bool wait,
                                bool zero_fill) {
  SERVELAB_DYNAMIC_SMEM(smem);
  const int lane = threadIdx.x;
  cp_async16(smem_u32(smem + 16 * lane), src + 4 * lane, !zero_fill);
  cp_async_commit();
  if (wait) cp_async_wait<0>();
  __syncthreads();
  std::memcpy(out + 4 * lane, smem + 16 * ((lane + 1) % 32), 16);
}

// D = A B + C for one 16x16 A (row-major bf16), 16x8 B (given as B^T, 8 x 16 row-major bf16,
// i.e. column-major B) and 16x8 C, through ldmatrix (A: x4; B: x4 over B^T, two k halves) and
// one mma.sync; `trans_b` loads B from a row-major 16x8 copy with ldmatrix.trans instead.
__global__ void mma_kernel(const std::uint16_t* a, const std::uint16_t* bt, const std::uint16_t* b,
                           const float* c, float* d, bool trans_b) {
  SERVELAB_DYNAMIC_SMEM(smem);
  auto* sa = reinterpret_cast<std::uint16_t*>(smem);         // 16 x 16
  auto* sbt = reinterpret_cast<std::uint16_t*>(smem + 512);  // 8 x 16 (B^T)
  auto* sb = reinterpret_cast<std::uint16_t*>(smem + 768);   // 16 x 8 (B), rows of 16 bytes
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) sa[i] = a[i];
  for (int i = lane; i < 128; i += 32) sbt[i] = bt[i];
  for (int i = lane; i < 128; i += 32) sb[i] = b[i];
  __syncwarp();
  std::uint32_t af[4];
  // Matrices: rows 0-7 / cols 0-7, rows 8-15 / cols 0-7, rows 0-7 / cols 8-15, rows 8-15 / 8-15.
  const int m = lane / 8, r = lane % 8;
  ldmatrix_x4(af, smem_u32(sa + ((m & 1) * 8 + r) * 16 + (m >> 1) * 8));
  std::uint32_t bf[4];
  if (!trans_b) {
    // B^T rows n = r, k halves: matrices 0 (k 0-7) and 1 (k 8-15); 2, 3 repeat them.
    ldmatrix_x4(bf, smem_u32(sbt + r * 16 + (m & 1) * 8));
  } else {
    // B rows k = 8 (m & 1) + r, all 8 columns; .trans gives the col-major fragment.
    ldmatrix_x4_trans(bf, smem_u32(sb + ((m & 1) * 8 + r) * 8));
  }
  const int g = lane / 4, t = lane % 4;
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t],
                  c[(g + 8) * 8 + 2 * t + 1]};
  mma_bf16(acc, af, bf[0], bf[1]);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

__global__ void big_smem_kernel(int* out) {
  SERVELAB_DYNAMIC_SMEM(smem);
  smem[60000] = 7;
  out[0] = smem[60000];
}

// The same, for a test of its own (the attribute is process-wide: big_smem_kernel's opt-in from
// another test would hold here).
__global__ void big_smem_kernel2(int* out) {
  SERVELAB_DYNAMIC_SMEM(smem);
  smem[60000] = 7;
  out[0] = smem[60000];
}

__global__ void add_one_kernel(int* x) { x[threadIdx.x] += 1; }

// Programmatic dependent launch: every thread must wait for the predecessor grid; here the
// threads from `skip_from` on return first.
__global__ void pdl_kernel(int* x, int skip_from) {
  if (static_cast<int>(threadIdx.x) >= skip_from) return;
  servelab::kernels::detail::wait_for_predecessor();
  servelab::kernels::detail::allow_dependents();
  x[threadIdx.x] += 1;
}

// d = a b (64 x 16 by 16 x 64) by one wgmma, A and B K-major from shared memory, where both
// operands arrive by cp.async (a row-major; bt is B transposed, row-major 64 x 16): thread t
// copies the 16 bytes of row t / 2, k 8 (t % 2) .. + 8 of each, then fences its copies into the
// async proxy before the barrier, as wgmma needs. `mode` gets it wrong: 1 the operation issued
// before the copies landed (the wait, fence and barrier come after the issue); 2 thread 0
// overwrites an element of B after the issue; 3 the accumulators (accumulate on, from zero)
// changed after the issue; 4 A from registers, whose first register thread 5 clears after the
// issue; 5 no fence.proxy.async. Each is a race on a GPU, where wgmma reads its operands through
// the async proxy any time from the issue to the wait; 0 is right.
__global__ void wgmma_in_flight_kernel(const std::uint16_t* a, const std::uint16_t* bt, float* d,
                                       int mode) {
  SERVELAB_DYNAMIC_SMEM(smem);
  const int t = threadIdx.x, row = t / 2, k0 = 8 * (t % 2);
  const std::uint32_t base = smem_u32(smem);
  const std::uint32_t at = (row % 8) * 16 + (row / 8) * 256 + (k0 / 8) * 128;
  cp_async16(base + at, a + row * 16 + k0, true);
  cp_async16(base + 2048 + at, bt + row * 16 + k0, true);
  cp_async_commit();
  const auto landed = [mode] {
    cp_async_wait<0>();
    if (mode != 5) fence_proxy_async();
    __syncthreads();
  };
  if (mode != 1) landed();
  float acc[8][4] = {};
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
  std::uint32_t af[4];
  for (int r = 0; r < 4; ++r) {
    const int m = 16 * w + g + 8 * (r % 2), col = 2 * q + 8 * (r / 2);
    af[r] = std::uint32_t{a[m * 16 + col]} | (std::uint32_t{a[m * 16 + col + 1]} << 16);
  }
  wgmma_fence();
  if (mode == 4) {
    wgmma_rs_bmn<64>(acc, af, wgmma_desc(base + 2048, 128, 256), false);
  } else {
    wgmma_ss<64>(acc, wgmma_desc(base, 128, 256), wgmma_desc(base + 2048, 128, 256), mode == 3);
  }
  wgmma_commit();
  if (mode == 1) landed();
  if (mode == 2 && t == 0) std::memset(smem + 2048, 0, 2);
  if (mode == 3) acc[0][0] += 1.0f;
  if (mode == 4 && t == 5) af[0] = 0;
  wgmma_wait<0>(acc, af);
  for (int i = 0; i < 32; ++i) {
    d[(16 * w + g + 8 * ((i / 2) % 2)) * 64 + 8 * (i / 4) + 2 * q + i % 2] = acc[i / 4][i % 4];
  }
}

// Every thread appends its global index to `log`: the order in which threads and blocks ran.
__global__ void order_kernel(unsigned* counter, int* log) {
  log[atomicAdd(counter, 1u)] = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
}

// Thread 0 writes a value that thread 1 reads, with or without a barrier between: without it a
// race, which the default order hides (the writer has the lower index).
__global__ void lower_writer_kernel(int* out, bool barrier) {
  SERVELAB_DYNAMIC_SMEM(smem);
  int* s = reinterpret_cast<int*>(smem);
  if (threadIdx.x == 0) s[0] = 42;
  if (barrier) __syncthreads();
  if (threadIdx.x == 1) out[0] = s[0];
}

// Warp 1 writes a value that warp 0 reads after a shuffle, with or without a barrier between:
// without it a race, which the default schedule hides (it runs warp 1's write while warp 0
// waits in its shuffle).
__global__ void later_warp_writer_kernel(int* out, bool barrier) {
  SERVELAB_DYNAMIC_SMEM(smem);
  int* s = reinterpret_cast<int*>(smem);
  if (threadIdx.x == 32) s[0] = 42;
  if (threadIdx.x < 32) {
    const int v = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
    if (barrier) __syncthreads();
    if (threadIdx.x == 0) out[0] = s[0] + (v - 1);  // v is 1 in lane 0
  } else if (barrier) {
    __syncthreads();
  }
}

// One warp, one pipeline stage of 32 rows of 16 bytes: every lane reads its row, then refills
// the next lane's row with the next tile by cp.async, waited for after a barrier. Without
// `barrier` between the reads and the refill (a multi-stage pipeline's classic missing barrier)
// that is a race, which copies landing at their wait hide.
__global__ void refill_kernel(const std::uint32_t* src, std::uint32_t* out, bool barrier) {
  SERVELAB_DYNAMIC_SMEM(smem);
  const int lane = threadIdx.x, next = (lane + 1) % 32;
  std::memcpy(smem + 16 * lane, src + 4 * lane, 16);
  __syncthreads();
  std::uint32_t row[4];
  std::memcpy(row, smem + 16 * lane, 16);
  if (barrier) __syncthreads();
  cp_async16(smem_u32(smem + 16 * next), src + 128 + 4 * next, true);
  cp_async_commit();
  __syncthreads();
  cp_async_wait<0>();
  std::memcpy(out + 4 * lane, row, 16);
}

// The emulator's schedule for one scope (the schedule is the process's).
class ScopedSchedule {
 public:
  explicit ScopedSchedule(servelab_emu::Schedule s) : saved_(servelab_emu::schedule()) {
    servelab_emu::set_schedule(s);
  }
  ~ScopedSchedule() { servelab_emu::set_schedule(saved_); }
  ScopedSchedule(const ScopedSchedule&) = delete;
  ScopedSchedule& operator=(const ScopedSchedule&) = delete;

 private:
  servelab_emu::Schedule saved_;
};

// ---- tests -----------------------------------------------------------------------------------

// Warpgroup MMA, m64n64k16: a (64 x 16) and b (16 x 64) row-major bf16 in global memory are
// stored in shared memory in the no-swizzle canonical layouts (A K-major, LBO 128, SBO 256; B
// K-major the same, or MN-major with SBO 256 along N and LBO 128 along K), then d = c + a b by
// one wgmma (A from shared memory, or with `rs` from registers, which wgmma_rs_bmn pairs with B
// MN-major). `early`
// receives d as read between the issue and the wait. `fence` false skips wgmma.fence; `waiters`
// < 128: only that many threads wait (a warpgroup collective short of threads).
__global__ void wgmma_kernel(const std::uint16_t* a, const std::uint16_t* b, const float* c,
                             float* d, float* early, bool rs, bool b_mn, bool fence, int waiters) {
  SERVELAB_DYNAMIC_SMEM(smem);
  const int t = threadIdx.x;
  auto put = [&](std::uint32_t at, std::uint16_t v) { std::memcpy(smem + at, &v, 2); };
  for (int i = t; i < 64 * 16; i += 128) {
    const int m = i / 16, k = i % 16;
    put((m % 8) * 16 + (m / 8) * 256 + (k % 8) * 2 + (k / 8) * 128, a[i]);
  }
  for (int i = t; i < 16 * 64; i += 128) {
    const int k = i / 64, n = i % 64;
    put(2048 + (b_mn ? (n % 8) * 2 + (n / 8) * 256 + (k % 8) * 16 + (k / 8) * 128
                     : (n % 8) * 16 + (n / 8) * 256 + (k % 8) * 2 + (k / 8) * 128),
        b[i]);
  }
  __syncthreads();
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
  // Accumulator element i of this thread: row-major index in the 64 x 64 result.
  auto at = [&](int i) {
    return (16 * w + g + 8 * ((i / 2) % 2)) * 64 + 8 * (i / 4) + 2 * q + i % 2;
  };
  float acc[8][4];
  for (int i = 0; i < 32; ++i) acc[i / 4][i % 4] = c[at(i)];
  std::uint32_t af[4];
  for (int r = 0; r < 4; ++r) {
    const int row = 16 * w + g + 8 * (r % 2), col = 2 * q + 8 * (r / 2);
    af[r] = std::uint32_t{a[row * 16 + col]} | (std::uint32_t{a[row * 16 + col + 1]} << 16);
  }
  const std::uint32_t base = smem_u32(smem);
  if (fence) wgmma_fence();
  if (rs) {
    wgmma_rs_bmn<64>(acc, af, wgmma_desc(base + 2048, 128, 256), true);
  } else {
    wgmma_ss<64>(acc, wgmma_desc(base, 128, 256), wgmma_desc(base + 2048, 128, 256), true);
  }
  wgmma_commit();
  for (int i = 0; i < 32; ++i) early[at(i)] = acc[i / 4][i % 4];
  if (t >= waiters) return;
  wgmma_wait<0>(acc, af);
  for (int i = 0; i < 32; ++i) d[at(i)] = acc[i / 4][i % 4];
}

TEST(CudaEmu, SharedMemoryAndBarrierAcrossWarps) {
  std::vector<int> in(512), out(512, -1);
  for (int i = 0; i < 512; ++i) in[i] = i * 3;
  SERVELAB_LAUNCH(reverse_kernel, 2, 256, 0, nullptr)(in.data(), out.data(), true);
  ASSERT_EQ(last_error(), "");
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 256; ++t) EXPECT_EQ(out[b * 256 + t], in[b * 256 + 255 - t]);
  }
}

TEST(CudaEmu, MissingBarrierReadsStaleData) {
  // Without the barrier a thread reads its mirror's slot before the mirror has run: the block's
  // threads run in order, so the first half reads what the previous block left (stale).
  std::vector<int> in(512), out(512, -1);
  for (int i = 0; i < 512; ++i) in[i] = i;
  SERVELAB_LAUNCH(reverse_kernel, 2, 256, 0, nullptr)(in.data(), out.data(), false);
  ASSERT_EQ(last_error(), "");
  int wrong = 0;
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t < 256; ++t) wrong += out[b * 256 + t] != in[b * 256 + 255 - t];
  }
  EXPECT_GT(wrong, 0);
}

TEST(CudaEmu, ShuffleXor) {
  for (int mask : {1, 2, 16, 31}) {
    std::vector<int> out(32, -1);
    SERVELAB_LAUNCH(shfl_kernel, 1, 32, 0, nullptr)(out.data(), mask);
    ASSERT_EQ(last_error(), "");
    for (int l = 0; l < 32; ++l) EXPECT_EQ(out[l], (l ^ mask) * 10) << "mask " << mask;
  }
}

// SERVELAB_LAUNCH_PDL launches programmatically only inside ProgrammaticLaunch(true); such a
// launch fails when a thread exits without griddepcontrol.wait (programmatic_launch.h); the same
// kernel launched plainly does not need it.
TEST(CudaEmu, ProgrammaticLaunchRequiresEveryThreadToWait) {
  using servelab::kernels::ProgrammaticLaunch;
  std::vector<int> x(64, 0);
  const std::int64_t before = servelab_emu::programmatic_launches_executed();
  SERVELAB_LAUNCH_PDL(pdl_kernel, 1, 64, 0, nullptr)(x.data(), 64);
  EXPECT_EQ(last_error(), "");
  EXPECT_EQ(servelab_emu::programmatic_launches_executed(), before);
  {
    const ProgrammaticLaunch on(true);
    EXPECT_TRUE(ProgrammaticLaunch::active());
    {
      const ProgrammaticLaunch off(false);
      EXPECT_FALSE(ProgrammaticLaunch::active());
      SERVELAB_LAUNCH_PDL(pdl_kernel, 1, 64, 0, nullptr)(x.data(), 40);  // plain: fine
      EXPECT_EQ(last_error(), "");
    }
    EXPECT_TRUE(ProgrammaticLaunch::active());
    SERVELAB_LAUNCH_PDL(pdl_kernel, 2, 64, 0, nullptr)(x.data(), 64);
    EXPECT_EQ(last_error(), "");
    EXPECT_EQ(servelab_emu::programmatic_launches_executed(), before + 1);
    SERVELAB_LAUNCH_PDL(pdl_kernel, 1, 64, 0, nullptr)(x.data(), 40);
    const std::string e = last_error();
    EXPECT_NE(e.find("thread (40, 0, 0) of block (0, 0, 0) exited without griddepcontrol.wait"),
              std::string::npos)
        << e;
  }
  EXPECT_FALSE(ProgrammaticLaunch::active());
  // Four launches: thread 0 of each block added 1 in every one (the failed launch's error comes
  // at thread 40's exit), 2 in the two-block one; thread 63 only where it was not skipped.
  EXPECT_EQ(x[0], 5);
  EXPECT_EQ(x[63], 3);
}

TEST(CudaEmu, DivergentBarriersAndCollectivesFail) {
  // Threads 32..63 exit; __syncthreads waits only for live threads, so this one completes.
  SERVELAB_LAUNCH(divergent_barrier_kernel, 1, 64, 0, nullptr)();
  EXPECT_EQ(last_error(), "");
  // Half a warp at __syncthreads, half in a shuffle: neither can complete.
  std::vector<int> out(32);
  SERVELAB_LAUNCH(deadlock_kernel, 1, 32, 0, nullptr)(out.data());
  std::string e = last_error();
  EXPECT_NE(e.find("deadlock: 16 threads wait at __syncthreads and 16 in a warp collective"),
            std::string::npos)
      << e;
  // A warp collective that an exited lane can never reach.
  SERVELAB_LAUNCH(exited_lane_kernel, 1, 32, 0, nullptr)(out.data());
  e = last_error();
  EXPECT_NE(e.find("exited while its warp waits in __shfl_xor_sync"), std::string::npos) << e;
}

TEST(CudaEmu, CpAsyncLandsOnlyAfterItsWait) {
  std::vector<std::uint32_t> src(128), out(128, 0);
  for (int i = 0; i < 128; ++i) src[i] = 0x1000u + i;
  SERVELAB_LAUNCH(cp_async_kernel, 1, 32, 512, nullptr)(src.data(), out.data(), true, false);
  ASSERT_EQ(last_error(), "");
  for (int l = 0; l < 32; ++l) {
    for (int w = 0; w < 4; ++w) EXPECT_EQ(out[4 * l + w], src[4 * ((l + 1) % 32) + w]);
  }
  // Forgetting the wait: neighbours' copies have not landed, the poison (0xff..) is read.
  SERVELAB_LAUNCH(cp_async_kernel, 1, 32, 512, nullptr)(src.data(), out.data(), false, false);
  ASSERT_EQ(last_error(), "");
  for (std::uint32_t v : out) EXPECT_EQ(v, 0xffffffffu);
  // src-size 0: nothing read, zeros land.
  SERVELAB_LAUNCH(cp_async_kernel, 1, 32, 512, nullptr)(src.data(), out.data(), true, true);
  ASSERT_EQ(last_error(), "");
  for (std::uint32_t v : out) EXPECT_EQ(v, 0u);
}

// d (rows x cols, row-major) against c + a b, a (rows x 16) and b (16 x cols) bf16 row-major.
void ExpectProduct(const std::vector<float>& d, const std::vector<std::uint16_t>& a,
                   const std::vector<std::uint16_t>& b, const std::vector<float>& c, int rows,
                   int cols, const std::string& what) {
  for (int i = 0; i < rows; ++i) {
    for (int n = 0; n < cols; ++n) {
      double want = c[i * cols + n];
      for (int k = 0; k < 16; ++k) {
        want += double{from_bf16(a[i * 16 + k])} * from_bf16(b[k * cols + n]);
      }
      ASSERT_NEAR(d[i * cols + n], want, 1e-4 * (1 + std::fabs(want)))
          << what << ": row " << i << " col " << n;
    }
  }
}

TEST(CudaEmu, LdmatrixAndMmaComputeTheProduct) {
  std::vector<std::uint16_t> a(256), bt(128), b(128);
  std::vector<float> c(128), d(128);
  for (int i = 0; i < 256; ++i) a[i] = bf16(std::sin(0.37f * i) * 2.0f);
  for (int n = 0; n < 8; ++n) {
    for (int k = 0; k < 16; ++k) {
      const std::uint16_t v = bf16(std::cos(0.11f * (n * 16 + k)) - 0.25f);
      bt[n * 16 + k] = v;
      b[k * 8 + n] = v;
    }
  }
  for (int i = 0; i < 128; ++i) c[i] = 0.5f * i;
  for (bool trans : {false, true}) {
    std::fill(d.begin(), d.end(), NAN);
    SERVELAB_LAUNCH(mma_kernel, 1, 32, 1024, nullptr)
    (a.data(), bt.data(), b.data(), c.data(), d.data(), trans);
    ASSERT_EQ(last_error(), "");
    ExpectProduct(d, a, b, c, 16, 8, trans ? "ldmatrix.trans" : "ldmatrix");
  }
}

// wgmma.m64n64k16 from the PTX ISA's layouts, as kernels/ptx.cuh offers it (A and B K-major from
// shared memory; A from registers with B MN-major), against the direct product; asynchronous (the
// accumulators read before the wait still hold c); refused without wgmma.fence, when threads exit
// without the wait, and in a block that is not whole warpgroups.
TEST(CudaEmu, WgmmaComputesTheProductAtItsWait) {
  std::vector<std::uint16_t> a(64 * 16), b(16 * 64);
  std::vector<float> c(64 * 64), d(64 * 64), early(64 * 64);
  for (int i = 0; i < 64 * 16; ++i) a[i] = bf16(std::sin(0.37f * i) * 2.0f);
  for (int i = 0; i < 16 * 64; ++i) b[i] = bf16(std::cos(0.11f * i) - 0.25f);
  for (int i = 0; i < 64 * 64; ++i) c[i] = 0.01f * i;
  struct Mode {
    bool rs, b_mn;
  };
  for (const Mode m : {Mode{false, false}, Mode{true, true}}) {
    SCOPED_TRACE(std::string(m.rs ? "A registers" : "A shared") +
                 (m.b_mn ? ", B MN-major" : ", B K-major"));
    std::fill(d.begin(), d.end(), NAN);
    ASSERT_EQ(cudaFuncSetAttribute(wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 4096),
              cudaSuccess);
    SERVELAB_LAUNCH(wgmma_kernel, 1, 128, 4096, nullptr)
    (a.data(), b.data(), c.data(), d.data(), early.data(), m.rs, m.b_mn, true, 128);
    ASSERT_EQ(last_error(), "");
    EXPECT_TRUE(early == c) << "accumulators changed before wgmma.wait_group";
    ExpectProduct(d, a, b, c, 64, 64, "wgmma");
  }
  SERVELAB_LAUNCH(wgmma_kernel, 1, 128, 4096, nullptr)
  (a.data(), b.data(), c.data(), d.data(), early.data(), false, false, false, 128);
  EXPECT_NE(last_error().find("without a wgmma.fence"), std::string::npos);
  SERVELAB_LAUNCH(wgmma_kernel, 1, 128, 4096, nullptr)
  (a.data(), b.data(), c.data(), d.data(), early.data(), false, false, true, 96);
  EXPECT_NE(last_error().find("never waited for"), std::string::npos);
  SERVELAB_LAUNCH(wgmma_kernel, 1, 64, 4096, nullptr)
  (a.data(), b.data(), c.data(), d.data(), early.data(), false, false, true, 64);
  EXPECT_NE(last_error().find("multiple of 128"), std::string::npos);
}

// One wgmma's operands: a (64 x 16) and b (16 x 64) row-major bf16, bt = b transposed.
struct WgmmaOperands {
  std::vector<std::uint16_t> a = std::vector<std::uint16_t>(64 * 16),
                             b = std::vector<std::uint16_t>(16 * 64),
                             bt = std::vector<std::uint16_t>(64 * 16);
  WgmmaOperands() {
    for (int i = 0; i < 64 * 16; ++i) a[i] = bf16(0.25f * static_cast<float>((i * 7) % 13) - 1.5f);
    for (int k = 0; k < 16; ++k) {
      for (int n = 0; n < 64; ++n) {
        b[k * 64 + n] = bf16(0.125f * static_cast<float>((k * 5 + n * 3) % 11) - 0.5f);
        bt[n * 16 + k] = b[k * 64 + n];
      }
    }
  }
  // Runs wgmma_in_flight_kernel in `mode` into d; the launch's error ("" if none).
  std::string run(int mode, std::vector<float>& d) const {
    SERVELAB_LAUNCH(wgmma_in_flight_kernel, 1, 128, 4096, nullptr)
    (a.data(), bt.data(), d.data(), mode);
    return last_error();
  }
};

// wgmma reads shared memory through the async proxy: operands that arrived by cp.async need
// each copying thread's fence.proxy.async before the barrier; without it the launch fails naming
// the operand and the writer.
TEST(CudaEmu, WgmmaAfterCpAsyncNeedsTheProxyFence) {
  const WgmmaOperands w;
  std::vector<float> d(64 * 64, -1.0f);
  ASSERT_EQ(w.run(0, d), "");
  ExpectProduct(d, w.a, w.b, std::vector<float>(64 * 64, 0.0f), 64, 64, "fenced");
  const std::string e = w.run(5, d);
  EXPECT_NE(e.find("wgmma: A element (0, 0) at shared address 0 was written by a cp.async of "
                   "thread (0, 0, 0), which has not executed fence.proxy.async since"),
            std::string::npos)
      << e;
}

// wgmma may read its operands (shared memory, A registers, accumulators) any time from its first
// issue in the warpgroup to the wait that retires it: operands that change in between fail the
// launch, naming what changed (the emulator computes at the wait, the latest time; a GPU may read
// them earlier).
TEST(CudaEmu, WgmmaOperandsBelongToTheOperationUntilItsWait) {
  const WgmmaOperands w;
  std::vector<float> d(64 * 64, -1.0f);
  // Thread 0 issues first: no copy has landed yet (each lands at its thread's wait).
  std::string e = w.run(1, d);
  EXPECT_NE(e.find("wgmma: A element (0, 0) at shared address 0 changed between the "
                   "operation's issue (by its warpgroup's first thread, (0, 0, 0)) and the "
                   "wgmma.wait_group that retires it"),
            std::string::npos)
      << e;
  e = w.run(2, d);
  EXPECT_NE(e.find("wgmma: B element (0, 0) at shared address 2048 changed between the "
                   "operation's issue"),
            std::string::npos)
      << e;
  e = w.run(3, d);
  EXPECT_NE(e.find("wgmma: the accumulators of warpgroup thread 0 changed between its "
                   "wgmma.mma_async and the wgmma.wait_group"),
            std::string::npos)
      << e;
  e = w.run(4, d);
  EXPECT_NE(e.find("wgmma: the A registers of warpgroup thread 5 changed"), std::string::npos) << e;
}

TEST(CudaEmu, DynamicSharedMemoryAbove48KbNeedsTheOptIn) {
  int out = 0;
  SERVELAB_LAUNCH(big_smem_kernel, 1, 32, 64 * 1024, nullptr)(&out);
  const std::string e = last_error();
  EXPECT_NE(e.find("cudaFuncSetAttribute"), std::string::npos) << e;
  ASSERT_EQ(
      cudaFuncSetAttribute(big_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
      cudaSuccess);
  SERVELAB_LAUNCH(big_smem_kernel, 1, 32, 64 * 1024, nullptr)(&out);
  EXPECT_EQ(last_error(), "");
  EXPECT_EQ(out, 7);
  EXPECT_NE(cudaFuncSetAttribute(big_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 300 * 1024),
            cudaSuccess);
  cudaGetLastError();
}

// As in CUDA, a kernel attribute belongs to the process (the device context): set on one host
// thread, it holds for launches from another (engine serve opts in on its main thread and steps
// on the engine's); the last error is per thread. (The emulator once kept both per thread.)
TEST(CudaEmu, KernelAttributesAreThePerProcessLastErrorsPerThread) {
  std::thread([] {
    cudaFuncSetAttribute(big_smem_kernel2, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024);
  }).join();
  int out = 0;
  SERVELAB_LAUNCH(big_smem_kernel2, 1, 32, 64 * 1024, nullptr)(&out);
  EXPECT_EQ(last_error(), "");
  EXPECT_EQ(out, 7);
  SERVELAB_LAUNCH(big_smem_kernel2, 1, 32, 100 * 1024, nullptr)(&out);
  std::string other;
  std::thread([&other] { other = last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(last_error().find("above the 65536"), std::string::npos);
}

TEST(CudaEmu, CaptureRecordsAndGraphReplays) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::vector<int> x(32, 0);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  SERVELAB_LAUNCH(add_one_kernel, 1, 32, 0, s)(x.data());
  SERVELAB_LAUNCH(add_one_kernel, 1, 32, 0, s)(x.data());
  EXPECT_EQ(x[0], 0) << "a captured launch does not run";
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  cudaGraphDestroy(graph);
  const std::int64_t before = servelab_emu::launches_executed();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  EXPECT_EQ(servelab_emu::launches_executed() - before, 6);
  for (int v : x) EXPECT_EQ(v, 6);
  cudaGraphExecDestroy(exec);

  // A synchronising call during capture fails and invalidates the capture.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  cudaGetLastError();
  cudaStreamDestroy(s);
}

// The emulated cuBLASLt (tests/emu/include/cublasLt.h): the heuristic offers its algorithms within
// the workspace limit, algorithm 0 gives cublasGemmEx's bits, a split one other bits (so tests
// that compare a graph with an eager pass can tell algorithms apart), and cudaStreamIsCapturing
// says whether a stream is being captured.
TEST(CudaEmu, CublasLtAlgorithmsDifferOnlyInRounding) {
  const int m = 64, n = 3, k = 1000;  // C m x n = A^T (k x m stored) B (k x n)
  std::vector<float> a(static_cast<std::size_t>(k) * m), b(static_cast<std::size_t>(k) * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37f * static_cast<float>(i));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.11f * static_cast<float>(i));
  cublasLtHandle_t lt = nullptr;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const std::int32_t trans = CUBLAS_OP_T;
  ASSERT_EQ(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)),
      CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, k, m, k), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t r[8];
  int got = 0;
  // No workspace: only algorithm 0.
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 8, r, &got),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(got, 1);
  const std::uint64_t ws_bytes = 1 << 20;
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws_bytes, sizeof(ws_bytes)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 8, r, &got),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(got, kEmuLtAlgos);
  std::vector<char> ws(ws_bytes);
  std::vector<std::vector<float>> c(kEmuLtAlgos,
                                    std::vector<float>(static_cast<std::size_t>(m) * n));
  const float alpha = 1.0f, beta = 0.0f;
  for (int i = 0; i < got; ++i) {
    std::int32_t split = 0;
    ASSERT_EQ(cublasLtMatmulAlgoConfigGetAttribute(&r[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                   &split, sizeof(split), nullptr),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(split, i + 1);
    ASSERT_EQ(cublasLtMatmul(lt, desc, &alpha, a.data(), la, b.data(), lb, &beta, c[i].data(), lc,
                             c[i].data(), lc, &r[i].algo, ws.data(), ws.size(), nullptr),
              CUBLAS_STATUS_SUCCESS);
  }
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  std::vector<float> ex(static_cast<std::size_t>(m) * n);
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a.data(), CUDA_R_32F, k,
                         b.data(), CUDA_R_32F, k, &beta, ex.data(), CUDA_R_32F, m,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(ex.data(), c[0].data(), ex.size() * 4), 0);
  EXPECT_NE(std::memcmp(c[0].data(), c[2].data(), ex.size() * 4), 0);
  for (std::size_t i = 0; i < ex.size(); ++i) EXPECT_NEAR(c[2][i], ex[i], 1e-3);
  // An algorithm needing more workspace than given is refused.
  EXPECT_EQ(cublasLtMatmul(lt, desc, &alpha, a.data(), la, b.data(), lb, &beta, c[2].data(), lc,
                           c[2].data(), lc, &r[2].algo, ws.data(), 16, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);

  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  cublasDestroy(h);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt);
}

}  // namespace

// ---- the schedule (servelab_cuda_emu.h "the schedule") ---------------------------------------

TEST(CudaEmu, ScheduleOrdersThreadsAndBlocks) {
  for (const bool reverse : {false, true}) {
    const ScopedSchedule schedule({.reverse = reverse});
    unsigned counter = 0;
    std::vector<int> log(128, -1);
    SERVELAB_LAUNCH(order_kernel, 2, 64, 0, nullptr)(&counter, log.data());
    ASSERT_EQ(last_error(), "");
    ASSERT_EQ(counter, 128u);
    for (int i = 0; i < 128; ++i) EXPECT_EQ(log[i], reverse ? 127 - i : i) << i;
  }
}

TEST(CudaEmu, ReverseScheduleExposesAReadOfALowerThreadsWrite) {
  struct Case {
    servelab_emu::Schedule schedule;
    bool barrier;
    int want;
  };
  // Without the barrier, the default order happens to give the writer's value; the reverse
  // order reads the never-written shared memory (0xff...). With it, both give the value.
  for (const Case& c : {Case{{}, false, 42}, Case{{.reverse = true}, false, -1}, Case{{}, true, 42},
                        Case{{.reverse = true}, true, 42}}) {
    const ScopedSchedule schedule(c.schedule);
    int out = 0;
    SERVELAB_LAUNCH(lower_writer_kernel, 1, 2, 16, nullptr)(&out, c.barrier);
    ASSERT_EQ(last_error(), "");
    EXPECT_EQ(out, c.want) << "reverse " << c.schedule.reverse << ", barrier " << c.barrier;
  }
}

TEST(CudaEmu, GreedyWarpsExposeAReadOfALaterWarpsWrite) {
  struct Case {
    servelab_emu::Schedule schedule;
    bool barrier;
    int want;
  };
  for (const Case& c : {Case{{}, false, 42}, Case{{.greedy_warps = true}, false, -1},
                        Case{{}, true, 42}, Case{{.greedy_warps = true}, true, 42},
                        Case{{.reverse = true, .greedy_warps = true}, true, 42}}) {
    const ScopedSchedule schedule(c.schedule);
    int out = 0;
    SERVELAB_LAUNCH(later_warp_writer_kernel, 1, 64, 16, nullptr)(&out, c.barrier);
    ASSERT_EQ(last_error(), "");
    EXPECT_EQ(out, c.want) << "greedy " << c.schedule.greedy_warps << ", reverse "
                           << c.schedule.reverse << ", barrier " << c.barrier;
  }
}

TEST(CudaEmu, EarlyCopiesExposeARefillBeforeTheBarrier) {
  std::vector<std::uint32_t> src(256);
  for (int i = 0; i < 256; ++i) src[i] = 0x1000u + i;
  for (const bool barrier : {false, true}) {
    for (const bool early : {false, true}) {
      for (const bool reverse : {false, true}) {
        const ScopedSchedule schedule({.reverse = reverse, .early_copies = early});
        std::vector<std::uint32_t> out(128, 0);
        SERVELAB_LAUNCH(refill_kernel, 1, 32, 512, nullptr)(src.data(), out.data(), barrier);
        ASSERT_EQ(last_error(), "");
        int wrong = 0;
        for (int i = 0; i < 128; ++i) wrong += out[i] != src[i];
        // Only the race under early copies reads a refilled row (lane 1 the one lane 0
        // refilled; in reverse, lane 0 the one lane 31 refilled).
        EXPECT_EQ(wrong > 0, early && !barrier)
            << "barrier " << barrier << ", early " << early << ", reverse " << reverse;
      }
    }
  }
}

TEST(CudaEmu, ScheduleParsesItsVariable) {
  struct Case {
    const char* text;
    bool ok, reverse, early, greedy;
  };
  for (const Case& c :
       {Case{nullptr, true, false, false, false}, Case{"", true, false, false, false},
        Case{"forward", true, false, false, false}, Case{"reverse", true, true, false, false},
        Case{"early_copies", true, false, true, false},
        Case{"greedy_warps", true, false, false, true},
        Case{"greedy_warps,early_copies,reverse", true, true, true, true},
        Case{"reverse,", false, false, false, false}, Case{"sideways", false, false, false, false},
        Case{"forward,reverse", false, false, false, false}}) {
    servelab_emu::Schedule s{
        .reverse = !c.reverse, .early_copies = !c.early, .greedy_warps = !c.greedy};
    const char* why = nullptr;
    const bool ok = servelab_emu::parse_schedule(c.text, &s, &why);
    const std::string text = c.text == nullptr ? "(unset)" : c.text;
    EXPECT_EQ(ok, c.ok) << text;
    if (ok) {
      EXPECT_EQ(s.reverse, c.reverse) << text;
      EXPECT_EQ(s.early_copies, c.early) << text;
      EXPECT_EQ(s.greedy_warps, c.greedy) << text;
    } else {
      EXPECT_STREQ(why,
                   "expected forward, or a comma-separated list of reverse, early_copies and "
                   "greedy_warps")
          << text;
    }
  }
}
