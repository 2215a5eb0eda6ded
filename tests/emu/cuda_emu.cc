// The CUDA emulator's runtime (contract: tests/emu/include/servelab_cuda_emu.h): fibers for a
// block's threads, the warp collectives and PTX instruction models, the runtime API over host
// memory, stream capture into replayable graphs.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "servelab_cuda_emu.h"

#if defined(__SANITIZE_ADDRESS__)
#define SERVELAB_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SERVELAB_EMU_ASAN 1
#endif
#endif
#if defined(SERVELAB_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

thread_local uint3 threadIdx{0, 0, 0};
thread_local uint3 blockIdx{0, 0, 0};
thread_local dim3 blockDim{1, 1, 1};
thread_local dim3 gridDim{1, 1, 1};

#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif

// switch_stack(save, to): saves the callee-saved registers on the current stack, stores the
// stack pointer in *save, loads `to` and restores that stack's registers (System V x86-64 ABI).
extern "C" void servelab_emu_switch_stack(void** save, void* to);
asm(R"(
  .text
  .globl servelab_emu_switch_stack
  .type servelab_emu_switch_stack,@function
servelab_emu_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size servelab_emu_switch_stack,.-servelab_emu_switch_stack
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace servelab_emu {
namespace {

#if defined(SERVELAB_EMU_ASAN)
constexpr std::size_t kStackBytes = 1u << 20;
#else
constexpr std::size_t kStackBytes = 256u << 10;
#endif
constexpr std::size_t kDeviceBytes = std::size_t{4} << 30;   // what cudaMemGetInfo reports
constexpr std::size_t kPoisonLimit = std::size_t{64} << 20;  // allocations filled with 0xff
constexpr int kMaxSmemOptin = 232448;                        // 227 KB (sm_90)
// The L2 size reported (cudaDevAttrL2CacheSize, cudaDeviceProp): small, so that code that flushes
// L2 by writing twice its size (kernels/gemm_lt.cc's timing) stays cheap on the CPU.
constexpr int kL2Bytes = 4 << 20;
constexpr int kDefaultSmem = 48 * 1024;

enum class Collective { kNone, kShfl, kSyncwarp, kLdmatrix, kLdmatrixTrans, kMma };
const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kShfl:
      return "__shfl_xor_sync";
    case Collective::kSyncwarp:
      return "__syncwarp";
    case Collective::kLdmatrix:
      return "ldmatrix";
    case Collective::kLdmatrixTrans:
      return "ldmatrix.trans";
    case Collective::kMma:
      return "mma.sync";
    case Collective::kNone:
      break;
  }
  return "nothing";
}

struct CopyRequest {
  unsigned char* dst;
  const unsigned char* src;
  int bytes;  // 0: zero-fill
};

// One wgmma.mma_async as a thread issued it (servelab_cuda_emu.h wgmma_bf16), with what its
// registers held at the issue: they belong to the operation until its wait retires it.
struct WgmmaOp {
  float* d;
  int n;
  const std::uint32_t* a;  // null: A through desc_a
  std::uint64_t desc_a, desc_b;
  bool accumulate, b_mn_major;
  std::uint32_t a_issued[4] = {};  // the A fragment at the issue (a not null)
  std::uint64_t d_issued = 0;      // a hash of the n / 2 accumulators at the issue
};

// The shared-memory operands of a warpgroup's wgmma as read when its first thread issued it
// (BlockRun::wgmma_issues): wgmma may read them any time from then to the wait that retires it,
// so they must not change in between (a thread that writes them after its issue races with the
// operation; one that writes them before its issue but after another thread's lacks the barrier
// that orders its write before the other warps' issue).
struct WgmmaIssue {
  int threads = 0;                  // how many of the warpgroup's 128 have issued it
  int first = -1;                   // the thread that issued it first (index in the block)
  std::vector<std::uint16_t> a, b;  // bf16 bits (read_wgmma_operands)
};

struct Fiber {
  void* sp = nullptr;
  std::unique_ptr<unsigned char[]> stack;
  uint3 tid{0, 0, 0};
  int warp = 0, lane = 0;
  bool done = false;
  bool waiting = false;
  bool at_block_barrier = false;  // waiting in __syncthreads (else in a warp collective)
  bool waited_for_grid = false;   // executed griddepcontrol.wait (griddep_wait)
  std::vector<CopyRequest> open_group;
  std::deque<std::vector<CopyRequest>> groups;
  // How many fence.proxy.async it has executed in this block (BlockRun::unfenced).
  std::uint32_t proxy_fences = 0;
  bool at_warpgroup = false;       // waiting in wgmma.wait_group
  bool wgmma_fenced = false;       // wgmma.fence since the last wgmma.wait_group
  int wgmma_pending = 0;           // argument of the wgmma.wait_group it waits in
  std::uint64_t wgmma_issued = 0;  // wgmma.mma_async it has issued in this block
  std::vector<WgmmaOp> wgmma_open;
  std::deque<std::vector<WgmmaOp>> wgmma_groups;
#if defined(SERVELAB_EMU_ASAN)
  void* fake_stack = nullptr;
#endif
};

struct LaneSlot {
  std::uint32_t in[10];
  std::uint32_t out[4];
  int arg = 0;
};

struct Warp {
  int lanes = 0;  // existing and not exited
  int arrived = 0;
  Collective kind = Collective::kNone;
  LaneSlot slot[32];
};

// One block being run.
struct BlockRun {
  std::span<Fiber> fibers;  // the first blockDim of the thread's State::fibers
  std::vector<Warp> warps;
  int live = 0;
  int block_arrived = 0;
  std::vector<int> warpgroup_arrived;  // threads waiting in wgmma.wait_group, per warpgroup
  // Per warpgroup, its wgmma operations issued and not yet retired, oldest first, and how many
  // it has retired (the sequence number of the deque's front: a thread's k-th wgmma.mma_async
  // is operation k of its warpgroup).
  std::vector<std::deque<WgmmaIssue>> wgmma_issues;
  std::vector<std::uint64_t> wgmma_retired;
  Fiber* current = nullptr;
  void* scheduler_sp = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<unsigned char> smem;
  // Per 16-byte granule of shared memory, the cp.async copy that landed there last: 1 + its
  // thread's index (0: none) in the high 32 bits, that thread's proxy_fences count at the
  // landing in the low 32 (empty until the block's first copy lands). While the count is
  // unchanged the thread has not executed fence.proxy.async since, and wgmma (which reads shared
  // memory through the async proxy) must not read the granule.
  std::vector<std::uint64_t> unfenced;
  std::string error;
  bool programmatic = false;  // launched with programmatic dependent launch
#if defined(SERVELAB_EMU_ASAN)
  void* scheduler_fake_stack = nullptr;
  const void* scheduler_bottom = nullptr;
  std::size_t scheduler_size = 0;
#endif
};

struct Capture {
  std::vector<std::function<void()>> ops;
  bool invalid = false;
};

// What CUDA keeps per host thread: the last error. A block runs on the thread that launched it
// (its fibers are that thread's).
struct State {
  BlockRun* run = nullptr;
  std::vector<Fiber> fibers;  // reused between blocks (their stacks)
  cudaError_t last_error = cudaSuccess;
  std::string last_message;
};
State& state() {
  static thread_local State s;
  return s;
}

// What CUDA keeps per device context, for every host thread alike (a kernel attribute set on one
// thread holds for launches from another; memory and captures are the process's): guarded by mu,
// never held while a kernel runs.
struct Device {
  std::mutex mu;
  std::map<const void*, int> smem_limit;
  std::map<cudaStream_t, Capture> captures;
  std::size_t allocated = 0;
  std::map<void*, std::size_t> allocations;
  std::atomic<std::int64_t> launches{0};
  std::atomic<std::int64_t> programmatic_launches{0};
};
Device& device() {
  static Device d;
  return d;
}

// The schedule (servelab_cuda_emu.h): bit 0 reverse, bit 1 early_copies, bit 2 greedy_warps;
// -1 until first read.
std::atomic<int> g_schedule{-1};
int schedule_bits(Schedule s) {
  return (s.reverse ? 1 : 0) | (s.early_copies ? 2 : 0) | (s.greedy_warps ? 4 : 0);
}

// "(x, y, z)" of a dim3 or uint3.
template <typename D>
std::string xyz(D d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

// ---- fibers ----------------------------------------------------------------------------------

void switch_to_scheduler(bool exiting) {
  BlockRun& r = *state().run;
  Fiber& f = *r.current;
#if defined(SERVELAB_EMU_ASAN)
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f.fake_stack, r.scheduler_bottom,
                                 r.scheduler_size);
#else
  (void)exiting;
#endif
  servelab_emu_switch_stack(&f.sp, r.scheduler_sp);
#if defined(SERVELAB_EMU_ASAN)
  __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
#endif
}

// What fail() throws: it unwinds the failing thread's fiber to fiber_main, so that the frames
// between (the temporaries of the message included) are destroyed, not abandoned.
struct KernelFailure {};

// Stops the running thread for good, the block's run failing with `message`.
[[noreturn]] void fail(const std::string& message) {
  BlockRun& r = *state().run;
  if (r.error.empty()) {
    r.error = message + " (block " + xyz(blockIdx) + ", thread " + xyz(threadIdx) + ")";
  }
  throw KernelFailure{};
}

void release_block_barrier(BlockRun& r) {
  for (Fiber& f : r.fibers) {
    if (f.waiting && !f.done) f.waiting = false;
  }
  r.block_arrived = 0;
}

void thread_exited(BlockRun& r, Fiber& f) {
  f.done = true;
  --r.live;
  if (r.programmatic && !f.waited_for_grid && r.error.empty()) {
    r.error = "thread " + xyz(f.tid) + " of block " + xyz(blockIdx) +
              " exited without griddepcontrol.wait in a kernel launched with programmatic "
              "dependent launch (kernels/programmatic_launch.h: every thread must wait)";
  }
  Warp& w = r.warps[static_cast<std::size_t>(f.warp)];
  --w.lanes;
  if (w.arrived > 0 && r.error.empty()) {
    r.error = "lane " + std::to_string(f.lane) + " of warp " + std::to_string(f.warp) +
              " exited while its warp waits in " + collective_name(w.kind) + " (block " +
              xyz(blockIdx) + ")";
  }
  if (!f.wgmma_groups.empty() || !f.wgmma_open.empty()) {
    if (r.error.empty()) {
      r.error = "thread " + xyz(f.tid) + " of block " + xyz(blockIdx) +
                " exited with wgmma.mma_async operations it never waited for";
    }
  }
  const std::size_t wg = static_cast<std::size_t>(f.warp / 4);
  if (wg < r.warpgroup_arrived.size() && r.warpgroup_arrived[wg] > 0 && r.error.empty()) {
    r.error = "thread " + xyz(f.tid) + " exited while its warpgroup waits in wgmma.wait_group" +
              " (block " + xyz(blockIdx) + ")";
  }
  if (r.block_arrived > 0 && r.block_arrived == r.live) release_block_barrier(r);
}

void fiber_main() {
  BlockRun& r = *state().run;
#if defined(SERVELAB_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &r.scheduler_bottom, &r.scheduler_size);
#endif
  try {
    (*r.body)();
  } catch (const KernelFailure&) {
    // r.error holds the message
  } catch (const std::exception& e) {
    if (r.error.empty()) r.error = std::string("exception in kernel code: ") + e.what();
  }
  thread_exited(r, *r.current);
  switch_to_scheduler(true);
  std::abort();  // an exited fiber is never resumed
}

void prepare_stack(Fiber& f) {
  if (!f.stack) {
    f.stack.reset(new unsigned char[kStackBytes]);  // not zeroed: pages stay untouched
    f.sp = nullptr;
  }
#if defined(SERVELAB_EMU_ASAN)
  // The frames live at a fiber's last switch never return (it switched away for good, or its
  // block ended without resuming it): their redzones would stay poisoned for the next block's
  // fiber on this stack. They lie between that switch's stack pointer and the top (frames that
  // returned earlier unpoisoned their own); unpoisoning only that span, not the whole 1 MiB,
  // keeps a launch cheap (128 fibers a block).
  if (f.sp != nullptr) {
    const auto base = reinterpret_cast<std::uintptr_t>(f.stack.get());
    const std::uintptr_t low = std::max(base, reinterpret_cast<std::uintptr_t>(f.sp) - 256);
    __asan_unpoison_memory_region(reinterpret_cast<void*>(low), base + kStackBytes - low);
  }
#endif
  // The return address of the first switch sits at a 16-byte aligned slot, so fiber_main starts
  // with the stack alignment of a called function; six zeroed callee-saved registers below it.
  auto top = reinterpret_cast<std::uintptr_t>(f.stack.get() + kStackBytes) & ~std::uintptr_t{15};
  auto* slot = reinterpret_cast<void**>(top - 32);
  slot[0] = reinterpret_cast<void*>(&fiber_main);
  slot[1] = nullptr;
  for (int i = 1; i <= 6; ++i) slot[-i] = nullptr;
  f.sp = slot - 6;
}

// Runs one block of `body` to completion; returns the failure message or "".
std::string run_block(const std::function<void()>& body, dim3 block, std::size_t smem_bytes,
                      bool programmatic) {
  State& st = state();
  const int n = static_cast<int>(block.x * block.y * block.z);
  if (st.run != nullptr) return "a kernel launch from inside a kernel (not emulated)";
  // The thread's fibers are reused from block to block, never reallocated (under
  // AddressSanitizer every allocation is expensive, and a launch runs many blocks). Shared memory
  // is allocated afresh at its exact size, so that ASan sees an access past its end.
  if (static_cast<int>(st.fibers.size()) < n) st.fibers.resize(static_cast<std::size_t>(n));
  const std::span<Fiber> fibers(st.fibers.data(), static_cast<std::size_t>(n));

  BlockRun r;
  r.fibers = fibers;
  r.body = &body;
  r.live = n;
  r.programmatic = programmatic;
  r.smem.assign(smem_bytes, 0xff);
  r.warps.resize(static_cast<std::size_t>((n + 31) / 32));
  r.warpgroup_arrived.assign(static_cast<std::size_t>((n + 127) / 128), 0);
  r.wgmma_issues.resize(r.warpgroup_arrived.size());
  r.wgmma_retired.assign(r.warpgroup_arrived.size(), 0);
  for (int i = 0; i < n; ++i) {
    Fiber& f = fibers[static_cast<std::size_t>(i)];
    f.tid = {static_cast<unsigned>(i) % block.x, static_cast<unsigned>(i) / block.x % block.y,
             static_cast<unsigned>(i) / (block.x * block.y)};
    f.warp = i / 32;
    f.lane = i % 32;
    f.done = f.waiting = f.waited_for_grid = false;
    f.open_group.clear();
    f.groups.clear();
    f.proxy_fences = 0;
    f.at_warpgroup = f.wgmma_fenced = false;
    f.wgmma_open.clear();
    f.wgmma_groups.clear();
    f.wgmma_issued = 0;
    ++r.warps[static_cast<std::size_t>(f.warp)].lanes;
    prepare_stack(f);
  }
  st.run = &r;
  // One round: the warps in order (or reverse), each warp's lanes in order (or reverse), each
  // runnable one to its next synchronisation point; with greedy_warps a warp's rounds repeat
  // until none of its lanes can run (all wait at a block barrier or a warpgroup's wait, or
  // exited) before the next warp starts.
  const Schedule sched = schedule();
  const int n_warps = (n + 31) / 32;
  for (;;) {
    bool ran = false;
    for (int wi = 0; wi < n_warps && r.error.empty(); ++wi) {
      const int w = sched.reverse ? n_warps - 1 - wi : wi;
      const int first = 32 * w, count = std::min(32, n - first);
      for (bool warp_ran = true; warp_ran && r.error.empty();) {
        warp_ran = false;
        for (int li = 0; li < count; ++li) {
          Fiber& f =
              fibers[static_cast<std::size_t>(first + (sched.reverse ? count - 1 - li : li))];
          if (f.done || f.waiting) continue;
          ran = warp_ran = true;
          r.current = &f;
          threadIdx = f.tid;
#if defined(SERVELAB_EMU_ASAN)
          __sanitizer_start_switch_fiber(&r.scheduler_fake_stack, f.stack.get(), kStackBytes);
#endif
          servelab_emu_switch_stack(&r.scheduler_sp, f.sp);
#if defined(SERVELAB_EMU_ASAN)
          __sanitizer_finish_switch_fiber(r.scheduler_fake_stack, nullptr, nullptr);
#endif
          if (!r.error.empty()) break;
        }
        if (!sched.greedy_warps) break;
      }
    }
    if (!r.error.empty() || r.live == 0) break;
    if (!ran) {
      int at_block = 0, at_warp = 0, at_warpgroup = 0;
      Collective kind = Collective::kNone;
      for (const Fiber& f : fibers) {
        if (f.done || !f.waiting) continue;
        if (f.at_block_barrier) {
          ++at_block;
        } else if (f.at_warpgroup) {
          ++at_warpgroup;
        } else {
          ++at_warp;
          kind = r.warps[static_cast<std::size_t>(f.warp)].kind;
        }
      }
      r.error = "deadlock: " + std::to_string(at_block) + " threads wait at __syncthreads and " +
                std::to_string(at_warp) + " in a warp collective (" + collective_name(kind) +
                "), " + std::to_string(at_warpgroup) +
                " in wgmma.wait_group, that the others never reach (block " + xyz(blockIdx) + ")";
      break;
    }
  }
  st.run = nullptr;
  return r.error;
}

BlockRun& running(const char* what) {
  BlockRun* r = state().run;
  if (r == nullptr) {
    std::fprintf(stderr, "servelab CUDA emulator: %s called outside a kernel\n", what);
    std::abort();
  }
  return *r;
}

// ---- warp collectives ------------------------------------------------------------------------

void compute_collective(Warp& w, Collective kind, const BlockRun& r);

// Posts this lane's inputs; the last lane to arrive computes every lane's outputs.
const std::uint32_t* warp_collective(Collective kind, unsigned mask, const std::uint32_t* in,
                                     int n_in, int arg = 0) {
  BlockRun& r = running(collective_name(kind));
  Fiber& f = *r.current;
  Warp& w = r.warps[static_cast<std::size_t>(f.warp)];
  if (mask != 0xffffffffu) {
    fail(std::string(collective_name(kind)) + " with mask " + std::to_string(mask) +
         ": the emulator supports full-warp collectives only");
  }
  if (w.lanes != 32) {
    fail(std::string(collective_name(kind)) + " with a full mask in a warp of " +
         std::to_string(w.lanes) + " live lanes");
  }
  if (w.arrived == 0) {
    w.kind = kind;
  } else if (w.kind != kind) {
    fail(std::string("divergent warp: this lane is in ") + collective_name(kind) + ", " +
         std::to_string(w.arrived) + " others in " + collective_name(w.kind));
  }
  LaneSlot& s = w.slot[f.lane];
  std::copy(in, in + n_in, s.in);
  s.arg = arg;
  if (++w.arrived == 32) {
    compute_collective(w, kind, r);
    w.arrived = 0;
    // The warp's lanes are fibers 32 w .. 32 w + 31 (run_block): wake those, not the block.
    const std::size_t first = static_cast<std::size_t>(f.warp) * 32;
    const std::size_t last = std::min(r.fibers.size(), first + 32);
    for (std::size_t i = first; i < last; ++i) {
      Fiber& g = r.fibers[i];
      if (g.waiting && !g.done) g.waiting = false;
    }
  } else {
    f.waiting = true;
    f.at_block_barrier = false;
    f.at_warpgroup = false;
    switch_to_scheduler(false);
  }
  return s.out;
}

// The 16 bytes of shared memory at `addr`, checked.
const unsigned char* smem_row(const BlockRun& r, std::uint32_t addr, const char* what) {
  if (addr % 16 != 0 || std::size_t{addr} + 16 > r.smem.size()) {
    fail(std::string(what) + ": row address " + std::to_string(addr) +
         (addr % 16 != 0 ? " is not 16-byte aligned"
                         : " is past the block's " + std::to_string(r.smem.size()) +
                               " bytes of dynamic shared memory"));
  }
  return r.smem.data() + addr;
}

std::uint16_t half_of(std::uint32_t reg, int hi) {
  return static_cast<std::uint16_t>(hi ? reg >> 16 : reg & 0xffffu);
}
float bf16_bits(std::uint16_t b) { return __uint_as_float(std::uint32_t{b} << 16); }

void compute_collective(Warp& w, Collective kind, const BlockRun& r) {
  switch (kind) {
    case Collective::kShfl:
      for (int l = 0; l < 32; ++l) {
        const int width = w.slot[l].arg >> 8, lane_mask = w.slot[l].arg & 0xff;
        const int src = (l & ~(width - 1)) | ((l ^ lane_mask) & (width - 1));
        w.slot[l].out[0] = w.slot[src].in[0];
      }
      return;
    case Collective::kSyncwarp:
    case Collective::kNone:
      return;
    case Collective::kLdmatrix:
    case Collective::kLdmatrixTrans: {
      // Matrix m's row j is the 16 bytes at the address of lane 8 m + j. Lane l, register m:
      // elements (l / 4, 2 (l % 4) + {0, 1}) of matrix m, or of its transpose.
      const unsigned char* rows[32];
      for (int l = 0; l < 32; ++l) rows[l] = smem_row(r, w.slot[l].in[0], collective_name(kind));
      for (int l = 0; l < 32; ++l) {
        for (int m = 0; m < 4; ++m) {
          std::uint16_t e[2];
          for (int k = 0; k < 2; ++k) {
            const int row = kind == Collective::kLdmatrix ? l / 4 : 2 * (l % 4) + k;
            const int col = kind == Collective::kLdmatrix ? 2 * (l % 4) + k : l / 4;
            std::memcpy(&e[k], rows[8 * m + row] + 2 * col, 2);
          }
          w.slot[l].out[m] = std::uint32_t{e[0]} | (std::uint32_t{e[1]} << 16);
        }
      }
      return;
    }
    case Collective::kMma: {
      // PTX ISA, mma.m16n8k16 .bf16 -> .f32, lane l = 4 g + t:
      //   A (16 x 16) a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
      //   B (16 x 8)  b0 (2t..2t+1, g), b1 (2t+8..2t+9, g)
      //   C, D (16 x 8) c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)
      // Each output sums k = 0..15 in order onto its accumulator, the whole 16 x 8 tile at once
      // (k outermost, so the compiler vectorises the columns): the same sums in the same order
      // as one output at a time, so the same bits (products of two bf16 values are exact in
      // double).
      double a[16][16], b[16][8], acc[16][8];
      for (int l = 0; l < 32; ++l) {
        const int g = l / 4, t = l % 4;
        const std::uint32_t* in = w.slot[l].in;
        for (int k = 0; k < 2; ++k) {
          a[g][2 * t + k] = bf16_bits(half_of(in[0], k));
          a[g + 8][2 * t + k] = bf16_bits(half_of(in[1], k));
          a[g][2 * t + 8 + k] = bf16_bits(half_of(in[2], k));
          a[g + 8][2 * t + 8 + k] = bf16_bits(half_of(in[3], k));
          b[2 * t + k][g] = bf16_bits(half_of(in[4], k));
          b[2 * t + 8 + k][g] = bf16_bits(half_of(in[5], k));
        }
        for (int e = 0; e < 4; ++e) {
          acc[g + 8 * (e >> 1)][2 * t + (e & 1)] = __uint_as_float(in[6 + e]);
        }
      }
      for (int k = 0; k < 16; ++k) {
        for (int row = 0; row < 16; ++row) {
          const double x = a[row][k];
          for (int col = 0; col < 8; ++col) acc[row][col] += x * b[k][col];
        }
      }
      for (int l = 0; l < 32; ++l) {
        const int g = l / 4, t = l % 4;
        for (int e = 0; e < 4; ++e) {
          w.slot[l].out[e] =
              __float_as_uint(static_cast<float>(acc[g + 8 * (e >> 1)][2 * t + (e & 1)]));
        }
      }
      return;
    }
  }
}

// ---- errors and capture ------------------------------------------------------------------------

cudaError_t set_error(cudaError_t e, const std::string& message) {
  State& st = state();
  st.last_error = e;
  st.last_message = message;
  return e;
}

bool capturing(cudaStream_t s) {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mu);
  return d.captures.count(s) != 0;
}

