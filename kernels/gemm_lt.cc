#include "kernels/gemm_lt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace servelab::kernels {

const char* tuned_kernel_name(TunedKernel kernel) {
  switch (kernel) {
    case TunedKernel::kCublas:
      return "cublas";
    case TunedKernel::kSkinny:
      return "skinny";
    case TunedKernel::kCublasLt:
      break;
  }
  return "lt";
}

namespace {

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLASLt ") + what + ": " + cublasLtGetStatusString(s));
  }
}
void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
  }
}

cublasLtHandle_t as_handle(void* h) { return static_cast<cublasLtHandle_t>(h); }

// The largest power of two up to 256 that divides p's address (cuBLASLt's alignment unit).
std::uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}
cudaStream_t as_stream(Stream s) { return static_cast<cudaStream_t>(s); }

// True when `stream` is being captured (or its capture state cannot be read: then nothing that
// synchronises may run either).
bool capturing(Stream stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(as_stream(stream), &status) != cudaSuccess) {
    (void)cudaGetLastError();  // the query's error is not the caller's
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

std::int32_t algo_attribute(const cublasLtMatmulAlgo_t& algo,
                            cublasLtMatmulAlgoConfigAttributes_t attr, std::int32_t fallback) {
  std::int32_t value = fallback;
  std::size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written) !=
      CUBLAS_STATUS_SUCCESS) {
    return fallback;
  }
  return value;
}

// Events timing kLtTimedLaunches launches, destroyed with the object.
class LaunchTimer {
 public:
  LaunchTimer() {
    for (auto& e : start_) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
    for (auto& e : stop_) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
  }
  ~LaunchTimer() {
    for (auto e : start_) (void)cudaEventDestroy(e);
    for (auto e : stop_) (void)cudaEventDestroy(e);
  }
  LaunchTimer(const LaunchTimer&) = delete;
  LaunchTimer& operator=(const LaunchTimer&) = delete;
  cudaEvent_t start(int i) const { return start_[static_cast<std::size_t>(i)]; }
  cudaEvent_t stop(int i) const { return stop_[static_cast<std::size_t>(i)]; }
  // The median launch in microseconds, after waiting for the last.
  float median_us() const {
    check_cuda(cudaEventSynchronize(stop_.back()), "cudaEventSynchronize");
    std::array<float, kLtTimedLaunches> us{};
    for (int i = 0; i < kLtTimedLaunches; ++i) {
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, start(i), stop(i)), "cudaEventElapsedTime");
      us[static_cast<std::size_t>(i)] = ms * 1000.0f;
    }
    std::sort(us.begin(), us.end());
    return us[kLtTimedLaunches / 2];
  }

 private:
  std::array<cudaEvent_t, kLtTimedLaunches> start_{}, stop_{};
};

}  // namespace

struct LtGemm::Plan {
  LtChoice info;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  bool planned = false;       // the process's decision is known
  bool usable = false;        // cuBLASLt runs the shape (else the caller runs cuBLAS)
  std::uint32_t align = 256;  // the pointer alignment the algorithm was chosen for
  cublasLtMatmulAlgo_t algo{};

  ~Plan() {
    if (c != nullptr) (void)cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) (void)cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) (void)cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) (void)cublasLtMatmulDescDestroy(desc);
  }
};

struct LtGemm::Candidates {
  std::vector<cublasLtMatmulHeuristicResult_t> results;
};

namespace {

// The process's decisions, per (shape, workspace bytes): made once, by the first LtGemm that
// runs the shape, under the lock (so two threads never time the same shape).
struct Decision {
  bool usable = false;
  std::uint32_t align = 256;
  cublasLtMatmulAlgo_t algo{};
  LtChoice info;
};
struct Decisions {
  std::mutex mu;
  std::map<std::pair<LtShape, std::size_t>, Decision> by_shape;
  std::int64_t tunings = 0;
};
Decisions& decisions() {
  static Decisions* d = new Decisions;  // never destroyed: LtGemms may outlive static destructors
  return *d;
}

}  // namespace

LtGemm::LtGemm() {
  cublasLtHandle_t h = nullptr;
  check(cublasLtCreate(&h), "cublasLtCreate");
  handle_ = h;
}

LtGemm::~LtGemm() {
  plans_.clear();  // the descriptors before the handle
  (void)cublasLtDestroy(as_handle(handle_));
}

