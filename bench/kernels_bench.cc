// GPU kernel benchmarks (Google Benchmark, manual GPU time from CUDA events, L2 flushed before
// every timed iteration by a 256 MiB memset, as llm.c does). Every benchmark reports as skipped
// where the build has no CUDA or the machine no device. Commands and targets: docs/gpu-todo.md.
//
//   BM_DeviceCopy/bytes           device-to-device cudaMemcpy: the bandwidth reference
//   BM_DecodeAttention/batch/ctx/kernel
//                                 Llama-3-8B shape (32 q heads, 8 KV heads, head_dim 128, 16-token
//                                 blocks, shuffled block tables), kernel 0 = tiled, 1 = pipelined
//                                 (the default; label names it), 2 = pipelined over an fp8 e4m3
//                                 cache (half the bytes): GB/s of K+V read (as stored) and
//                                 vs_copy = that / BM_DeviceCopy's rate (target >= 0.8 for batch
//                                 >= 32, ctx >= 2048, kernel 1)
//   BM_PrefillAttention/len/kernel  one causal prefill of len tokens, same shape, kernel 0 = fa2
//                                 (the default), 1 = wmma (kernels/prefill_kernel.h), 2 = fa2
//                                 over an fp8 e4m3 cache, 3 = fa2_128, 4 = wgmma (Hopper wgmma,
//                                 128 query rows per CTA), 5 = wgmma over fp8: TFLOP/s counting
//                                 4 * heads * len^2 * head_dim / 2 (compare with
//                                 bench/gpu/sdpa_bench.py; target >= 0.7x SDPA for fa2)
//   BM_PrefillChunk/q/prefix/split  a chunk of q queries after prefix cached keys, fa2 unsplit (0)
//                                 or split-KV as the executor plans it (1), fa2_gqa (4 heads of
//                                 a GQA group a CTA: what the executor runs for chunks of <= 16
//                                 tokens) split as planned (2), wgmma split as planned (3: the
//                                 executor's kernel for longer chunks): time, splits
//   BM_DecodeGemm/M/shape/kernel  one of Llama-3-8B's linear layers at M tokens as the executor
//                                 calls it (0 qkv, 1 o, 2 gate_up, 3 down, 4 LM head, 5 down
//                                 with its SiLU-and-multiply: silu_mul + cuBLAS, or the skinny
//                                 kernel's fused input), kernel 0 = cuBLAS, 1 = skinny
//                                 (kernels/gemm_kernel.h; at M <= 32 only), 2 = cuBLASLt with
//                                 the algorithm timed for the shape (kernels/gemm_lt.h; tuned
//                                 by the untimed first call; counters candidates, chosen,
//                                 split_k and first_us, the heuristic's first candidate's
//                                 median while tuning; the skinny rows: counters splits and
//                                 predicted_us, its plan), 3 = auto (the fastest of cuBLAS,
//                                 cuBLASLt's candidates and the skinny kernel's split counts,
//                                 timed by the untimed first call; counters lt_us, cublas_us,
//                                 skinny_us, skinny_splits; label "shape auto WINNER"): GB/s of
//                                 weights + activations, vs the copy (a decode step reads every
//                                 weight once: these rows say how close); label "shape kernel"
//   BM_SkinnySplits/M/shape/splits  the skinny kernel on BM_DecodeGemm's shape at M tokens with
//                                 `splits` CTAs a row block (0: its plan's; kernels/skinny_plan.h):
//                                 GB/s as BM_DecodeGemm, counters splits and predicted_us (the
//                                 plan's model), label "shape S splits"
//   BM_LoraDelta/M/adapters/kernel  the LoRA deltas of one Llama-3-8B layer (q, k, v, o, gate,
//                                 up, down; rank 16) for a decode batch of M rows, row i under
//                                 adapter i % adapters (so `adapters` > 1 makes M one-row
//                                 segments), kernel 0 = cuBLAS (two GEMMs per segment and
//                                 projection), 1 = the gather kernels (kernels/lora.h, 8 launches):
//                                 time per layer; label "S segments kernel"
//   BM_TokenKernels/rows/kernel   a per-token kernel of a Llama-3-8B decode step at `rows` token
//                                 rows, kernel 0 = rms_norm (hidden 4096, no delta, as the
//                                 executor calls it), 1 = silu_mul (width 14336), 2 =
//                                 qkv_rope_kv_write (32 q / 8 KV heads, head_dim 128, bf16
//                                 cache): us per launch, the mean of kTokenKernelReps back-to-back
//                                 launches after an L2 flush (so L2 is warm after the first, as
//                                 in a step where the previous kernel just wrote the input);
//                                 label the kernel
//   BM_SwapOut/blocks             copy_blocks of 2 MiB blocks to pinned host memory: GB/s
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

#include "core/rng.h"
#if SERVELAB_HAVE_CUDA
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cache_ops.h"
#include "kernels/counter_normal.h"
#include "kernels/device.h"
#include "kernels/float_formats.h"
#include "kernels/gemm.h"
#include "kernels/gemm_skinny.h"
#include "kernels/kv_layout.h"
#include "kernels/lora.h"
#include "kernels/norm.h"
#include "kernels/random_fill.h"
#include "kernels/rope.h"
#endif

