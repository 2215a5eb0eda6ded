// The CUDA executor against the CPU reference (labelled GPU in ctest; skips without CUDA or a
// device): logits of chunked prefill and decode within bf16 tolerance, the invariance property
// through the real scheduler (each request's greedy tokens equal those of the request run
// alone), bit-exact KV across swap and copy-on-write, and the plans it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/block_pool.h"
#include "core/config_error.h"
#include "core/host_block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/kv_offload_tiers.h"
#include "core/output_constraint.h"
#include "core/request.h"
#include "core/rng.h"
#include "core/scheduler.h"
#include "core/stop_conditions.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "engine/logprobs.h"
#include "engine/nvml_energy.h"
#include "engine/safetensors.h"
#include "engine/sample_stream.h"
#include "engine/warm_up.h"
#include "policies/registry.h"
#include "serving/home.h"
#include "serving/kv_capacity.h"
#include "tests/gpu_test_support.h"
#include "tests/speculation_workload.h"
#if SERVELAB_HAVE_CUDA
#include "engine/cuda_executor.h"
#include "kernels/attention.h"
#include "kernels/device.h"
#include "kernels/sampling_ref.h"
#endif
#include "serving/home.h"

#if SERVELAB_CUDA_EMU
#include "servelab_cuda_emu.h"  // programmatic_launches_executed
#endif

namespace servelab {
namespace {

// A reduced run (ReducedRun(), tests/gpu_test_support.h) takes fewer decode steps, seeds and
// shapes in the three longest tests, as tests/gpu_kernels_test.cc takes fewer cases; run the
// executable directly for all of them.

// Logits agree within this fraction of max(1, max |logit|): bf16 weights, activations and KV
// against the fp32 reference, two layers.
[[maybe_unused]] constexpr float kLogitTol = 3e-2f;
// Greedy tokens are compared only where the top-2 margin exceeds this (bf16 rounding can flip
// closer calls).
[[maybe_unused]] constexpr float kGpuTieMargin = 0.1f;

// A small Llama-shaped model the kernels support (head_dim 64 or 128).
[[maybe_unused]] LlamaConfig GpuConfig(std::int32_t head_dim, std::int32_t heads,
                                       std::int32_t kv_heads, bool bias_tied) {
  LlamaConfig c = load_llama_config("tiny", servelab_home().string() + "/experiments/catalog");
  c.model.name = "tiny-gpu";
  c.model.head_dim = head_dim;
  c.model.num_heads = heads;
  c.model.num_kv_heads = kv_heads;
  c.model.hidden_size = 256;
  c.model.intermediate_size = 512;
  c.model.vocab_size = 1024;
  c.model.qkv_bias = bias_tied;
  c.model.tie_word_embeddings = bias_tied;
  c.rope_scaling = RopeScaling{};
  c.model.rope_theta = 500000.0;
  return c;
}

[[maybe_unused]] float TopTwoMargin(const std::vector<float>& l) {
  std::vector<float> v(l);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return v[0] - v[1];
}

#if SERVELAB_HAVE_CUDA
CudaExecutorOptions GpuOptions(std::int32_t block_size, std::int32_t blocks,
                               std::int32_t host = 0) {
  CudaExecutorOptions o;
  o.block_size = block_size;
  o.num_blocks = blocks;
  o.num_host_blocks = host;
  o.max_num_tokens = 256;
  o.max_num_seqs = 16;
  o.max_model_len = 1024;
  o.keep_logits = true;
  return o;
}

// Options whose KV cache is sized from memory: half the device (the emulator's 4 GiB), blocks of
// 16 tokens.
CudaExecutorOptions MemorySizedOptions() {
  CudaExecutorOptions o = GpuOptions(16, 0);
  o.gpu_memory_utilization = 0.5;
  return o;
}
// The KV blocks an executor built with `options` gets, and their bytes.
std::pair<std::int64_t, std::int64_t> CacheBlocks(const LlamaWeights& w,
                                                  const CudaExecutorOptions& options) {
  const CudaExecutor e(w, options);
  return {e.num_blocks(), e.block_bytes()};
}

// One step for one request over `table`: tokens [done, done + n).
StepPlan OnePlan(const RequestSpec& spec, const std::vector<std::int32_t>& outputs,
                 std::int32_t done, std::int32_t n, const std::vector<BlockId>& table) {
  StepPlan plan;
  ScheduledRequest e;
  e.id = spec.id;
  e.spec = &spec;
  e.output_tokens = outputs;
  e.first_token = done;
  e.num_tokens = n;
  e.is_prefill = done + n < spec.prompt_len + static_cast<std::int32_t>(outputs.size());
  e.samples = done + n == spec.prompt_len + static_cast<std::int32_t>(outputs.size());
  e.block_table = table;
  plan.requests.push_back(e);
  return plan;
}
#endif

TEST(GpuExecutor, LogitsMatchCpuExecutor) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  struct Shape {
    std::int32_t hd, heads, kv;
    bool bias_tied;
  };
  const std::vector<Shape> shapes = {Shape{64, 4, 2, false}, Shape{128, 8, 2, true},
                                     Shape{64, 8, 1, false}};
  for (std::size_t si = 0; si < shapes.size(); ++si) {
    const Shape& sh = shapes[si];
    SCOPED_TRACE("head_dim " + std::to_string(sh.hd) + " heads " + std::to_string(sh.heads) + "/" +
                 std::to_string(sh.kv));
    const LlamaWeights w = LlamaWeights::random(GpuConfig(sh.hd, sh.heads, sh.kv, sh.bias_tied), 3);
    // Both decode kernels at every block size with the default prefill kernel (fa2), the wmma
    // prefill kernel once, the 128-row fa2_128 and wgmma prefill kernels twice each (block
    // sizes 16 and 5), an fp8 KV cache in each format (against the CPU
    // executor storing the same format), and the skinny linear-layer kernel three times.
    struct Variant {
      std::int32_t bs;
      kernels::DecodeKernel decode;
      kernels::PrefillKernel prefill;
      kernels::FloatFormat kv = kernels::FloatFormat::kBf16;
      kernels::GemmKernel gemm = kernels::GemmKernel::kCublas;
    };
    std::vector<Variant> variants;
    for (std::int32_t bs : {1, 5, 16}) {
      for (kernels::DecodeKernel d :
           {kernels::DecodeKernel::kTiled, kernels::DecodeKernel::kPipelined}) {
        variants.push_back({bs, d, kernels::PrefillKernel::kFa2});
      }
    }
    variants.push_back({16, kernels::kDefaultDecodeKernel, kernels::PrefillKernel::kWmma});
    variants.push_back({16, kernels::kDefaultDecodeKernel, kernels::PrefillKernel::kFa2Wide});
    variants.push_back({16, kernels::kDefaultDecodeKernel, kernels::PrefillKernel::kWgmma});
    variants.push_back({16, kernels::DecodeKernel::kPipelined, kernels::PrefillKernel::kFa2,
                        kernels::FloatFormat::kFp8E4m3});
    variants.push_back({5, kernels::DecodeKernel::kPipelined, kernels::PrefillKernel::kFa2,
                        kernels::FloatFormat::kFp8E5m2});
    variants.push_back({16, kernels::DecodeKernel::kPipelined, kernels::PrefillKernel::kWgmma,
                        kernels::FloatFormat::kFp8E4m3});
    // The skinny linear-layer kernel (decode steps and the LM head; prefill chunks fall back).
    variants.push_back({16, kernels::DecodeKernel::kPipelined, kernels::PrefillKernel::kFa2,
                        kernels::FloatFormat::kBf16, kernels::GemmKernel::kSkinny});
    variants.push_back({5, kernels::DecodeKernel::kPipelined, kernels::PrefillKernel::kFa2Wide,
                        kernels::FloatFormat::kFp8E4m3, kernels::GemmKernel::kSkinny});
    variants.push_back({5, kernels::DecodeKernel::kPipelined, kernels::PrefillKernel::kWgmma,
                        kernels::FloatFormat::kBf16, kernels::GemmKernel::kSkinny});
    // cuBLASLt with timed algorithms (the decode buckets' shapes; the rest cuBLAS), and auto (each
    // of those shapes on the fastest of cuBLAS, cuBLASLt and the skinny kernel's split counts).
    variants.push_back({16, kernels::DecodeKernel::kPipelined, kernels::PrefillKernel::kFa2,
                        kernels::FloatFormat::kBf16, kernels::GemmKernel::kCublasLt});
    variants.push_back({16, kernels::DecodeKernel::kPipelined, kernels::PrefillKernel::kFa2,
                        kernels::FloatFormat::kBf16, kernels::GemmKernel::kAuto});
    for (std::size_t vi = 0; vi < variants.size(); ++vi) {
      // A reduced run takes each variant once, on one of the shapes.
      if (ReducedRun() && (vi + si) % 3 != 0) continue;
      const Variant& v = variants[vi];
      if (!kernels::prefill_kernel_built(v.prefill)) continue;  // wgmma without sm_90a
      const std::int32_t bs = v.bs;
      SCOPED_TRACE(std::string("block ") + std::to_string(bs) + " decode " +
                   kernels::decode_kernel_name(v.decode) + " prefill " +
                   kernels::prefill_kernel_name(v.prefill) + " kv " +
                   std::string(kernels::format_name(v.kv)) + " gemm " +
                   kernels::gemm_kernel_name(v.gemm));
      CpuExecutorOptions cpu_options;
      cpu_options.block_size = bs;
      cpu_options.num_blocks = 200;
      if (v.kv != kernels::FloatFormat::kBf16) cpu_options.kv_format = v.kv;
      CpuExecutor cpu(w, cpu_options);
      CudaExecutorOptions options = GpuOptions(bs, 200);
      options.decode_kernel = v.decode;
      options.prefill_kernel = v.prefill;
      options.kv_format = v.kv;
      options.gemm_kernel = v.gemm;
      CudaExecutor gpu(w, options);
      const RequestSpec spec = make_request(7, 0, {{unique_content_id(1, 7), 0, 150}}, 20);
      std::vector<BlockId> table(180 / bs + 2);
      std::iota(table.begin(), table.end(), 1);
      std::reverse(table.begin(), table.end());
      std::vector<std::int32_t> outputs;
      std::int32_t done = 0;
      int compared = 0;
      const std::size_t steps = ReducedRun() ? 6 : 20;
      while (outputs.size() < steps) {
        const std::int32_t known = spec.prompt_len + static_cast<std::int32_t>(outputs.size());
        const std::int32_t n = std::min(known - done, 64);  // 64-token chunks, then decode
        const StepPlan plan = OnePlan(spec, outputs, done, n, table);
        const StepResult rc = cpu.execute(plan);
        const StepResult rg = gpu.execute(plan);
        done += n;
        if (!plan.requests[0].samples) continue;
        const Eigen::VectorXf& lc = cpu.last_logits()[0];
        const std::vector<float>& lg = gpu.last_logits()[0];
        const std::vector<float> want(lc.data(), lc.data() + lc.size());
        const float scale = std::max(1.0f, lc.cwiseAbs().maxCoeff());
        for (std::size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(lg[i], want[i], kLogitTol * scale)
              << "token " << i << " step " << outputs.size();
        }
        if (TopTwoMargin(want) > kGpuTieMargin) {
          EXPECT_EQ(rg.sampled_tokens[0], rc.sampled_tokens[0]);
        }
        ++compared;
        outputs.push_back(rc.sampled_tokens[0]);  // both continue from the reference's token
      }
      EXPECT_EQ(compared, static_cast<int>(steps));
    }
  }
#endif
}

// Head packing (CudaExecutorOptions::prefill_pack_heads): a model whose GQA group is 4 runs its
// prefill chunks of at most 16 tokens on the fa2_gqa kernel (4 heads a CTA), and with fa2
// configured and no split (contexts under 1,024 keys) its logits are those of the unpacked run
// bit for bit, and close to CpuExecutor's; chunks of 17 tokens or more, and a model whose group
// is 2, never pack; fa2_gqa configured for a group of 2 is refused.
TEST(GpuExecutor, ShortChunksPackTheHeadsOfAGqaGroup) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 8, 2, false), 5);
  CpuExecutorOptions cpu_options;
  cpu_options.block_size = 16;
  cpu_options.num_blocks = 40;
  CpuExecutor cpu(w, cpu_options);
  auto options = [](bool pack) {
    CudaExecutorOptions o = GpuOptions(16, 40);
    o.prefill_kernel = kernels::PrefillKernel::kFa2;
    o.prefill_pack_heads = pack;
    return o;
  };
  CudaExecutor packed(w, options(true)), plain(w, options(false));
  ASSERT_TRUE(packed.prefill_launch().packs());
  EXPECT_EQ(packed.prefill_launch().packed_heads, 4);
  EXPECT_EQ(packed.prefill_launch().packed_rows, 16);
  EXPECT_FALSE(plain.prefill_launch().packs());
  const RequestSpec spec = make_request(3, 0, {{unique_content_id(1, 3), 0, 70}}, 4);
  std::vector<BlockId> table(8);
  std::iota(table.begin(), table.end(), 2);
  std::vector<std::int32_t> outputs;
  std::int32_t done = 0, steps = 0;
  // Chunks of 16, 16, 16, then one of 22 (not packed), then decodes.
  for (const std::int32_t n : {16, 16, 16, 22, 1, 1}) {
    const StepPlan plan = OnePlan(spec, outputs, done, n, table);
    const StepResult rc = cpu.execute(plan);
    packed.execute(plan);
    plain.execute(plan);
    ++steps;
    done += n;
    if (!plan.requests[0].samples) continue;
    const std::vector<float>& lp = packed.last_logits()[0];
    EXPECT_TRUE(lp == plain.last_logits()[0])
        << "packed and unpacked logits differ, step " << steps;
    const Eigen::VectorXf& lc = cpu.last_logits()[0];
    const float scale = std::max(1.0f, lc.cwiseAbs().maxCoeff());
    for (std::size_t i = 0; i < lp.size(); ++i) {
      ASSERT_NEAR(lp[i], lc[static_cast<Eigen::Index>(i)], kLogitTol * scale) << "token " << i;
    }
    outputs.push_back(rc.sampled_tokens[0]);
  }
  EXPECT_EQ(packed.packed_prefill_steps(), 3);  // the three 16-token chunks
  EXPECT_EQ(plain.packed_prefill_steps(), 0);
  // A group of 2: nothing packs, and fa2_gqa cannot be the configured kernel.
  const LlamaWeights w2 = LlamaWeights::random(GpuConfig(64, 4, 2, false), 5);
  EXPECT_FALSE(CudaExecutor(w2, options(true)).prefill_launch().packs());
  CudaExecutorOptions gqa = options(true);
  gqa.prefill_kernel = kernels::PrefillKernel::kFa2Gqa;
  EXPECT_THROW(CudaExecutor(w2, gqa), std::invalid_argument);
  EXPECT_EQ(CudaExecutor(w, gqa).prefill_launch().tile_rows, 16);