// A call that synchronises (or allocates) while a stream is being captured: CUDA refuses it and
// invalidates the capture.
cudaError_t refuse_during_capture(const char* what) {
  {
    Device& d = device();
    std::lock_guard<std::mutex> lock(d.mu);
    for (auto& [s, c] : d.captures) {
      c.invalid = true;
      (void)s;
    }
  }
  return set_error(cudaErrorStreamCaptureUnsupported,
                   std::string(what) + " is not allowed while a stream is being captured");
}
bool capturing_any() {
  Device& d = device();
  std::lock_guard<std::mutex> lock(d.mu);
  return !d.captures.empty();
}

}  // namespace

// ---- the functions the kernels call -------------------------------------------------------------

std::uint32_t shfl_xor(unsigned mask, std::uint32_t value, int lane_mask, int width) {
  if (width < 1 || width > 32 || (width & (width - 1)) != 0 || lane_mask < 0 || lane_mask > 31) {
    fail("__shfl_xor_sync: width " + std::to_string(width) + ", lane mask " +
         std::to_string(lane_mask));
  }
  return warp_collective(Collective::kShfl, mask, &value, 1, (width << 8) | lane_mask)[0];
}

// Writes a cp.async copy of the running thread into shared memory, marking its granule as
// written through the generic proxy and not yet fenced (BlockRun::unfenced).
void land_copy(BlockRun& r, const CopyRequest& c) {
  if (c.bytes == 16) {
    std::memcpy(c.dst, c.src, 16);
  } else {
    std::memset(c.dst, 0, 16);
  }
  if (r.unfenced.empty()) r.unfenced.assign((r.smem.size() + 15) / 16, 0);
  const Fiber& f = *r.current;
  r.unfenced[static_cast<std::size_t>(c.dst - r.smem.data()) / 16] =
      (static_cast<std::uint64_t>(1 + (&f - r.fibers.data())) << 32) | f.proxy_fences;
}

