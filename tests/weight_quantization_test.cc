// Quantized weights on the CPU executor (engine/weight_quantization.h): fp8 per-tensor codes and
// AWQ int4 groups by hand, what quantize_weights touches and leaves, the accuracy probe
// (engine/weight_quant_probe.h), and `engine run` with model.quantization (the CPU executor runs
// it, the CUDA executor refuses it by name).
#include "engine/weight_quantization.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>

#include "engine/weight_quant_probe.h"
#include "kernels/float_formats.h"
#include "serving/config_node.h"
#include "serving/home.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

// max |W| = 448 gives the scale 1: each weight is its nearest e4m3 value (ties to even).
TEST(WeightQuantization, Fp8PerTensorRoundsToE4m3AfterScaling) {
  RowMatrix w(2, 3);
  w << 448.0f, -3.3f, 0.1f, 17.0f, 0.0f, -448.0f;
  quantize_fp8_per_tensor(w);
  EXPECT_EQ(w(0, 0), 448.0f);
  EXPECT_EQ(w(0, 1), -3.25f);      // 2 x (1 + 5/8) is the nearest code
  EXPECT_EQ(w(0, 2), 0.1015625f);  // 2^-4 x (1 + 5/8)
  EXPECT_EQ(w(1, 0), 16.0f);       // halfway between 16 and 18: the even mantissa
  EXPECT_EQ(w(1, 1), 0.0f);
  EXPECT_EQ(w(1, 2), -448.0f);
  // The scale is per tensor: doubling every weight doubles every result exactly.
  RowMatrix twice(2, 3);
  twice << 896.0f, -6.6f, 0.2f, 34.0f, 0.0f, -896.0f;
  quantize_fp8_per_tensor(twice);
  RowMatrix expected = w * 2.0f;
  EXPECT_EQ(twice, expected);
  RowMatrix zeros = RowMatrix::Zero(2, 2);
  quantize_fp8_per_tensor(zeros);
  EXPECT_EQ(zeros, RowMatrix::Zero(2, 2));
}

// One row of two groups of 128: the first from -1 to 2 in equal steps, the second all 0.5.
TEST(WeightQuantization, AwqInt4GroupsByHand) {
  RowMatrix w(1, 256);
  for (int i = 0; i < 128; ++i) w(0, i) = -1.0f + 3.0f * static_cast<float>(i) / 127.0f;
  for (int i = 128; i < 256; ++i) w(0, i) = 0.5f;
  const RowMatrix before = w;
  quantize_awq_int4(w);
  // Group 1: scale = fp16(3 / 15) = 0.199951171875, zero = round(1 / scale) = 5.
  const float scale = kernels::round_to_format(0.2f, kernels::FloatFormat::kFp16);
  EXPECT_EQ(scale, 0.199951171875f);
  std::set<float> codes;
  for (int i = 0; i < 128; ++i) {
    const float q = w(0, i) / scale + 5.0f;
    EXPECT_EQ(q, std::nearbyint(q)) << i;  // on the group's grid
    EXPECT_GE(q, 0.0f);
    EXPECT_LE(q, 15.0f);
    EXPECT_LE(std::abs(w(0, i) - before(0, i)), scale / 2 + 1e-6f) << i;
    codes.insert(w(0, i));
  }
  EXPECT_EQ(codes.size(), 16u);  // every int4 code is used by an even ramp
  EXPECT_EQ(w(0, 0), -5.0f * scale);
  EXPECT_EQ(w(0, 127), 10.0f * scale);
  // Group 2, range widened to [0, 0.5]: scale fp16(0.5 / 15), zero 0, 0.5 is code 15.
  const float scale2 = kernels::round_to_format(0.5f / 15.0f, kernels::FloatFormat::kFp16);
  for (int i = 128; i < 256; ++i) EXPECT_EQ(w(0, i), 15.0f * scale2) << i;
  // Quantized values are fixed points, and groups do not see each other.
  RowMatrix again = w;
  quantize_awq_int4(again);
  EXPECT_EQ(again, w);
  RowMatrix other = before;
  other(0, 200) = 7.0f;
  quantize_awq_int4(other);
  EXPECT_EQ(other.leftCols(128), w.leftCols(128));
  RowMatrix bad(2, 100);
  bad.setOnes();
  EXPECT_THROW(quantize_awq_int4(bad), std::invalid_argument);
}