#endif
}

// The invariance property on the GPU: random workloads through the real scheduler (chunked
// prefill, prefix caching, recompute and swap preemption, the preemptive formation) give each
// request the greedy tokens it gets when run alone on the same executor, wherever the decision
// is not a near-tie.
TEST(GpuExecutor, SchedulingNeverChangesGreedyOutputs) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 11);
  std::int64_t compared = 0, near_ties = 0, preemptions = 0, cached = 0;
  const std::uint64_t seeds = ReducedRun() ? 3 : 8;
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    Rng rng = Rng::stream(seed, "gpu_executor_test");
    SchedulerConfig c;
    c.block_size = static_cast<std::int32_t>(rng.uniform_int(2, 17));
    c.max_num_batched_tokens = static_cast<std::int32_t>(rng.uniform_int(12, 80));
    c.long_prefill_token_threshold = static_cast<std::int32_t>(rng.uniform_int(4, 32));
    c.max_num_seqs = static_cast<std::int32_t>(rng.uniform_int(3, 8));
    c.max_model_len = 256;
    c.enable_chunked_prefill = true;
    c.enable_prefix_caching = true;
    const bool swap = seed % 2 == 0;
    use_policy(c, PolicyKind::kPreemption, swap ? "swap" : "recompute");
    // Seeds 2, 5, 8: the preemptive formation under an MLFQ whose 1 us quanta demote every
    // running request every step, so waiting and swapped requests displace running ones all the
    // time (a step may swap victims out and a swapped request in: the executor's order).
    if (seed % 3 == 2) {
      use_policy(c, PolicyKind::kBatch, "preemptive");
      use_policy(c, PolicyKind::kQueue, "mlfq",
                 {{"levels", std::int64_t{3}}, {"quantum_ms", 0.001}, {"skip_join", false}});
    }
    const std::int32_t num_blocks = 200 / c.block_size + 2, host_blocks = swap ? 64 : 0;
    std::vector<RequestSpec> specs;
    for (RequestId id = 0; id < 10; ++id) {
      std::vector<PromptSegment> segs;
      const std::int64_t shared = rng.uniform_int(0, 2);
      if (shared > 0) {
        segs.push_back({1000 + static_cast<std::uint64_t>(shared), 0,
                        static_cast<std::uint32_t>(rng.uniform_int(6, 40))});
      }
      segs.push_back(
          {unique_content_id(seed, id), 0, static_cast<std::uint32_t>(rng.uniform_int(1, 60))});
      specs.push_back(make_request(id, 0, segs, static_cast<std::int32_t>(rng.uniform_int(4, 16))));
    }
    BlockPool pool(num_blocks);
    HostBlockPool host(host_blocks);
    KvCacheOptions kv_opt;
    if (swap) kv_opt.host_pool = &host;
    KvCacheManager kv(pool, c.block_size, c.max_model_len, c.enable_prefix_caching, kv_opt);
    Scheduler s(c, kv, nullptr);
    CudaExecutor exec(w, GpuOptions(c.block_size, num_blocks, host_blocks));
    for (const RequestSpec& spec : specs) s.add_request(spec, 0);
    std::map<RequestId, std::vector<std::int32_t>> outputs;
    TimeNs now = 0;
    for (int steps = 0; s.has_unfinished(); ++steps) {
      ASSERT_LT(steps, 100000);
      const StepPlan& plan = s.schedule(now);
      ASSERT_FALSE(plan.empty()) << "stalled";
      for (const ScheduledRequest& e : plan.requests) cached += e.num_cached_prefix;
      const StepResult result = exec.execute(plan);
      for (std::size_t i = 0; i < plan.requests.size(); ++i) {
        if (plan.requests[i].samples)
          outputs[plan.requests[i].id].push_back(result.sampled_tokens[i]);
      }
      now += std::max<TimeNs>(result.duration_ns, 1);
      s.complete(result, now);
    }
    preemptions += s.counters().num_preemptions;
    for (const RequestSpec& spec : specs) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " request " + std::to_string(spec.id));
      CudaExecutor alone(w, GpuOptions(16, 32));
      std::vector<BlockId> table(20);
      std::iota(table.begin(), table.end(), 1);
      const std::vector<std::int32_t>& got = outputs[spec.id];
      ASSERT_EQ(static_cast<std::int32_t>(got.size()), spec.max_output_tokens);
      std::vector<std::int32_t> mine;
      std::int32_t done = 0;
      while (mine.size() < got.size()) {
        const std::int32_t n = spec.prompt_len + static_cast<std::int32_t>(mine.size()) - done;
        const StepResult r = alone.execute(OnePlan(spec, mine, done, n, table));
        done += n;
        if (TopTwoMargin(alone.last_logits()[0]) <= kGpuTieMargin) {
          ++near_ties;
          break;
        }
        ASSERT_EQ(got[mine.size()], r.sampled_tokens[0]) << "output " << mine.size();
        ++compared;
        mine.push_back(r.sampled_tokens[0]);
      }
    }
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(cached, 0);
  EXPECT_GT(compared, static_cast<std::int64_t>(300 * seeds / 8));
  EXPECT_LT(near_ties * 10, compared);
#endif
}

#if SERVELAB_HAVE_CUDA
struct SpecRun {
  std::map<RequestId, std::vector<std::int32_t>> tokens;
  // The plain run's logits at each output of each request (keep_logits).
  std::map<RequestId, std::vector<std::vector<float>>> logits;
  std::int64_t drafts = 0, accepted = 0, steps = 0;
};

// Whether the token drawn at output `index` of request `id` from `logits` would survive the
// rounding differences between two kernel paths: greedy, a top-2 margin above kGpuTieMargin;
// sampled (seed 3, top_p 1), the same token for the executors' draw u moved by +-5e-3 (a logit
// change of 1e-3 at temperature 0.3 moves the cumulative mass by far less).
bool StableDraw(const std::vector<float>& logits, double temperature, RequestId id,
                std::size_t index) {
  if (temperature == 0) return TopTwoMargin(logits) > kGpuTieMargin;
  const double u =
      Rng(mix64(mix64(std::uint64_t{3} ^ name_hash("cpu_executor.sample")) ^ id) ^ mix64(index))
          .uniform();
  const double lo = std::max(0.0, u - 5e-3), hi = std::min(u + 5e-3, 1.0 - 1e-9);
  return kernels::sample_reference(logits, temperature, {}, lo) ==
         kernels::sample_reference(logits, temperature, {}, hi);
}

// tests/speculation_workload.h's requests through the real scheduler, with speculation k (0:
// off).
SpecRun RunSpeculation(const LlamaWeights& w, std::int32_t k, double temperature) {
  const SchedulerConfig sc = test_util::speculation_scheduler(k);
  BlockPool pool(128);
  KvCacheManager kv(pool, sc.block_size, sc.max_model_len, sc.enable_prefix_caching);
  test_util::FinishedTokens cap;
  Scheduler s(sc, kv, &cap);
  CudaExecutorOptions o = GpuOptions(sc.block_size, 128);
  o.sampling.temperature = temperature;
  o.sampling.seed = 3;
  o.speculative = sc.speculative;
  CudaExecutor ex(w, o);
  test_util::add_speculation_requests(s);
  SpecRun out;
  TimeNs t = 0;
  while (s.has_unfinished()) {
    const StepPlan& plan = s.schedule(t);
    if (plan.empty()) break;
    const StepResult r = ex.execute(plan);
    if (k == 0) {
      for (std::size_t i = 0; i < plan.requests.size(); ++i) {
        if (plan.requests[i].samples) {
          out.logits[plan.requests[i].id].push_back(ex.last_logits()[i]);
        }
      }
    }
    t += 1000;
    s.complete(r, t);
    ++out.steps;
  }
  out.tokens = cap.tokens;
  out.drafts = s.counters().num_draft_tokens;
  out.accepted = s.counters().num_accepted_tokens;
  return out;
}
#endif