namespace {

bool have_gpu(benchmark::State& state) {
#if SERVELAB_HAVE_CUDA
  std::string why;
  if (servelab::kernels::cuda_device_available(&why)) return true;
  state.SkipWithError(("no CUDA device: " + why).c_str());
#else
  state.SkipWithError("no CUDA device: this build has no CUDA support");
#endif
  return false;
}

#if SERVELAB_HAVE_CUDA
namespace k = servelab::kernels;

constexpr std::int32_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16;

// Invalidates L2 (50 MB on H100) between timed iterations.
void flush_l2() {
  static k::DeviceBuffer junk(256u << 20);
  k::fill_bytes(junk.get(), 0, junk.bytes());
}

// Runs `run` once untimed (cuBLAS picks and loads its kernels there), then times it per iteration
// with a cold L2.
template <typename Run>
void time_warm_then_cold(benchmark::State& state, const Run& run) {
  run();
  k::GpuTimer t;
  for (auto _ : state) {
    flush_l2();
    t.start();
    run();
    state.SetIterationTime(t.stop() * 1e-3);
  }
}

double measured_copy_gbps() {
  static const double gbps = [] {
    const std::size_t bytes = 1u << 30;
    k::DeviceBuffer a(bytes), b(bytes);
    k::copy_async(b.get(), a.get(), bytes);
    k::GpuTimer t;
    t.start();
    for (int i = 0; i < 10; ++i) k::copy_async(b.get(), a.get(), bytes);
    const float ms = t.stop();
    return 2.0 * bytes * 10 / (ms * 1e-3) / 1e9;  // read + write
  }();
  return gbps;
}

// A cache with `blocks` blocks for one layer (K and V planes of a 1-layer layout), every byte
// 0x3c (bf16 0x3c3c ~ 0.0115; fp8 e4m3 0x3c = 1.5), and shuffled block tables.
struct Cache {
  k::FloatFormat format;
  k::KvCacheLayout layout;
  k::DeviceBuffer data, tables;
  std::int32_t width = 0;
  Cache(std::int32_t seqs, std::int32_t ctx, k::FloatFormat f = k::FloatFormat::kBf16)
      : format(f), layout{1, kBlock, kKvHeads, kHeadDim, k::kv_elem_bytes(f)} {
    width = (ctx + kBlock - 1) / kBlock;
    const std::int64_t blocks = std::int64_t{seqs} * width;
    data = k::DeviceBuffer(static_cast<std::size_t>(blocks * layout.block_bytes()));
    k::fill_bytes(data.get(), 0x3c, data.bytes());
    std::vector<std::int32_t> t(static_cast<std::size_t>(blocks));
    std::iota(t.begin(), t.end(), 0);
    servelab::Rng rng = servelab::Rng::stream(1, "kernels_bench");
    for (std::size_t i = t.size(); i > 1; --i) {
      std::swap(t[i - 1], t[static_cast<std::size_t>(rng.uniform_int(0, i - 1))]);
    }
    tables = k::DeviceBuffer(t.size() * 4);
    k::copy_to_device(tables.get(), t.data(), t.size() * 4);
  }
  k::PagedKv view() const {
    const auto* base = data.as<unsigned char>();
    return {base + layout.layer_base(0, 0) * layout.elem_bytes,
            base + layout.layer_base(0, 1) * layout.elem_bytes,
            layout.block_stride(),
            kBlock,
            kKvHeads,
            kHeadDim,
            tables.as<std::int32_t>(),
            width,
            format};
  }
};
#endif

void BM_DeviceCopy(benchmark::State& state) {
  if (!have_gpu(state)) return;
#if SERVELAB_HAVE_CUDA
  const auto bytes = static_cast<std::size_t>(state.range(0));
  k::DeviceBuffer a(bytes), b(bytes);
  k::GpuTimer t;
  for (auto _ : state) {
    flush_l2();
    t.start();
    k::copy_async(b.get(), a.get(), bytes);
    state.SetIterationTime(t.stop() * 1e-3);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(2 * bytes) * state.iterations());
#endif
}
BENCHMARK(BM_DeviceCopy)->Arg(256 << 20)->Arg(1 << 30)->UseManualTime();

void BM_DecodeAttention(benchmark::State& state) {
  if (!have_gpu(state)) return;
#if SERVELAB_HAVE_CUDA
  const auto batch = static_cast<std::int32_t>(state.range(0));
  const auto ctx = static_cast<std::int32_t>(state.range(1));
  const k::DecodeKernel kernel =
      state.range(2) == 0 ? k::DecodeKernel::kTiled : k::DecodeKernel::kPipelined;
  const k::FloatFormat format =
      state.range(2) == 2 ? k::FloatFormat::kFp8E4m3 : k::FloatFormat::kBf16;
  state.SetLabel(std::string(k::decode_kernel_name(kernel)) +
                 (state.range(2) == 2 ? " fp8_e4m3" : ""));
  Cache cache(batch, ctx, format);
  k::DeviceBuffer q(static_cast<std::size_t>(batch) * kHeads * kHeadDim * 2);
  k::DeviceBuffer out(q.bytes());
  k::fill_bytes(q.get(), 0x3c, q.bytes());
  std::vector<std::int32_t> rows(batch), lens(batch, ctx);
  std::iota(rows.begin(), rows.end(), 0);
  k::DeviceBuffer d_rows(batch * 4), d_lens(batch * 4);
  k::copy_to_device(d_rows.get(), rows.data(), batch * 4);
  k::copy_to_device(d_lens.get(), lens.data(), batch * 4);
  const k::DecodeSplitPlan plan = k::plan_decode_splits(
      lens, k::decode_ctas_per_seq(kernel, kHeads, kKvHeads),
      k::decode_max_resident_ctas(kernel, kHeadDim, kHeads, kKvHeads, format));
  k::DeviceBuffer ws(static_cast<std::size_t>(
                         k::decode_workspace_floats(batch, kHeads, kHeadDim, plan.max_splits)) *
                     4);
  const k::DecodeAttentionArgs args{cache.view(),
                                    q.as<k::Bf16>(),
                                    out.as<k::Bf16>(),
                                    d_rows.as<std::int32_t>(),
                                    d_lens.as<std::int32_t>(),
                                    batch,
                                    kHeads,
                                    0.088f,
                                    plan,
                                    ws.as<float>(),
                                    ctx,
                                    kernel};
  k::GpuTimer t;
  for (auto _ : state) {
    flush_l2();
    t.start();
    k::paged_decode_attention(args, nullptr);
    state.SetIterationTime(t.stop() * 1e-3);
  }
  const double kv_bytes = 2.0 * batch * ctx * kKvHeads * kHeadDim * cache.layout.elem_bytes;
  state.SetBytesProcessed(static_cast<std::int64_t>(kv_bytes) * state.iterations());
  state.counters["GBps"] =
      benchmark::Counter(kv_bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["copy_GBps"] = measured_copy_gbps();
  state.counters["splits"] = plan.max_splits;
#endif
}
BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{1, 8, 32, 64, 128}, {512, 2048, 8192}, {0, 1}})
    ->ArgsProduct({{8, 32, 128}, {512, 8192}, {2}})
    ->Args({64, 8192, 2})
    ->UseManualTime();

