// model.kv_cache_dtype and model.quantization in the simulator: the bytes of a KV block and of
// the weights in KV capacity, the bytes the roofline charges, and the experiment keys (parsing,
// --set on `model: NAME`, errors with their location, the echo in config.yaml).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/step_features.h"
#include "serving/config_node.h"
#include "serving/experiment.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/kv_capacity.h"
#include "serving/model_config.h"
#include "sim/roofline_cost_model.h"
#include "tests/cost_fixtures.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

std::string catalog() { return servelab_home().string() + "/experiments/catalog"; }

ModelConfig llama(const std::string& kv = "auto", const std::string& q = "none") {
  ModelConfig m = load_model("Llama-3-8B", catalog());
  m.kv_cache_dtype = kv;
  m.quantization = q;
  return m;
}

HardwareConfig h100() { return load_hardware("H100-SXM", catalog()); }

// Llama-3-8B: 32 layers, 8 KV heads of 128: K and V of a token are 2 * 32 * 1024 elements.
TEST(KvDtypeTest, BytesPerTokenFollowTheKvDtype) {
  EXPECT_EQ(llama().kv_bytes_per_token(), 131072);
  EXPECT_EQ(llama("bf16").kv_bytes_per_token(), 131072);
  EXPECT_EQ(llama("fp16").kv_bytes_per_token(), 131072);
  EXPECT_EQ(llama("fp8").kv_bytes_per_token(), 65536);
  EXPECT_EQ(llama("fp8_e5m2").kv_bytes_per_token(), 65536);
  EXPECT_EQ(llama("fp8").kv_dtype(), "fp8_e4m3");
  EXPECT_EQ(llama().kv_dtype(), "bf16");
  ModelConfig tiny = load_model("tiny", catalog());  // fp32: auto keeps 4 bytes
  EXPECT_EQ(tiny.kv_dtype_bytes(), 4);
  tiny.kv_cache_dtype = "bf16";
  EXPECT_EQ(tiny.kv_dtype_bytes(), 2);
  ModelConfig bad = llama("fp4");
  EXPECT_THROW(bad.validate(), ConfigError);
}

// AWQ, by hand for one Llama-3-8B layer (per group of 128 input rows and column an fp16 scale
// and an int4 zero point, 2.5 B): q and o (4096 x 4096): 8,388,608 packed bytes + 32 groups x
// 4096 columns x 2.5 B = 8,716,288 each; k and v (4096 -> 1024): 2,097,152 + 81,920 = 2,179,072
// each; gate, up (4096 -> 14336) and down (14336 -> 4096): 29,360,128 + 1,146,880 = 30,507,008
// each. Sum 113,311,744 B for 218,103,808 weights: 0.51953 B per weight.
TEST(KvDtypeTest, QuantizedWeightBytes) {
  EXPECT_EQ(llama().linear_weight_bytes_per_layer(), 2 * 218103808);
  EXPECT_EQ(llama("auto", "awq").linear_weight_bytes_per_layer(), 113311744);
  EXPECT_EQ(llama("auto", "fp8").linear_weight_bytes_per_layer(), 218103808 + 7 * 4);
  EXPECT_EQ(llama().weight_bytes(), llama().num_params() * 2);
  EXPECT_EQ(llama().weight_bytes() - llama("auto", "awq").weight_bytes(),
            32LL * (2 * 218103808LL - 113311744LL));
  ModelConfig bad = llama("auto", "gptq");
  EXPECT_THROW(bad.validate(), ConfigError);
}