// The thread whose cp.async copy wrote the granule of shared address `at` and which has not
// executed fence.proxy.async since, or null.
const Fiber* unfenced_writer(const BlockRun& r, std::uint64_t at) {
  if (r.unfenced.empty()) return nullptr;
  const std::uint64_t e = r.unfenced[at / 16];
  if (e == 0) return nullptr;
  const Fiber& writer = r.fibers[(e >> 32) - 1];
  return writer.proxy_fences == static_cast<std::uint32_t>(e) ? &writer : nullptr;
}

void cp_async16(std::uint32_t dst, const void* src, int src_bytes) {
  BlockRun& r = running("cp.async");
  if (dst % 16 != 0 || std::size_t{dst} + 16 > r.smem.size()) {
    fail("cp.async: shared address " + std::to_string(dst) +
         (dst % 16 != 0 ? " is not 16-byte aligned"
                        : " is past the block's " + std::to_string(r.smem.size()) +
                              " bytes of dynamic shared memory"));
  }
  if (src_bytes != 0 && src_bytes != 16) fail("cp.async: src-size must be 0 or 16");
  if (src_bytes == 16 && reinterpret_cast<std::uintptr_t>(src) % 16 != 0) {
    fail("cp.async: global source address is not 16-byte aligned");
  }
  if (schedule().early_copies) {  // lands now: its group retires nothing later
    land_copy(r, {r.smem.data() + dst, static_cast<const unsigned char*>(src), src_bytes});
    return;
  }
  r.current->open_group.push_back(
      {r.smem.data() + dst, static_cast<const unsigned char*>(src), src_bytes});
}