// Speculative decoding on the CUDA executor (n-gram drafts verified in one batch,
// engine/cuda_executor.h): every request gets the tokens of the run without speculation, greedy
// and sampled, up to the first draw of that run that rounding could flip (StableDraw: a
// verified position's logits come from the prefill kernel, a decoded one's from the decode
// kernel, which round differently); drafts are accepted on the repetitive prompts and the
// greedy run takes fewer steps. Sampled rows are drawn from their own output index's stream, so
// a verify row drawing with another index's u would show. Other methods are refused.
TEST(GpuExecutor, SpeculativeDecodingGivesTheTokensOfPlainDecoding) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 9);
  for (const double temperature : {0.0, 0.3}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    const SpecRun base = RunSpeculation(w, 0, temperature),
                  spec = RunSpeculation(w, 3, temperature);
    ASSERT_EQ(base.tokens.size(), 4u);
    ASSERT_EQ(spec.tokens.size(), 4u);
    std::int64_t compared = 0;
    for (const auto& [id, want] : base.tokens) {
      SCOPED_TRACE("request " + std::to_string(id));
      const std::vector<std::int32_t>& got = spec.tokens.at(id);
      ASSERT_EQ(got.size(), want.size());
      const std::vector<std::vector<float>>& logits = base.logits.at(id);
      ASSERT_EQ(logits.size(), want.size());
      for (std::size_t j = 0; j < want.size() && StableDraw(logits[j], temperature, id, j);
           ++j, ++compared) {
        ASSERT_EQ(got[j], want[j]) << "output " << j;
      }
    }
    // At least 6 stable draws a request on average (the H200 compared 32 greedy, the emulator
    // more: where a near tie cuts a request short depends on the device's rounding).
    EXPECT_GE(compared, 24);
    EXPECT_GT(spec.drafts, 0);
    if (temperature == 0) {
      EXPECT_GT(spec.accepted, 0);
      EXPECT_LT(spec.steps, base.steps);
    }
  }
  CudaExecutorOptions eagle = GpuOptions(8, 16);
  eagle.speculative.method = SpecMethod::kEagle;
  eagle.speculative.num_speculative_tokens = 2;
  EXPECT_THROW(CudaExecutor(w, eagle), std::invalid_argument);
#endif
}

TEST(GpuExecutor, SwapAndCopyRestoreKvBitForBit) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(128, 8, 2, false), 5);
  for (kernels::FloatFormat kv : {kernels::FloatFormat::kBf16, kernels::FloatFormat::kFp8E4m3}) {
    SCOPED_TRACE(kernels::format_name(kv));
    CudaExecutorOptions options = GpuOptions(8, 40, 10);
    options.kv_format = kv;
    CudaExecutor exec(w, options);
    const RequestSpec spec = make_request(1, 0, {{unique_content_id(3, 1), 0, 30}}, 2);
    const std::vector<BlockId> table = {3, 9, 4, 7};
    const StepResult first = exec.execute(OnePlan(spec, {}, 0, 30, table));
    const std::vector<float> logits = exec.last_logits()[0];
    // Swap out to host blocks 2, 5, 6, 1; then back into device blocks 20..23; then copy 20 -> 30.
    StepPlan out;
    for (std::size_t i = 0; i < table.size(); ++i)
      out.swap_out.push_back({table[i], std::vector<BlockId>{2, 5, 6, 1}[i]});
    exec.execute(out);
    StepPlan in;
    for (std::size_t i = 0; i < table.size(); ++i)
      in.swap_in.push_back({out.swap_out[i].dst, 20 + static_cast<BlockId>(i)});
    in.copies.push_back({20, 30});
    exec.execute(in);
    for (std::int32_t layer = 0; layer < w.config.model.num_layers; ++layer) {
      for (bool value : {false, true}) {
        for (std::size_t i = 0; i < table.size(); ++i) {
          const auto orig = exec.read_block(false, layer, value, table[i]);
          EXPECT_EQ(exec.read_block(true, layer, value, out.swap_out[i].dst), orig);
          EXPECT_EQ(exec.read_block(false, layer, value, 20 + static_cast<std::int32_t>(i)), orig);
        }
        EXPECT_EQ(exec.read_block(false, layer, value, 30),
                  exec.read_block(false, layer, value, 20));
      }
    }
    // The last prompt position recomputed over the restored blocks gives the same logits.
    const std::vector<BlockId> moved = {30, 21, 22, 23};
    exec.execute(OnePlan(spec, {}, 29, 1, moved));
    EXPECT_EQ(exec.last_logits()[0].size(), logits.size());
    // (The prefill kernel computed them first, the decode kernel now: bf16 tolerance.)
    float scale = 1.0f;
    for (float l : logits) scale = std::max(scale, std::fabs(l));
    for (std::size_t i = 0; i < logits.size(); ++i) {
      ASSERT_NEAR(exec.last_logits()[0][i], logits[i], kLogitTol * scale);
    }
    (void)first;
  }
#endif
}

// The board's energy counter (engine/nvml_energy.h, what `engine profile` and `engine run` read)
// moves while the executor runs steps, at a power a GPU can draw. Skips where NVML is missing
// (the CUDA emulator, a container without the driver's library) with the reason.
TEST(GpuExecutor, BoardEnergyCounterMovesWhileStepsRun) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const NvmlEnergy meter(kernels::device_info().pci_bus_id);
  if (!meter.available()) GTEST_SKIP() << "no NVML energy counter: " << meter.why();
  const LlamaWeights w = LlamaWeights::random(GpuConfig(128, 8, 2, false), 5);
  CudaExecutor exec(w, GpuOptions(8, 40, 10));
  const RequestSpec spec = make_request(1, 0, {{unique_content_id(3, 1), 0, 256}}, 2);
  std::vector<BlockId> table(32);  // 256 tokens in blocks of 8
  std::iota(table.begin(), table.end(), 1);
  const StepPlan plan = OnePlan(spec, {}, 0, 256, table);
  exec.execute(plan);  // warm
  const auto start = std::chrono::steady_clock::now();
  const std::optional<std::uint64_t> before = meter.millijoules();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500)) {
    exec.execute(plan);
  }
  const std::optional<std::uint64_t> after = meter.millijoules();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(before && after);
  ASSERT_GT(*after, *before);
  const double watts = static_cast<double>(*after - *before) * 1e-3 / seconds;
  EXPECT_GT(watts, 20.0);
  EXPECT_LT(watts, 1500.0);
#endif
}

// min_tokens (core/stop_conditions.h): before it, EOS and the stop token ids are masked out of
// the logits the executor samples from, as CpuExecutor masks them: the token the same prompt
// samples greedily without conditions is not drawn when it is the EOS id, and is again once
// min_tokens outputs exist.
TEST(GpuExecutor, MinTokensKeepsEosOutOfTheSample) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 9);
  RequestSpec spec = make_request(4, 0, {{unique_content_id(6, 4), 0, 24}}, 8);
  const std::vector<BlockId> table = {1, 2, 3, 4};
  auto first_token = [&](const RequestSpec& r, bool cpu_side) {
    if (cpu_side) {
      CpuExecutorOptions o;
      o.block_size = 8;
      o.num_blocks = 16;
      CpuExecutor cpu(w, o);
      return cpu.execute(OnePlan(r, {}, 0, 24, table)).sampled_tokens[0];
    }
    CudaExecutor gpu(w, GpuOptions(8, 16));
    return gpu.execute(OnePlan(r, {}, 0, 24, table)).sampled_tokens[0];
  };
  const std::int32_t plain = first_token(spec, false);
  auto stop = std::make_shared<StopConditions>();
  stop->eos_token_id = plain;
  stop->min_tokens = 2;
  spec.stop = stop;
  const std::int32_t masked = first_token(spec, false);
  EXPECT_NE(masked, plain);
  EXPECT_EQ(masked, first_token(spec, true)) << "the CPU executor masks the same token";
  auto later = std::make_shared<StopConditions>(*stop);
  later->min_tokens = 0;
  spec.stop = later;
  EXPECT_EQ(first_token(spec, false), plain);
#endif
}

// Requests with their own sampling parameters (RequestSpec::sampling) in one step with others:
// each row samples with its own temperature, top_p, top_k and min_p (kernels::sample_rows) and
// the draw of engine/sample_stream.h, so a greedy row is the argmax of its logits and a sampled
// row is sample_reference's token on them (up to fp32 rounding at a boundary); rows without their
// own parameters keep the engine's (greedy here).
TEST(GpuExecutor, EachRequestSamplesWithItsOwnParameters) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 9);
  const std::vector<std::optional<RequestSampling>> own = {
      std::nullopt,
      RequestSampling{0.0, 1.0, {}},
      RequestSampling{1.0, 0.9, 7},
      RequestSampling{0.7, 1.0, {}},
      RequestSampling{1.3, 0.5, 99},
      std::nullopt,
      RequestSampling{2.0, 1.0, 5},
      RequestSampling{1.2, 1.0, 11, 0, 0, 5},
      RequestSampling{0.9, 0.95, 12, 0, 0, 0, 0.2},
      RequestSampling{3.0, 0.9, 13, 0, 0, 3, 0.05}};
  std::vector<RequestSpec> specs;
  std::vector<std::vector<BlockId>> tables;
  for (std::size_t i = 0; i < own.size(); ++i) {
    specs.push_back(make_request(i, 0, {{unique_content_id(8, i), 0, 16}}, 4));
    if (own[i]) specs.back().sampling = std::make_shared<const RequestSampling>(*own[i]);
    tables.push_back({static_cast<BlockId>(2 * i + 1), static_cast<BlockId>(2 * i + 2)});
  }
  StepPlan plan;
  for (std::size_t i = 0; i < own.size(); ++i) {
    plan.requests.push_back(OnePlan(specs[i], {}, 0, 16, tables[i]).requests[0]);
  }
  CudaExecutor gpu(w, GpuOptions(8, 32));
  const StepResult r = gpu.execute(plan);
  int sampled = 0, agree = 0;
  for (std::size_t i = 0; i < own.size(); ++i) {
    const std::vector<float>& logits = gpu.last_logits()[i];
    const RowSampling row = row_sampling(SamplingParams{}, specs[i], specs[i].id, 0);
    if (row.temperature == 0) {
      EXPECT_EQ(r.sampled_tokens[i], kernels::greedy_reference(logits)) << "row " << i;
      continue;
    }
    ++sampled;
    agree +=
        r.sampled_tokens[i] == kernels::sample_reference(logits, row.temperature,
                                                         {row.top_p, row.top_k, row.min_p}, row.u);
  }
  EXPECT_EQ(sampled, 7);
  EXPECT_GE(agree, sampled - 1) << agree << " of " << sampled;
#endif
}