TEST(KvDtypeTest, Fp8KvDoublesTheBlocks) {
  KvCapacityOptions o;
  o.gpu_memory_utilization = 0.9;
  const KvCapacity bf16 = compute_kv_capacity(llama(), h100(), o);
  const KvCapacity fp8 = compute_kv_capacity(llama("fp8"), h100(), o);
  EXPECT_EQ(fp8.block_bytes * 2, bf16.block_bytes);
  EXPECT_EQ(fp8.kv_bytes, bf16.kv_bytes);  // same memory, half the bytes per block
  EXPECT_EQ(fp8.num_gpu_blocks, fp8.kv_bytes / fp8.block_bytes);
  EXPECT_GE(fp8.num_gpu_blocks, 2 * bf16.num_gpu_blocks);
  EXPECT_LE(fp8.num_gpu_blocks, 2 * bf16.num_gpu_blocks + 1);
  EXPECT_EQ(fp8.num_cpu_blocks, 2 * bf16.num_cpu_blocks);
  // Tensor and pipeline parallelism: each GPU's share halves too.
  o.tensor_parallel = 2;
  o.pipeline_parallel = 2;
  const KvCapacity bf16_p = compute_kv_capacity(llama(), h100(), o);
  const KvCapacity fp8_p = compute_kv_capacity(llama("fp8"), h100(), o);
  EXPECT_EQ(fp8_p.gpu_block_bytes * 2, bf16_p.gpu_block_bytes);
  EXPECT_GE(fp8_p.num_gpu_blocks, 2 * bf16_p.num_gpu_blocks);
  EXPECT_LE(fp8_p.num_gpu_blocks, 2 * bf16_p.num_gpu_blocks + 1);
}

TEST(KvDtypeTest, QuantizedWeightsLeaveMoreRoomForKv) {
  KvCapacityOptions o;
  o.activation_reserve_bytes = std::int64_t{2} << 30;
  const KvCapacity none = compute_kv_capacity(llama(), h100(), o);
  const KvCapacity awq = compute_kv_capacity(llama("auto", "awq"), h100(), o);
  EXPECT_EQ(none.weight_bytes - awq.weight_bytes, 32 * (2 * 218103808LL - 113311744LL));
  EXPECT_EQ(awq.kv_bytes - none.kv_bytes, none.weight_bytes - awq.weight_bytes);
  EXPECT_EQ(awq.num_gpu_blocks, awq.kv_bytes / awq.block_bytes);
  o.tensor_parallel = 2;
  const KvCapacity none2 = compute_kv_capacity(llama(), h100(), o);
  const KvCapacity fp8w2 = compute_kv_capacity(llama("auto", "fp8"), h100(), o);
  EXPECT_GT(fp8w2.num_gpu_blocks, none2.num_gpu_blocks);
  EXPECT_LT(fp8w2.weight_bytes, none2.weight_bytes);
}

StepFeatures decode(std::int64_t batch, std::int64_t context) {
  StepFeatures f;
  f.num_tokens = f.decode_tokens = batch;
  f.decode_pairs = batch * context;
  f.decode_context_tokens = batch * (context - 1);
  f.num_sampled = batch;
  return f;
}

TEST(KvDtypeTest, RooflineChargesTheKvDtypesBytes) {
  const RooflineCostModel bf16(llama(), h100(), 16);
  const RooflineCostModel fp8(llama("fp8"), h100(), 16);
  const StepFeatures f = decode(64, 2048);
  const StepCostBreakdown b = bf16.breakdown(f), e = fp8.breakdown(f);
  // Decode attention reads the context's KV and writes the new token's: 64 x 2048 tokens.
  EXPECT_DOUBLE_EQ(b.bytes - e.bytes, 65536.0 * 64 * 2048);
  // Memory-bound: the attention time nearly halves (Q and O stay in bf16).
  EXPECT_LT(e.decode_attention, 0.51 * b.decode_attention);
  EXPECT_GT(e.decode_attention, 0.49 * b.decode_attention);
  EXPECT_DOUBLE_EQ(e.gemm, b.gemm);
  EXPECT_EQ(fp8.block_bytes() * 2, bf16.block_bytes());
  EXPECT_NEAR(static_cast<double>(fp8.swap_time(1000)), bf16.swap_time(1000) / 2.0, 1.0);
}