void cp_async_commit() {
  Fiber& f = *running("cp.async.commit_group").current;
  f.groups.push_back(std::move(f.open_group));
  f.open_group.clear();
}

void cp_async_wait(int pending_groups) {
  BlockRun& r = running("cp.async.wait_group");
  Fiber& f = *r.current;
  while (static_cast<int>(f.groups.size()) > pending_groups) {
    for (const CopyRequest& c : f.groups.front()) land_copy(r, c);
    f.groups.pop_front();
  }
}

void fence_proxy_async() { ++running("fence.proxy.async").current->proxy_fences; }

void ldmatrix_x4(std::uint32_t (&reg)[4], std::uint32_t addr, bool trans) {
  const std::uint32_t* out = warp_collective(
      trans ? Collective::kLdmatrixTrans : Collective::kLdmatrix, 0xffffffffu, &addr, 1);
  std::copy(out, out + 4, reg);
}

void mma_m16n8k16_bf16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                       std::uint32_t b1) {
  std::uint32_t in[10] = {a[0], a[1], a[2], a[3], b0, b1};
  for (int e = 0; e < 4; ++e) in[6 + e] = __float_as_uint(d[e]);
  const std::uint32_t* out = warp_collective(Collective::kMma, 0xffffffffu, in, 10);
  for (int e = 0; e < 4; ++e) d[e] = __uint_as_float(out[e]);
}

// ---- warpgroup MMA ---------------------------------------------------------------------------