// A request's logit_bias and repetition, presence and frequency penalties (RequestSampling): the
// logits the step samples from are the plain ones through logit_adjustments over the prompt and
// the entry's outputs (kernels::adjust_logits, bit for bit the host's adjust_logit), at those
// tokens only.
TEST(GpuExecutor, PenaltiesLowerTheLogitsOfTheOutputs) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 9);
  RequestSpec spec = make_request(1, 0, {{unique_content_id(14, 1), 0, 12}}, 8);
  const std::vector<std::int32_t> outputs = {17, 5, 17, 900};
  const std::vector<BlockId> table = {1, 2};
  const auto logits_of = [&](const RequestSpec& r) {
    CudaExecutor gpu(w, GpuOptions(8, 8));
    gpu.execute(OnePlan(r, outputs, 0, 16, table));
    return gpu.last_logits()[0];
  };
  const std::vector<float> plain = logits_of(spec);
  RequestSampling own;
  own.presence_penalty = 0.5;
  own.frequency_penalty = 1.25;
  spec.sampling = std::make_shared<const RequestSampling>(own);
  const std::vector<float> penalized = logits_of(spec);
  const auto adjustments = logit_adjustments(spec, {}, outputs, {});
  ASSERT_EQ(adjustments.size(), 3u);
  std::vector<float> want = plain;
  for (const LogitAdjustment& a : adjustments) {
    want[static_cast<std::size_t>(a.token)] =
        adjust_logit(plain[static_cast<std::size_t>(a.token)], a);
  }
  EXPECT_EQ(penalized, want);
  EXPECT_FLOAT_EQ(penalized[17] - plain[17], -3.0f);
  // With a repetition penalty over the prompt and the outputs, and a bias.
  own.repetition_penalty = 1.7;
  own.logit_bias = {{3, 2.5f}, {17, -1.0f}, {1000, 4.0f}};
  spec.sampling = std::make_shared<const RequestSampling>(own);
  const std::vector<float> adjusted = logits_of(spec);
  const std::vector<std::int32_t> prompt =
      distinct_prompt_tokens(spec, GpuConfig(64, 4, 2, false).model.vocab_size);
  want = plain;
  std::size_t changed = 0;
  for (const LogitAdjustment& a : logit_adjustments(spec, prompt, outputs, {})) {
    want[static_cast<std::size_t>(a.token)] =
        adjust_logit(plain[static_cast<std::size_t>(a.token)], a);
    ++changed;
  }
  EXPECT_GE(changed, prompt.size() + 2);  // the prompt's, 5 and 900 (17 may be in the prompt)
  EXPECT_EQ(adjusted, want);
#endif
}

// A structured output's constraint that allows {5, 900, 1000} after four outputs, nothing else.
class AfterFourOutputs final : public OutputConstraint {
 public:
  std::shared_ptr<const TokenMask> allowed(RequestId, std::span<const std::int32_t> earlier,
                                           std::span<const std::int32_t> later) const override {
    auto mask = std::make_shared<TokenMask>(32, 0u);
    if (earlier.size() + later.size() == 4) {
      for (const std::int32_t t : {5, 900, 1000}) (*mask)[t / 32] |= 1u << (t % 32);
    }
    return mask;
  }
};

// A request's allowed_token_ids and bad_words (RequestSampling, step 0): the step samples from
// the plain logits of the allowed tokens that no bad word bans after the entry's outputs
// (engine/sample_stream.h row_bans), -inf everywhere else, as CpuExecutor does; then a
// constraint's tokens (structured outputs).
TEST(GpuExecutor, AllowedTokensBadWordsAndConstraintsMaskTheLogits) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 9);
  RequestSpec spec = make_request(1, 0, {{unique_content_id(14, 1), 0, 12}}, 8);
  const std::vector<std::int32_t> outputs = {17, 5, 17, 900};
  const std::vector<BlockId> table = {1, 2};
  const auto logits_of = [&](const RequestSpec& r) {
    CudaExecutor gpu(w, GpuOptions(8, 8));
    const StepResult result = gpu.execute(OnePlan(r, outputs, 0, 16, table));
    return std::make_pair(gpu.last_logits()[0], result.sampled_tokens[0]);
  };
  const std::vector<float> plain = logits_of(spec).first;
  RequestSampling own;
  own.allowed_token_ids = {3, 17, 900, 1000};
  // [900, 3] and [17, 900, 17] end at the outputs (3 and 17 banned); [5] and [17, 5, 1000] do
  // not matter (5 is not allowed; the outputs do not end with [17, 5]).
  own.bad_words = {{900, 3}, {5}, {17, 900, 17}, {17, 5, 1000}};
  spec.sampling = std::make_shared<const RequestSampling>(own);
  const auto [masked, token] = logits_of(spec);
  std::vector<float> want(plain.size(), -std::numeric_limits<float>::infinity());
  for (const std::size_t t : {std::size_t{900}, std::size_t{1000}}) want[t] = plain[t];
  EXPECT_EQ(masked, want);
  EXPECT_EQ(token, plain[900] >= plain[1000] ? 900 : 1000);
  // Every allowed token banned: the row draws token 0.
  own.bad_words = {{900, 3}, {17, 900, 17}, {900}, {1000}};
  spec.sampling = std::make_shared<const RequestSampling>(own);
  EXPECT_EQ(logits_of(spec).second, 0);
  // Structured outputs (RequestSampling::constraint): the row keeps the tokens the constraint
  // allows after the entry's outputs ({5, 900, 1000} after four), intersected with its
  // allowed_token_ids when it has them.
  own = {};
  own.constraint = std::make_shared<AfterFourOutputs>();
  spec.sampling = std::make_shared<const RequestSampling>(own);
  const auto [held, drawn] = logits_of(spec);
  want.assign(plain.size(), -std::numeric_limits<float>::infinity());
  for (const std::size_t t : {std::size_t{5}, std::size_t{900}, std::size_t{1000}}) {
    want[t] = plain[t];
  }
  EXPECT_EQ(held, want);
  EXPECT_EQ(drawn,
            static_cast<std::int32_t>(std::max_element(want.begin(), want.end()) - want.begin()));
  own.allowed_token_ids = {3, 17, 900, 1000};
  spec.sampling = std::make_shared<const RequestSampling>(own);
  const std::vector<float> both = logits_of(spec).first;
  want[5] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(both, want);
#endif
}

// Log probabilities (RequestSpec::logprobs): the entries that ask, and the forked samples of one
// that asks, get token_logprobs of their row's raw logits (those keep_logits returns, no mask
// here); the others none.
TEST(GpuExecutor, LogprobsOfTheRowsThatAsk) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 9);
  std::vector<RequestSpec> specs;
  for (std::uint64_t i = 0; i < 3; ++i) {
    specs.push_back(make_request(i, 0, {{unique_content_id(12, i), 0, 16}}, 4));
  }
  specs[1].logprobs = 4;
  specs[2].logprobs = 0;
  specs[2].n = 3;
  specs[2].sampling = std::make_shared<const RequestSampling>(RequestSampling{1.0, 1.0, 4});
  std::vector<std::vector<BlockId>> tables;  // the plan's block tables point into them
  for (std::size_t i = 0; i < specs.size(); ++i) {
    tables.push_back({static_cast<BlockId>(2 * i + 1), static_cast<BlockId>(2 * i + 2)});
  }
  StepPlan plan;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    plan.requests.push_back(OnePlan(specs[i], {}, 0, 16, tables[i]).requests[0]);
  }
  plan.requests[2].num_samples = 3;
  plan.num_fork_tokens = 2;
  CudaExecutor gpu(w, GpuOptions(8, 32));
  const StepResult r = gpu.execute(plan);
  ASSERT_EQ(r.logprobs.size(), 3u);
  EXPECT_TRUE(r.logprobs[0].top.empty());
  for (std::size_t i = 1; i < 3; ++i) {
    const TokenLogprobs want =
        token_logprobs(gpu.last_logits()[i], r.sampled_tokens[i], specs[i].logprobs);
    EXPECT_EQ(r.logprobs[i].logprob, want.logprob) << i;
    EXPECT_EQ(r.logprobs[i].top, want.top) << i;
  }
  EXPECT_EQ(r.logprobs[1].top.size(), 4u);
  ASSERT_EQ(r.fork_tokens.size(), 2u);
  ASSERT_EQ(r.fork_logprobs.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(r.fork_logprobs[k].logprob,
              token_logprobs(gpu.last_logits()[2], r.fork_tokens[k], 0).logprob);
  }
#endif
}

// Prompt log probabilities (RequestSpec::prompt_logprobs): the rows of a prompt chunk, one that
// samples nothing as well as the last, give CpuExecutor's numbers within bf16's tolerance, with
// the same first alternative wherever the reference's top two are not a near-tie; an entry that
// did not ask gives none.
TEST(GpuExecutor, PromptLogprobsMatchCpuExecutor) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, true), 5);
  RequestSpec asks = make_request(1, 0, {{unique_content_id(13, 1), 0, 20}}, 2);
  asks.prompt_logprobs = 3;
  const RequestSpec plain = make_request(2, 0, {{unique_content_id(13, 2), 0, 20}}, 2);
  const std::vector<BlockId> t1 = {1, 2, 3}, t2 = {4, 5, 6};
  CpuExecutorOptions cpu_options;
  cpu_options.block_size = 8;
  cpu_options.num_blocks = 32;
  CpuExecutor cpu(w, cpu_options);
  CudaExecutor gpu(w, GpuOptions(8, 32));
  std::map<std::int32_t, std::pair<TokenLogprobs, TokenLogprobs>> seen;  // position: cpu, gpu
  for (const auto& [done, n] : {std::pair(0, 12), std::pair(12, 8)}) {
    StepPlan plan = OnePlan(plain, {}, done, n, t2);
    plan.requests.insert(plan.requests.begin(), OnePlan(asks, {}, done, n, t1).requests[0]);
    const StepResult rc = cpu.execute(plan);
    const StepResult rg = gpu.execute(plan);
    ASSERT_EQ(rc.prompt_logprobs.size(), 1u);
    ASSERT_EQ(rg.prompt_logprobs.size(), 1u);
    EXPECT_EQ(rg.prompt_logprobs[0].entry, 0u);
    EXPECT_EQ(rg.prompt_logprobs[0].first_position, done + 1);
    ASSERT_EQ(rg.prompt_logprobs[0].values.size(), rc.prompt_logprobs[0].values.size());
    for (std::size_t j = 0; j < rg.prompt_logprobs[0].values.size(); ++j) {
      seen[done + 1 + static_cast<std::int32_t>(j)] = {rc.prompt_logprobs[0].values[j],
                                                       rg.prompt_logprobs[0].values[j]};
    }
  }
  ASSERT_EQ(seen.size(), 19u);  // positions 1 .. 19
  for (const auto& [pos, pair] : seen) {
    const auto& [want, have] = pair;
    // bf16 against fp32: logits within kLogitTol of their scale, which a logprob this low is.
    EXPECT_NEAR(have.logprob, want.logprob, kLogitTol * std::max(1.0f, std::abs(want.logprob)))
        << "position " << pos;
    ASSERT_EQ(have.top.size(), 3u);
    if (want.top[0].second - want.top[1].second > kGpuTieMargin) {
      EXPECT_EQ(have.top[0].first, want.top[0].first) << "position " << pos;
    }
  }
#endif
}