#if SERVELAB_HAVE_CUDA
// One sequence's prefill for the benchmarks below: nq queries (bf16, all 0x3c3c) at positions
// first .. first + nq - 1, their tiles and metadata on the device, and the launch arguments over
// `cache` (which holds the sequence's first + nq keys).
struct PrefillInputs {
  k::DeviceBuffer q, out, meta, tiles;
  std::int32_t num_tiles = 0, first = 0, nq = 0;
  PrefillInputs(std::int32_t queries, std::int32_t first_pos,
                k::PrefillKernel kernel = k::PrefillKernel::kFa2)
      : q(static_cast<std::size_t>(queries) * kHeads * kHeadDim * 2),
        out(q.bytes()),
        meta(12),
        first(first_pos),
        nq(queries) {
    k::fill_bytes(q.get(), 0x3c, q.bytes());
    const std::vector<std::int32_t> m = {0, nq, first};  // q_row_begin, num_queries, first_pos
    k::copy_to_device(meta.get(), m.data(), 12);
    const std::vector<k::PrefillTile> t = k::plan_prefill_tiles({nq}, k::prefill_tile_rows(kernel));
    tiles = k::DeviceBuffer(t.size() * sizeof(k::PrefillTile));
    k::copy_to_device(tiles.get(), t.data(), tiles.bytes());
    num_tiles = static_cast<std::int32_t>(t.size());
  }
  k::PrefillAttentionArgs args(const Cache& cache, k::PrefillKernel kernel,
                               const k::PrefillSplitPlan& plan = {},
                               float* workspace = nullptr) const {
    const std::int32_t* m = meta.as<std::int32_t>();
    return {cache.view(),
            q.as<k::Bf16>(),
            out.as<k::Bf16>(),
            m,
            m + 1,
            m + 2,
            tiles.as<k::PrefillTile>(),
            num_tiles,
            kHeads,
            0.088f,
            kernel,
            plan,
            workspace,
            std::int64_t{first} + nq};
  }
};

