// cuBLASLt linear layers with the algorithm chosen by timing, per shape: what
// GemmKernel::kCublasLt runs, and where GemmKernel::kAuto times cuBLASLt against the other
// kernels (kernels/gemm.h, kernels/gemm_kernel.h). Computes what Gemm::linear
// computes, y[T][out] = x[T][in] * w[out][in]^T (+ beta * y), bf16 inputs, fp32 compute, fp32 or
// bf16 output, as cublasLtMatmul(OP_T, OP_N) with C = D = y. Compiled only when the build has
// CUDA (SERVELAB_HAVE_CUDA); no CUDA header here.
//
// A shape is (tokens, in, out, output type, beta != 0), plus, for GemmKernel::kAuto, whether x
// is the SwiGLU product of a gate/up projection and that the choice is among every kernel. The
// first decision for a shape on a stream that is not being captured tunes it: up to
// kLtCandidates algorithms from cublasLtMatmulAlgoGetHeuristic (those fitting the workspace
// given) are each run once, then timed over kLtTimedLaunches launches, each after an L2 flush (a
// write of twice the L2 size, so the weights come from memory, as in a decode step where the
// other layers' weights evicted them), and the one with the lowest median is kept. For kAuto the
// caller's alternatives (cuBLAS, the skinny kernel at several split counts: LtAlternative) are
// timed the same way after them, and the shape goes to whichever kernel had the lowest median
// (cuBLASLt on a tie); a SwiGLU shape's cuBLASLt candidates are timed with the caller's prologue
// (silu_mul) before each launch, as its alternatives include it or fuse it. The candidates write
// y when beta == 0 (the call then overwrites it) and a scratch output otherwise (the residual
// stream is never accumulated into twice). Tuning waits for the stream (events) and allocates its
// flush and scratch buffers once (cudaMalloc; reserve() does it beforehand): legal outside stream
// capture only.
// A shape first met while the stream is being captured cannot be timed: kCublasLt keeps the
// heuristic's first candidate, kAuto cuBLAS (recorded as not tuned). Decisions are the process's:
// every LtGemm of the process (every executor, every Gemm) takes a shape's kernel and algorithm
// from the first decision made for it with the same workspace size, and never changes it, so a
// graph captured with it and every eager pass after it, in any executor of the process, compute
// the same bits. Because the choice is by timing, two processes may choose differently for a
// shape and then differ in the last bits of its results (as two GPUs would): runs are
// reproducible within a process, not across processes, unless they share a decisions file
// (save_decisions / load_decisions below).
// The candidates asked for are those that work with the deciding call's pointer alignment (the
// largest power of two up to 256 dividing every pointer); a later call whose pointers are less
// aligned than that runs cuBLAS instead (run() returns false), so no algorithm ever meets
// pointers it cannot take.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/device.h"

namespace servelab::kernels {

inline constexpr int kLtCandidates = 16;
inline constexpr int kLtTimedLaunches = 5;

struct LtShape {
  std::int32_t tokens = 0, in = 0, out = 0;
  bool out_f32 = true;
  bool accumulate = false;  // beta != 0
  bool swiglu = false;      // x is silu_mul's output of a gate/up projection (kAuto only)
  bool any_kernel = false;  // kAuto's decision (among every kernel), not kCublasLt's
  // (nvcc compiles the .cu files that include this as C++17: no operator<=>.)
  bool operator<(const LtShape& o) const {
    return std::tie(tokens, in, out, out_f32, accumulate, swiglu, any_kernel) <
           std::tie(o.tokens, o.in, o.out, o.out_f32, o.accumulate, o.swiglu, o.any_kernel);
  }
};

// The kernel a decided shape runs on: cuBLASLt (always, for kCublasLt's shapes), or for kAuto's
// cuBLAS or the skinny kernel when one of them was faster.
enum class TunedKernel { kCublasLt, kCublas, kSkinny };
// "lt", "cublas" or "skinny".
const char* tuned_kernel_name(TunedKernel kernel);

// A kernel kAuto times beside cuBLASLt's candidates: `launch` computes the shape into the given
// output (y, or the scratch output when beta != 0) on the stream, its prologue included (the
// SwiGLU product for cuBLAS; the skinny kernel reads gate/up itself).
struct LtAlternative {
  TunedKernel kernel = TunedKernel::kCublas;
  std::int32_t splits = 0;  // the skinny kernel's CTAs a row block (0 otherwise)
  std::function<void(void* y, Stream stream)> launch;
};
struct LtAlternatives {
  // Run before each cuBLASLt candidate's launch (a SwiGLU shape's silu_mul into x); may be empty.
  std::function<void(Stream stream)> prologue;
  std::vector<LtAlternative> kernels;
};

// What was chosen for a shape, for reports and tests.
struct LtChoice {
  LtShape shape;
  std::int32_t candidates = 0;  // heuristic results offered (0: none, the shape runs cuBLAS)
  std::int32_t timed = 0;       // candidates that ran (a candidate may fail to launch)
  std::int32_t chosen = -1;     // index among the candidates (0: the heuristic's first)
  bool tuned = false;           // false: met first during capture, candidate 0 untimed
  std::int32_t algo_id = -1;    // CUBLASLT_ALGO_CONFIG_ID of the chosen algorithm
  std::int32_t split_k = 1;     // CUBLASLT_ALGO_CONFIG_SPLITK_NUM
  float first_us = 0;           // median time of candidate 0 (0 when untimed)
  float chosen_us = 0;          // median time of the chosen candidate (0 when untimed)
  // kAuto: the kernel that runs the shape, the skinny kernel's split count when it does, and the
  // lowest medians of cuBLAS and of the skinny kernel's split counts (0 when untimed). Times of
  // a SwiGLU shape include its silu_mul where the kernel does not fuse it.
  TunedKernel kernel = TunedKernel::kCublasLt;
  std::int32_t skinny_splits = 0;
  float cublas_us = 0;
  float skinny_us = 0;
};

class LtGemm {
 public:
  // Throws std::runtime_error when cuBLASLt cannot be initialised.
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // The workspace cuBLASLt may use (device memory the caller keeps alive; nullptr: none, so only
  // algorithms needing none are offered). Shapes already planned keep their algorithm.
  void set_workspace(void* workspace, std::size_t bytes);