// Async scheduling (StepPlan::pipelined): a decode formed before its input token is known takes
// the token the executor's previous plan sampled, so its logits equal those of the same decode
// given the token; a pipelined entry whose request sampled nothing last is refused.
TEST(GpuExecutor, PipelinedDecodeTakesThePreviousPlansToken) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 8);
  const RequestSpec spec = make_request(3, 0, {{unique_content_id(5, 3), 0, 20}}, 4);
  const std::vector<BlockId> table = {2, 5, 1};
  std::vector<std::vector<float>> logits;
  for (const bool pipelined : {false, true}) {
    CudaExecutor exec(w, GpuOptions(8, 16));
    const StepResult first = exec.execute(OnePlan(spec, {}, 0, 20, table));
    // (ScheduledRequest::output_tokens views the vector: it must outlive the plan.)
    const std::vector<std::int32_t> outputs =
        pipelined ? std::vector<std::int32_t>{}
                  : std::vector<std::int32_t>{first.sampled_tokens[0]};
    StepPlan next = OnePlan(spec, outputs, 20, 1, table);
    next.pipelined = pipelined;
    next.requests[0].samples = true;
    next.requests[0].is_prefill = false;
    exec.execute(next);
    logits.push_back(exec.last_logits()[0]);
  }
  EXPECT_EQ(logits[0], logits[1]);
  CudaExecutor fresh(w, GpuOptions(8, 16));
  StepPlan orphan = OnePlan(spec, {}, 20, 1, table);
  orphan.pipelined = true;
  EXPECT_THROW(fresh.execute(orphan), std::invalid_argument);
#endif
}

// The KV offload host tier (CudaExecutorOptions::num_tier_slots): stores copy device blocks into
// slots and loads copy slots back, bit for bit, in CpuExecutor's order: a load group reads its
// slots after the stores before it (stores_before) and writes its blocks after the stores that
// follow, so a slot overwritten and a block stored in the same plan keep their old contents
// where the load and the store need them.
TEST(GpuExecutor, OffloadTierMovesKvInThePlansOrder) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 6);
  CudaExecutorOptions options = GpuOptions(8, 40);
  options.num_tier_slots = 4;
  CudaExecutor exec(w, options);
  const RequestSpec spec = make_request(1, 0, {{unique_content_id(4, 1), 0, 30}}, 2);
  exec.execute(OnePlan(spec, {}, 0, 30, {3, 9, 4, 7}));
  const std::int32_t layers = w.config.model.num_layers;
  using Bytes = std::vector<std::uint8_t>;
  auto block = [&](std::int32_t b) {  // every layer's K and V of device block b
    std::vector<Bytes> v;
    for (std::int32_t l = 0; l < layers; ++l)
      for (bool value : {false, true}) v.push_back(exec.read_block(false, l, value, b));
    return v;
  };
  auto slot = [&](std::int32_t t) {
    std::vector<Bytes> v;
    for (std::int32_t l = 0; l < layers; ++l)
      for (bool value : {false, true}) v.push_back(exec.read_tier_slot(l, value, t));
    return v;
  };
  const auto b3 = block(3), b9 = block(9), b4 = block(4), b7 = block(7);
  ASSERT_NE(b3, b9);
  StepPlan first;
  first.tier_stores = {{3, 0}, {9, 1}};
  exec.execute(first);
  EXPECT_EQ(slot(0), b3);
  EXPECT_EQ(slot(1), b9);
  // Store 7 -> slot 2; then the group (stores_before 1) reads slots 0 and 1; store 4 -> slot 0;
  // then the group writes blocks 20 and 7.
  StepPlan second;
  second.tier_stores = {{7, 2}, {4, 0}};
  second.tier_loads = {{kHostTier, 20, 0, 1}, {kHostTier, 7, 1, 1}};
  exec.execute(second);
  EXPECT_EQ(slot(2), b7);
  EXPECT_EQ(slot(0), b4);
  EXPECT_EQ(block(20), b3);
  EXPECT_EQ(block(7), b9);
  EXPECT_GT(exec.tier_copy_ns(), 0);
  // Out of range or order: refused before anything moves.
  StepPlan bad;
  bad.tier_stores = {{3, 4}};
  EXPECT_THROW(exec.execute(bad), std::invalid_argument);
  bad.tier_stores = {{3, 1}};
  bad.tier_loads = {{kHostTier, 5, 0, 2}};
  EXPECT_THROW(exec.execute(bad), std::invalid_argument);
  EXPECT_EQ(slot(1), b9);
#endif
}

// Host weights by their Hugging Face name: (data, size, is a vector).
[[maybe_unused]] std::map<std::string, std::pair<const float*, std::int64_t>> HostTensors(
    const LlamaWeights& w) {
  std::map<std::string, std::pair<const float*, std::int64_t>> t;
  auto add = [&](const std::string& name, const auto& x) { t[name] = {x.data(), x.size()}; };
  add("model.embed_tokens.weight", w.embed_tokens);
  if (!w.config.model.tie_word_embeddings) add("lm_head.weight", w.lm_head);
  add("model.norm.weight", w.norm);
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const LlamaLayerWeights& l = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "self_attn.q_proj.weight", l.q_proj);
    add(p + "self_attn.k_proj.weight", l.k_proj);
    add(p + "self_attn.v_proj.weight", l.v_proj);
    if (w.config.model.qkv_bias) {
      add(p + "self_attn.q_proj.bias", l.q_bias);
      add(p + "self_attn.k_proj.bias", l.k_bias);
      add(p + "self_attn.v_proj.bias", l.v_bias);
    }
    add(p + "self_attn.o_proj.weight", l.o_proj);
    add(p + "mlp.gate_proj.weight", l.gate_proj);
    add(p + "mlp.up_proj.weight", l.up_proj);
    add(p + "mlp.down_proj.weight", l.down_proj);
    add(p + "input_layernorm.weight", l.input_layernorm);
    add(p + "post_attention_layernorm.weight", l.post_attention_layernorm);
  }
  return t;
}

// Issue 14: random weights generated on the device (CudaExecutor(config, seed)) are the host's
// LlamaWeights::random rounded to bf16, element for element (fp32 norms and biases: equal), and
// an executor built that way computes exactly what one uploaded from the host weights does.
TEST(GpuExecutor, DeviceGeneratedWeightsEqualHostWeights) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  for (const bool bias_tied : {false, true}) {
    SCOPED_TRACE(bias_tied ? "qkv bias, tied embeddings" : "untied, no bias");
    const LlamaConfig config = GpuConfig(64, 4, 2, bias_tied);
    const std::uint64_t seed = 21;
    const LlamaWeights host = LlamaWeights::random(config, seed);
    CudaExecutor generated(config, seed, GpuOptions(16, 40));
    const auto tensors = HostTensors(host);
    const std::vector<std::string> names = tensor_names(config.model);
    ASSERT_EQ(tensors.size(), names.size());
    for (const std::string& name : names) {
      SCOPED_TRACE(name);
      ASSERT_EQ(tensors.count(name), 1U);
      const auto [data, size] = tensors.at(name);
      const std::vector<float> dev = generated.read_weight(name);
      ASSERT_EQ(static_cast<std::int64_t>(dev.size()), size);
      const bool vector = name.ends_with("norm.weight") || name.ends_with(".bias");
      std::int64_t mismatches = 0;
      for (std::int64_t i = 0; i < size; ++i) {
        const float want = vector ? data[i] : bf16_to_float(float_to_bf16(data[i]));
        if (dev[i] != want && ++mismatches <= 5) {
          ADD_FAILURE() << "element " << i << ": device " << dev[i] << ", host " << data[i]
                        << " (bf16 " << want << ")";
        }
      }
      EXPECT_EQ(mismatches, 0);
    }
    EXPECT_THROW(generated.read_weight("no.such.weight"), std::out_of_range);

    // Same device weights, same kernels: the same logits, bit for bit, as the uploaded ones.
    CudaExecutor uploaded(host, GpuOptions(16, 40));
    const RequestSpec spec = make_request(3, 0, {{unique_content_id(2, 3), 0, 40}}, 4);
    std::vector<BlockId> table(8);
    std::iota(table.begin(), table.end(), 1);
    std::vector<std::int32_t> outputs;
    std::int32_t done = 0;
    while (outputs.size() < 4) {
      const std::int32_t n = spec.prompt_len + static_cast<std::int32_t>(outputs.size()) - done;
      const StepPlan plan = OnePlan(spec, outputs, done, n, table);
      const StepResult a = generated.execute(plan);
      const StepResult b = uploaded.execute(plan);
      ASSERT_EQ(generated.last_logits()[0], uploaded.last_logits()[0]) << "step " << outputs.size();
      ASSERT_EQ(a.sampled_tokens[0], b.sampled_tokens[0]);
      done += n;
      outputs.push_back(a.sampled_tokens[0]);
    }
  }
#endif
}

// Issue 14: the executor destroyed its stream before the cuBLAS handle bound to it. Executors
// that ran steps are destroyed (and their streams with them) without a CUDA error, and the
// device is usable afterwards.
TEST(GpuExecutor, DestructionLeavesTheDeviceUsable) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaConfig config = GpuConfig(64, 4, 2, false);
  const RequestSpec spec = make_request(1, 0, {{unique_content_id(4, 1), 0, 20}}, 1);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    CudaExecutor exec(config, 5, GpuOptions(16, 8, 2));
    exec.execute(OnePlan(spec, {}, 0, 20, {1, 2}));  // leaves no work pending: execute syncs
    StepPlan out;
    out.swap_out.push_back({1, 0});
    exec.execute(out);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("CUDA"), std::string::npos) << err;
  kernels::DeviceBuffer after(1 << 20);
  kernels::fill_bytes(after.get(), 0, after.bytes());
  EXPECT_NO_THROW(kernels::synchronize());
#endif
}

#if SERVELAB_HAVE_CUDA
// A request stepped by hand in multi-request plans: the whole known prefix on its first step,
// then one token per step; blocks [first_block, first_block + 16).
struct HandSeq {
  RequestSpec spec;
  std::vector<std::int32_t> outputs;
  std::int32_t done = 0;
  std::vector<BlockId> table;
  HandSeq(RequestId id, std::uint32_t prompt, BlockId first_block)
      : spec(make_request(id, 0, {{unique_content_id(19, id), 0, prompt}}, 1000)) {
    for (BlockId b = 0; b < 16; ++b) table.push_back(first_block + b);
  }
  std::int32_t known() const { return spec.prompt_len + static_cast<std::int32_t>(outputs.size()); }
};

StepPlan HandPlan(const std::vector<HandSeq*>& seqs) {
  StepPlan plan;
  for (HandSeq* q : seqs) {
    ScheduledRequest e;
    e.id = q->spec.id;
    e.spec = &q->spec;
    e.output_tokens = q->outputs;
    e.first_token = q->done;
    e.num_tokens = q->known() - q->done;
    e.is_prefill = q->done < q->spec.prompt_len;
    e.samples = true;
    e.block_table = q->table;
    plan.requests.push_back(e);
  }
  return plan;
}

// Runs one step of `seqs` on `exec` and advances them by its sampled tokens.
void StepOne(CudaExecutor& exec, const std::vector<HandSeq*>& seqs) {
  const StepResult r = exec.execute(HandPlan(seqs));
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->done = seqs[i]->known();
    seqs[i]->outputs.push_back(r.sampled_tokens[i]);
  }
}

// Runs `plan` on every executor, requires bit-identical logits and tokens, and advances seqs.
void StepAllEqual(const std::vector<CudaExecutor*>& execs, const std::vector<HandSeq*>& seqs,
                  const std::string& what) {
  const StepPlan plan = HandPlan(seqs);
  std::vector<StepResult> results;
  for (CudaExecutor* x : execs) results.push_back(x->execute(plan));
  for (std::size_t e = 1; e < execs.size(); ++e) {
    ASSERT_EQ(results[e].sampled_tokens, results[0].sampled_tokens) << what;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      ASSERT_EQ(execs[e]->last_logits()[i], execs[0]->last_logits()[i])
          << what << ": logits of entry " << i << " differ (executor " << e << ")";
    }
  }
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->done = seqs[i]->known();
    seqs[i]->outputs.push_back(results[0].sampled_tokens[i]);
  }
}
#endif