LlamaConfig wide_config() {
  LlamaConfig c;
  c.model = load_model("tiny", servelab_home().string() + "/experiments/catalog");
  c.model.hidden_size = 128;
  c.model.num_heads = 8;
  c.model.intermediate_size = 256;
  return c;
}

TEST(WeightQuantization, QuantizeWeightsTouchesOnlyTheProjections) {
  const LlamaWeights plain = LlamaWeights::random(wide_config(), 7, 1);
  for (const char* q : {"fp8", "awq"}) {
    LlamaWeights w = LlamaWeights::random(wide_config(), 7, 1);
    quantize_weights(w, q);
    EXPECT_EQ(w.embed_tokens, plain.embed_tokens) << q;
    EXPECT_EQ(w.lm_head, plain.lm_head) << q;
    EXPECT_EQ(w.norm, plain.norm) << q;
    for (std::size_t l = 0; l < w.layers.size(); ++l) {
      const LlamaLayerWeights &a = w.layers[l], &b = plain.layers[l];
      EXPECT_EQ(a.input_layernorm, b.input_layernorm);
      EXPECT_EQ(a.post_attention_layernorm, b.post_attention_layernorm);
      for (auto [x, y] : {std::pair{&a.q_proj, &b.q_proj},
                          {&a.k_proj, &b.k_proj},
                          {&a.v_proj, &b.v_proj},
                          {&a.o_proj, &b.o_proj},
                          {&a.gate_proj, &b.gate_proj},
                          {&a.up_proj, &b.up_proj},
                          {&a.down_proj, &b.down_proj}}) {
        EXPECT_NE(*x, *y) << q << " layer " << l;
        // Close: fp8 keeps 3 mantissa bits (relative error <= 1/16 away from the subnormals),
        // int4 16 levels per group.
        EXPECT_LT((*x - *y).norm(), (std::string(q) == "fp8" ? 0.05 : 0.2) * y->norm())
            << q << " layer " << l;
      }
    }
    // Deterministic.
    LlamaWeights again = LlamaWeights::random(wide_config(), 7, 1);
    quantize_weights(again, q);
    EXPECT_EQ(again.layers[1].down_proj, w.layers[1].down_proj) << q;
  }
  // awq_marlin stores the same int4 codes: only the GPU kernel that multiplies them differs.
  LlamaWeights legacy = LlamaWeights::random(wide_config(), 7, 1);
  LlamaWeights marlin = LlamaWeights::random(wide_config(), 7, 1);
  quantize_weights(legacy, "awq");
  quantize_weights(marlin, "awq_marlin");
  EXPECT_EQ(marlin.layers[1].down_proj, legacy.layers[1].down_proj);
  EXPECT_EQ(marlin.layers[0].q_proj, legacy.layers[0].q_proj);
  LlamaWeights none = LlamaWeights::random(wide_config(), 7, 1);
  quantize_weights(none, "none");
  EXPECT_EQ(none.layers[0].q_proj, plain.layers[0].q_proj);
  EXPECT_THROW(quantize_weights(none, "int2"), ConfigError);
  // The tiny model's 64-wide inputs cannot form AWQ's groups of 128.
  LlamaConfig tiny;
  tiny.model = load_model("tiny", servelab_home().string() + "/experiments/catalog");
  LlamaWeights t = LlamaWeights::random(tiny, 7, 1);
  try {
    quantize_weights(t, "awq");
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tiny's q_proj has 64"), std::string::npos) << e.what();
  }
}