  // y = x w^T + beta y on `stream` (see above), `shape` being x's and y's, beta's and the
  // mode's. Returns false, having done nothing, when cuBLASLt does not run the call: it offers no
  // algorithm for the shape, the pointers are less aligned than the decision's, or (any_kernel)
  // the decision is another kernel. A kAuto shape must be decided (decide_auto) before. REQUIRES:
  // tokens, in, out >= 1.
  bool run(const LtShape& shape, const Bf16* x, const Bf16* w, void* y, float beta, Stream stream);

  // True when this object holds the process's decision for `shape` (decide_auto then times
  // nothing and ignores its alternatives).
  bool planned(const LtShape& shape) const;

  // kAuto (shape.any_kernel): the process's decision for the shape, made now if none was (see
  // above; `alternatives` are timed only then). x is the cuBLASLt candidates' input (a SwiGLU
  // shape's silu_mul output, which alternatives.prologue writes).
  LtChoice decide_auto(const LtShape& shape, const Bf16* x, const Bf16* w, void* y, float beta,
                       Stream stream, const LtAlternatives& alternatives);

  // Allocates now the buffers tuning needs (the L2 flush, twice the L2 size, and a scratch output
  // of at least scratch_bytes for beta != 0 shapes: their largest tokens x out x 4), so that a
  // caller sizing its memory afterwards (the executor's KV cache) counts them; tuning grows the
  // scratch if a shape needs more. Not during stream capture (cudaMalloc).
  void reserve(std::size_t scratch_bytes);

  // Every shape this object ran, in LtShape order (with the process's decision for each).
  std::vector<LtChoice> choices() const;

  // Shapes timed in this process so far, by any LtGemm (tests: a decision is made once).
  static std::int64_t process_tunings();

  // The process's decisions as a text file, so that later processes run the same kernels and
  // algorithms (a profile and the runs calibrated on it; two runs of one experiment: bit-identical
  // tokens):
  //   # servelab GEMM decisions v2
  //   device <name of device 0> | cublaslt <cublasLtGetVersion()>
  // then a line a shape, in shape order: tokens in out f32|bf16 accumulate(0|1) swiglu(0|1)
  // any_kernel(0|1) workspace_bytes align usable(0|1) tuned(0|1) candidates timed chosen split_k
  // first_us chosen_us lt|cublas|skinny skinny_splits cublas_us skinny_us and the cuBLASLt
  // algorithm (8 words of 16 hex digits); times with 9 significant digits, so a float read back is
  // the float written. A kCublasLt line names lt; a skinny line a split count >= 1. (v1, the
  // cuBLASLt-only format before 2026-12-05, is refused: delete such a file.) save_decisions writes
  // every decision made or loaded so far, through a temporary file renamed over `path` (a reader
  // never sees half a file); load_decisions adds a file's decisions to the process's (a shape this
  // process already decided keeps its own) and returns how many it added. Throws
  // std::invalid_argument "<path>: line N: <what was expected>" for a malformed file, and "<path>:
  // made on <device | cublaslt>, this process has <...>: delete it to time the shapes again" for
  // another device or cuBLASLt version (an algorithm descriptor is only valid for the library that
  // made it); std::runtime_error when the file cannot be read or written.
  static void save_decisions(const std::string& path);
  static std::int64_t load_decisions(const std::string& path);

 private:
  struct Plan;
  struct Candidates;
  Plan& plan(const LtShape& shape);
  void decide(Plan& p, const Bf16* x, const Bf16* w, void* y, float beta, Stream stream,
              const LtAlternatives* alternatives);
  void tune(Plan& p, const Candidates& c, const Bf16* x, const Bf16* w, void* y, float beta,
            Stream stream, const LtAlternatives* alternatives);
  bool launch(const Plan& p, const void* algo, const Bf16* x, const Bf16* w, void* y, float beta,
              Stream stream) const;

  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::map<LtShape, std::unique_ptr<Plan>> plans_;
  DeviceBuffer flush_;    // 2 x L2, written before each timed launch
  DeviceBuffer scratch_;  // the candidates' output for beta != 0
};

}  // namespace servelab::kernels