// Times `args` (the L2 flushed before each launch). A launch that throws (a kernel this build or
// device cannot run, such as wgmma without sm_90a) is this benchmark's error, and the run goes on
// to the next one (report.py shows the row as ERROR).
void time_prefill(benchmark::State& state, const k::PrefillAttentionArgs& args) {
  k::GpuTimer t;
  for (auto _ : state) {
    flush_l2();
    t.start();
    try {
      k::paged_prefill_attention(args, nullptr);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
    state.SetIterationTime(t.stop() * 1e-3);
  }
}

// A bf16 kernel other than fa2 is checked before it is timed: on random Q, K and V (the inputs
// its timed runs then read) its output must be fa2's within bf16 rounding (|a - b| <= 2e-2 (1 +
// |b|): a fragment or descriptor mistake gives errors of order 1, or NaN). One that differs is
// the row's error, so report.py's prefill choice never runs it in the modes after bench (its
// speed would mean nothing); a GPU test failure says more.
bool agrees_with_fa2(benchmark::State& state, Cache& cache, PrefillInputs& in,
                     k::PrefillKernel kernel) {
  const std::size_t q_elems = in.q.bytes() / 2, kv_elems = cache.data.bytes() / 2;
  PrefillInputs ref(in.nq, in.first);  // fa2's tiles
  for (k::DeviceBuffer* q : {&in.q, &ref.q}) {
    k::fill_counter_normal(q->as<k::Bf16>(), static_cast<std::int64_t>(q_elems),
                           k::counter_normal_params(0x5eed, 0.0, 1.0), nullptr);
  }
  k::fill_counter_normal(cache.data.as<k::Bf16>(), static_cast<std::int64_t>(kv_elems),
                         k::counter_normal_params(0x5eee, 0.0, 1.0), nullptr);
  std::vector<std::uint16_t> got(q_elems), want(q_elems);
  try {
    k::paged_prefill_attention(ref.args(cache, k::PrefillKernel::kFa2), nullptr);
    k::paged_prefill_attention(in.args(cache, kernel), nullptr);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return false;
  }
  k::copy_to_host(want.data(), ref.out.get(), q_elems * 2);
  k::copy_to_host(got.data(), in.out.get(), q_elems * 2);
  double worst = 0;
  for (std::size_t i = 0; i < q_elems; ++i) {
    const double a = k::bf16_to_float(got[i]), b = k::bf16_to_float(want[i]);
    const double err = std::fabs(a - b) / (1 + std::fabs(b));
    if (std::isnan(err)) {
      worst = err;
      break;
    }
    worst = std::max(worst, err);
  }
  if (!(worst <= 2e-2)) {
    const std::string why =
        "outputs differ from fa2's (worst |a - b| / (1 + |b|) " + std::to_string(worst) + ")";
    state.SkipWithError(why.c_str());
    return false;
  }
  return true;
}
#endif

void BM_PrefillAttention(benchmark::State& state) {
  if (!have_gpu(state)) return;
#if SERVELAB_HAVE_CUDA
  const auto len = static_cast<std::int32_t>(state.range(0));
  // 0: fa2, 1: wmma, 2: fa2 over fp8 e4m3, 3: fa2_128, 4: wgmma, 5: wgmma over fp8 e4m3
  // (bench/gpu/report.py PREFILL_KERNELS).
  const std::int64_t v = state.range(1);
  const bool fp8 = v == 2 || v == 5;
  const k::PrefillKernel kernel = v == 1             ? k::PrefillKernel::kWmma
                                  : v == 3           ? k::PrefillKernel::kFa2Wide
                                  : v == 4 || v == 5 ? k::PrefillKernel::kWgmma
                                                     : k::PrefillKernel::kFa2;
  Cache cache(1, len, fp8 ? k::FloatFormat::kFp8E4m3 : k::FloatFormat::kBf16);
  PrefillInputs in(len, 0, kernel);
  // (Over fp8 the random fill would make NaN codes: the kernel tests check those outputs.)
  if (v != 0 && !fp8 && !agrees_with_fa2(state, cache, in, kernel)) return;
  time_prefill(state, in.args(cache, kernel));
  const double flops = 4.0 * kHeads * static_cast<double>(len) * len * kHeadDim / 2;
  state.counters["TFLOPs"] =
      benchmark::Counter(flops * state.iterations() / 1e12, benchmark::Counter::kIsRate);
#endif
}
BENCHMARK(BM_PrefillAttention)
    ->ArgsProduct({{512, 2048, 8192}, {0, 1, 3, 4}})
    ->ArgsProduct({{512, 8192}, {2, 5}})
    ->UseManualTime();

// A chunk of Q queries after PREFIX cached keys (one sequence), fa2, unsplit (S = 0) or split-KV
// as the executor plans it (S = 1): a short chunk after a long prefix is the case split-KV is
// for (one query tile x 32 heads leaves most SMs idle); fa2_gqa (S = 2: 4 heads a CTA, K/V read
// once for them, 8 CTAs a tile) and wgmma (S = 3), each split as the executor plans it. S = 2 is
// checked against fa2's outputs first. Reported: time and the split count.
void BM_PrefillChunk(benchmark::State& state) {
  if (!have_gpu(state)) return;
#if SERVELAB_HAVE_CUDA
  const auto nq = static_cast<std::int32_t>(state.range(0));
  const auto prefix = static_cast<std::int32_t>(state.range(1));
  const k::PrefillKernel kernel = state.range(2) == 2   ? k::PrefillKernel::kFa2Gqa
                                  : state.range(2) == 3 ? k::PrefillKernel::kWgmma
                                                        : k::PrefillKernel::kFa2;
  Cache cache(1, prefix + nq);
  PrefillInputs in(nq, prefix, kernel);
  if (kernel == k::PrefillKernel::kFa2Gqa && !agrees_with_fa2(state, cache, in, kernel)) return;
  const k::PrefillSplitPlan plan =
      state.range(2) >= 1
          ? k::plan_prefill_splits(in.num_tiles, kHeads / k::prefill_heads_per_cta(kernel),
                                   prefix + nq, k::prefill_max_resident_ctas(kHeadDim, kernel))
          : k::PrefillSplitPlan{};
  k::DeviceBuffer ws(static_cast<std::size_t>(k::prefill_workspace_floats(
                         in.num_tiles, kHeads, kHeadDim, std::max(1, plan.kv_splits),
                         k::prefill_tile_rows(kernel))) *
                     sizeof(float));
  time_prefill(state, in.args(cache, kernel, plan, ws.as<float>()));
  state.counters["splits"] = plan.kv_splits;
#endif
}
BENCHMARK(BM_PrefillChunk)
    ->ArgsProduct({{16, 256}, {6144}, {0, 1}})
    ->ArgsProduct({{16, 64}, {128, 1024, 6144}, {2, 3}})
    ->Args({16, 128, 0})  // the same chunk after a short prefix: what split-KV should approach
    ->UseManualTime();

#if SERVELAB_HAVE_CUDA
// Llama-3-8B's linear layers as CudaExecutor::forward_layers calls Gemm::linear.
struct GemmShape {
  const char* name;
  std::int32_t in, out;
  k::Gemm::Out out_type;
  float beta;
  bool swiglu;  // x is gate_up [M][2 in]: Gemm::swiglu_linear (silu_mul + linear, or fused)
};
constexpr GemmShape kGemmShapes[] = {
    {"qkv", 4096, 6144, k::Gemm::Out::kF32, 0.0f, false},
    {"o", 4096, 4096, k::Gemm::Out::kF32, 1.0f, false},
    {"gate_up", 4096, 28672, k::Gemm::Out::kBf16, 0.0f, false},
    {"down", 14336, 4096, k::Gemm::Out::kF32, 1.0f, false},
    {"lm_head", 4096, 128256, k::Gemm::Out::kF32, 0.0f, false},
    {"silu_down", 14336, 4096, k::Gemm::Out::kF32, 1.0f, true},
};
#endif

#if SERVELAB_HAVE_CUDA
// One shape's operands at m tokens (weights and inputs 0x3c3c: bf16 1.0117; y zeros) and the
// bytes a call moves: weights, activations, y (read too when beta != 0).
struct GemmOperands {
  GemmOperands(const GemmShape& g, std::int32_t m)
      : w_bytes(std::size_t{2} * g.in * g.out),
        x_bytes(std::size_t{2} * m * g.in * (g.swiglu ? 2 : 1)),
        y_bytes(std::size_t{g.out_type == k::Gemm::Out::kF32 ? 4u : 2u} * m * g.out),
        bytes(static_cast<double>(w_bytes + x_bytes + y_bytes * (g.beta != 0 ? 2 : 1))),
        w(w_bytes),
        x(x_bytes),
        y(y_bytes),
        act(std::size_t{2} * m * g.in) {
    k::fill_bytes(w.get(), 0x3c, w_bytes);
    k::fill_bytes(x.get(), 0x3c, x_bytes);
    k::fill_bytes(y.get(), 0, y_bytes);
  }
  std::size_t w_bytes, x_bytes, y_bytes;
  double bytes;
  k::DeviceBuffer w, x, y, act;
};

void report_gemm_rate(benchmark::State& state, double bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * state.iterations());
  state.counters["GBps"] =
      benchmark::Counter(bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["copy_GBps"] = measured_copy_gbps();
}
#endif

void BM_DecodeGemm(benchmark::State& state) {
  if (!have_gpu(state)) return;
#if SERVELAB_HAVE_CUDA
  const auto m = static_cast<std::int32_t>(state.range(0));
  const GemmShape& g = kGemmShapes[state.range(1)];
  const auto kernel = state.range(2) == 1   ? k::GemmKernel::kSkinny
                      : state.range(2) == 2 ? k::GemmKernel::kCublasLt
                      : state.range(2) == 3 ? k::GemmKernel::kAuto
                                            : k::GemmKernel::kCublas;
  GemmOperands op(g, m);
  k::Gemm gemm;
  gemm.set_kernel(kernel);
  k::DeviceBuffer ws(k::Gemm::kRecommendedWorkspaceBytes);
  gemm.set_workspace(ws.get(), ws.bytes());
  const auto run = [&] {
    if (g.swiglu) {
      gemm.swiglu_linear(op.x.as<k::Bf16>(), op.act.as<k::Bf16>(), op.w.as<k::Bf16>(), op.y.get(),
                         g.out_type, m, g.in, g.out, g.beta, nullptr);
    } else {
      gemm.linear(op.x.as<k::Bf16>(), op.w.as<k::Bf16>(), op.y.get(), g.out_type, m, g.in, g.out,
                  g.beta, nullptr);
    }
  };
  time_warm_then_cold(state, run);  // with cuBLASLt, the untimed first call tunes the shape
  if (const auto plan = gemm.skinny_plan(m, g.in, g.out, g.swiglu)) {
    state.counters["splits"] = plan->splits;
    state.counters["predicted_us"] = plan->predicted_us;
  }
  std::string label = std::string(g.name) + " " + k::gemm_kernel_name(kernel);
  for (const k::LtChoice& c : gemm.lt_choices()) {
    state.counters["candidates"] = c.candidates;
    state.counters["chosen"] = c.chosen;
    state.counters["split_k"] = c.split_k;
    state.counters["first_us"] = c.first_us;
    if (kernel == k::GemmKernel::kAuto) {
      // What auto chose (label "shape auto KERNEL"), and each kernel's best while tuning.
      label += std::string(" ") + k::tuned_kernel_name(c.kernel);
      state.counters["lt_us"] = c.chosen_us;
      state.counters["cublas_us"] = c.cublas_us;
      state.counters["skinny_us"] = c.skinny_us;
      state.counters["skinny_splits"] = c.skinny_splits;
    }
  }
  report_gemm_rate(state, op.bytes);
  state.SetLabel(label);
#endif
}
// The skinny kernel at M = 1, 8 and 32 only: at 128 Gemm falls back to cuBLAS.
BENCHMARK(BM_DecodeGemm)
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (const std::int64_t m : {1, 8, 32, 128}) {
        for (std::int64_t shape = 0; shape < 6; ++shape) {
          for (const std::int64_t kernel : {0, 1, 2, 3}) {
            if (kernel != 1 || m <= 32) b->Args({m, shape, kernel});
          }
        }
      }
    })
    ->UseManualTime();