// The shared-memory address of element (mn, k) of a no-swizzle canonical layout through `desc`
// (servelab_cuda_emu.h).
std::uint64_t wgmma_address(std::uint64_t desc, int mn, int k, bool mn_major, const char* which) {
  const std::uint64_t start = (desc & 0x3fffu) << 4, lbo = ((desc >> 16) & 0x3fffu) << 4,
                      sbo = ((desc >> 32) & 0x3fffu) << 4;
  const std::uint64_t reserved = desc & ((std::uint64_t{3} << 14) | (std::uint64_t{3} << 30) |
                                         (std::uint64_t{7} << 46) | (std::uint64_t{0x3ff} << 52));
  if (reserved != 0 || ((desc >> 49) & 7u) != 0 || (desc >> 62) != 0) {
    fail(std::string("wgmma: matrix descriptor of ") + which + " " + std::to_string(desc) +
         ": the emulator models only the no-swizzle canonical layout (swizzle mode 0, base "
         "offset 0, reserved bits 0)");
  }
  return mn_major ? start + (mn % 8) * 2 + (mn / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo
                  : start + (mn % 8) * 16 + (mn / 8) * sbo + (k % 8) * 2 + (k / 8) * lbo;
}

// Fails the read of operand element (mn, k) at shared address `at`, which is past the block's
// shared memory or was written by a cp.async whose thread has not executed the proxy fence since.
[[noreturn]] void fail_operand_read(const BlockRun& r, std::uint64_t at, int mn, int k,
                                    const char* which) {
  const std::string element = std::string("wgmma: ") + which + " element (" + std::to_string(mn) +
                              ", " + std::to_string(k) + ") at shared address " +
                              std::to_string(at);
  if (at + 2 > r.smem.size()) {
    fail(element + " is past the block's " + std::to_string(r.smem.size()) +
         " bytes of dynamic shared memory");
  }
  const Fiber* writer = unfenced_writer(r, at);
  fail(element + " was written by a cp.async of thread " +
       (writer != nullptr ? xyz(writer->tid) : std::string("?")) +
       ", which has not executed fence.proxy.async since (wgmma reads shared memory through the "
       "async proxy: kernels/ptx.cuh fence_proxy_async)");
}

// The bf16 bits of the shared-memory operands of `o` now: A 64 x 16 row-major (left empty when A
// comes from registers) and B 16 x n (k-th row at k n). Each descriptor is checked once; each
// element's address always, and with `fenced` its last cp.async writer's proxy fence (at the
// issue; a write after it changes the bits, which the wait sees).
void read_wgmma_operands(const BlockRun& r, const WgmmaOp& o, bool fenced,
                         std::vector<std::uint16_t>& a, std::vector<std::uint16_t>& b) {
  const auto un = static_cast<std::size_t>(o.n);
  a.assign(o.a == nullptr ? 64 * 16 : 0, 0);
  b.assign(16 * un, 0);
  // Element (mn, k) of an operand: `origin` + mn_off(mn) + k_off(k), the terms tabulated.
  struct Layout {
    std::uint64_t origin;
    std::array<std::uint64_t, 256> mn_off;  // n is at most 256
    std::array<std::uint64_t, 16> k_off;
  };
  const auto layout = [&](std::uint64_t desc, int mns, bool mn_major, const char* which) {
    Layout l;
    l.origin = wgmma_address(desc, 0, 0, mn_major, which);
    for (int mn = 0; mn < mns; ++mn) {
      l.mn_off[static_cast<std::size_t>(mn)] =
          wgmma_address(desc, mn, 0, mn_major, which) - l.origin;
    }
    for (int k = 0; k < 16; ++k) {
      l.k_off[static_cast<std::size_t>(k)] = wgmma_address(desc, 0, k, mn_major, which) - l.origin;
    }
    return l;
  };
  const auto element = [&](const Layout& l, int mn, int k, const char* which) {
    const std::uint64_t at =
        l.origin + l.mn_off[static_cast<std::size_t>(mn)] + l.k_off[static_cast<std::size_t>(k)];
    if (at + 2 > r.smem.size() || (fenced && unfenced_writer(r, at) != nullptr)) {
      fail_operand_read(r, at, mn, k, which);
    }
    std::uint16_t bits;
    std::memcpy(&bits, r.smem.data() + at, 2);
    return bits;
  };
  if (o.a == nullptr) {
    const Layout la = layout(o.desc_a, 64, false, "A");
    for (int m = 0; m < 64; ++m) {
      for (int k = 0; k < 16; ++k) a[static_cast<std::size_t>(m * 16 + k)] = element(la, m, k, "A");
    }
  }
  const Layout lb = layout(o.desc_b, o.n, o.b_mn_major, "B");
  for (int k = 0; k < 16; ++k) {
    for (int j = 0; j < o.n; ++j) {
      b[static_cast<std::size_t>(k) * un + static_cast<std::size_t>(j)] = element(lb, j, k, "B");
    }
  }
}

// A hash of a thread's n / 2 accumulators (their bits): four independent FNV-1a lanes (n / 2 is
// a multiple of 4), so that the multiplications do not wait on each other.
std::uint64_t accumulator_hash(const float* d, int n) {
  std::uint64_t h[4] = {1469598103934665603ull, 1469598103934665603ull ^ 1u,
                        1469598103934665603ull ^ 2u, 1469598103934665603ull ^ 3u};
  for (int i = 0; i < n / 2; i += 4) {
    for (int j = 0; j < 4; ++j) {
      std::uint32_t bits;
      std::memcpy(&bits, d + i + j, 4);
      h[j] = (h[j] ^ bits) * 1099511628211ull;
    }
  }
  return h[0] ^ (h[1] << 1) ^ (h[2] << 2) ^ (h[3] << 3);
}

// Operation `done` of thread f's oldest group has written its accumulators: the next operation
// of f over the same accumulators (a chain of k steps into one tile) expects them as they are
// now, not as they were at its issue (the one after it is updated when that one retires).
void accumulators_written(Fiber& f, std::size_t done) {
  const WgmmaOp& w = f.wgmma_groups.front()[done];
  const float* end = w.d + w.n / 2;
  std::size_t skip = done + 1;
  for (std::vector<WgmmaOp>& group : f.wgmma_groups) {
    for (std::size_t j = skip; j < group.size(); ++j) {
      WgmmaOp& later = group[j];
      if (later.d < end && w.d < later.d + later.n / 2) {
        if (later.accumulate) later.d_issued = accumulator_hash(later.d, later.n);
        return;
      }
    }
    skip = 0;
  }
}

// Fails unless the operands `o` reads now are those read at its warpgroup's issue (`issue`), and
// every thread's A registers and accumulators are what they were at its own issue.
void check_wgmma_unchanged(const BlockRun& r, const std::vector<const WgmmaOp*>& ops,
                           const WgmmaIssue& issue, const std::vector<std::uint16_t>& a,
                           const std::vector<std::uint16_t>& b) {
  const WgmmaOp& o = *ops[0];
  const auto changed = [&](const char* which, int mn, int k, std::uint64_t desc, bool mn_major) {
    fail(std::string("wgmma: ") + which + " element (" + std::to_string(mn) + ", " +
         std::to_string(k) + ") at shared address " +
         std::to_string(wgmma_address(desc, mn, k, mn_major, which)) +
         " changed between the operation's issue (by its warpgroup's first thread, " +
         xyz(r.fibers[static_cast<std::size_t>(issue.first)].tid) +
         ") and the wgmma.wait_group that retires it: wgmma may read its shared-memory operands "
         "any time in between (a wait or barrier is missing before the issue, or a write comes "
         "before the wait)");
  };
  for (std::size_t i = 0; a != issue.a && i < a.size(); ++i) {
    if (a[i] != issue.a[i])
      changed("A", static_cast<int>(i / 16), static_cast<int>(i % 16), o.desc_a, false);
  }
  for (std::size_t i = 0; b != issue.b && i < b.size(); ++i) {
    if (b[i] != issue.b[i]) {
      changed("B", static_cast<int>(i % static_cast<std::size_t>(o.n)),
              static_cast<int>(i / static_cast<std::size_t>(o.n)), o.desc_b, o.b_mn_major);
    }
  }
  for (std::size_t t = 0; t < ops.size(); ++t) {
    const WgmmaOp& x = *ops[t];
    if (x.a != nullptr && std::memcmp(x.a, x.a_issued, sizeof x.a_issued) != 0) {
      fail("wgmma: the A registers of warpgroup thread " + std::to_string(t) +
           " changed between its wgmma.mma_async and the wgmma.wait_group that retires it (they "
           "belong to the operation until then)");
    }
    if (x.accumulate && accumulator_hash(x.d, x.n) != x.d_issued) {
      fail("wgmma: the accumulators of warpgroup thread " + std::to_string(t) +
           " changed between its wgmma.mma_async and the wgmma.wait_group that retires it (the "
           "operation may read them any time in between: wait before rescaling them)");
    }
  }
}

// Runs operation `op` of a group, issued alike by the 128 threads of warpgroup `wg` (`ops[t]`
// is thread t's), after checking that its operands are those of its issue.
void run_wgmma(const BlockRun& r, const std::vector<const WgmmaOp*>& ops, const WgmmaIssue& issue) {
  const WgmmaOp& o = *ops[0];
  for (const WgmmaOp* x : ops) {
    if (x->n != o.n || (x->a == nullptr) != (o.a == nullptr) || x->desc_b != o.desc_b ||
        (o.a == nullptr && x->desc_a != o.desc_a) || x->accumulate != o.accumulate ||
        x->b_mn_major != o.b_mn_major) {
      fail(
          "wgmma: the threads of a warpgroup issued different operations (shape, descriptors "
          "or flags differ)");
    }
  }
  const int n = o.n;
  const auto un = static_cast<std::size_t>(n);
  static thread_local std::vector<std::uint16_t> sa, sb;
  read_wgmma_operands(r, o, false, sa, sb);
  check_wgmma_unchanged(r, ops, issue, sa, sb);
  // Operands and the 64 x n accumulator tile in double, reused between operations; the sums
  // run k = 0..15 in order from the accumulator (k outermost, so the columns vectorise), and
  // the products of two bf16 values are exact in double.
  static thread_local std::vector<double> a, b, acc;
  a.assign(64 * 16, 0.0);
  b.resize(sb.size());
  for (std::size_t i = 0; i < sb.size(); ++i) b[i] = bf16_bits(sb[i]);
  acc.assign(64 * un, 0.0);
  if (o.a == nullptr) {
    for (std::size_t i = 0; i < sa.size(); ++i) a[i] = bf16_bits(sa[i]);
  } else {
    for (int t = 0; t < 128; ++t) {
      const int row = 16 * (t / 32) + (t % 32) / 4, col = 2 * (t % 4);
      const std::uint32_t* reg = ops[static_cast<std::size_t>(t)]->a;
      for (int h = 0; h < 2; ++h) {
        a[static_cast<std::size_t>(row * 16 + col + h)] = bf16_bits(half_of(reg[0], h));
        a[static_cast<std::size_t>((row + 8) * 16 + col + h)] = bf16_bits(half_of(reg[1], h));
        a[static_cast<std::size_t>(row * 16 + col + 8 + h)] = bf16_bits(half_of(reg[2], h));
        a[static_cast<std::size_t>((row + 8) * 16 + col + 8 + h)] = bf16_bits(half_of(reg[3], h));
      }
    }
  }
  // Thread t's register i: row 16 (t / 32) + (t % 32) / 4 + 8 ((i / 2) % 2), column
  // 8 (i / 4) + 2 (t % 4) + i % 2; every element of the 64 x n tile is exactly one of them.
  auto element = [n](int t, int i) {
    const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
    const int col = 8 * (i / 4) + 2 * (t % 4) + i % 2;
    return static_cast<std::size_t>(row * n + col);
  };
  if (o.accumulate) {
    for (int t = 0; t < 128; ++t) {
      const float* d = ops[static_cast<std::size_t>(t)]->d;
      for (int i = 0; i < n / 2; ++i) acc[element(t, i)] = d[i];
    }
  }
  for (int k = 0; k < 16; ++k) {
    const double* bk = b.data() + static_cast<std::size_t>(k) * un;
    for (std::size_t m = 0; m < 64; ++m) {
      const double x = a[m * 16 + static_cast<std::size_t>(k)];
      double* am = acc.data() + m * un;
      for (std::size_t j = 0; j < un; ++j) am[j] += x * bk[j];
    }
  }
  for (int t = 0; t < 128; ++t) {
    float* d = ops[static_cast<std::size_t>(t)]->d;
    for (int i = 0; i < n / 2; ++i) d[i] = static_cast<float>(acc[element(t, i)]);
  }
}

void wgmma_bf16(float* d, int n, const std::uint32_t* a, std::uint64_t desc_a, std::uint64_t desc_b,
                bool accumulate, bool b_mn_major) {
  BlockRun& r = running("wgmma.mma_async");
  Fiber& f = *r.current;
  if (r.fibers.size() % 128 != 0) {
    fail("wgmma.mma_async in a block of " + std::to_string(r.fibers.size()) +
         " threads (a multiple of 128, whole warpgroups, is needed)");
  }
  if (n < 8 || n > 256 || n % 8 != 0) fail("wgmma.mma_async: n = " + std::to_string(n));
  if (!f.wgmma_fenced) {
    fail(
        "wgmma.mma_async without a wgmma.fence since the thread's last wgmma.wait_group (the "
        "accumulator and A registers may be stale)");
  }
  WgmmaOp op{d, n, a, desc_a, desc_b, accumulate, b_mn_major};
  if (a != nullptr) std::memcpy(op.a_issued, a, sizeof op.a_issued);
  if (accumulate) op.d_issued = accumulator_hash(d, n);
  // The operation's shared-memory operands as they are when the warpgroup's first thread issues
  // it: from then on nothing may write them until the wait.
  const std::size_t wg = static_cast<std::size_t>(f.warp / 4);
  std::deque<WgmmaIssue>& issues = r.wgmma_issues[wg];
  const std::size_t k = static_cast<std::size_t>(f.wgmma_issued++ - r.wgmma_retired[wg]);
  if (k == issues.size()) issues.emplace_back();
  WgmmaIssue& issue = issues[k];
  if (issue.threads++ == 0) {
    issue.first = static_cast<int>(&f - r.fibers.data());
    read_wgmma_operands(r, op, true, issue.a, issue.b);
  }
  f.wgmma_open.push_back(op);
}

void wgmma_fence() { running("wgmma.fence").current->wgmma_fenced = true; }

void wgmma_commit() {
  Fiber& f = *running("wgmma.commit_group").current;
  f.wgmma_groups.push_back(std::move(f.wgmma_open));
  f.wgmma_open.clear();
}

void wgmma_wait(int pending) {
  BlockRun& r = running("wgmma.wait_group");
  Fiber& f = *r.current;
  if (r.fibers.size() % 128 != 0) {
    fail("wgmma.wait_group in a block of " + std::to_string(r.fibers.size()) + " threads");
  }
  if (!f.wgmma_open.empty()) {
    fail("wgmma.wait_group with wgmma.mma_async operations not yet committed");
  }
  f.wgmma_fenced = false;
  f.wgmma_pending = pending;
  const std::size_t wg = static_cast<std::size_t>(f.warp / 4);
  const std::span<Fiber> group = r.fibers.subspan(wg * 128, 128);
  for (const Fiber& g : group) {
    if (g.done) fail("wgmma.wait_group in a warpgroup some of whose threads have exited");
  }
  if (++r.warpgroup_arrived[wg] < 128) {
    f.waiting = true;
    f.at_block_barrier = false;
    f.at_warpgroup = true;
    switch_to_scheduler(false);
    return;
  }
  r.warpgroup_arrived[wg] = 0;
  for (const Fiber& g : group) {
    if (g.wgmma_pending != pending || g.wgmma_groups.size() != f.wgmma_groups.size()) {
      fail(
          "wgmma.wait_group: the threads of a warpgroup differ in their wait argument or "
          "committed groups");
    }
  }
  while (static_cast<int>(f.wgmma_groups.size()) > pending) {
    const std::size_t ops = f.wgmma_groups.front().size();
    for (const Fiber& g : group) {
      if (g.wgmma_groups.front().size() != ops) {
        fail("wgmma.wait_group: the threads of a warpgroup committed different operations");
      }
    }
    std::vector<const WgmmaOp*> op(128);
    for (std::size_t i = 0; i < ops; ++i) {
      for (std::size_t t = 0; t < 128; ++t) op[t] = &group[t].wgmma_groups.front()[i];
      std::deque<WgmmaIssue>& issues = r.wgmma_issues[wg];
      if (issues.empty() || issues.front().threads != 128) {
        fail("wgmma.wait_group: an operation not issued by all 128 threads of the warpgroup");
      }
      run_wgmma(r, op, issues.front());
      issues.pop_front();
      ++r.wgmma_retired[wg];
      for (Fiber& g : group) accumulators_written(g, i);
    }
    for (Fiber& g : group) g.wgmma_groups.pop_front();
  }
  for (Fiber& g : group) {
    if (g.waiting && g.at_warpgroup && !g.done) {
      g.waiting = false;
      g.at_warpgroup = false;
    }
  }
}

unsigned char* dynamic_smem() { return running("dynamic shared memory").smem.data(); }

std::int64_t launches_executed() { return device().launches.load(); }
std::int64_t programmatic_launches_executed() { return device().programmatic_launches.load(); }

void griddep_wait() { running("griddepcontrol.wait").current->waited_for_grid = true; }

bool enqueue(cudaStream_t stream, std::function<void()> op) {
  bool refuse = false;
  {
    Device& d = device();
    std::lock_guard<std::mutex> lock(d.mu);
    const auto c = d.captures.find(stream);
    if (c != d.captures.end()) {
      c->second.ops.push_back(std::move(op));
      return true;
    }
    refuse = stream == nullptr && !d.captures.empty();
  }
  if (refuse) {
    refuse_during_capture("an operation on the legacy default stream");
    return false;
  }
  op();
  return true;
}

bool parse_schedule(const char* text, Schedule* out, const char** why) {
  Schedule s;
  const std::string value = text == nullptr ? "" : text;
  if (value != "forward" && !value.empty()) {
    std::size_t at = 0;
    while (at <= value.size()) {
      const std::size_t comma = std::min(value.find(',', at), value.size());
      const std::string word = value.substr(at, comma - at);
      if (word == "reverse") {
        s.reverse = true;
      } else if (word == "early_copies") {
        s.early_copies = true;
      } else if (word == "greedy_warps") {
        s.greedy_warps = true;
      } else {
        *why =
            "expected forward, or a comma-separated list of reverse, early_copies and "
            "greedy_warps";
        return false;
      }
      at = comma + 1;
    }
  }
  *out = s;
  return true;
}

Schedule schedule() {
  int bits = g_schedule.load(std::memory_order_relaxed);
  if (bits < 0) {
    const char* env = std::getenv("SERVELAB_EMU_SCHEDULE");
    Schedule s;
    const char* why = nullptr;
    if (!parse_schedule(env, &s, &why)) {
      std::fprintf(stderr, "servelab CUDA emulator: SERVELAB_EMU_SCHEDULE=%s: %s\n", env, why);
      std::exit(2);
    }
    int expected = -1;
    g_schedule.compare_exchange_strong(expected, schedule_bits(s));
    bits = g_schedule.load(std::memory_order_relaxed);
  }
  return {(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
}

void set_schedule(Schedule s) { g_schedule.store(schedule_bits(s), std::memory_order_relaxed); }

void launch(const void* func, const char* name, dim3 grid, dim3 block, std::size_t smem,
            cudaStream_t stream, std::function<void()> body, bool programmatic) {
  const std::string who = std::string(name) + " <<<" + xyz(grid) + ", " + xyz(block) + ", " +
                          std::to_string(smem) + ">>>";
  const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.y > 65535 || grid.z > 65535) {
    set_error(cudaErrorInvalidConfiguration, who + ": invalid launch configuration");
    return;
  }
  int limit = kDefaultSmem;
  {
    Device& d = device();
    std::lock_guard<std::mutex> lock(d.mu);
    const auto lim = d.smem_limit.find(func);
    if (lim != d.smem_limit.end()) limit = lim->second;
  }
  if (smem > static_cast<std::size_t>(limit)) {
    set_error(cudaErrorInvalidValue,
              who + ": " + std::to_string(smem) + " bytes of dynamic shared memory, above the " +
                  std::to_string(limit) +
                  " this kernel may use (cudaFuncSetAttribute MaxDynamicSharedMemorySize)");
    return;
  }
  auto run = [grid, block, smem, who, programmatic, body = std::move(body)] {
    ++device().launches;
    if (programmatic) ++device().programmatic_launches;
    const dim3 saved_grid = gridDim, saved_block = blockDim;
    gridDim = grid;
    blockDim = block;
    const bool reverse = schedule().reverse;
    for (unsigned z = 0; z < grid.z; ++z) {
      for (unsigned y = 0; y < grid.y; ++y) {
        for (unsigned x = 0; x < grid.x; ++x) {
          blockIdx =
              reverse ? uint3{grid.x - 1 - x, grid.y - 1 - y, grid.z - 1 - z} : uint3{x, y, z};
          const std::string e = run_block(body, block, smem, programmatic);
          if (!e.empty()) {
            set_error(cudaErrorLaunchFailure, who + ": " + e);
            std::fprintf(stderr, "servelab CUDA emulator: %s: %s\n", who.c_str(), e.c_str());
            gridDim = saved_grid;
            blockDim = saved_block;
            return;
          }
        }
      }
    }
    gridDim = saved_grid;
    blockDim = saved_block;
  };
  enqueue(stream, std::move(run));
}

}  // namespace servelab_emu

using servelab_emu::set_error;
using servelab_emu::State;
using servelab_emu::state;

void __syncthreads() {
  using namespace servelab_emu;
  BlockRun& r = running("__syncthreads");
  if (++r.block_arrived == r.live) {
    release_block_barrier(r);
    return;
  }
  r.current->waiting = true;
  r.current->at_block_barrier = true;
  r.current->at_warpgroup = false;
  switch_to_scheduler(false);
}

void __syncwarp(unsigned mask) {
  servelab_emu::warp_collective(servelab_emu::Collective::kSyncwarp, mask, nullptr, 0);
}

std::size_t __cvta_generic_to_shared(const void* p) {
  using namespace servelab_emu;
  BlockRun& r = running("__cvta_generic_to_shared");
  const auto* b = static_cast<const unsigned char*>(p);
  if (b < r.smem.data() || b > r.smem.data() + r.smem.size()) {
    fail(
        "__cvta_generic_to_shared: the address is not in the block's dynamic shared memory (the "
        "emulator maps only that)");
  }
  return static_cast<std::size_t>(b - r.smem.data());
}

// ---- runtime API
// -----------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : set_error(cudaErrorInvalidValue, "no such device");
}
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  if (device != 0) return set_error(cudaErrorInvalidValue, "no such device");
  if (bus_id == nullptr || len < 13) return set_error(cudaErrorInvalidValue, "buffer too short");
  std::snprintf(bus_id, static_cast<std::size_t>(len), "0000:00:00.0");  // no PCI device
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return set_error(cudaErrorInvalidValue, "no such device");
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "ServeLab CUDA emulator (H200-shaped, CPU)");
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->totalGlobalMem = servelab_emu::kDeviceBytes;
  prop->sharedMemPerBlockOptin = servelab_emu::kMaxSmemOptin;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->clockRate = 1980000;
  prop->memoryClockRate = 3201000;
  prop->memoryBusWidth = 6144;
  prop->l2CacheSize = servelab_emu::kL2Bytes;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0 || (attr != cudaDevAttrMultiProcessorCount && attr != cudaDevAttrL2CacheSize)) {
    return set_error(cudaErrorInvalidValue, "cudaDeviceGetAttribute: not emulated");
  }
  *value = attr == cudaDevAttrL2CacheSize ? servelab_emu::kL2Bytes : 132;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  servelab_emu::Device& d = servelab_emu::device();
  std::lock_guard<std::mutex> lock(d.mu);
  *total_bytes = servelab_emu::kDeviceBytes;
  *free_bytes = servelab_emu::kDeviceBytes - std::min(servelab_emu::kDeviceBytes, d.allocated);
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = state().last_error;
  state().last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return state().last_error; }