TEST(KvDtypeTest, RooflineChargesQuantizedWeights) {
  const RooflineCostModel none(llama(), h100(), 16);
  const RooflineCostModel awq(llama("auto", "awq"), h100(), 16);
  const RooflineCostModel fp8(llama("auto", "fp8"), h100(), 16);
  // Decode is weight-streaming: AWQ reads 0.53 B per weight instead of 2, FP8 1.
  const StepFeatures f = decode(16, 1024);
  const double g = none.breakdown(f).gemm;
  EXPECT_LT(awq.breakdown(f).gemm, 0.5 * g);
  EXPECT_LT(fp8.breakdown(f).gemm, 0.6 * g);
  EXPECT_GT(fp8.breakdown(f).gemm, 0.45 * g);
  EXPECT_DOUBLE_EQ(none.breakdown(f).bytes - awq.breakdown(f).bytes,
                   32.0 * (2 * 218103808.0 - 113311744.0));
  // Dequantization grows with the token tiles of the fused kernel: at 240 tokens AWQ is slower
  // than bf16; from 256 tokens the matrix is dequantized once and multiplied densely, slower
  // than bf16 by the dequantization launch.
  EXPECT_GT(awq.gemm_seconds(240), none.gemm_seconds(240));
  EXPECT_GT(awq.gemm_seconds(4096), none.gemm_seconds(4096));
  EXPECT_LT(awq.gemm_seconds(4096), 1.2 * none.gemm_seconds(4096));
  // Never cheaper with more tokens.
  for (std::int64_t t = 1; t < 600; ++t) {
    ASSERT_LE(awq.gemm_seconds(t), awq.gemm_seconds(t + 1) * (1 + 1e-12)) << t;
  }
}

// awq_marlin (vLLM's default kernel for an AWQ checkpoint): the same packed bytes as the legacy
// kernel, read by a tensor-core GEMM that widens them in registers: a decode reads what AWQ reads,
// and from a few hundred tokens the GEMMs run at bf16's rate, with no dequantization tiles or
// dense launch (the legacy kernel's cost), on either GPU.
TEST(KvDtypeTest, AwqMarlinReadsThePackedBytesAtTheDtypesRate) {
  for (const HardwareConfig& hw : {h100(), load_hardware("A100-80GB", catalog())}) {
    SCOPED_TRACE(hw.name);
    const RooflineCostModel none(llama(), hw, 16);
    const RooflineCostModel legacy(llama("auto", "awq"), hw, 16);
    const RooflineCostModel marlin(llama("auto", "awq_marlin"), hw, 16);
    const StepFeatures f = decode(16, 1024);
    EXPECT_DOUBLE_EQ(marlin.breakdown(f).bytes, legacy.breakdown(f).bytes);
    EXPECT_LT(marlin.breakdown(f).gemm, 0.5 * none.breakdown(f).gemm);
    EXPECT_LE(marlin.breakdown(f).gemm, legacy.breakdown(f).gemm);
    for (const std::int64_t t : {240, 1024, 4096}) {
      SCOPED_TRACE(t);
      EXPECT_LE(marlin.gemm_seconds(t), none.gemm_seconds(t) * (1 + 1e-12));
      EXPECT_LT(marlin.gemm_seconds(t), legacy.gemm_seconds(t));
    }
    // Compute-bound at 4,096 tokens: the bf16 product plus the smaller weight reads.
    EXPECT_GT(marlin.gemm_seconds(4096), 0.9 * none.gemm_seconds(4096));
    for (std::int64_t t = 1; t < 600; ++t) {
      ASSERT_LE(marlin.gemm_seconds(t), marlin.gemm_seconds(t + 1) * (1 + 1e-12)) << t;
    }
  }
}