// LoRA on the CUDA executor (engine/cuda_executor.h): one batch mixing two adapters of different
// ranks (the first on two adjacent entries: one segment) and the base model, over a prefill step
// and decode steps, gives each entry CpuExecutor's logits with the same adapters within the bf16
// tolerance, with either linear-layer kernel and either LoRA kernel choice (the gather kernels
// with cuBLAS for the long segment, or cuBLAS for all); the adapters move the logits by more than
// that tolerance (so a missing delta would fail), and the adapters generated on the device equal
// make_lora_adapter's rounded to bf16. With the gather kernels the adapted decode steps
// replay CUDA graphs (a row table per bucket row) bit-identical to the padded eager steps; with
// cuBLAS they run eagerly.
// Without enable_lora, or with an adapter asked at another rank, the plan is refused.
TEST(GpuExecutor, LoraAdaptersMatchCpuExecutor) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 5);
  const std::pair<kernels::GemmKernel, kernels::LoraKernel> variants[] = {
      {kernels::GemmKernel::kCublas, kernels::LoraKernel::kCublas},
      {kernels::GemmKernel::kSkinny, kernels::LoraKernel::kGather},
      {kernels::GemmKernel::kCublas, kernels::LoraKernel::kGather}};
  for (const auto& [gemm, lora_kernel] : variants) {
    SCOPED_TRACE(std::string("gemm ") + kernels::gemm_kernel_name(gemm) + ", lora " +
                 kernels::lora_kernel_name(lora_kernel));
    CpuExecutorOptions co;
    co.block_size = 16;
    co.num_blocks = 200;
    co.enable_lora = true;
    co.lora_seed = 7;
    CpuExecutor cpu(w, co), base(w, co);
    CudaExecutorOptions go = GpuOptions(16, 200);
    go.enable_lora = true;
    go.lora_seed = 7;
    go.max_loras = 2;  // adapters 1 and 2 share each step
    go.gemm_kernel = gemm;
    go.lora_kernel = lora_kernel;
    CudaExecutor gpu(w, go);
    CudaExecutorOptions po = go;
    po.cuda_graphs = false;
    po.pad_decode_steps = true;
    CudaExecutor padded(w, po);
    // The first step's a + d (80 rows under adapter 1) is longer than kLoraGatherMaxRows: cuBLAS
    // takes it under either kernel choice, while c's 33 rows and every decode row take the
    // gather kernels under kGather.
    HandSeq a(1, 70, 1), d(4, 10, 60), b(2, 25, 20), c(3, 33, 40);
    a.spec.lora_id = d.spec.lora_id = 1;
    a.spec.lora_rank = d.spec.lora_rank = 8;
    c.spec.lora_id = 2;
    c.spec.lora_rank = 4;
    std::vector<HandSeq*> seqs = {&a, &d, &b, &c};
    // The same requests without adapters, on `base`.
    HandSeq a0 = a, d0 = d, b0 = b, c0 = c;
    std::vector<HandSeq*> plain = {&a0, &d0, &b0, &c0};
    for (HandSeq* q : plain) q->spec.lora_id = 0;
    std::int32_t moved = 0;
    const int steps = ReducedRun() ? 3 : 6;
    for (int step = 0; step < steps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const StepPlan plan = HandPlan(seqs);
      const StepResult rc = cpu.execute(plan);
      gpu.execute(plan);
      padded.execute(plan);
      base.execute(HandPlan(plain));
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        ASSERT_EQ(gpu.last_logits()[i], padded.last_logits()[i])
            << "entry " << i << ": the graph step differs from the padded eager one";
        const Eigen::VectorXf& lc = cpu.last_logits()[i];
        const std::vector<float>& lg = gpu.last_logits()[i];
        const float scale = std::max(1.0f, lc.cwiseAbs().maxCoeff());
        for (Eigen::Index t = 0; t < lc.size(); ++t) {
          ASSERT_NEAR(lg[static_cast<std::size_t>(t)], lc[t], kLogitTol * scale)
              << "entry " << i << " token " << t;
        }
        const float shift = (lc - base.last_logits()[i]).cwiseAbs().maxCoeff();
        if (seqs[i]->spec.lora_id != 0) {
          moved += shift > kLogitTol * scale ? 1 : 0;
        } else {
          EXPECT_EQ(shift, 0.0f) << "the base entry " << i << " changed";
        }
      }
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        for (HandSeq* q : {seqs[i], plain[i]}) {
          q->done = q->known();
          q->outputs.push_back(rc.sampled_tokens[i]);  // both continue from the reference's
        }
      }
    }
    EXPECT_EQ(moved, 3 * steps);
    // The adapters the device generated are the host's, rounded to bf16 (B times the scaling in
    // fp32 first), element for element.
    for (const auto& [id, rank] : {std::pair<std::uint32_t, std::int32_t>{1, 8}, {2, 4}}) {
      const LoraAdapter host = make_lora_adapter(w.config.model, 7, id, rank);
      for (std::int32_t l = 0; l < w.config.model.num_layers; ++l) {
        for (int t = 0; t < kNumLoraTargets; ++t) {
          const LoraAdapter::Pair& p = host.layers[static_cast<std::size_t>(l)][t];
          for (const bool b : {false, true}) {
            const std::vector<float> dev = gpu.read_lora(id, l, static_cast<LoraTarget>(t), b);
            const RowMatrix& want = b ? p.b : p.a;
            ASSERT_EQ(static_cast<Eigen::Index>(dev.size()), want.size());
            for (Eigen::Index i = 0; i < want.size(); ++i) {
              const float v = b ? host.scaling * want.data()[i] : want.data()[i];
              ASSERT_EQ(dev[static_cast<std::size_t>(i)], bf16_to_float(float_to_bf16(v)))
                  << "adapter " << id << " layer " << l << " target " << t << (b ? " B" : " A")
                  << " element " << i;
            }
          }
        }
      }
    }
    EXPECT_THROW(gpu.read_lora(9, 0, LoraTarget::kQ, false), std::out_of_range);
    // Steps 1.. are decode-only.
    EXPECT_EQ(gpu.graph_stats().replays,
              lora_kernel == kernels::LoraKernel::kGather ? steps - 1 : 0);
    CudaExecutor off(w, GpuOptions(16, 200));
    EXPECT_THROW(off.execute(HandPlan({&a})), std::invalid_argument);
    HandSeq e(5, 12, 80);
    e.spec.lora_id = 1;
    e.spec.lora_rank = 4;  // adapter 1 exists with rank 8
    EXPECT_THROW(gpu.execute(HandPlan({&e})), std::invalid_argument);
  }
#endif
}

// LoRA slots (core/lora_slots.h): an executor with max_loras 2 running three adapters evicts
// the least recently used one and regenerates an evicted adapter when a step needs it again;
// every step equals, bit for bit, an executor with a slot for each adapter (a stale slot, a reload
// skipped or the wrong slot read would differ), each adapter is generated once per placement and
// no more, and an evicted adapter is no longer on the device. A step under more adapters than
// slots, or an adapter above max_lora_rank, is refused with nothing changed. The slots are
// allocated before the KV cache is sized: max_loras slots of max_lora_rank leave their bytes
// (serving/kv_capacity.h lora_slot_bytes, the simulator's figure) fewer for the cache.
TEST(GpuExecutor, LoraSlotsEvictTheLeastRecentlyUsedAndReloadExactly) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 6);
  CudaExecutorOptions o = GpuOptions(16, 200);
  o.enable_lora = true;
  o.lora_seed = 11;
  o.max_lora_rank = 8;
  o.max_loras = 2;
  CudaExecutor two(w, o);
  o.max_loras = 3;
  CudaExecutor three(w, o);
  HandSeq a(1, 20, 1), b(2, 18, 40), c(3, 22, 80);
  a.spec.lora_id = 1;
  b.spec.lora_id = 2;
  c.spec.lora_id = 3;
  a.spec.lora_rank = c.spec.lora_rank = 8;
  b.spec.lora_rank = 4;
  const std::vector<CudaExecutor*> both = {&two, &three};
  StepAllEqual(both, {&a, &b}, "prefill under 1 and 2");  // two: loads 1, 2
  StepAllEqual(both, {&b, &c}, "2 decodes, 3 prefills");  // 3 evicts 1
  EXPECT_THROW(two.read_lora(1, 0, LoraTarget::kQ, false), std::out_of_range);
  StepAllEqual(both, {&a, &c}, "1 and 3 decode");  // 1 evicts 2
  StepAllEqual(both, {&a, &b}, "1 and 2 decode");  // 2 evicts 3
  StepAllEqual(both, {&a, &b}, "1 and 2 again");   // resident: no load
  EXPECT_EQ(two.lora_loads(), 5);
  EXPECT_EQ(three.lora_loads(), 3);
  EXPECT_THROW(two.read_lora(3, 0, LoraTarget::kQ, false), std::out_of_range);
  for (const bool bmat : {false, true}) {
    EXPECT_EQ(two.read_lora(1, 1, LoraTarget::kDown, bmat),
              three.read_lora(1, 1, LoraTarget::kDown, bmat));
  }
  // Refused before anything changes: three adapters in one step, a rank above max_lora_rank.
  EXPECT_THROW(two.execute(HandPlan({&a, &b, &c})), std::invalid_argument);
  HandSeq big(4, 10, 120);
  big.spec.lora_id = 4;
  big.spec.lora_rank = 16;
  EXPECT_THROW(three.execute(HandPlan({&big})), std::invalid_argument);
  EXPECT_EQ(two.lora_loads(), 5);
  StepAllEqual(both, {&a, &b}, "after the refusals");
  // Bad limits.
  o.max_loras = 0;
  EXPECT_THROW(CudaExecutor(w, o), std::invalid_argument);
  o.max_loras = 1;
  o.max_lora_rank = 1024;
  EXPECT_THROW(CudaExecutor(w, o), std::invalid_argument);
  // The slots come out of the memory the cache is sized from.
  CudaExecutorOptions sized = MemorySizedOptions();
  const auto [plain_blocks, block_bytes] = CacheBlocks(w, sized);
  sized.enable_lora = true;
  sized.max_loras = 4;
  sized.max_lora_rank = 64;
  ModelConfig bf16 = w.config.model;  // the CUDA executor holds adapters in bf16
  bf16.dtype_bytes = 2;
  const std::int64_t slots = 4 * lora_slot_bytes(bf16, bf16.num_layers, 64);
  CudaExecutor with_lora(w, sized);
  // And the decode graphs' gather scratch, made with the slots: the largest bucket's rows (16)
  // at the gather kernels' largest rank, fp32.
  const std::int64_t graph_scratch =
      std::int64_t{16} * kernels::kLoraMaxGroupTargets * kernels::kLoraMaxGatherRank * 4;
  const std::int64_t fewer = plain_blocks - with_lora.num_blocks();
  EXPECT_GE(fewer, slots / block_bytes);
  EXPECT_LE(fewer, (slots + graph_scratch) / block_bytes + 2);
  EXPECT_GT(fewer, 0);
#endif
}