const char* cudaGetErrorString(cudaError_t e) {
  if (e == cudaSuccess) return "no error";
  const std::string& m = state().last_message;
  return m.empty() ? "CUDA emulator error" : m.c_str();
}
cudaError_t cudaDeviceSynchronize() {
  if (servelab_emu::capturing_any()) {
    return servelab_emu::refuse_during_capture("cudaDeviceSynchronize");
  }
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, std::size_t bytes) {
  using namespace servelab_emu;
  if (capturing_any()) return refuse_during_capture("cudaMalloc");
  Device& st = device();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.allocated + bytes > kDeviceBytes) {
    return set_error(cudaErrorMemoryAllocation, "out of emulated device memory");
  }
  void* q = ::operator new (std::max<std::size_t>(bytes, 1), std::align_val_t{256});
  // Never-written device memory reads as NaN, as garbage would read on a GPU.
  if (bytes <= kPoisonLimit) std::memset(q, 0xff, bytes);
  st.allocated += bytes;
  st.allocations[q] = bytes;
  *p = q;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  servelab_emu::Device& st = servelab_emu::device();
  std::unique_lock<std::mutex> lock(st.mu);
  const auto it = st.allocations.find(p);
  if (it == st.allocations.end()) {
    lock.unlock();
    return set_error(cudaErrorInvalidValue, "cudaFree of a pointer cudaMalloc did not return");
  }
  st.allocated -= it->second;
  st.allocations.erase(it);
  ::operator delete (p, std::align_val_t{256});
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, std::size_t bytes, unsigned) {
  *p = ::operator new (std::max<std::size_t>(bytes, 1), std::align_val_t{256});
  return cudaSuccess;
}
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned) {
  *device = host;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  ::operator delete (p, std::align_val_t{256});
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind) {
  if (servelab_emu::capturing_any()) return servelab_emu::refuse_during_capture("cudaMemcpy");
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind,
                            cudaStream_t stream) {
  if (!servelab_emu::enqueue(stream, [=] {
        if (bytes > 0) std::memmove(dst, src, bytes);
      })) {
    return state().last_error;
  }
  return cudaSuccess;
}
cudaError_t cudaMemset(void* dst, int value, std::size_t bytes) {
  if (servelab_emu::capturing_any()) return servelab_emu::refuse_during_capture("cudaMemset");
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
  if (!servelab_emu::enqueue(stream, [=] { std::memset(dst, value, bytes); })) {
    return state().last_error;
  }
  return cudaSuccess;
}