void LtGemm::set_workspace(void* workspace, std::size_t bytes) {
  workspace_ = workspace;
  workspace_bytes_ = workspace != nullptr ? bytes : 0;
}

std::int64_t LtGemm::process_tunings() {
  Decisions& d = decisions();
  std::lock_guard<std::mutex> lock(d.mu);
  return d.tunings;
}

LtGemm::Plan& LtGemm::plan(const LtShape& shape) {
  auto it = plans_.find(shape);
  if (it != plans_.end()) return *it->second;
  auto p = std::make_unique<Plan>();
  p->info.shape = shape;
  // Column-major: W^T (stored in x out, ld in) times X (in x T, ld in) into Y (out x T, ld out).
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  check(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                       sizeof(trans_a)),
        "cublasLtMatmulDescSetAttribute(TRANSA)");
  check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                       sizeof(trans_b)),
        "cublasLtMatmulDescSetAttribute(TRANSB)");
  check(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, static_cast<std::uint64_t>(shape.in),
                                   static_cast<std::uint64_t>(shape.out), shape.in),
        "cublasLtMatrixLayoutCreate(A)");
  check(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, static_cast<std::uint64_t>(shape.in),
                                   static_cast<std::uint64_t>(shape.tokens), shape.in),
        "cublasLtMatrixLayoutCreate(B)");
  check(cublasLtMatrixLayoutCreate(&p->c, shape.out_f32 ? CUDA_R_32F : CUDA_R_16BF,
                                   static_cast<std::uint64_t>(shape.out),
                                   static_cast<std::uint64_t>(shape.tokens), shape.out),
        "cublasLtMatrixLayoutCreate(C)");
  return *plans_.emplace(shape, std::move(p)).first->second;
}

bool LtGemm::launch(const Plan& p, const void* algo, const Bf16* x, const Bf16* w, void* y,
                    float beta, Stream stream) const {
  const float alpha = 1.0f;
  return cublasLtMatmul(as_handle(handle_), p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c,
                        static_cast<const cublasLtMatmulAlgo_t*>(algo), workspace_,
                        workspace_bytes_, as_stream(stream)) == CUBLAS_STATUS_SUCCESS;
}

void LtGemm::reserve(std::size_t scratch_bytes) {
  if (flush_.bytes() == 0) {
    int device = 0, l2 = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device),
               "cudaDeviceGetAttribute(L2)");
    flush_ = DeviceBuffer(std::max<std::size_t>(2 * static_cast<std::size_t>(l2), 1 << 20));
  }
  if (scratch_.bytes() < scratch_bytes) scratch_ = DeviceBuffer(scratch_bytes);
}

void LtGemm::tune(Plan& p, const Candidates& c, const Bf16* x, const Bf16* w, void* y, float beta,
                  Stream stream, const LtAlternatives* alternatives) {
  const LtShape& s = p.info.shape;
  const std::size_t out_bytes =
      static_cast<std::size_t>(s.tokens) * static_cast<std::size_t>(s.out) * (s.out_f32 ? 4 : 2);
  reserve(s.accumulate ? out_bytes : 0);
  void* target = y;
  if (s.accumulate) {
    check_cuda(cudaMemsetAsync(scratch_.get(), 0, out_bytes, as_stream(stream)), "cudaMemsetAsync");
    target = scratch_.get();
  }
  LaunchTimer timer;
  // `launch` (false: it cannot run here) once untimed, then kLtTimedLaunches times after an L2
  // flush each: the median in microseconds, or a negative number when it cannot run.
  const auto time_launches = [&](const std::function<bool()>& launch) -> float {
    if (!launch()) return -1.0f;
    for (int r = 0; r < kLtTimedLaunches; ++r) {
      check_cuda(cudaMemsetAsync(flush_.get(), r & 0xff, flush_.bytes(), as_stream(stream)),
                 "cudaMemsetAsync");
      check_cuda(cudaEventRecord(timer.start(r), as_stream(stream)), "cudaEventRecord");
      const bool ok = launch();
      check_cuda(cudaEventRecord(timer.stop(r), as_stream(stream)), "cudaEventRecord");
      if (!ok) throw std::runtime_error("cuBLASLt cublasLtMatmul: a candidate that ran failed");
    }
    return timer.median_us();
  };
  const bool has_prologue = alternatives != nullptr && alternatives->prologue;
  float best = 0;
  for (std::size_t i = 0; i < c.results.size(); ++i) {
    const cublasLtMatmulAlgo_t* algo = &c.results[i].algo;
    const float us = time_launches([&] {
      if (has_prologue) alternatives->prologue(stream);
      return launch(p, algo, x, w, target, beta, stream);
    });
    if (us < 0) continue;  // cannot run here
    ++p.info.timed;
    if (i == 0) p.info.first_us = us;
    if (p.info.chosen < 0 || us < best) {
      best = us;
      p.info.chosen = static_cast<std::int32_t>(i);
    }
  }
  p.info.chosen_us = best;
  p.info.tuned = p.info.chosen >= 0;
  if (alternatives == nullptr) return;
  // kAuto: the other kernels; the shape goes to the fastest (cuBLASLt on a tie).
  bool have_best = p.info.chosen >= 0;
  if (have_best) p.info.kernel = TunedKernel::kCublasLt;
  for (const LtAlternative& alt : alternatives->kernels) {
    const float us = time_launches([&] {
      alt.launch(target, stream);
      return true;
    });
    float& family = alt.kernel == TunedKernel::kSkinny ? p.info.skinny_us : p.info.cublas_us;
    if (family == 0 || us < family) family = us;
    if (!have_best || us < best) {
      best = us;
      have_best = true;
      p.info.kernel = alt.kernel;
      p.info.skinny_splits = alt.kernel == TunedKernel::kSkinny ? alt.splits : 0;
    }
  }
  p.info.tuned = have_best;
}