// The timing buffers of the lt and auto GEMM choices (kernels/gemm_lt.h LtGemm::reserve: an L2
// flush of twice the L2 size, at least 1 MiB, and a scratch output for the residual's
// projections, the largest decode bucket x hidden x 4 bytes) are allocated before the KV cache
// is sized, so they come out of gpu_memory_utilization's budget; cuBLAS allocates none of them.
TEST(GpuExecutor, GemmTuningBuffersComeOutOfTheCacheBudget) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 3);
  CudaExecutorOptions sized = MemorySizedOptions();
  const auto [plain, block_bytes] = CacheBlocks(w, sized);
  const std::int64_t scratch = std::int64_t{16} * w.config.model.hidden_size * 4;  // bucket 16
  for (const kernels::GemmKernel g : {kernels::GemmKernel::kCublasLt, kernels::GemmKernel::kAuto}) {
    SCOPED_TRACE(kernels::gemm_kernel_name(g));
    sized.gemm_kernel = g;
    const std::int64_t fewer = plain - CacheBlocks(w, sized).first;
    EXPECT_GE(fewer * block_bytes, scratch + (std::int64_t{1} << 20));
    EXPECT_LE(fewer * block_bytes, scratch + (std::int64_t{256} << 20) + 2 * block_bytes);
  }
  sized.gemm_kernel = kernels::GemmKernel::kCublas;
  EXPECT_EQ(CacheBlocks(w, sized).first, plain);
#endif
}

// Issue 19 item 4: decode steps replayed from CUDA graphs give bit-identical logits and tokens
// to the same steps run eagerly with the same padded shapes (pad_decode_steps; an unpadded eager
// step may differ in the last bits where cuBLAS picks another kernel for another row count), over
// batch sizes in several buckets, mixed and prefill steps (eager in both) in between; padding rows
// leave the KV cache alone, and the fused and unfused QKV/RoPE/KV-write paths agree bit for bit.
// With each linear-layer kernel (cuBLAS, the skinny one with its fused SiLU input, cuBLASLt with
// algorithms timed per bucket shape: the process's decisions, so the four executors agree), and
// with programmatic dependent launch (graphs on) giving the same bits as without.
TEST(GpuExecutor, CudaGraphReplayIsBitIdenticalToPaddedEagerSteps) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  struct Shape {
    std::int32_t hd, heads, kv;
    bool bias_tied;
  };
  // Each shape with every linear-layer kernel (cuBLAS, skinny, cuBLASLt); a reduced run takes
  // head_dim 128 (biases, tied embeddings) with cuBLAS and head_dim 64 with the other two.
  struct Case {
    Shape shape;
    kernels::GemmKernel gemm;
  };
  std::vector<Case> cases;
  for (const Shape& sh : {Shape{64, 4, 2, false}, Shape{128, 8, 2, true}}) {
    for (const kernels::GemmKernel g : {kernels::GemmKernel::kCublas, kernels::GemmKernel::kSkinny,
                                        kernels::GemmKernel::kCublasLt}) {
      if (!ReducedRun() || (sh.hd == 128) == (g == kernels::GemmKernel::kCublas)) {
        cases.push_back({sh, g});
      }
    }
  }
  for (const Case& cs : cases) {
    const Shape& sh = cs.shape;
    SCOPED_TRACE("head_dim " + std::to_string(sh.hd) + " gemm " +
                 kernels::gemm_kernel_name(cs.gemm));
    const LlamaWeights w = LlamaWeights::random(GpuConfig(sh.hd, sh.heads, sh.kv, sh.bias_tied), 4);
    CudaExecutorOptions graphs = GpuOptions(16, 200);
    graphs.gemm_kernel = cs.gemm;
    graphs.graph_table_bytes = 0;  // table widths follow the contexts: a re-capture below
    CudaExecutorOptions padded = graphs;
    padded.cuda_graphs = false;
    padded.pad_decode_steps = true;
    CudaExecutorOptions unfused = padded;
    unfused.fused_qkv_rope = false;
    // Programmatic dependent launch changes when kernels may start, never what they compute.
    CudaExecutorOptions pdl = graphs;
    pdl.programmatic_launch = true;
    CudaExecutor a(w, graphs), b(w, padded), c(w, unfused), d(w, pdl);
    const std::vector<std::uint8_t> dummy_before = a.read_block(false, 0, false, 0);
    std::vector<HandSeq> seqs;
    for (RequestId id = 0; id < 11; ++id) {
      seqs.emplace_back(id, 20 + 7 * static_cast<std::uint32_t>(id), 1 + 16 * id);
    }
    const std::vector<CudaExecutor*> all = {&a, &b, &c, &d};
#if SERVELAB_CUDA_EMU
    const std::int64_t programmatic_before = servelab_emu::programmatic_launches_executed();
#endif
    auto pick = [&](std::int32_t from, std::int32_t n) {
      std::vector<HandSeq*> v;
      for (std::int32_t i = from; i < from + n; ++i) v.push_back(&seqs[i]);
      return v;
    };
    StepAllEqual(all, pick(0, 3), "prefill of 3");
    for (int i = 0; i < 4; ++i) StepAllEqual(all, pick(0, 3), "decode 3 (bucket 4)");
    StepAllEqual(all, pick(3, 6), "prefill of 6");
    for (int i = 0; i < 3; ++i) StepAllEqual(all, pick(0, 9), "decode 9 (bucket 16)");
    std::vector<HandSeq*> mixed = pick(0, 5);
    mixed.push_back(&seqs[9]);  // its prompt: a mixed step, eager everywhere
    StepAllEqual(all, mixed, "mixed");
    for (int i = 0; i < 3; ++i) StepAllEqual(all, pick(0, 10), "decode 10 (bucket 16)");
    for (int i = 0; i < 2; ++i) StepAllEqual(all, pick(2, 1), "decode 1 (bucket 1)");
    for (int i = 0; i < 2; ++i) StepAllEqual(all, pick(0, 5), "decode 5 (bucket 8)");
    if (HasFailure()) return;
#if SERVELAB_CUDA_EMU
    // Only `d` launches programmatically (every thread of those launches waited: the emulator
    // fails one that does not).
    EXPECT_GT(servelab_emu::programmatic_launches_executed(), programmatic_before);
#endif
    const CudaGraphStats st = a.graph_stats();
    EXPECT_FALSE(st.disabled);
    EXPECT_GE(st.captures, 4);  // buckets 4, 16, 1, 8
    EXPECT_EQ(st.replays, 4 + 3 + 3 + 2 + 2);
    EXPECT_EQ(b.graph_stats().replays, 0);
    EXPECT_EQ(b.graph_stats().padded_eager, 14);
    // Two sequences (contexts 34 and 41 -> 66 and 73) decode across a table width (64 keys):
    // bucket 2 is captured twice, the second time without the eager warm-up pass.
    for (int i = 0; i < 32; ++i) StepAllEqual(all, pick(0, 2), "decode 2 (bucket 2)");
    if (HasFailure()) return;
    const CudaGraphStats st2 = a.graph_stats();
    EXPECT_EQ(st2.captures - st.captures, 2);
    EXPECT_EQ(st2.padded_eager - st.padded_eager, 1);
    EXPECT_EQ(st2.replays - st.replays, 32);
    // The caches agree everywhere the sequences live, and the dummy block padding rows read is
    // untouched.
    for (std::int32_t layer = 0; layer < w.config.model.num_layers; ++layer) {
      for (BlockId blk = 1; blk <= 16 * 10; blk += 5) {
        ASSERT_EQ(a.read_block(false, layer, true, blk), b.read_block(false, layer, true, blk));
        ASSERT_EQ(a.read_block(false, layer, false, blk), c.read_block(false, layer, false, blk));
      }
    }
    EXPECT_EQ(a.read_block(false, 0, false, 0), dummy_before);
  }
#endif
}

// A graph is captured once per key and replayed afterwards; a new bucket or a wider block table
// captures a new one (here with no table budget, so that the width follows the contexts);
// prefill steps never touch graphs; cuda_graphs = false never captures.
TEST(GpuExecutor, CudaGraphsCaptureOncePerBucketAndReplay) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 6);
  CudaExecutorOptions narrow = GpuOptions(16, 200);
  narrow.graph_table_bytes = 0;  // table widths follow the contexts
  CudaExecutor exec(w, narrow);
  std::vector<HandSeq> seqs;
  for (RequestId id = 0; id < 5; ++id) seqs.emplace_back(id, 40, 1 + 16 * id);
  auto step = [&](const std::vector<HandSeq*>& v) { StepOne(exec, v); };
  std::vector<HandSeq*> three = {&seqs[0], &seqs[1], &seqs[2]};
  std::vector<HandSeq*> five = {&seqs[0], &seqs[1], &seqs[2], &seqs[3], &seqs[4]};
  step(three);  // prefill: eager
  EXPECT_EQ(exec.graph_stats().captures, 0);
  EXPECT_EQ(exec.graph_stats().eager_steps, 1);
  for (int i = 0; i < 5; ++i) step(three);  // contexts 41..45: bucket 4, table width 4
  EXPECT_EQ(exec.graph_stats().captures, 1);
  EXPECT_EQ(exec.graph_stats().replays, 5);
  step({&seqs[3], &seqs[4]});              // their prefill
  for (int i = 0; i < 3; ++i) step(five);  // bucket 8: a second graph
  EXPECT_EQ(exec.graph_stats().captures, 2);
  EXPECT_EQ(exec.graph_stats().replays, 8);
  for (int i = 0; i < 2; ++i) step(three);  // back to bucket 4: replayed, not captured
  EXPECT_EQ(exec.graph_stats().captures, 2);
  EXPECT_EQ(exec.graph_stats().replays, 10);
  EXPECT_EQ(exec.graph_stats().cached_graphs, 2);
  // Sequence 0 alone (bucket 1: a third graph) until its context passes 64 tokens: 5 blocks of
  // 16 need table width 8, a fourth graph; no other capture on the way.
  std::vector<HandSeq*> one = {&seqs[0]};
  step(one);
  EXPECT_EQ(exec.graph_stats().captures, 3);
  while (seqs[0].known() < 64) step(one);
  EXPECT_EQ(exec.graph_stats().captures, 3);
  step(one);
  step(one);
  EXPECT_EQ(exec.graph_stats().captures, 4);
  EXPECT_EQ(exec.graph_stats().eager_steps, 2);
  EXPECT_FALSE(exec.graph_stats().disabled);

  CudaExecutorOptions off = GpuOptions(16, 200);
  off.cuda_graphs = false;
  CudaExecutor eager(w, off);
  HandSeq s(9, 30, 1);
  for (int i = 0; i < 4; ++i) {
    const StepPlan plan = HandPlan({&s});
    const StepResult r = eager.execute(plan);
    s.done = s.known();
    s.outputs.push_back(r.sampled_tokens[0]);
  }
  EXPECT_EQ(eager.graph_stats().captures, 0);
  EXPECT_EQ(eager.graph_stats().replays, 0);
  EXPECT_EQ(eager.graph_stats().padded_eager, 0);
  EXPECT_EQ(eager.graph_stats().eager_steps, 4);
#endif
}