namespace {
struct EmuStream {
  int id;
};
struct EmuEvent {
  std::chrono::steady_clock::time_point at;
};
struct EmuGraph {
  std::vector<std::function<void()>> ops;
};
}  // namespace

cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = reinterpret_cast<cudaStream_t>(new EmuStream{1});
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  {
    servelab_emu::Device& d = servelab_emu::device();
    std::lock_guard<std::mutex> lock(d.mu);
    d.captures.erase(s);
  }
  delete reinterpret_cast<EmuStream*>(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (servelab_emu::capturing(s)) {
    return servelab_emu::refuse_during_capture("cudaStreamSynchronize on a capturing stream");
  }
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = reinterpret_cast<cudaEvent_t>(new EmuEvent{std::chrono::steady_clock::now()});
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<EmuEvent*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  auto* ev = reinterpret_cast<EmuEvent*>(e);
  servelab_emu::enqueue(s, [ev] { ev->at = std::chrono::steady_clock::now(); });
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  const auto d = reinterpret_cast<EmuEvent*>(stop)->at - reinterpret_cast<EmuEvent*>(start)->at;
  *ms = std::chrono::duration<float, std::milli>(d).count();
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  if (status == nullptr) return set_error(cudaErrorInvalidValue, "cudaStreamIsCapturing: null");
  servelab_emu::Device& d = servelab_emu::device();
  std::lock_guard<std::mutex> lock(d.mu);
  const auto c = d.captures.find(s);
  *status = c == d.captures.end() ? cudaStreamCaptureStatusNone
            : c->second.invalid   ? cudaStreamCaptureStatusInvalidated
                                  : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (s == nullptr) return set_error(cudaErrorInvalidValue, "cannot capture the legacy stream");
  servelab_emu::Device& d = servelab_emu::device();
  std::unique_lock<std::mutex> lock(d.mu);
  if (d.captures.count(s) != 0) {
    lock.unlock();
    return set_error(cudaErrorInvalidValue, "the stream is already being captured");
  }
  d.captures[s] = {};
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  *graph = nullptr;
  servelab_emu::Capture c;
  bool found = false;
  {
    servelab_emu::Device& d = servelab_emu::device();
    std::lock_guard<std::mutex> lock(d.mu);
    const auto it = d.captures.find(s);
    if (it != d.captures.end()) {
      c = std::move(it->second);
      d.captures.erase(it);
      found = true;
    }
  }
  if (!found) return set_error(cudaErrorInvalidValue, "the stream is not being captured");
  const bool invalid = c.invalid;
  auto* g = new EmuGraph{std::move(c.ops)};
  if (invalid) {
    delete g;
    return set_error(cudaErrorStreamCaptureInvalidated,
                     "the capture was invalidated by an operation not allowed during capture");
  }
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = reinterpret_cast<cudaGraphExec_t>(new EmuGraph(*reinterpret_cast<EmuGraph*>(graph)));
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  const auto* g = reinterpret_cast<const EmuGraph*>(exec);
  const cudaError_t before = state().last_error;
  for (const auto& op : g->ops) {
    if (!servelab_emu::enqueue(s, op)) return state().last_error;
  }
  return state().last_error != before ? state().last_error : cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<EmuGraph*>(graph);
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<EmuGraph*>(exec);
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      value > servelab_emu::kMaxSmemOptin) {
    return set_error(cudaErrorInvalidValue, "cudaFuncSetAttribute: MaxDynamicSharedMemorySize " +
                                                std::to_string(value) + " (at most " +
                                                std::to_string(servelab_emu::kMaxSmemOptin) + ")");
  }
  servelab_emu::Device& d = servelab_emu::device();
  std::lock_guard<std::mutex> lock(d.mu);
  d.smem_limit[func] = value;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void*,
                                                          int block_threads,
                                                          std::size_t dynamic_smem) {
  // sm_90: 228 KB of shared memory per SM (1 KB reserved per block), 2048 threads, 32 blocks.
  const std::size_t per_block = dynamic_smem + 1024;
  const int by_smem = static_cast<int>((228u * 1024u) / per_block);
  const int by_threads = 2048 / std::max(1, ((block_threads + 31) / 32) * 32);
  *blocks = std::max(0, std::min({32, by_smem, by_threads}));
  return cudaSuccess;
}