// FP8 tensor cores (HardwareConfig::peak_flops_fp8): optional in an entry, 0 on Ampere.
TEST(KvDtypeTest, Fp8PeakOfTheHardwareEntries) {
  EXPECT_DOUBLE_EQ(h100().peak_flops_fp8, 1979e12);
  EXPECT_DOUBLE_EQ(load_hardware("H200", catalog()).peak_flops_fp8, 1979e12);
  EXPECT_DOUBLE_EQ(load_hardware("L40S", catalog()).peak_flops_fp8, 733e12);
  EXPECT_FALSE(load_hardware("A100-80GB", catalog()).has_fp8_tensor_cores());
  EXPECT_FALSE(load_hardware("A40", catalog()).has_fp8_tensor_cores());
  const std::filesystem::path dir = test_util::temp_dir("fp8_peak");
  const std::string base =
      "peak_tflops: 1\npeak_tflops_fp32: 1\nhbm_bandwidth_gbps: 1\nmemory_gib: 1\n"
      "host_link_gbps: 1\n";
  for (const char* bad : {"0", "-5", "fast"}) {
    test_util::write_file(dir / "gpu.yaml", base + "peak_tflops_fp8: " + bad + "\n");
    try {
      (void)load_hardware((dir / "gpu.yaml").string(), catalog());
      ADD_FAILURE() << bad << ": expected a ConfigError";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("gpu.yaml:6"), std::string::npos) << msg;
      EXPECT_NE(msg.find("peak_tflops_fp8"), std::string::npos) << msg;
    }
  }
  HardwareConfig hw = h100();
  hw.peak_flops_fp8 = -1;
  EXPECT_THROW(hw.validate(), ConfigError);
}

// model.quantization: fp8 on a GPU with FP8 tensor cores is W8A8 (the GEMMs at the FP8 rate,
// their inputs in one byte); on one without, W8A16 (weights widened in the kernel, the GEMMs
// at the bf16 rate). By hand on the classic roofline (hard max per layer, GEMM efficiency
// 0.65), for Llama-3-8B: 218,103,808 projection weights per layer.
TEST(KvDtypeTest, Fp8WeightsUseFp8TensorCoresWhereTheGpuHasThem) {
  const HardwareConfig hopper = h100().classic_roofline();
  HardwareConfig ampere_like = hopper;  // the same GPU without FP8 tensor cores
  ampere_like.peak_flops_fp8 = 0;
  const RooflineCostModel none(llama(), hopper, 16);
  const RooflineCostModel w8a8(llama("auto", "fp8"), hopper, 16);
  const RooflineCostModel w8a16(llama("auto", "fp8"), ampere_like, 16);
  // A prefill of 8,192 tokens is compute-bound: FP8 halves its GEMM time, W8A16 keeps bf16's.
  const double flops = 2.0 * 8192 * 218103808.0 * 32;
  EXPECT_NEAR(none.gemm_seconds(8192), flops / (989e12 * 0.65), 1e-12);
  EXPECT_NEAR(w8a8.gemm_seconds(8192), flops / (1979e12 * 0.65), 1e-12);
  EXPECT_DOUBLE_EQ(w8a16.gemm_seconds(8192), none.gemm_seconds(8192));
  // One decode token is weight-bound: both read one byte per weight (W8A8 its input too).
  const double h = 4096, q = 4096, kv = 1024, inter = 14336;
  const double weights = 218103808.0 + 4 * 4;  // an fp32 scale per launch's matrix
  const double bw = 3350e9 * 0.7;              // the classic roofline's one bandwidth efficiency
  EXPECT_NEAR(w8a16.gemm_seconds(1), 32 * (weights + (4 * h + 2 * q + 2 * kv + 3 * inter) * 2) / bw,
              1e-15);
  EXPECT_NEAR(w8a8.gemm_seconds(1),
              32 * (weights + (2 * h + q + inter) + (q + 2 * kv + 2 * h + 2 * inter) * 2) / bw,
              1e-15);
  // The bytes a step moves: W8A16 saves the weights' second byte; W8A8 also its GEMM inputs and
  // the norms' and SiLU-mul's outputs (2h + inter), and adds the quantization of the attention
  // output for O (reads q in bf16, writes q bytes): per token and layer 26,624 + 22,528 -
  // 12,288 bytes.
  const StepFeatures f = decode(16, 1024);
  const double weight_saving = 32 * (218103808.0 - 28);
  EXPECT_DOUBLE_EQ(none.breakdown(f).bytes - w8a16.breakdown(f).bytes, weight_saving);
  EXPECT_DOUBLE_EQ(none.breakdown(f).bytes - w8a8.breakdown(f).bytes,
                   weight_saving + 16.0 * 32 * (26624 + 22528 - 12288));
  EXPECT_DOUBLE_EQ(w8a8.breakdown(f).flops, none.breakdown(f).flops);
  // Elementwise time on the classic roofline is bytes over bandwidth: W8A8's 22,528 bytes saved
  // less the quantization launch's 12,288 per token and layer.
  EXPECT_NEAR(w8a16.elementwise_seconds(16) - w8a8.elementwise_seconds(16),
              16.0 * 32 * (22528 - 12288) / bw, 1e-15);
  // On the fitted H100 entry: a long prefill's GEMMs take little more than half of bf16's.
  const RooflineCostModel fitted_none(llama(), h100(), 16);
  const RooflineCostModel fitted_fp8(llama("auto", "fp8"), h100(), 16);
  const double ratio = fitted_fp8.gemm_seconds(8192) / fitted_none.gemm_seconds(8192);
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.6);
  // There a small step pays the quantization launch's floor (3.24 us) in each of 32 layers.
  HardwareConfig fitted_ampere_like = h100();
  fitted_ampere_like.peak_flops_fp8 = 0;
  const RooflineCostModel fitted_w8a16(llama("auto", "fp8"), fitted_ampere_like, 16);
  EXPECT_GT(fitted_fp8.elementwise_seconds(16) - fitted_w8a16.elementwise_seconds(16),
            32 * 3.24e-6 * 0.9);
}