// The skinny kernel with `splits` CTAs a row block (0: its plan's, kernels/skinny_plan.h), to
// check the plan's model: counters splits and predicted_us (the model's time for those splits).
void BM_SkinnySplits(benchmark::State& state) {
  if (!have_gpu(state)) return;
#if SERVELAB_HAVE_CUDA
  const auto m = static_cast<std::int32_t>(state.range(0));
  const GemmShape& g = kGemmShapes[state.range(1)];
  GemmOperands op(g, m);
  k::DeviceBuffer ws(k::Gemm::kRecommendedWorkspaceBytes);
  k::DeviceBuffer counters(sizeof(unsigned) * k::Gemm::kSkinnyCounters);
  k::fill_bytes(counters.get(), 0, counters.bytes());
  k::SkinnyGemmArgs a{op.x.as<k::Bf16>(),
                      op.w.as<k::Bf16>(),
                      op.y.get(),
                      g.out_type == k::Gemm::Out::kF32,
                      m,
                      g.in,
                      g.out,
                      g.beta,
                      g.swiglu};
  a.partials = ws.as<float>();
  a.partial_bytes = ws.bytes();
  a.counters = counters.as<unsigned>();
  a.counter_count = k::Gemm::kSkinnyCounters;
  a.forced_splits = static_cast<std::int32_t>(state.range(2));
  const k::SkinnyPlan plan = k::skinny_plan_for(a);
  time_warm_then_cold(state, [&] { k::skinny_linear(a, nullptr); });
  report_gemm_rate(state, op.bytes);
  state.counters["splits"] = plan.splits;
  state.counters["predicted_us"] = plan.predicted_us;
  state.SetLabel(std::string(g.name) + " " + std::to_string(plan.splits) + " splits");
#endif
}
BENCHMARK(BM_SkinnySplits)->ArgsProduct({{1, 32}, {0, 1, 3}, {0, 1, 2, 4, 8, 16}})->UseManualTime();