void LtGemm::decide(Plan& p, const Bf16* x, const Bf16* w, void* y, float beta, Stream stream,
                    const LtAlternatives* alternatives) {
  Decisions& d = decisions();
  std::lock_guard<std::mutex> lock(d.mu);
  const auto key = std::make_pair(p.info.shape, workspace_bytes_);
  const auto known = d.by_shape.find(key);
  if (known == d.by_shape.end()) {
    Candidates c;
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const std::uint64_t max_ws = workspace_bytes_;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws));
    // Only algorithms that work with this call's pointers (the heuristic assumes 256-byte
    // alignment otherwise); a later call with less aligned pointers runs cuBLAS (run()).
    Decision made;
    made.align = std::min({alignment(x), alignment(w), alignment(y)});
    for (const auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      if (st == CUBLAS_STATUS_SUCCESS) {
        st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &made.align, sizeof(made.align));
      }
    }
    int returned = 0;
    std::vector<cublasLtMatmulHeuristicResult_t> results(kLtCandidates);
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulAlgoGetHeuristic(as_handle(handle_), p.desc, p.a, p.b, p.c, p.c, pref,
                                          kLtCandidates, results.data(), &returned);
    }
    (void)cublasLtMatmulPreferenceDestroy(pref);
    // NOT_SUPPORTED: no algorithm for the shape (the caller runs cuBLAS); else an error.
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
      check(st, "cublasLtMatmulAlgoGetHeuristic");
    }
    for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < returned; ++i) {
      if (results[static_cast<std::size_t>(i)].state == CUBLAS_STATUS_SUCCESS) {
        c.results.push_back(results[static_cast<std::size_t>(i)]);
      }
    }
    p.info.candidates = static_cast<std::int32_t>(c.results.size());
    const bool any_kernel = p.info.shape.any_kernel;
    if (any_kernel) p.info.kernel = TunedKernel::kCublas;  // until a faster one is timed
    if ((!c.results.empty() || any_kernel) && !capturing(stream)) {
      // (decide_auto always passes its alternatives; run() never decides a kAuto shape)
      tune(p, c, x, w, y, beta, stream, any_kernel ? alternatives : nullptr);
      ++d.tunings;
      made.usable = p.info.timed > 0;  // none could run: the shape goes to cuBLAS for good
    } else {
      // During capture: kCublasLt takes the heuristic's first, kAuto cuBLAS; untimed.
      made.usable = !c.results.empty();
    }
    if (made.usable) {
      if (p.info.chosen < 0) p.info.chosen = 0;
      made.algo = c.results[static_cast<std::size_t>(p.info.chosen)].algo;
      p.info.algo_id = algo_attribute(made.algo, CUBLASLT_ALGO_CONFIG_ID, -1);
      p.info.split_k = algo_attribute(made.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 1);
    }
    made.info = p.info;
    d.by_shape.emplace(key, made);
  }
  const Decision& got = d.by_shape.at(key);
  p.usable = got.usable;
  p.align = got.align;
  p.algo = got.algo;
  p.info = got.info;
  p.planned = true;
}