// A mixture of experts under W8A8: its quantized launches (attention, experts) multiply at the
// FP8 rate; the router stays in bf16 and the activations stay in dtype (fused_moe quantizes its
// input in a launch of its own).
TEST(KvDtypeTest, Fp8MixtureOfExpertsMultipliesAtTheFp8Rate) {
  ModelConfig moe = load_model("Qwen3-30B-A3B", catalog());
  moe.quantization = "fp8";
  HardwareConfig ampere_like = h100();
  ampere_like.peak_flops_fp8 = 0;
  const RooflineCostModel w8a8(moe, h100(), 16);
  const RooflineCostModel w8a16(moe, ampere_like, 16);
  EXPECT_LT(w8a8.gemm_seconds(8192), 0.7 * w8a16.gemm_seconds(8192));
  EXPECT_LE(w8a8.gemm_seconds(1), w8a16.gemm_seconds(1));
  EXPECT_GT(w8a8.gemm_seconds(1), 0.95 * w8a16.gemm_seconds(1));
  const StepFeatures f = decode(8, 512);
  EXPECT_DOUBLE_EQ(w8a8.breakdown(f).bytes, w8a16.breakdown(f).bytes);
  EXPECT_DOUBLE_EQ(w8a8.elementwise_seconds(8), w8a16.elementwise_seconds(8));
}

constexpr const char* kExperiment = R"(name: kv
model:
  name: Llama-3-8B
  kv_cache_dtype: fp8
  quantization: awq
hardware: H100-SXM
workload: {type: synthetic, num_requests: 10}
)";

TEST(KvDtypeTest, ExperimentKeys) {
  const ExperimentConfig c = load_experiment_text(kExperiment, "kv.yaml", ".", "kv", {});
  EXPECT_EQ(c.model, "Llama-3-8B");
  ASSERT_TRUE(c.kv_cache_dtype && c.quantization);
  EXPECT_EQ(*c.kv_cache_dtype, "fp8");
  EXPECT_EQ(*c.quantization, "awq");
  ModelConfig m = load_model(c.model, catalog());
  apply_model_storage(c, m);
  EXPECT_EQ(m.kv_dtype_bytes(), 1);
  EXPECT_EQ(m.quantization, "awq");
  const std::string yaml = resolved_config_yaml(c, {});
  EXPECT_NE(yaml.find("model:\n  name: Llama-3-8B\n  kv_cache_dtype: fp8\n  quantization: awq\n"),
            std::string::npos)
      << yaml;
  // The echo loads back to the same choices.
  const ExperimentConfig again = load_experiment_text(yaml, "echo.yaml", ".", "kv", {});
  EXPECT_EQ(*again.kv_cache_dtype, "fp8");
  EXPECT_EQ(*again.quantization, "awq");
}

