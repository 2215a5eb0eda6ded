// Tests of the model and hardware catalogues, KV capacity arithmetic and the roofline cost model.
// Expected values are computed by hand in the comments (docs/cost-model.md has the same
// formulas), never by calling the code under test a second way.
#include "sim/cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/block_pool.h"
#include "core/rng.h"
#include "core/step_plan.h"
#include "serving/config_node.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/kv_capacity.h"
#include "serving/model_config.h"
#include "sim/memo_table.h"
#include "sim/roofline_cost_model.h"
#include "sim/sim_backend.h"
#include "tests/cost_fixtures.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using test_util::decode_plan;
using test_util::easy_hardware;
using test_util::easy_model;
using test_util::entry;
using test_util::expect_config_error;
using test_util::prefill_plan;

std::string catalog() { return servelab_home().string() + "/experiments/catalog"; }

// A fresh directory under the test temp dir.
fs::path temp_dir(const std::string& name) {
  return servelab::test_util::temp_dir("cost_model_" + name);
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(CostModelCatalog, ParameterCountsMatchPublishedSizes) {
  // Llama-3-8B: per layer 2*4096*4096 + 2*4096*1024 + 3*4096*14336 + 2*4096 = 218,112,000;
  // x32 = 6,979,584,000; + final norm 4,096 + embedding and LM head 2*128256*4096 =
  // 1,050,673,152 -> 8,030,261,248.
  const ModelConfig l3 = load_model("Llama-3-8B", catalog());
  EXPECT_EQ(l3.num_params(), 8'030'261'248);
  EXPECT_NEAR(static_cast<double>(l3.num_params()), 8.03e9, 0.01 * 8.03e9);
  EXPECT_EQ(l3.weight_bytes(), 16'060'522'496);
  // Llama-2-7B: per layer 4*4096^2 + 3*4096*11008 + 2*4096 = 202,383,360; x32 = 6,476,267,520;
  // + 4,096 + 2*32000*4096 = 262,144,000 -> 6,738,415,616.
  const ModelConfig l2 = load_model("Llama-2-7B", catalog());
  EXPECT_EQ(l2.num_params(), 6'738'415'616);
  EXPECT_NEAR(static_cast<double>(l2.num_params()), 6.74e9, 0.01 * 6.74e9);
  // Qwen2-7B counts its q/k/v biases: 7,615,616,512 (published as 7.6B).
  const ModelConfig qwen = load_model("Qwen2-7B", catalog());
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_EQ(qwen.num_params(), 7'615'616'512);
  // Mistral-7B v0.3: 7,248,023,552; Llama-3-70B: 70,553,706,496.
  EXPECT_EQ(load_model("Mistral-7B", catalog()).num_params(), 7'248'023'552);
  EXPECT_EQ(load_model("Llama-3-70B", catalog()).num_params(), 70'553'706'496);
}

TEST(CostModelCatalog, BlockBytesLlama3At16TokensIsTwoMiB) {
  // 2 (K, V) * 32 layers * 16 tokens * 8 kv heads * 128 head_dim * 2 B = 2,097,152 = 2 MiB.
  const ModelConfig m = load_model("Llama-3-8B", catalog());
  EXPECT_EQ(m.kv_bytes_per_token(), 131'072);  // 128 KiB
  EXPECT_EQ(kv_block_bytes(m, 16), 2'097'152);
  // Llama-2-7B has 32 KV heads: four times as much, 8 MiB.
  EXPECT_EQ(kv_block_bytes(load_model("Llama-2-7B", catalog()), 16), 8 * 1024 * 1024);
}

TEST(CostModelCapacity, Llama3OnH100AtUtilization09) {
  const ModelConfig m = load_model("Llama-3-8B", catalog());
  const HardwareConfig hw = load_hardware("H100-SXM", catalog());
  KvCapacityOptions opt;
  opt.block_size = 16;
  opt.gpu_memory_utilization = 0.9;
  opt.activation_reserve_bytes = std::int64_t{2} << 30;
  // memory 80 GiB = 85,899,345,920; x0.9 = 77,309,411,328; - weights 16,060,522,496
  // - reserve 2 GiB 2,147,483,648 = 59,101,405,184 bytes; / 2,097,152 = 28,181.7 -> 28,181.
  const KvCapacity c = compute_kv_capacity(m, hw, opt);
  EXPECT_EQ(c.memory_bytes, 85'899'345'920);
  EXPECT_EQ(c.usable_bytes, 77'309'411'328);
  EXPECT_EQ(c.weight_bytes, 16'060'522'496);
  EXPECT_EQ(c.kv_bytes, 59'101'405'184);
  EXPECT_EQ(c.block_bytes, 2'097'152);
  EXPECT_EQ(c.num_gpu_blocks, 28'181);
  EXPECT_EQ(c.num_gpu_tokens(), 450'896);
  // Swap space 4 GiB / 2 MiB = 2,048 host blocks.
  EXPECT_EQ(c.num_cpu_blocks, 2'048);
  EXPECT_FALSE(c.overridden);

  // The estimated reserve: 1 GiB + 8192 tokens * (2*4096 + 4096 + 2*1024 + 3*14336) * 2 B
  // (939,524,096) + 256 seqs * 128256 * 4 B logits (131,334,144) = 2,144,600,064;
  // KV = 77,309,411,328 - 16,060,522,496 - 2,144,600,064 = 59,104,288,768 -> 28,183 blocks.
  opt.activation_reserve_bytes.reset();
  const KvCapacity d = compute_kv_capacity(m, hw, opt);
  EXPECT_EQ(d.activation_reserve_bytes, 2'144'600'064);
  EXPECT_EQ(d.num_gpu_blocks, 28'183);
}

TEST(CostModelCapacity, OverrideAndErrors) {
  const ModelConfig m = load_model("Llama-3-8B", catalog());
  const HardwareConfig h100 = load_hardware("H100-SXM", catalog());
  KvCapacityOptions opt;
  opt.num_gpu_blocks = 1000;
  const KvCapacity c = compute_kv_capacity(m, h100, opt);
  EXPECT_EQ(c.num_gpu_blocks, 1000);
  EXPECT_TRUE(c.overridden);

  // 141 GB of Llama-3-70B weights do not fit in 80 GiB x 0.9.
  expect_config_error([&] { compute_kv_capacity(load_model("Llama-3-70B", catalog()), h100, {}); },
                      {"Llama-3-70B", "H100-SXM", "weights", "no room"});
  // A catalogue entry is named by its name; a user's own file (which may reuse the name) by its
  // path too.
  try {
    compute_kv_capacity(load_model("Llama-3-70B", catalog()), h100, {});
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).find(".yaml"), std::string::npos) << e.what();
  }
  const std::filesystem::path own = test_util::temp_dir("own_hardware") / "h.yaml";
  std::filesystem::copy_file(catalog() + "/hardware/H100-SXM.yaml", own);
  expect_config_error(
      [&] {
        compute_kv_capacity(load_model("Llama-3-70B", catalog()),
                            load_hardware(own.string(), catalog()), {});
      },
      {"model Llama-3-70B on H100-SXM (" + own.string() + "): no room"});
  std::filesystem::remove_all(own.parent_path());
  // Memory for one and a half blocks: the pool keeps one as its null block, so one is not
  // enough to serve (an error, never BlockPool's internal error later).
  const KvCapacity all = compute_kv_capacity(m, h100, {});
  KvCapacityOptions one_block;
  one_block.activation_reserve_bytes =
      all.activation_reserve_bytes + all.kv_bytes - all.gpu_block_bytes * 3 / 2;
  expect_config_error([&] { compute_kv_capacity(m, h100, one_block); },
                      {"no room", "less than two blocks", "null block"});
  one_block.activation_reserve_bytes = *one_block.activation_reserve_bytes - all.gpu_block_bytes;
  EXPECT_EQ(compute_kv_capacity(m, h100, one_block).num_gpu_blocks, 2);
  KvCapacityOptions bad;
  bad.gpu_memory_utilization = 1.5;
  expect_config_error([&] { compute_kv_capacity(m, h100, bad); }, {"gpu_memory_utilization"});
  bad = {};
  bad.num_gpu_blocks = 0;
  expect_config_error([&] { compute_kv_capacity(m, h100, bad); }, {"num_gpu_blocks"});
  // More blocks than the block pool takes (2^27): a ConfigError naming the key to change, for a
  // count given, derived from memory (the tiny model with one-token blocks on an H200) or
  // derived from swap space, never BlockPool's internal error later.
  bad = {};
  bad.num_gpu_blocks = BlockPool::kMaxBlocks + 1;
  expect_config_error([&] { compute_kv_capacity(m, h100, bad); }, {"num_gpu_blocks", "2^27"});
  bad = {};
  bad.block_size = 1;
  bad.gpu_memory_utilization = 1;
  expect_config_error(
      [&] {
        compute_kv_capacity(load_model("tiny", catalog()), load_hardware("H200", catalog()), bad);
      },
      {"serving.block_size", "2^27"});
  bad = {};
  bad.block_size = 1;
  bad.swap_space_gib = 1e5;
  expect_config_error([&] { compute_kv_capacity(m, h100, bad); }, {"swap_space_gb", "2^27"});
  bad.block_size = 16;  // 2 MiB blocks: 10,000 GiB is 5.12 M of them, within the limit
  bad.swap_space_gib = 1e4;
  EXPECT_EQ(compute_kv_capacity(m, h100, bad).num_cpu_blocks, 5'120'000);
}

TEST(CostModelRoofline, DecodeStepIsMemoryBoundHandComputed) {
  const RooflineCostModel cm(easy_model(), easy_hardware(), 10);
  // One decode token at position 99 (context 100), sampled.
  //   GEMM: FLOPs 2 * 7e7 = 1.4e8 -> 0.14 ms; bytes 7e7*2 + 220,000 = 140,220,000 -> 1.4022 ms.
  //   decode attention: pairs 100; FLOPs 4e6 -> 8 us at 0.5 x 1e12; bytes 40,000 * (100 + 1)
  //     + 40,000 = 4,080,000 -> 40.8 us.
  //   LM head: FLOPs 2e6 -> 2 us; bytes 1000*1000*2 + (1000 + 1000)*2 = 2,004,000 -> 20.04 us.
  //   elementwise: 304,000 B -> 3.04 us.
  //   overhead 100 us. Total 1.4022 + 0.00304 + 0.0408 + 0.02004 + 0.1 ms = 1.56608 ms.
  const StepPlan plan = decode_plan(1, 100);
  const StepCostBreakdown b = cm.breakdown(plan);
  EXPECT_NEAR(b.gemm, 1.4022e-3, 1e-12);
  EXPECT_NEAR(b.elementwise, 3.04e-6, 1e-15);
  EXPECT_NEAR(b.decode_attention, 40.8e-6, 1e-12);
  EXPECT_EQ(b.prefill_attention, 0.0);
  EXPECT_NEAR(b.lm_head, 20.04e-6, 1e-12);
  EXPECT_NEAR(b.overhead, 100e-6, 1e-15);
  EXPECT_EQ(b.swap, 0.0);
  EXPECT_NEAR(b.flops, 1.4e8 + 4e6 + 2e6, 1e-3);
  EXPECT_NEAR(b.bytes, 140'220'000.0 + 304'000 + 4'080'000 + 2'004'000, 1e-3);
  EXPECT_NEAR(static_cast<double>(cm.step_time(plan)), 1'566'080.0, 1.0);
}

TEST(CostModelRoofline, PrefillStepIsComputeBoundHandComputed) {
  const RooflineCostModel cm(easy_model(), easy_hardware(), 10);
  // A 1000-token prompt from position 0, sampling its first output.
  //   GEMM: FLOPs 2 * 7e7 * 1000 = 1.4e11 -> 140 ms; bytes 1.4e8 + 2.2e8 = 3.6e8 -> 3.6 ms.
  //   prefill attention: pairs 1000*1001/2 = 500,500; FLOPs 40,000 * 500,500 = 2.002e10 at
  //     0.5 x 1e12 -> 40.04 ms; bytes 40,000 * 2000 + 40,000 * 1000 = 1.2e8 -> 1.2 ms.
  //   elementwise: 1000 * 304,000 B = 3.04e8 B -> 3.04 ms.
  //   LM head (one sequence) 20.04 us; overhead 100 us.
  //   Total 140 + 3.04 + 40.04 + 0.02004 + 0.1 ms = 183.20004 ms.
  const StepPlan plan = prefill_plan(0, 1000, true);
  const StepCostBreakdown b = cm.breakdown(plan);
  EXPECT_NEAR(b.gemm, 0.14, 1e-12);
  EXPECT_NEAR(b.elementwise, 3.04e-3, 1e-12);
  EXPECT_NEAR(b.prefill_attention, 0.04004, 1e-12);
  EXPECT_EQ(b.decode_attention, 0.0);
  EXPECT_NEAR(static_cast<double>(cm.step_time(plan)), 183'200'040.0, 1.0);

  // A chunk of 500 tokens starting at 500 (chunked prefill, not sampling): pairs 500*500 +
  // 500*501/2 = 375,250 -> FLOPs 1.501e10 -> 30.02 ms; GEMM 1.4e11/2 -> 70 ms; no LM head.
  const StepCostBreakdown c = cm.breakdown(prefill_plan(500, 500, false));
  EXPECT_NEAR(c.prefill_attention, 0.03002, 1e-12);
  EXPECT_NEAR(c.gemm, 0.07, 1e-12);
  EXPECT_EQ(c.lm_head, 0.0);
}

TEST(CostModelRoofline, BlockIndirectionChargesEveryVisitedBlockPerLayer) {
  // 50 ns per block per layer, 10 layers: 500 ns per block visited.
  HardwareConfig hw = easy_hardware();
  hw.block_indirection_s = 50e-9;
  // Two decode entries at context 100 and one 95-token prefill chunk from position 0:
  //   block size 10: decode 2 x ceil(100/10) = 20 blocks -> 10 us; prefill ceil(95/10) = 10
  //     blocks -> 5 us;
  //   block size 32: decode 2 x ceil(100/32) = 8 blocks -> 4 us; prefill ceil(95/32) = 3 -> 1.5 us.
  StepPlan plan = decode_plan(2, 100);
  plan.requests.push_back(entry(0, 95, true, true));
  plan.num_prefill_tokens = 95;
  const RooflineCostModel plain(easy_model(), easy_hardware(), 10);
  const RooflineCostModel small(easy_model(), hw, 10);
  const RooflineCostModel large(easy_model(), hw, 32);
  const StepCostBreakdown b0 = plain.breakdown(plan);
  const StepCostBreakdown b10 = small.breakdown(plan);
  const StepCostBreakdown b32 = large.breakdown(plan);
  EXPECT_NEAR(b10.decode_attention - b0.decode_attention, 10e-6, 1e-12);
  EXPECT_NEAR(b10.prefill_attention - b0.prefill_attention, 5e-6, 1e-12);
  EXPECT_NEAR(b32.decode_attention - b0.decode_attention, 4e-6, 1e-12);
  EXPECT_NEAR(b32.prefill_attention - b0.prefill_attention, 1.5e-6, 1e-12);
  // Nothing else moves: no FLOPs or bytes are added, and the GEMMs do not see the pages.
  EXPECT_EQ(b10.gemm, b0.gemm);
  EXPECT_EQ(b10.flops, b0.flops);
  EXPECT_EQ(b10.bytes, b0.bytes);
  EXPECT_GT(small.step_time(plan), large.step_time(plan));
  EXPECT_NEAR(static_cast<double>(small.step_time(plan) - plain.step_time(plan)), 15'000.0, 1.0);

  // The features overload charges what the features say: none without add_kv_blocks.
  StepFeatures f = StepFeatures::from_plan(plan);
  EXPECT_EQ(f.decode_blocks, 0);
  EXPECT_EQ(small.breakdown(f).decode_attention, b0.decode_attention);
  f.add_kv_blocks(plan, 10);
  EXPECT_EQ(f.decode_blocks, 20);
  EXPECT_EQ(f.prefill_blocks, 10);
  EXPECT_EQ(small.breakdown(f).decode_attention, b10.decode_attention);

  // Out of range: a ConfigError naming the field.
  hw.block_indirection_s = -1e-9;
  expect_config_error([&] { RooflineCostModel bad(easy_model(), hw, 10); },
                      {"block_indirection_s"});
}

TEST(CostModelCatalog, BlockIndirectionFromTheHardwareEntry) {
  const fs::path dir = temp_dir("indirection");
  write_file(dir / "gpu.yaml",
             "peak_tflops: 1\npeak_tflops_fp32: 1\nhbm_bandwidth_gbps: 1\nmemory_gib: 1\n"
             "host_link_gbps: 1\nblock_indirection_ns: 40\n");
  EXPECT_NEAR(load_hardware((dir / "gpu.yaml").string(), catalog()).block_indirection_s, 40e-9,
              1e-18);
  write_file(dir / "bad.yaml",
             "peak_tflops: 1\npeak_tflops_fp32: 1\nhbm_bandwidth_gbps: 1\nmemory_gib: 1\n"
             "host_link_gbps: 1\nblock_indirection_ns: -3\n");
  expect_config_error([&] { load_hardware((dir / "bad.yaml").string(), catalog()); },
                      {"bad.yaml:6", "block_indirection_ns"});
  // Every shipped entry leaves it at 0: today's step times.
  for (const char* name : {"A100-80GB", "A40", "H100-SXM", "H200", "L40S"}) {
    EXPECT_EQ(load_hardware(name, catalog()).block_indirection_s, 0.0) << name;
  }
}

TEST(CostModelRoofline, SwapCopyAndEmptyPlan) {
  const RooflineCostModel cm(easy_model(), easy_hardware(), 10);
  // Block: 40,000 B/token * 10 tokens = 400,000 B. 5 blocks = 2e6 B over 1e9 B/s = 2 ms.
  EXPECT_EQ(cm.block_bytes(), 400'000);
  EXPECT_EQ(cm.swap_time(5), 2'000'000);
  EXPECT_EQ(cm.swap_time(0), 0);
  StepPlan empty;
  EXPECT_EQ(cm.step_time(empty), 0);
  // Swap-only step: 3 out + 2 in = 2 ms, plus the 100 us overhead.
  StepPlan swaps;
  swaps.swap_out = {{1, 1}, {2, 2}, {3, 3}};
  swaps.swap_in = {{4, 4}, {5, 5}};
  EXPECT_EQ(cm.step_time(swaps), 2'100'000);
  // A copy reads and writes a block: 800,000 B over 1e11 B/s = 8 us on top of the decode step.
  StepPlan with_copy = decode_plan(1, 100);
  with_copy.copies = {{7, 8}};
  EXPECT_NEAR(cm.breakdown(with_copy).copy, 8e-6, 1e-15);
  EXPECT_EQ(cm.step_time(with_copy) - cm.step_time(decode_plan(1, 100)), 8'000);
}

TEST(CostModelRoofline, Llama3OnH100DecodeNearWeightStreaming) {
  const HardwareConfig h100 = load_hardware("H100-SXM", catalog());
  const RooflineCostModel cm(load_model("Llama-3-8B", catalog()), h100, 16);
  // Batch 1 at context 1024: the step streams the weights once. GEMM weights 6,979,321,856 *
  // 2 B = 13.96 GB at the fitted GEMM bandwidth 3.35 TB/s * 0.907 -> 4.59 ms, plus 7 launches
  // of 5.11 us in each of 32 layers; the LM head 1.05 GB; the whole step above all weight
  // bytes over that bandwidth plus the host time (500 us + 4 us per sequence), by less than
  // 25 % of the weight time (launch floors: 6.58 ms in all; a published vLLM 0.21 batch-1
  // TPOT of Llama-3.1-8B on an H100 is 6.48 ms, docs/e2e-sources.md "Leads not used").
  ASSERT_DOUBLE_EQ(h100.gemm_bandwidth_efficiency, 0.907);
  const double bw = 3.35e12 * 0.907;
  const StepCostBreakdown b1 = cm.breakdown(decode_plan(1, 1024));
  const double weights_s = 16'060'522'496.0 / bw;
  EXPECT_GT(b1.total(), weights_s + 504e-6);
  EXPECT_LT(b1.total(), 1.25 * weights_s + 504e-6);
  EXPECT_GT(b1.gemm, 13'958'643'712.0 / bw);
  EXPECT_LT(b1.gemm, 1.1 * 13'958'643'712.0 / bw + 32 * 7 * 5.11e-6);
  // Batch 32: the GEMMs are still memory-bound, so they take about as long as at batch 1
  // (Vidur's H100 linears: 32 tokens +2 % over 1 token, +5 % over 2-8 tokens); decode attention
  // reads 32 * 1025 * 128 KiB at memory_bandwidth (0.7).
  const StepCostBreakdown b32 = cm.breakdown(decode_plan(32, 1024));
  EXPECT_GT(b32.gemm, b1.gemm);
  EXPECT_LT(b32.gemm, 1.06 * b1.gemm);
  const double kv_s = (32.0 * 1025 * 131072 + 32.0 * 2 * 4096 * 2 * 32) / (3.35e12 * 0.7);
  EXPECT_NEAR(b32.decode_attention, kv_s, 1e-12);
  EXPECT_GT(cm.step_time(decode_plan(32, 1024)), cm.step_time(decode_plan(1, 1024)));
}

TEST(CostModelRoofline, Llama3OnH100WorkedExampleOfTheDocs) {
  // docs/cost-model.md, "Worked example": the classic roofline (the H100 entry without its
  // fitted kernel parameters). Effective rates 642.85 TFLOP/s (GEMM), 395.6 TFLOP/s
  // (attention), 2.345 TB/s.
  const RooflineCostModel cm(load_model("Llama-3-8B", catalog()),
                             load_hardware("H100-SXM", catalog()).classic_roofline(), 16);
  // Decode, 32 sequences at context 1024:
  //   GEMM bytes 13,958,643,712 + 32 * 4,456,448 = 14,101,250,048 -> 6.01333 ms;
  //   elementwise 32 * 5,521,408 = 176,685,056 B -> 0.07535 ms;
  //   decode attention 131,072 * 32,800 + 32 * 524,288 = 4,315,938,816 B -> 1.84049 ms;
  //   LM head 1,050,673,152 + 32 * 264,704 = 1,059,143,680 B -> 0.45166 ms; overhead 0.5 ms.
  //   Total 8.88082 ms.
  const StepCostBreakdown d = cm.breakdown(decode_plan(32, 1024));
  EXPECT_NEAR(d.gemm, 14'101'250'048.0 / 2.345e12, 1e-12);
  EXPECT_NEAR(d.elementwise, 176'685'056.0 / 2.345e12, 1e-12);
  EXPECT_NEAR(d.decode_attention, 4'315'938'816.0 / 2.345e12, 1e-12);
  EXPECT_NEAR(d.lm_head, 1'059'143'680.0 / 2.345e12, 1e-12);
  EXPECT_NEAR(static_cast<double>(cm.step_time(decode_plan(32, 1024))), 8'880'818.0, 1.0);
  // Prefill, one 2048-token prompt: GEMM 2 * 2048 * 6,979,321,856 FLOPs -> 44.46962 ms;
  //   elementwise 2048 * 5,521,408 B -> 4.82211 ms; attention 4 * 2,098,176 * 131,072 FLOPs
  //   -> 2.78073 ms; LM head 1,050,937,856 B -> 0.44816 ms; overhead 0.5 ms. Total 53.02061 ms.
  const StepCostBreakdown p = cm.breakdown(prefill_plan(0, 2048, true));
  EXPECT_NEAR(p.gemm, 2.0 * 2048 * 6'979'321'856.0 / 642.85e12, 1e-12);
  EXPECT_NEAR(p.prefill_attention, 4.0 * 2'098'176 * 131'072 / 395.6e12, 1e-12);
  EXPECT_NEAR(static_cast<double>(cm.step_time(prefill_plan(0, 2048, true))), 53'020'609.0, 1.0);
}

TEST(CostModelRoofline, Llama3OnH100FittedEntryOfTheDocs) {
  // docs/cost-model.md, "Worked example", last part: the same steps on the shipped H100 entry
  // (fitted GEMM and elementwise launches, host time 500 us + 4 us per sampled sequence).
  const HardwareConfig h100 = load_hardware("H100-SXM", catalog());
  const RooflineCostModel cm(load_model("Llama-3-8B", catalog()), h100, 16);
  const RooflineCostModel classic(load_model("Llama-3-8B", catalog()), h100.classic_roofline(), 16);
  // Decode, 32 sequences at context 1024: GEMMs 5.514 ms (4 launches x 32 layers, each at
  // least 5.11 us), elementwise 0.431 ms (launch floors: 5.7x the classic 0.075 ms), decode
  // attention unchanged 1.840 ms, LM head 0.370 ms, host 0.628 ms. Total 8.784 ms, 1.1 % under
  // the classic 8.881 ms.
  const StepCostBreakdown d = cm.breakdown(decode_plan(32, 1024));
  EXPECT_NEAR(d.gemm * 1e3, 5.514, 0.0005);
  EXPECT_GT(d.gemm, 32 * 4 * 5.11e-6 + 14'101'250'048.0 / (3.35e12 * 0.907));
  EXPECT_NEAR(d.elementwise * 1e3, 0.431, 0.0005);
  EXPECT_DOUBLE_EQ(d.decode_attention, classic.breakdown(decode_plan(32, 1024)).decode_attention);
  EXPECT_NEAR(d.lm_head * 1e3, 0.370, 0.0005);
  EXPECT_NEAR(d.overhead, 500e-6 + 32 * 4e-6, 1e-12);
  EXPECT_EQ(cm.step_time(decode_plan(32, 1024)), 8'784'342);
  EXPECT_LT(cm.step_time(decode_plan(32, 1024)), classic.step_time(decode_plan(32, 1024)));
  // Batch 1: 6.582 ms (classic 6.962 ms): the weights stream at the fitted GEMM bandwidth.
  EXPECT_EQ(cm.step_time(decode_plan(1, 1024)), 6'582'474);
  EXPECT_NEAR(static_cast<double>(classic.step_time(decode_plan(1, 1024))) / 1e6, 6.962, 0.0005);
  // Prefill, one 2048-token prompt: GEMMs 40.587 ms (compute-bound at 0.792 of peak, against
  // 44.470 ms at 0.65), elementwise 7.722 ms (classic 4.822 ms), attention 2.781 ms, LM head
  // 0.351 ms, host 0.504 ms. Total 51.945 ms, 2.0 % under the classic 53.021 ms.
  const StepCostBreakdown p = cm.breakdown(prefill_plan(0, 2048, true));
  EXPECT_NEAR(p.gemm * 1e3, 40.587, 0.0005);
  EXPECT_NEAR(p.elementwise * 1e3, 7.722, 0.0005);
  EXPECT_NEAR(p.prefill_attention * 1e3, 2.781, 0.0005);
  EXPECT_NEAR(p.lm_head * 1e3, 0.351, 0.0005);
  EXPECT_NEAR(p.overhead, 504e-6, 1e-12);
  EXPECT_EQ(cm.step_time(prefill_plan(0, 2048, true)), 51'945'489);
  EXPECT_NEAR(static_cast<double>(classic.step_time(prefill_plan(0, 2048, true))) / 1e6, 53.021,
              0.0005);
  // Elementwise: 5.7x the classic time at 32 tokens, 1.6x at 2,048.
  EXPECT_NEAR(d.elementwise / classic.breakdown(decode_plan(32, 1024)).elementwise, 5.7, 0.05);
  EXPECT_NEAR(p.elementwise / classic.breakdown(prefill_plan(0, 2048, true)).elementwise, 1.6,
              0.05);
  // The largest differences are at a few hundred tokens: 256 tokens 10.70 ms, classic 8.08 ms.
  EXPECT_NEAR(static_cast<double>(cm.step_time(prefill_plan(0, 256, true))) / 1e6, 10.70, 0.005);
  EXPECT_NEAR(static_cast<double>(classic.step_time(prefill_plan(0, 256, true))) / 1e6, 8.08,
              0.005);
}

TEST(MemoTable, ComputesAnEntryOnlyWhenFirstRead) {
  MemoTable table(8);
  int calls = 0;
  const auto square = [&calls](std::int64_t i) {
    ++calls;
    return static_cast<double>(i * i);
  };
  EXPECT_EQ(table.size(), 8);
  EXPECT_TRUE(table.holds(0));
  EXPECT_TRUE(table.holds(7));
  EXPECT_FALSE(table.holds(8));
  EXPECT_FALSE(table.holds(-1));
  EXPECT_EQ(calls, 0);  // nothing computed up front
  EXPECT_EQ(table.get(5, square), 25.0);
  EXPECT_EQ(table.get(5, square), 25.0);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(table.get(0, square), 0.0);  // 0 is a value, not "empty"
  EXPECT_EQ(table.get(0, square), 0.0);
  EXPECT_EQ(calls, 2);
  // A negative result is returned as it is, only not kept.
  EXPECT_EQ(table.get(3, [](std::int64_t) { return -2.0; }), -2.0);
  EXPECT_EQ(table.get(3, square), 9.0);
  EXPECT_EQ(table.get(8, square), 64.0);  // outside the table: computed each time
  EXPECT_EQ(table.get(8, square), 64.0);
  EXPECT_EQ(table.get(-2, square), 4.0);
  EXPECT_EQ(calls, 6);
  MemoTable moved = std::move(table);
  EXPECT_EQ(moved.get(5, square), 25.0);
  EXPECT_EQ(calls, 6);
}

// The roofline's tables are filled as steps read them: a step's time must not depend on which
// steps were priced before it, on which model object prices it, or on threads sharing the model.
TEST(CostModelRoofline, StepTimesDoNotDependOnWhatWasPricedBefore) {
  ModelConfig moe = load_model("Qwen3-30B-A3B", catalog());
  moe.router_skew = 1.0;  // experts_touched is a sum over the experts, tabulated too
  const HardwareConfig h100 = load_hardware("H100-SXM", catalog());
  for (const ModelConfig& model : {load_model("Llama-3-8B", catalog()), moe}) {
    std::vector<StepPlan> plans;
    for (std::int32_t n : {1, 2, 17, 512, 4096, 16384, 16385, 20000}) {
      plans.push_back(prefill_plan(0, n, true));  // beyond 16,384 tokens: computed, not tabled
    }
    for (int batch : {1, 8, 64, 4096, 4097}) plans.push_back(decode_plan(batch, 1000));
    const RooflineCostModel forward(model, h100, 16), backward(model, h100, 16);
    std::vector<TimeNs> first(plans.size()), second(plans.size());
    for (std::size_t i = 0; i < plans.size(); ++i) first[i] = forward.step_time(plans[i]);
    for (std::size_t i = plans.size(); i-- > 0;) second[i] = backward.step_time(plans[i]);
    EXPECT_EQ(first, second) << model.name;
    for (std::size_t i = 0; i < plans.size(); ++i) {  // read again, now from the tables
      EXPECT_EQ(forward.step_time(plans[i]), first[i]) << model.name << " plan " << i;
    }
    // Four threads on one fresh model, each in its own order.
    const RooflineCostModel shared(model, h100, 16);
    std::vector<std::vector<TimeNs>> seen(4, std::vector<TimeNs>(plans.size()));
    std::vector<std::thread> threads;
    for (std::size_t k = 0; k < seen.size(); ++k) {
      threads.emplace_back([&, k] {
        for (std::size_t j = 0; j < plans.size(); ++j) {
          const std::size_t i = (j * 5 + k * 3) % plans.size();  // 5 is prime to 13 plans
          seen[k][i] = shared.step_time(plans[i]);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const std::vector<TimeNs>& s : seen) EXPECT_EQ(s, first) << model.name;
  }
}

TEST(CostModelRoofline, MoreWorkIsNeverFaster) {
  const RooflineCostModel cm(load_model("Llama-3-8B", catalog()),
                             load_hardware("H100-SXM", catalog()), 16);
  TimeNs prev = 0;
  for (std::int32_t n = 1; n <= 8192; n += 37) {  // longer prefill chunks
    const TimeNs t = cm.step_time(prefill_plan(0, n, true));
    EXPECT_GE(t, prev) << "chunk " << n;
    prev = t;
  }
  prev = 0;
  for (int batch = 1; batch <= 512; ++batch) {  // more decode sequences
    const TimeNs t = cm.step_time(decode_plan(batch, 2048));
    EXPECT_GE(t, prev) << "batch " << batch;
    prev = t;
  }
  prev = 0;
  for (std::int32_t ctx = 1; ctx <= 32768; ctx += 101) {  // longer contexts
    const TimeNs t = cm.step_time(decode_plan(16, ctx));
    EXPECT_GE(t, prev) << "context " << ctx;
    prev = t;
  }
  // A mixed step is at least as slow as either of its parts.
  StepPlan mixed = decode_plan(64, 1000);
  mixed.requests.push_back(entry(256, 512, true, false));
  mixed.num_prefill_tokens = 512;
  EXPECT_GE(cm.step_time(mixed), cm.step_time(decode_plan(64, 1000)));
  EXPECT_GE(cm.step_time(mixed), cm.step_time(prefill_plan(256, 512, false)));
}

TEST(CostModelRoofline, FeaturesFromPlan) {
  StepPlan plan = decode_plan(3, 10);                 // pairs 10 each, context 10 each
  plan.requests.push_back(entry(4, 3, true, false));  // pairs 3*4 + 3*4/2 = 18, context 7
  plan.requests.push_back(entry(0, 5, true, true));   // pairs 15, context 5
  plan.swap_in = {{1, 2}};
  plan.copies = {{3, 4}, {5, 6}};
  const StepFeatures f = StepFeatures::from_plan(plan);
  EXPECT_EQ(f.num_tokens, 11);
  EXPECT_EQ(f.decode_tokens, 3);
  EXPECT_EQ(f.decode_pairs, 30);
  EXPECT_EQ(f.decode_context_tokens, 30);
  EXPECT_EQ(f.prefill_tokens, 8);
  EXPECT_EQ(f.prefill_pairs, 33);
  EXPECT_EQ(f.prefill_context_tokens, 12);
  EXPECT_EQ(f.num_sampled, 4);
  EXPECT_EQ(f.swap_in_blocks, 1);
  EXPECT_EQ(f.swap_out_blocks, 0);
  EXPECT_EQ(f.copy_blocks, 2);

  // A Scheduler plan carries its totals; the features are the same with or without them.
  StepPlan with_totals = plan;
  with_totals.num_prefill_tokens = 8;  // kept by the Scheduler too
  with_totals.num_decode_tokens = 3;
  with_totals.totals = {.valid = true,
                        .decode_context_tokens = 30,
                        .prefill_pairs = 33,
                        .prefill_context_tokens = 12,
                        .num_sampled = 4};
  const StepFeatures g = StepFeatures::from_plan(with_totals);
  EXPECT_EQ(g.num_tokens, f.num_tokens);
  EXPECT_EQ(g.decode_tokens, f.decode_tokens);
  EXPECT_EQ(g.decode_pairs, f.decode_pairs);
  EXPECT_EQ(g.decode_context_tokens, f.decode_context_tokens);
  EXPECT_EQ(g.prefill_tokens, f.prefill_tokens);
  EXPECT_EQ(g.prefill_pairs, f.prefill_pairs);
  EXPECT_EQ(g.prefill_context_tokens, f.prefill_context_tokens);
  EXPECT_EQ(g.num_sampled, f.num_sampled);
  StepPlan cleared = with_totals;
  cleared.clear();
  EXPECT_FALSE(cleared.totals.valid);
}

// The simulator reuses one StepResult for every step: execute_into must overwrite all of it.
TEST(CostModelRoofline, SimBackendExecuteIntoOverwritesAReusedResult) {
  const RooflineCostModel cm(easy_model(), easy_hardware(), 10);
  SimBackend backend(cm);
  StepPlan big = decode_plan(5, 100);
  big.requests[0].num_samples = 4;
  big.num_fork_tokens = 3;
  StepResult reused;
  backend.execute_into(big, reused);
  EXPECT_EQ(reused.sampled_tokens.size(), 5u);
  EXPECT_EQ(reused.fork_tokens.size(), 3u);
  reused.sampled_tokens.assign(5, 42);
  const StepPlan small = decode_plan(2, 300);
  backend.execute_into(small, reused);
  const StepResult fresh = backend.execute(small);
  EXPECT_EQ(reused.duration_ns, fresh.duration_ns);
  EXPECT_EQ(reused.duration_ns, std::max<TimeNs>(1, cm.step_time(small)));
  EXPECT_EQ(reused.sampled_tokens, fresh.sampled_tokens);
  EXPECT_EQ(reused.sampled_tokens, std::vector<std::int32_t>(2, 0));
  EXPECT_TRUE(reused.fork_tokens.empty());
}

// Every step's duration goes through seconds_to_ns: it must round exactly as std::llround does.
TEST(CostModelRoofline, SecondsToNsRoundsLikeLlround) {
  std::vector<double> xs = {0.0,
                            0.5,
                            1.5,
                            2.5,
                            -0.5,
                            -1.5,
                            0.49999999999999994,
                            1e-9,
                            2.5e-9,
                            0x1p52 / 1e9,
                            (0x1p53 + 2) / 1e9,
                            -0x1p52 / 1e9,
                            0x1p61 / 1e9,
                            123456.4999999,
                            7.000000000000001};
  Rng rng(9);
  for (int i = 0; i < 20000; ++i) {
    xs.push_back(rng.uniform(-1e4, 1e4));
    // Exact halves of nanoseconds, in seconds.
    xs.push_back((static_cast<double>(rng.uniform_int(0, 1'000'000'000)) + 0.5) / 1e9);
  }
  for (const double s : xs) {
    EXPECT_EQ(seconds_to_ns(s), static_cast<TimeNs>(std::llround(s * 1e9))) << s;
  }
  // Past the simulated clock's horizon (2^62 ns), and for infinities and NaN, it saturates
  // instead of wrapping (llround's value there is unspecified), so a step that long reaches
  // the event queue's check.
  for (const double s : {0x1p63 / 1e9, 1e300, HUGE_VAL, std::nan("")}) {
    EXPECT_EQ(seconds_to_ns(s), kTimeHorizonNs) << s;
  }
  for (const double s : {-0x1p63 / 1e9, -1e300, -HUGE_VAL}) {
    EXPECT_EQ(seconds_to_ns(s), -kTimeHorizonNs) << s;
  }
  EXPECT_EQ(add_saturated(kTimeHorizonNs, kTimeHorizonNs), kTimeHorizonNs);
  EXPECT_EQ(add_saturated(kTimeHorizonNs - 5, 3), kTimeHorizonNs - 2);
}

TEST(CostModelCatalog, HuggingFaceConfigJson) {
  const fs::path dir = temp_dir("hf") / "Meta-Llama-3-8B";
  fs::create_directories(dir);
  write_file(dir / "config.json", R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_scaling": null, "rope_theta": 500000.0, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "vocab_size": 128256})");
  const ModelConfig from_file = load_model((dir / "config.json").string(), catalog());
  const ModelConfig from_dir = load_model(dir.string(), catalog());
  const ModelConfig cat = load_model("Llama-3-8B", catalog());
  for (const ModelConfig* m : {&from_file, &from_dir}) {
    EXPECT_EQ(m->name, "Meta-Llama-3-8B");
    EXPECT_EQ(m->num_layers, cat.num_layers);
    EXPECT_EQ(m->hidden_size, cat.hidden_size);
    EXPECT_EQ(m->num_heads, cat.num_heads);
    EXPECT_EQ(m->num_kv_heads, cat.num_kv_heads);
    EXPECT_EQ(m->head_dim, 128);  // defaulted: 4096 / 32
    EXPECT_EQ(m->intermediate_size, cat.intermediate_size);
    EXPECT_EQ(m->vocab_size, cat.vocab_size);
    EXPECT_EQ(m->dtype, "bf16");
    EXPECT_EQ(m->rope_theta, 500000.0);
    EXPECT_EQ(m->max_position_embeddings, 8192);
    EXPECT_EQ(m->rms_norm_eps, 1e-5);
    EXPECT_FALSE(m->qkv_bias);
    EXPECT_EQ(m->num_params(), cat.num_params());
  }

  // A key twice: refused, naming it (JSON readers keep one of the two without a word).
  const fs::path twice = temp_dir("hf_twice") / "config.json";
  write_file(twice, R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
    "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256,
    "hidden_size": 128})");
  expect_config_error([&] { load_model(twice.string(), catalog()); },
                      {"config.json", "key \"hidden_size\" appears twice"});

  // Widths each in range whose products overflow the 64-bit counts (parameters, weight and KV
  // bytes) are refused, naming the file.
  const fs::path huge = temp_dir("hf_huge") / "config.json";
  write_file(huge, R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1024,
    "hidden_size": 1048576, "num_attention_heads": 1048576, "num_key_value_heads": 1048576,
    "head_dim": 1048576, "intermediate_size": 1048576, "vocab_size": 256})");
  expect_config_error([&] { load_model(huge.string(), catalog()); },
                      {"config.json", "parameters, more than the 1e15"});
  const fs::path wide_kv = temp_dir("hf_kv") / "config.json";
  write_file(wide_kv, R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1024,
    "hidden_size": 64, "num_attention_heads": 64, "head_dim": 16384, "intermediate_size": 128,
    "vocab_size": 256})");
  expect_config_error([&] { load_model(wide_kv.string(), catalog()); },
                      {"config.json", "bytes a token in fp32, more than the 1e8"});

  // Qwen2 implies q/k/v biases; num_key_value_heads defaults to the head count; float16.
  const fs::path qwen = temp_dir("hf_qwen") / "qwen.json";
  write_file(qwen, R"({"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 2,
    "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256,
    "torch_dtype": "float16", "tie_word_embeddings": true,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})");
  const ModelConfig q = load_model(qwen.string(), catalog());
  EXPECT_EQ(q.name, "qwen");
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_EQ(q.num_kv_heads, 4);
  EXPECT_EQ(q.head_dim, 16);
  EXPECT_EQ(q.dtype, "fp16");
  EXPECT_TRUE(q.tie_word_embeddings);
  EXPECT_EQ(q.rms_norm_eps, 1e-6);
  EXPECT_EQ(q.rope_theta, 1e6);
}

TEST(CostModelCatalog, HuggingFaceConfigErrorsNameTheKey) {
  const fs::path dir = temp_dir("hf_bad");
  const fs::path bad_type = dir / "bad_type.json";
  write_file(bad_type, R"({"num_hidden_layers": "thirty-two", "hidden_size": 64,
    "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256})");
  expect_config_error([&] { load_model(bad_type.string(), catalog()); },
                      {bad_type.string(), "num_hidden_layers", "thirty-two"});
  const fs::path missing = dir / "missing.json";
  write_file(missing, R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
    "intermediate_size": 128})");
  expect_config_error([&] { load_model(missing.string(), catalog()); }, {"vocab_size", "missing"});
  const fs::path mla = dir / "mla.json";
  write_file(mla, R"({"architectures": ["DeepseekV3ForCausalLM"]})");
  expect_config_error([&] { load_model(mla.string(), catalog()); },
                      {"architectures", "DeepseekV3ForCausalLM", "LlamaForCausalLM"});
  const fs::path gqa = dir / "gqa.json";
  write_file(gqa, R"({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 3, "intermediate_size": 128, "vocab_size": 256})");
  expect_config_error([&] { load_model(gqa.string(), catalog()); }, {"num_key_value_heads"});
  expect_config_error([&] { load_model((dir / "absent.json").string(), catalog()); },
                      {"absent.json", "cannot open"});
}

TEST(CostModelCatalog, UnknownNameListsTheCatalogue) {
  expect_config_error([] { load_model("Llama-4-400B", catalog()); },
                      {"unknown model 'Llama-4-400B'", "Llama-2-7B", "Llama-3-8B", "Llama-3-70B",
                       "Mistral-7B", "Qwen2-7B", "tiny", "config.json"});
  // Names are case-sensitive.
  expect_config_error([] { load_model("llama-3-8b", catalog()); }, {"unknown model"});
  expect_config_error([] { load_hardware("B200", catalog()); },
                      {"unknown hardware 'B200'", "A100-80GB", "H100-SXM", "H200", "L40S"});
}

TEST(CostModelCatalog, MalformedCatalogueFileNamesFileLineAndKey) {
  const fs::path dir = temp_dir("bad_catalog");
  fs::create_directories(dir / "models");
  fs::create_directories(dir / "hardware");
  // A typo on line 3.
  write_file(dir / "models" / "typo.yaml",
             "num_layers: 2\nhidden_size: 64\nhidden_sise: 64\nnum_heads: 4\n");
  expect_config_error([&] { load_model("typo", dir.string()); }, {"typo.yaml:3:", "hidden_sise"});
  // A KV head count that does not divide the head count.
  write_file(dir / "models" / "gqa.yaml",
             "num_layers: 2\nhidden_size: 64\nnum_heads: 4\nnum_kv_heads: 3\nhead_dim: 16\n"
             "intermediate_size: 128\nvocab_size: 256\n");
  expect_config_error([&] { load_model("gqa", dir.string()); }, {"gqa.yaml:4:", "num_kv_heads"});
  write_file(dir / "models" / "dtype.yaml",
             "num_layers: 2\nhidden_size: 64\nnum_heads: 4\nhead_dim: 16\n"
             "intermediate_size: 128\nvocab_size: 256\ndtype: int4\n");
  expect_config_error([&] { load_model("dtype", dir.string()); }, {"dtype.yaml:7:", "dtype"});
  // Hardware: an efficiency above 1, an unknown efficiency key, tensor parallelism.
  write_file(dir / "hardware" / "eff.yaml",
             "peak_tflops: 100\npeak_tflops_fp32: 10\nhbm_bandwidth_gbps: 1000\n"
             "memory_gib: 16\nhost_link_gbps: 16\nefficiency:\n  gemm_flops: 1.5\n");
  expect_config_error([&] { load_hardware("eff", dir.string()); },
                      {"eff.yaml:7:", "efficiency.gemm_flops"});
  write_file(dir / "hardware" / "key.yaml",
             "peak_tflops: 100\npeak_tflops_fp32: 10\nhbm_bandwidth_gbps: 1000\n"
             "memory_gib: 16\nhost_link_gbps: 16\nefficiency:\n  gemm_flop: 0.5\n");
  expect_config_error([&] { load_hardware("key", dir.string()); }, {"key.yaml:", "gemm_flop"});
  write_file(dir / "hardware" / "tp.yaml",
             "peak_tflops: 100\npeak_tflops_fp32: 10\nhbm_bandwidth_gbps: 1000\n"
             "memory_gib: 16\nhost_link_gbps: 16\ntensor_parallel: 2\n");
  expect_config_error([&] { load_hardware("tp", dir.string()); },
                      {"tp.yaml:6:", "tensor_parallel"});
}

TEST(CostModelCatalog, EveryShippedEntryLoadsAndPredicts) {
  const std::vector<std::string> models = catalog_names(catalog(), "models");
  const std::vector<std::string> hardware = catalog_names(catalog(), "hardware");
  for (const char* want :
       {"Llama-2-7B", "Llama-3-8B", "Llama-3-70B", "Qwen2-7B", "Mistral-7B", "tiny"}) {
    EXPECT_NE(std::find(models.begin(), models.end(), want), models.end()) << want;
  }
  for (const char* want : {"H100-SXM", "H200", "A100-80GB", "L40S"}) {
    EXPECT_NE(std::find(hardware.begin(), hardware.end(), want), hardware.end()) << want;
  }
  for (const std::string& hn : hardware) {
    const HardwareConfig hw = load_hardware(hn, catalog());
    EXPECT_EQ(hw.name, hn);
    EXPECT_NO_THROW(hw.validate());
    for (const std::string& mn : models) {
      const ModelConfig m = load_model(mn, catalog());
      EXPECT_EQ(m.name, mn);
      EXPECT_NO_THROW(m.validate());
      const RooflineCostModel cm(m, hw, 16);
      EXPECT_GT(cm.step_time(decode_plan(8, 512)), 0) << mn << " on " << hn;
      // A model fits where its weights take less than the 0.9 of memory vLLM may use (the 70B
      // model's 141 GB nowhere, Mixtral's 93 GB on the H200 only, Qwen3-30B-A3B's 61 GB not on
      // the 48 GB cards).
      if (static_cast<double>(m.weight_bytes()) > 0.9 * static_cast<double>(hw.memory_bytes)) {
        EXPECT_THROW(compute_kv_capacity(m, hw, {}), ConfigError) << mn << " on " << hn;
      } else {
        EXPECT_GT(compute_kv_capacity(m, hw, {}).num_gpu_blocks, 1000) << mn << " on " << hn;
      }
    }
  }
  // Units: the file's TFLOP/s, GB/s and GiB become FLOP/s, B/s and bytes.
  const HardwareConfig h100 = load_hardware("H100-SXM", catalog());
  EXPECT_DOUBLE_EQ(h100.peak_flops, 989e12);
  EXPECT_DOUBLE_EQ(h100.hbm_bandwidth, 3.35e12);
  EXPECT_EQ(h100.memory_bytes, 80 * (std::int64_t{1} << 30));
  EXPECT_DOUBLE_EQ(h100.host_link_bandwidth, 64e9);
  EXPECT_DOUBLE_EQ(h100.step_overhead_s, 500e-6);
}

TEST(CostModelRoofline, RejectsUnsupportedConfigurations) {
  HardwareConfig tp2 = easy_hardware();
  tp2.tensor_parallel = 2;
  expect_config_error([&] { RooflineCostModel(easy_model(), tp2, 16); }, {"tensor_parallel"});
  expect_config_error([&] { RooflineCostModel(easy_model(), easy_hardware(), 0); }, {"block_size"});
  ModelConfig bad = easy_model();
  bad.num_kv_heads = 3;
  expect_config_error([&] { RooflineCostModel(bad, easy_hardware(), 16); }, {"num_kv_heads"});
  // fp32 models run at the FP32 peak: the prefill GEMM of the easy model takes 10x longer
  // (and moves twice the bytes) at peak_flops_fp32 = 1e11.
  ModelConfig fp32 = easy_model();
  fp32.dtype = "fp32";
  fp32.dtype_bytes = 4;
  const RooflineCostModel cm(fp32, easy_hardware(), 16);
  EXPECT_NEAR(cm.breakdown(prefill_plan(0, 1000, true)).gemm, 1.4, 1e-9);
  EXPECT_EQ(cm.name(), "roofline");
}

}  // namespace
}  // namespace servelab