// The accuracy probe: no quantization changes nothing; fp8 moves the logits less than int4 does.
TEST(WeightQuantization, ProbeComparesEachFormatWithTheUnquantizedWeights) {
  const LlamaWeights w = LlamaWeights::random(wide_config(), 11, 1);
  KvProbeSetup setup;
  setup.requests = 3;
  setup.decode_tokens = 12;
  const std::vector<KvProbeDifference> d =
      compare_weight_quantizations(w, setup, {"none", "fp8", "awq"});
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].name, "none");
  EXPECT_EQ(d[0].max_abs, 0.0);
  EXPECT_EQ(d[0].differing, 0);
  for (const KvProbeDifference& x : d) {
    EXPECT_EQ(x.steps, 36) << x.name;
    EXPECT_GT(x.max_logit, 1.0) << x.name;
  }
  EXPECT_GT(d[1].max_abs, 0.0);
  EXPECT_GT(d[2].max_abs, d[1].max_abs);
  EXPECT_LT(d[2].max_abs, 0.5 * d[2].max_logit);
  const std::vector<KvProbeDifference> again = compare_weight_quantizations(w, setup, {"awq"});
  EXPECT_EQ(again[0].max_abs, d[2].max_abs);
  EXPECT_EQ(again[0].differing, d[2].differing);
}

// `engine run` with quantized weights: the CPU executor runs them (different logits, so the
// tokens may differ from the unquantized run's), the CUDA executor refuses, naming the key.
TEST(WeightQuantization, EngineRunOnTheCpuExecutor) {
  const fs::path dir = temp_dir("weight_quant_engine");
  write_file(dir / "wide.yaml",
             "name: wide\nnum_layers: 2\nhidden_size: 128\nnum_heads: 8\nnum_kv_heads: 2\n"
             "head_dim: 16\nintermediate_size: 256\nvocab_size: 256\ndtype: fp32\n"
             "tie_word_embeddings: false\nrope_theta: 10000.0\nmax_position_embeddings: 2048\n"
             "rms_norm_eps: 1.0e-5\nqkv_bias: false\n");
  write_file(dir / "e.yaml",
             "name: e\nseed: 3\nmodel: " + (dir / "wide.yaml").string() +
                 "\nhardware: H100-SXM\nserving: {num_gpu_blocks: 64}\n"
                 "workload: {type: synthetic, num_requests: 4, arrival: {process: poisson, "
                 "rate: 50}, prompt_len: {dist: uniform, min: 16, max: 32}, "
                 "output_len: {dist: uniform, min: 4, max: 8}}\n");
  auto engine = [&](const std::string& args, const std::string& out) {
    const std::string cmd = servelab_program("engine") + " run " + (dir / "e.yaml").string() +
                            " --quiet --tokens --out " + (dir / out).string() + " " + args + " > " +
                            (dir / (out + ".out")).string() + " 2> " +
                            (dir / (out + ".err")).string();
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(engine("", "none"), 0) << read_file(dir / "none.err");
  for (const char* q : {"fp8", "awq"}) {
    const std::string name = q;
    ASSERT_EQ(engine("--set model.quantization=" + name, name), 0)
        << read_file(dir / (name + ".err"));
    EXPECT_NE(read_file(dir / name / "config.yaml").find("quantization: " + name),
              std::string::npos);
    EXPECT_FALSE(read_file(dir / name / "tokens.jsonl").empty());
  }
  EXPECT_EQ(engine("--set model.quantization=fp8 --device cuda", "cuda"), 2);
  const std::string err = read_file(dir / "cuda.err");
  EXPECT_NE(err.find("key 'model.quantization'"), std::string::npos) << err;
  EXPECT_NE(err.find("--device cpu"), std::string::npos) << err;
}

}  // namespace
}  // namespace servelab