namespace {

constexpr const char* kDecisionsHeader = "# servelab GEMM decisions v2";
constexpr const char* kDecisionsV1Header = "# servelab cuBLASLt decisions v1";

// The kernel named `text` in a decisions file; false for another word.
bool parse_tuned_kernel(const std::string& text, TunedKernel* kernel) {
  for (const TunedKernel k : {TunedKernel::kCublasLt, TunedKernel::kCublas, TunedKernel::kSkinny}) {
    if (text == tuned_kernel_name(k)) {
      *kernel = k;
      return true;
    }
  }
  return false;
}

// "device <name> | cublaslt <version>" of this process (device 0's name, as the executor uses).
std::string decisions_origin() {
  cudaDeviceProp prop{};
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return std::string("device ") + prop.name + " | cublaslt " + std::to_string(cublasLtGetVersion());
}

}  // namespace

void LtGemm::save_decisions(const std::string& path) {
  Decisions& d = decisions();
  std::ostringstream text;
  text << kDecisionsHeader << "\n" << decisions_origin() << "\n";
  {
    std::lock_guard<std::mutex> lock(d.mu);
    for (const auto& [key, dec] : d.by_shape) {
      const LtChoice& c = dec.info;
      char times[64], others[64];
      std::snprintf(times, sizeof(times), "%.9g %.9g", static_cast<double>(c.first_us),
                    static_cast<double>(c.chosen_us));
      std::snprintf(others, sizeof(others), "%.9g %.9g", static_cast<double>(c.cublas_us),
                    static_cast<double>(c.skinny_us));
      const LtShape& s = key.first;
      text << s.tokens << ' ' << s.in << ' ' << s.out << ' ' << (s.out_f32 ? "f32" : "bf16") << ' '
           << (s.accumulate ? 1 : 0) << ' ' << (s.swiglu ? 1 : 0) << ' ' << (s.any_kernel ? 1 : 0)
           << ' ' << key.second << ' ' << dec.align << ' ' << (dec.usable ? 1 : 0) << ' '
           << (c.tuned ? 1 : 0) << ' ' << c.candidates << ' ' << c.timed << ' ' << c.chosen << ' '
           << c.split_k << ' ' << times << ' ' << tuned_kernel_name(c.kernel) << ' '
           << c.skinny_splits << ' ' << others;
      for (const std::uint64_t w : dec.algo.data) {
        char hex[24];
        std::snprintf(hex, sizeof(hex), " %016" PRIx64, w);
        text << hex;
      }
      text << '\n';
    }
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text.str();
    out.flush();
    if (!out) throw std::runtime_error(tmp + ": cannot write the cuBLASLt decisions");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": cannot write the cuBLASLt decisions (rename failed)");
  }
}