void BM_LoraDelta(benchmark::State& state) {
  if (!have_gpu(state)) return;
#if SERVELAB_HAVE_CUDA
  const auto m = static_cast<std::int32_t>(state.range(0));
  const auto num_adapters = static_cast<std::int32_t>(state.range(1));
  const bool gather = state.range(2) == 1;
  constexpr std::int32_t kRank = 16, kHidden = 4096, kKv = 1024, kInter = 14336;
  const k::LoraShape shape = k::llama_lora_shape(kHidden, kHidden, kKv, kInter);
  std::vector<k::DeviceBuffer> adapters;
  for (std::int32_t a = 0; a < num_adapters; ++a) {
    adapters.emplace_back(static_cast<std::size_t>(shape.elements(kRank, 1)) * 2);
    k::fill_bytes(adapters.back().get(), 0x3c, adapters.back().bytes());
  }
  std::vector<k::LoraRow> rows;
  std::vector<k::LoraSegment> segments;
  for (std::int32_t i = 0; i < m; ++i) {
    const k::Bf16* w = adapters[static_cast<std::size_t>(i % num_adapters)].as<k::Bf16>();
    rows.push_back({w, i, kRank});
    if (!segments.empty() && segments.back().weights == w) {
      ++segments.back().rows;
    } else {
      segments.push_back({w, i, 1, kRank});
    }
  }
  k::DeviceBuffer d_rows(rows.size() * sizeof(k::LoraRow));
  k::copy_to_device(d_rows.get(), rows.data(), d_rows.bytes());
  const auto mb = static_cast<std::size_t>(m);
  k::DeviceBuffer hidden(mb * kHidden * 2), attn(mb * kHidden * 2), act(mb * kInter * 2);
  k::DeviceBuffer qkv(mb * (kHidden + 2 * kKv) * 4), residual(mb * kHidden * 4),
      gate_up(mb * 2 * kInter * 2);
  for (k::DeviceBuffer* b : {&hidden, &attn, &act, &qkv, &residual, &gate_up}) {
    k::fill_bytes(b->get(), 0, b->bytes());
  }
  k::DeviceBuffer tmp16(mb * kRank * 2), tmp32(mb * 3 * kRank * 4);
  k::Gemm gemm;
  k::DeviceBuffer ws(k::Gemm::kRecommendedWorkspaceBytes);
  gemm.set_workspace(ws.get(), ws.bytes());
  // The executor's four groups: (first target, count, input, its width, output, type, width).
  struct Group {
    int first, count;
    const k::DeviceBuffer* in;
    std::int32_t ld_in;
    k::DeviceBuffer* out;
    k::Gemm::Out type;
    std::int32_t ld_out;
  };
  const Group groups[] = {{0, 3, &hidden, kHidden, &qkv, k::Gemm::Out::kF32, kHidden + 2 * kKv},
                          {3, 1, &attn, kHidden, &residual, k::Gemm::Out::kF32, kHidden},
                          {4, 2, &hidden, kHidden, &gate_up, k::Gemm::Out::kBf16, 2 * kInter},
                          {6, 1, &act, kInter, &residual, k::Gemm::Out::kF32, kHidden}};
  const auto run = [&] {
    for (const Group& g : groups) {
      if (gather) {
        k::LoraGroupArgs a;
        a.rows = d_rows.as<k::LoraRow>();
        a.num_rows = m;
        a.shape = shape;
        a.first_target = g.first;
        a.num_targets = g.count;
        a.tmp = tmp32.as<float>();
        a.max_rank = kRank;
        k::lora_shrink(a, g.in->as<k::Bf16>(), g.ld_in, nullptr);
        k::lora_expand(a, g.out->get(), g.type == k::Gemm::Out::kF32, g.ld_out, 0, nullptr);
      } else {
        k::lora_cublas(gemm, segments.data(), static_cast<std::int32_t>(segments.size()), shape, 0,
                       g.first, g.count, g.in->as<k::Bf16>(), g.ld_in, g.out->get(), g.type,
                       g.ld_out, tmp16.as<k::Bf16>(), nullptr);
      }
    }
  };
  time_warm_then_cold(state, run);
  state.counters["segments"] = static_cast<double>(segments.size());
  state.SetLabel(std::to_string(segments.size()) + " segments " +
                 k::lora_kernel_name(gather ? k::LoraKernel::kGather : k::LoraKernel::kCublas));
#endif
}
BENCHMARK(BM_LoraDelta)
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (const std::int64_t m : {8, 32}) {
        for (const std::int64_t adapters : {std::int64_t{1}, std::int64_t{4}, m}) {
          for (std::int64_t kernel = 0; kernel < 2; ++kernel) b->Args({m, adapters, kernel});
        }
      }
    })
    ->UseManualTime();