// Eager steps have their own split-K and LoRA scratch: a mixed step whose decodes split over
// more rows than a graph's never reallocates a buffer a captured graph points into, so the graph
// is replayed afterwards, not captured again (each capture costs a step on the GPU).
TEST(GpuExecutor, EagerStepsNeverInvalidateTheDecodeGraphs) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 6);
  CudaExecutor exec(w, GpuOptions(16, 200));
  std::vector<HandSeq> seqs;
  for (RequestId id = 0; id < 4; ++id) seqs.emplace_back(id, 200, 1 + 16 * id);
  auto step = [&](const std::vector<HandSeq*>& v) { StepOne(exec, v); };
  step({&seqs[0], &seqs[1], &seqs[2]});                    // prefills: eager
  for (int i = 0; i < 3; ++i) step({&seqs[0]});            // bucket 1, split: a graph
  for (int i = 0; i < 3; ++i) step({&seqs[0], &seqs[1]});  // bucket 2, split: a graph
  const CudaGraphStats before = exec.graph_stats();
  EXPECT_EQ(before.captures, 2);
  // A mixed step: a prefill beside three decodes of about 200 keys, split eagerly over 3 rows.
  step({&seqs[0], &seqs[1], &seqs[2], &seqs[3]});
  EXPECT_EQ(exec.graph_stats().eager_steps, before.eager_steps + 1);
  for (int i = 0; i < 2; ++i) step({&seqs[0]});
  for (int i = 0; i < 2; ++i) step({&seqs[0], &seqs[1]});
  EXPECT_EQ(exec.graph_stats().captures, before.captures);
  EXPECT_EQ(exec.graph_stats().replays, before.replays + 4);
  EXPECT_EQ(exec.graph_stats().cached_graphs, 2);
#endif
}

// The engine's warm-up (engine/warm_up.h) on the CUDA executor: it runs every decode bucket once
// (so a later first capture of a bucket needs no eager pass) and changes nothing a run computes:
// the same steps after it give bit-identical tokens and logits to a cold executor's.
TEST(GpuExecutor, WarmUpWarmsEveryBucketAndChangesNoResult) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 8);
  const CudaExecutorOptions o = GpuOptions(16, 200);
  CudaExecutor warm(w, o), cold(w, o);
  const WarmUpPlans plans({.max_num_batched_tokens = o.max_num_tokens,
                           .max_model_len = o.max_model_len,
                           .max_num_seqs = o.max_num_seqs,
                           .num_blocks = o.num_blocks,
                           .block_size = o.block_size});
  EXPECT_GT(run_warm_up(warm, plans), 0);
  const CudaGraphStats after = warm.graph_stats();
  EXPECT_EQ(after.padded_eager, 5);  // buckets 1, 2, 4, 8, 16
  EXPECT_EQ(after.captures, 5);
  std::vector<HandSeq> seqs;
  for (RequestId id = 0; id < 3; ++id) seqs.emplace_back(id, 30 + 5 * id, 1 + 16 * id);
  std::vector<HandSeq*> three = {&seqs[0], &seqs[1], &seqs[2]};
  const std::vector<CudaExecutor*> both = {&warm, &cold};
  StepAllEqual(both, three, "prefill after the warm-up");
  for (int i = 0; i < 4; ++i) StepAllEqual(both, three, "decode (bucket 4)");
  // Contexts 31-45 need 3 blocks; the warm-up decoded at 16 (1 block), and both steps take the
  // bucket's minimum width (64 blocks here: all of max_model_len), so its graph is replayed.
  EXPECT_EQ(warm.graph_stats().padded_eager, after.padded_eager);
  EXPECT_EQ(warm.graph_stats().captures, after.captures);
  EXPECT_EQ(warm.graph_stats().replays, after.replays + 4);
  EXPECT_EQ(cold.graph_stats().padded_eager, 1);
  // With no table budget the width follows the contexts: the same steps capture a 4-block graph.
  CudaExecutorOptions narrow = o;
  narrow.graph_table_bytes = 0;
  CudaExecutor warm_narrow(w, narrow);
  run_warm_up(warm_narrow, plans);
  const CudaGraphStats narrow_after = warm_narrow.graph_stats();
  std::vector<HandSeq> again;
  for (RequestId id = 0; id < 3; ++id) again.emplace_back(id, 30 + 5 * id, 1 + 16 * id);
  StepAllEqual({&warm_narrow}, {&again[0], &again[1], &again[2]}, "prefill (no table budget)");
  StepAllEqual({&warm_narrow}, {&again[0], &again[1], &again[2]}, "decode (no table budget)");
  EXPECT_EQ(warm_narrow.graph_stats().captures, narrow_after.captures + 1);
#endif
}

// The graph cache holds what the warm-up captures, a plain and an adapted graph for every bucket
// (70 at max_num_seqs 256, more than the 48 it used to keep), so that none is evicted by the
// warm-up's own later captures and captured again in the run.
TEST(GpuExecutor, GraphCacheHoldsEveryWarmedUpGraph) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 8);
  for (const std::int32_t seqs : {16, 256}) {
    CudaExecutorOptions o = GpuOptions(16, 200);
    o.max_num_seqs = seqs;
    o.enable_lora = true;
    const CudaExecutor exec(w, o);
    const auto buckets =
        static_cast<std::int32_t>(kernels::decode_graph_buckets(o.max_num_seqs).size());
    EXPECT_GE(exec.graph_stats().graph_capacity, 2 * buckets + 48) << seqs;
  }
  EXPECT_EQ(kernels::decode_graph_buckets(256).size(), 35U);
#endif
}

// The LoRA warm-up (WarmUpShape::lora_rank): every decode bucket again under the warm-up adapter,
// so that a run's first adapted decode step of a bucket is captured without an eager pass, and
// with the same results as on a cold executor.
TEST(GpuExecutor, WarmUpCapturesTheLoraDecodeGraphs) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 8);
  CudaExecutorOptions o = GpuOptions(16, 200);
  o.enable_lora = true;
  o.lora_seed = 3;
  CudaExecutor warm(w, o), cold(w, o);
  const WarmUpPlans plans({.max_num_batched_tokens = o.max_num_tokens,
                           .max_model_len = o.max_model_len,
                           .max_num_seqs = o.max_num_seqs,
                           .num_blocks = o.num_blocks,
                           .block_size = o.block_size,
                           .lora_rank = 8});
  run_warm_up(warm, plans);
  const CudaGraphStats after = warm.graph_stats();
  EXPECT_EQ(after.padded_eager, 10);  // buckets 1, 2, 4, 8, 16, plain and adapted
  EXPECT_EQ(after.captures, 10);
  EXPECT_EQ(after.cached_graphs, 10);  // none dropped by a later one
  std::vector<HandSeq> seqs;
  for (RequestId id = 0; id < 3; ++id) seqs.emplace_back(id, 30 + 5 * id, 1 + 16 * id);
  seqs[0].spec.lora_id = seqs[2].spec.lora_id = 1;
  seqs[0].spec.lora_rank = seqs[2].spec.lora_rank = 4;
  std::vector<HandSeq*> three = {&seqs[0], &seqs[1], &seqs[2]};
  const std::vector<CudaExecutor*> both = {&warm, &cold};
  StepAllEqual(both, three, "prefill after the warm-up");
  for (int i = 0; i < 3; ++i) StepAllEqual(both, three, "adapted decode (bucket 4)");
  // The warm-up's adapted bucket-4 graph (table width 64, all of max_model_len) serves the run.
  EXPECT_EQ(warm.graph_stats().padded_eager, after.padded_eager);
  EXPECT_EQ(warm.graph_stats().captures, after.captures);
  EXPECT_EQ(cold.graph_stats().padded_eager, 1);
#endif
}

TEST(GpuExecutor, RejectsMalformedPlansAndSizesTheCache) {
  REQUIRE_GPU();
#if SERVELAB_HAVE_CUDA
  const LlamaWeights w = LlamaWeights::random(GpuConfig(64, 4, 2, false), 2);
  CudaExecutor exec(w, GpuOptions(4, 8, 2));
  const RequestSpec spec = make_request(1, 0, {{unique_content_id(3, 1), 0, 10}}, 2);
  EXPECT_THROW(exec.execute(OnePlan(spec, {}, 0, 10, {1, 2})), std::invalid_argument);     // short
  EXPECT_THROW(exec.execute(OnePlan(spec, {}, 0, 10, {1, 2, 8})), std::invalid_argument);  // id
  EXPECT_THROW(exec.execute(OnePlan(spec, {}, 0, 12, {1, 2, 3})), std::invalid_argument);  // tokens
  StepPlan bad;
  bad.swap_out.push_back({1, 2});  // host block 2 of 2
  EXPECT_THROW(exec.execute(bad), std::invalid_argument);
  CudaExecutorOptions o = GpuOptions(16, 0);
  o.gpu_memory_utilization = 0.5;
  std::int64_t bf16_bytes = 0;
  std::int32_t bf16_blocks = 0;
  {
    CudaExecutor sized(w, o);
    EXPECT_GE(sized.num_blocks(), 2);
    EXPECT_EQ(sized.block_bytes(),
              cuda_block_bytes(w.config.model, 16, kernels::FloatFormat::kBf16));
    bf16_bytes = sized.block_bytes();
    bf16_blocks = sized.num_blocks();
    // Unset, the prefill kernel is wgmma over bf16 where the build has it, fa2 over fp8 (below).
    EXPECT_EQ(sized.options().prefill_kernel,
              kernels::prefill_kernel_built(kernels::PrefillKernel::kWgmma)
                  ? kernels::PrefillKernel::kWgmma
                  : kernels::PrefillKernel::kFa2);
  }
  // An fp8 cache: half the bytes a block, so about twice the blocks in the same memory.
  o.kv_format = kernels::FloatFormat::kFp8E4m3;
  {
    CudaExecutor fp8(w, o);
    EXPECT_EQ(fp8.options().prefill_kernel, kernels::PrefillKernel::kFa2);
    EXPECT_EQ(fp8.block_bytes() * 2, bf16_bytes);
    EXPECT_GE(fp8.num_blocks(), bf16_blocks * 19 / 10);
  }
  // fp8 with a fallback kernel, fp16, a zero scale: refused.
  o.decode_kernel = kernels::DecodeKernel::kTiled;
  EXPECT_THROW(CudaExecutor(w, o), std::invalid_argument);
  o.decode_kernel = kernels::DecodeKernel::kPipelined;
  // wmma reads bf16 KV only: refused with the reason cuda_kv_kernels_refusal gives.
  o.prefill_kernel = kernels::PrefillKernel::kWmma;
  try {
    CudaExecutor refused(w, o);
    ADD_FAILURE() << "fp8 KV with the wmma prefill kernel accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("SERVELAB_CUDA_DECODE / SERVELAB_CUDA_PREFILL chose "
                                         "pipelined / wmma"),
              std::string::npos)
        << e.what();
  }
  if (kernels::prefill_kernel_built(kernels::PrefillKernel::kWgmma)) {
    o.prefill_kernel = kernels::PrefillKernel::kWgmma;  // reads fp8 since 2026-12-05
    EXPECT_NO_THROW(CudaExecutor(w, o));
  }
  o.prefill_kernel = kernels::PrefillKernel::kFa2;
  o.k_scale = 0.0f;
  EXPECT_THROW(CudaExecutor(w, o), std::invalid_argument);
  o.k_scale = 1.0f;
  o.kv_format = kernels::FloatFormat::kFp16;
  EXPECT_THROW(CudaExecutor(w, o), std::invalid_argument);
  o.kv_format = kernels::FloatFormat::kBf16;
  o.block_size = 0;
  EXPECT_THROW(CudaExecutor(w, o), std::invalid_argument);
#endif
}

}  // namespace
}  // namespace servelab