std::int64_t LtGemm::load_decisions(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read the cuBLASLt decisions");
  const auto bad = [&](int line, const std::string& what) {
    return std::invalid_argument(path + ": line " + std::to_string(line) + ": " + what);
  };
  std::string line;
  if (!std::getline(in, line) || line != kDecisionsHeader) {
    if (line == kDecisionsV1Header) {
      throw bad(1, std::string("a cuBLASLt-only file of an older servelab: expected '") +
                       kDecisionsHeader + "'; delete it to time the shapes again");
    }
    throw bad(1, std::string("expected '") + kDecisionsHeader + "'");
  }
  const std::string origin = decisions_origin();
  if (!std::getline(in, line) || line.rfind("device ", 0) != 0) {
    throw bad(2, "expected 'device <name> | cublaslt <version>'");
  }
  if (line != origin) {
    throw std::invalid_argument(path + ": made on " + line.substr(7) + ", this process has " +
                                origin.substr(7) + ": delete it to time the shapes again");
  }
  std::vector<std::pair<std::pair<LtShape, std::size_t>, Decision>> read;
  for (int n = 3; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    std::istringstream f(line);
    LtShape s;
    std::string type, kernel, hex;
    int accumulate = -1, swiglu = -1, any_kernel = -1, usable = -1, tuned = -1;
    std::size_t workspace = 0;
    Decision dec;
    LtChoice& c = dec.info;
    f >> s.tokens >> s.in >> s.out >> type >> accumulate >> swiglu >> any_kernel >> workspace >>
        dec.align >> usable >> tuned >> c.candidates >> c.timed >> c.chosen >> c.split_k >>
        c.first_us >> c.chosen_us >> kernel >> c.skinny_splits >> c.cublas_us >> c.skinny_us;
    const auto flag = [](int v) { return v == 0 || v == 1; };
    bool ok = static_cast<bool>(f) && s.tokens >= 1 && s.in >= 1 && s.out >= 1 && dec.align >= 1 &&
              dec.align <= 256 && (dec.align & (dec.align - 1)) == 0 &&
              (type == "f32" || type == "bf16") && flag(accumulate) && flag(swiglu) &&
              flag(any_kernel) && flag(usable) && flag(tuned) && c.candidates >= 0 &&
              c.timed >= 0 && c.timed <= c.candidates && c.chosen >= -1 &&
              c.chosen < std::max(c.candidates, 1) && parse_tuned_kernel(kernel, &c.kernel) &&
              (any_kernel == 1 || (c.kernel == TunedKernel::kCublasLt && swiglu == 0)) &&
              (c.kernel == TunedKernel::kSkinny ? c.skinny_splits >= 1 : c.skinny_splits == 0) &&
              c.cublas_us >= 0 && c.skinny_us >= 0;
    for (std::uint64_t& w : dec.algo.data) {
      if (!(f >> hex) || hex.size() != 16 ||
          hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
        ok = false;
        break;
      }
      w = std::stoull(hex, nullptr, 16);
    }
    if (!ok || (f >> hex)) {
      throw bad(n,
                "expected 'tokens in out f32|bf16 accumulate(0|1) swiglu(0|1) any_kernel(0|1) "
                "workspace_bytes align usable(0|1) tuned(0|1) candidates timed chosen split_k "
                "first_us chosen_us lt|cublas|skinny skinny_splits cublas_us skinny_us' and 8 "
                "words of 16 hex digits (lt unless any_kernel, a split count with skinny only)");
    }
    s.out_f32 = type == "f32";
    s.accumulate = accumulate == 1;
    s.swiglu = swiglu == 1;
    s.any_kernel = any_kernel == 1;
    dec.usable = usable == 1;
    c.shape = s;
    c.tuned = tuned == 1;
    c.algo_id = dec.usable ? algo_attribute(dec.algo, CUBLASLT_ALGO_CONFIG_ID, -1) : -1;
    read.emplace_back(std::make_pair(s, workspace), dec);
  }
  Decisions& d = decisions();
  std::lock_guard<std::mutex> lock(d.mu);
  std::int64_t added = 0;
  for (const auto& [key, dec] : read) added += d.by_shape.emplace(key, dec).second ? 1 : 0;
  return added;
}

bool LtGemm::run(const LtShape& shape, const Bf16* x, const Bf16* w, void* y, float beta,
                 Stream stream) {
  Plan& p = plan(shape);
  if (!p.planned) {
    if (shape.any_kernel) throw std::logic_error("LtGemm::run: a kAuto shape is run undecided");
    decide(p, x, w, y, beta, stream, nullptr);
  }
  if (!p.usable || p.info.kernel != TunedKernel::kCublasLt ||
      std::min({alignment(x), alignment(w), alignment(y)}) < p.align) {
    return false;
  }
  if (!launch(p, &p.algo, x, w, y, beta, stream)) {
    throw std::runtime_error("cuBLASLt cublasLtMatmul failed for a " +
                             std::to_string(shape.tokens) + " x " + std::to_string(shape.in) +
                             " -> " + std::to_string(shape.out) + " GEMM");
  }
  return true;
}

bool LtGemm::planned(const LtShape& shape) const {
  const auto it = plans_.find(shape);
  return it != plans_.end() && it->second->planned;
}

LtChoice LtGemm::decide_auto(const LtShape& shape, const Bf16* x, const Bf16* w, void* y,
                             float beta, Stream stream, const LtAlternatives& alternatives) {
  Plan& p = plan(shape);
  if (!p.planned) decide(p, x, w, y, beta, stream, &alternatives);
  return p.info;
}

std::vector<LtChoice> LtGemm::choices() const {
  std::vector<LtChoice> out;
  out.reserve(plans_.size());
  for (const auto& [shape, p] : plans_) out.push_back(p->info);
  return out;
}

}  // namespace servelab::kernels