// The per-token kernels of a decode step (kernels/elementwise.cu) at Llama-3-8B's shapes: each
// launch is a few microseconds, so one timed iteration is kTokenKernelReps launches in a row
// (after one L2 flush) and reports their mean. Inputs are 0x3c bytes (small finite values);
// every launch writes the same outputs.
void BM_TokenKernels(benchmark::State& state) {
  if (!have_gpu(state)) return;
#if SERVELAB_HAVE_CUDA
  constexpr int kTokenKernelReps = 20;
  constexpr std::int32_t kHidden = 4096, kInter = 14336, kPositions = 8192;
  const auto rows = static_cast<std::int32_t>(state.range(0));
  const auto kernel = state.range(1);
  const auto n = static_cast<std::size_t>(rows);
  const auto filled = [](std::size_t bytes) {
    k::DeviceBuffer b(bytes);
    k::fill_bytes(b.get(), 0x3c, bytes);
    return b;
  };
  // rms_norm
  k::DeviceBuffer residual = filled(n * kHidden * 4), weight = filled(kHidden * 4),
                  normed(n * kHidden * 2);
  // silu_mul
  k::DeviceBuffer gate_up = filled(kernel == 1 ? n * 2 * kInter * 2 : 16),
                  act(kernel == 1 ? n * kInter * 2 : 16);
  // qkv_rope_kv_write: distinct slots 0 .. rows - 1 of a one-layer bf16 cache.
  const std::int32_t width = (kHeads + 2 * kKvHeads) * kHeadDim;
  const k::KvCacheLayout layout{1, kBlock, kKvHeads, kHeadDim, 2};
  const std::int32_t blocks = (rows + kBlock - 1) / kBlock;
  k::DeviceBuffer qkv = filled(kernel == 2 ? n * width * 4 : 16),
                  cos_sin = filled(kernel == 2 ? std::size_t{kPositions} * kHeadDim * 4 : 16),
                  q = filled(kernel == 2 ? n * kHeads * kHeadDim * 2 : 16),
                  cache = filled(
                      kernel == 2 ? static_cast<std::size_t>(blocks * layout.block_bytes()) : 16);
  std::vector<std::int32_t> positions(n);
  std::vector<std::int64_t> slots(n);
  for (std::int32_t i = 0; i < rows; ++i) {
    positions[static_cast<std::size_t>(i)] = (i * 97 + 1000) % kPositions;
    slots[static_cast<std::size_t>(i)] = i;
  }
  k::DeviceBuffer d_positions(n * 4), d_slots(n * 8);
  k::copy_to_device(d_positions.get(), positions.data(), n * 4);
  k::copy_to_device(d_slots.get(), slots.data(), n * 8);
  const k::RmsNormArgs norm{residual.as<float>(), nullptr, nullptr, weight.as<float>(),
                            normed.as<k::Bf16>(), rows,    kHidden, 1e-5f};
  auto* cache_base = cache.as<unsigned char>();
  const k::QkvRopeKvWriteArgs rope{qkv.as<float>(),
                                   nullptr,
                                   d_positions.as<std::int32_t>(),
                                   cos_sin.as<float>(),
                                   rows,
                                   kHeads,
                                   kKvHeads,
                                   kHeadDim,
                                   q.as<k::Bf16>(),
                                   d_slots.as<std::int64_t>(),
                                   cache_base + layout.layer_base(0, 0) * layout.elem_bytes,
                                   cache_base + layout.layer_base(0, 1) * layout.elem_bytes,
                                   layout.block_stride(),
                                   kBlock};
  const char* names[] = {"rms_norm", "silu_mul", "qkv_rope_kv_write"};
  state.SetLabel(names[kernel]);
  const auto launch = [&] {
    if (kernel == 0) {
      k::rms_norm(norm, nullptr);
    } else if (kernel == 1) {
      k::silu_mul(gate_up.as<k::Bf16>(), act.as<k::Bf16>(), rows, kInter, nullptr);
    } else {
      k::qkv_rope_kv_write(rope, nullptr);
    }
  };
  launch();
  k::GpuTimer t;
  for (auto _ : state) {
    flush_l2();
    t.start();
    for (int i = 0; i < kTokenKernelReps; ++i) launch();
    state.SetIterationTime(t.stop() * 1e-3 / kTokenKernelReps);
  }
  // Bytes one launch reads and writes (the rms_norm residual read once, the weight once).
  const double bytes =
      kernel == 0   ? n * kHidden * (4.0 + 2.0) + kHidden * 4.0
      : kernel == 1 ? n * kInter * (4.0 + 2.0)
                    : n * (width * 4.0 + kHeadDim * 4.0 + (kHeads + 2 * kKvHeads) * kHeadDim * 2.0);
  state.counters["GBps"] =
      benchmark::Counter(bytes * state.iterations() / 1e9, benchmark::Counter::kIsRate);
#endif
}
BENCHMARK(BM_TokenKernels)->ArgsProduct({{1, 8, 32, 128}, {0, 1, 2}})->UseManualTime();