TEST(KvDtypeTest, SetOnAModelName) {
  const std::string plain =
      "model: Llama-3-8B\nhardware: H100-SXM\nworkload: {type: synthetic, num_requests: 10}\n";
  const ExperimentConfig d = load_experiment_text(plain, "p.yaml", ".", "p", {});
  EXPECT_FALSE(d.kv_cache_dtype || d.quantization);
  EXPECT_NE(resolved_config_yaml(d, {}).find("\nmodel: Llama-3-8B\n"), std::string::npos);
  const ExperimentConfig c = load_experiment_text(
      plain, "p.yaml", ".", "p", {"model.kv_cache_dtype=fp8_e5m2", "model.quantization=fp8"});
  EXPECT_EQ(c.model, "Llama-3-8B");
  EXPECT_EQ(*c.kv_cache_dtype, "fp8_e5m2");
  EXPECT_EQ(*c.quantization, "fp8");
  const ExperimentConfig n = load_experiment_text(plain, "p.yaml", ".", "p", {"model.name=tiny"});
  EXPECT_EQ(n.model, "tiny");
}

void expect_error(const std::string& text, const std::vector<std::string>& overrides,
                  const std::vector<std::string>& parts) {
  try {
    (void)load_experiment_text(text, "e.yaml", ".", "e", overrides);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
  }
}

TEST(KvDtypeTest, ErrorsNameThePlace) {
  std::string bad = kExperiment;
  bad.replace(bad.find("fp8"), 3, "fp4");
  expect_error(bad, {}, {"e.yaml:4:", "model.kv_cache_dtype", "fp8_e4m3"});
  bad = kExperiment;
  bad.replace(bad.find("awq"), 3, "gptq");
  expect_error(bad, {}, {"e.yaml:5:", "model.quantization", "awq"});
  bad = kExperiment;
  bad.replace(bad.find("  quantization"), 0, "  kv_dtype: fp8\n");
  expect_error(bad, {}, {"e.yaml:5:", "kv_dtype"});
  expect_error(kExperiment, {"model.quantization=int2"}, {"--set model.quantization", "none"});
  const std::string plain =
      "model: Llama-3-8B\nhardware: H100-SXM\nworkload: {type: synthetic, num_requests: 10}\n";
  expect_error(plain, {"model.kv_cache_dtype=fp4"}, {"--set model.kv_cache_dtype", "fp8_e5m2"});
  expect_error("model: {kv_cache_dtype: fp8}\nhardware: H100-SXM\nworkload: {}\n", {},
               {"e.yaml:1:", "name"});
}