void BM_SwapOut(benchmark::State& state) {
  if (!have_gpu(state)) return;
#if SERVELAB_HAVE_CUDA
  const auto n = static_cast<std::int32_t>(state.range(0));
  const k::KvCacheLayout llama{32, 16, 8, 128, 2};  // 2 MiB blocks
  k::DeviceBuffer dev(static_cast<std::size_t>(n * llama.block_bytes()));
  k::DeviceBuffer host(dev.bytes(), k::DeviceBuffer::Kind::kPinnedHost);
  std::vector<k::BlockPair> pairs;
  for (std::int32_t i = 0; i < n; ++i) pairs.push_back({i, n - 1 - i});
  k::DeviceBuffer d_pairs(pairs.size() * sizeof(k::BlockPair));
  k::copy_to_device(d_pairs.get(), pairs.data(), d_pairs.bytes());
  k::GpuTimer t;
  for (auto _ : state) {
    t.start();
    k::copy_blocks(dev.get(), host.get(), d_pairs.as<k::BlockPair>(), n, llama.block_bytes(),
                   nullptr);
    state.SetIterationTime(t.stop() * 1e-3);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(dev.bytes()) * state.iterations());
#endif
}
BENCHMARK(BM_SwapOut)->Arg(16)->Arg(256)->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