// The real commands: `--set model.X` on a shipped experiment, a bad value (exit 2, naming the
// key), the engine refusing AWQ on the tiny model (its 64-wide inputs cannot form groups of 128;
// tests/weight_quantization_test.cc runs the engine on quantized weights).
TEST(KvDtypeTest, Commands) {
  using namespace test_util;
  const fs::path dir = temp_dir("kv_dtype_cli");
  const std::string exp = servelab_home().string() + "/experiments/burst.yaml";
  const std::string few = " --set workload.num_requests=50 --quiet --out ";
  Cli r = run_sim("run " + exp + " --set model.kv_cache_dtype=fp8 --set model.quantization=awq" +
                      few + (dir / "fp8").string(),
                  dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string config = read_file(dir / "fp8" / "config.yaml");
  EXPECT_NE(config.find("model:\n  name: Llama-3-8B\n  kv_cache_dtype: fp8\n  quantization: awq"),
            std::string::npos)
      << config;
  r = run_sim("run " + exp + " --set model.kv_cache_dtype=fp4" + few + (dir / "bad").string(), dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--set model.kv_cache_dtype"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "bad"));
  const std::string tiny = servelab_home().string() + "/experiments/burst-tiny.yaml";
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = servelab_program("engine") + " run " + tiny +
                          " --set model.quantization=awq --out " + (dir / "e").string() + " > " +
                          out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 2);
  EXPECT_NE(read_file(err).find("model.quantization"), std::string::npos) << read_file(err);
  // The simulator refuses the same (vLLM's AWQ layers need inputs in whole groups of 128), and
  // a tensor shard whose down_proj input (Llama-2-7B: 11008 / 4 = 2752) is not whole groups.
  r = run_sim(
      "run " + tiny + " --set model.quantization=awq_marlin" + few + (dir / "tiny-awq").string(),
      dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--set model.quantization: key 'model.quantization': awq_marlin needs every "
                       "projection's input width to be a multiple of 128"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("hidden_size (the input of q/k/v and gate/up) is 64"), std::string::npos)
      << r.err;
  r = run_sim("run " + exp +
                  " --set model=Llama-2-7B --set model.quantization=awq --set parallel.tensor=4" +
                  few + (dir / "tp4").string(),
              dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("intermediate_size (the input of down_proj) is 2752"), std::string::npos)
      << r.err;
  EXPECT_TRUE(run_sim("run " + exp +
                          " --set model=Llama-2-7B --set model.quantization=awq "
                          "--set parallel.tensor=2 --set serving.max_model_len=4096" +
                          few + (dir / "tp2").string(),
                      dir)
                  .code == 0);
  EXPECT_FALSE(fs::exists(dir / "tiny-awq"));
  EXPECT_FALSE(fs::exists(dir / "tp4"));
}

// A quantized checkpoint's config.json (quantization_config) is served as vLLM serves it: AWQ
// int4 in groups of 128 under awq_marlin, fp8 as fp8; another method or shape is refused rather
// than priced as the unquantized model.
TEST(KvDtypeTest, HfQuantizationConfigIsRead) {
  const std::filesystem::path dir = test_util::temp_dir("hf_quant");
  const std::string base =
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
          "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
          "vocab_size": 128256, "torch_dtype": "float16", "max_position_embeddings": 8192)";
  const auto load = [&](const std::string& name, const std::string& quant) {
    std::filesystem::create_directories(dir / name);
    test_util::write_file(
        dir / name / "config.json",
        base + (quant.empty() ? "" : ", \"quantization_config\": " + quant) + "}");
    return load_model((dir / name / "config.json").string(), catalog());
  };
  EXPECT_EQ(load("plain", "").quantization, "none");
  const ModelConfig awq =
      load("awq", R"({"bits": 4, "group_size": 128, "quant_method": "awq", "zero_point": true})");
  EXPECT_EQ(awq.quantization, "awq_marlin");
  EXPECT_EQ(awq.linear_weight_bytes_per_layer(), 113311744);
  EXPECT_EQ(load("fp8", R"({"quant_method": "fp8"})").quantization, "fp8");
  test_util::expect_config_error([&] { load("gptq", R"({"bits": 4, "quant_method": "gptq"})"); },
                                 {"config.json", "quantization_config", "'gptq' is not modelled"});
  test_util::expect_config_error(
      [&] { load("awq3", R"({"bits": 3, "group_size": 128, "quant_method": "awq"})"); },
      {"quantization_config", "bits 3", "not modelled"});
  std::filesystem::remove_all(dir);
}

// The legacy AWQ kernel's dense path (from 256 tokens) writes each matrix out in the dtype and
// reads it back: its bytes count in the step's work (MBU, energy), not only in its time.
TEST(KvDtypeTest, LegacyAwqDenseStepsCountTheirDequantizedBytes) {
  const RooflineCostModel legacy(llama("auto", "awq"), h100(), 16);
  const RooflineCostModel marlin(llama("auto", "awq_marlin"), h100(), 16);
  StepFeatures f;
  for (const std::int64_t t : {255, 256, 4096}) {
    f.num_tokens = f.prefill_tokens = t;
    f.prefill_pairs = t * (t + 1) / 2;
    f.prefill_context_tokens = 0;
    f.num_sampled = 1;
    const double extra = legacy.breakdown(f).bytes - marlin.breakdown(f).bytes;
    EXPECT_DOUBLE_EQ(extra, t < 256 ? 0.0 : 2.0 * 218103808.0 * 2 * 32) << t;
  }
}

}  // namespace
}  // namespace servelab
