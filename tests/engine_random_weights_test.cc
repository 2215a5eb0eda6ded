// LlamaWeights::random and the counter-based generator behind it (kernels/counter_normal.h):
// deterministic, independent of the thread count, the documented mean and scale per tensor, and
// distinct streams for distinct tensors and seeds. (The GPU side, that the CUDA executor's
// device-generated weights equal these rounded to bf16, is GpuExecutor.
// DeviceGeneratedWeightsEqualHostWeights in gpu_executor_test.cc.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "engine/llama_weights.h"
#include "kernels/counter_normal.h"
#include "serving/model_config.h"

namespace servelab {
namespace {

LlamaConfig TinyConfig() { return load_llama_config("tiny", default_catalog_dir()); }

// Bigger than tiny so that per-tensor statistics are tight, small enough to fill in a moment.
LlamaConfig MediumConfig() {
  LlamaConfig c = TinyConfig();
  c.model.hidden_size = 256;
  c.model.num_heads = 4;
  c.model.num_kv_heads = 2;
  c.model.head_dim = 64;
  c.model.intermediate_size = 768;
  c.model.vocab_size = 4096;
  c.model.qkv_bias = true;
  return c;
}

struct Moments {
  double mean = 0, stddev = 0;
};
template <typename X>
Moments MomentsOf(const X& x) {
  double s = 0, ss = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i) s += x.data()[i];
  const double mean = s / static_cast<double>(x.size());
  for (Eigen::Index i = 0; i < x.size(); ++i) ss += (x.data()[i] - mean) * (x.data()[i] - mean);
  return {mean, std::sqrt(ss / static_cast<double>(x.size()))};
}

void ExpectSameWeights(const LlamaWeights& a, const LlamaWeights& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  EXPECT_EQ(a.embed_tokens, b.embed_tokens);
  EXPECT_EQ(a.lm_head, b.lm_head);
  EXPECT_EQ(a.norm, b.norm);
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    const LlamaLayerWeights &x = a.layers[i], &y = b.layers[i];
    EXPECT_EQ(x.q_proj, y.q_proj);
    EXPECT_EQ(x.k_proj, y.k_proj);
    EXPECT_EQ(x.v_proj, y.v_proj);
    EXPECT_EQ(x.o_proj, y.o_proj);
    EXPECT_EQ(x.q_bias, y.q_bias);
    EXPECT_EQ(x.k_bias, y.k_bias);
    EXPECT_EQ(x.v_bias, y.v_bias);
    EXPECT_EQ(x.gate_proj, y.gate_proj);
    EXPECT_EQ(x.up_proj, y.up_proj);
    EXPECT_EQ(x.down_proj, y.down_proj);
    EXPECT_EQ(x.input_layernorm, y.input_layernorm);
    EXPECT_EQ(x.post_attention_layernorm, y.post_attention_layernorm);
  }
}

TEST(RandomWeights, CounterHashIsTheSplitMix64Stream) {
  for (std::uint64_t key : {0ULL, 1ULL, 0xdeadbeefULL, ~0ULL}) {
    for (std::uint64_t i : {0ULL, 1ULL, 2ULL, 1000ULL, 1ULL << 40}) {
      EXPECT_EQ(kernels::counter_hash(key, i), mix64(key + i * 0x9e3779b97f4a7c15ULL));
    }
  }
  EXPECT_DOUBLE_EQ(kernels::kIrwinHall4Std, std::sqrt((65536.0 * 65536.0 - 1) / 3));
  EXPECT_EQ(kernels::irwin_hall4(0), -2 * 65535);
  EXPECT_EQ(kernels::irwin_hall4(~0ULL), 2 * 65535);
}

TEST(RandomWeights, DeterministicAndIndependentOfTheThreadCount) {
  const LlamaConfig c = MediumConfig();
  const LlamaWeights one = LlamaWeights::random(c, 9, 1);
  ExpectSameWeights(one, LlamaWeights::random(c, 9, 1));
  for (int threads : {2, 3, 7, 0}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    ExpectSameWeights(one, LlamaWeights::random(c, 9, threads));
  }
  // The same elements as counter_normal of the documented parameters, wherever they lie.
  const kernels::CounterNormal p =
      random_tensor_params(c.model, 9, "model.layers.1.mlp.down_proj.weight", 768);
  const RowMatrix& down = one.layers[1].down_proj;
  for (std::int64_t i : {std::int64_t{0}, std::int64_t{12345}, down.size() - 1}) {
    EXPECT_EQ(down.data()[i], kernels::counter_normal(p, static_cast<std::uint64_t>(i)));
  }
}

TEST(RandomWeights, EachTensorHasTheDocumentedMeanAndScale) {
  const LlamaConfig c = MediumConfig();
  const LlamaWeights w = LlamaWeights::random(c, 4);
  const double hidden = c.model.hidden_size, inter = c.model.intermediate_size;
  struct Want {
    std::string what;
    Moments got;
    double mean, stddev;
    Eigen::Index n;
  };
  const LlamaLayerWeights& l = w.layers[0];
  const std::vector<Want> wants = {
      {"embed_tokens", MomentsOf(w.embed_tokens), 0.0, 1.0, w.embed_tokens.size()},
      {"lm_head", MomentsOf(w.lm_head), 0.0, 4.0 / std::sqrt(hidden), w.lm_head.size()},
      {"q_proj", MomentsOf(l.q_proj), 0.0, 1.0 / std::sqrt(hidden), l.q_proj.size()},
      {"gate_proj", MomentsOf(l.gate_proj), 0.0, 1.0 / std::sqrt(hidden), l.gate_proj.size()},
      {"down_proj", MomentsOf(l.down_proj), 0.0, 1.0 / std::sqrt(inter), l.down_proj.size()},
      {"input_layernorm", MomentsOf(l.input_layernorm), 1.0, 0.1, l.input_layernorm.size()},
      {"q_bias", MomentsOf(l.q_bias), 0.0, 0.1, l.q_bias.size()},
  };
  for (const Want& x : wants) {
    SCOPED_TRACE(x.what);
    // Five standard errors of the mean; the standard deviation within 5 / sqrt(n) relative
    // (its standard error is about sqrt(0.43 / n) at kurtosis 2.7), with a floor for small n.
    const double n = static_cast<double>(x.n);
    EXPECT_NEAR(x.got.mean, x.mean, 5 * x.stddev / std::sqrt(n));
    EXPECT_NEAR(x.got.stddev / x.stddev, 1.0, std::max(5 / std::sqrt(n), 0.01));
  }
}

TEST(RandomWeights, LargeTensorIsApproximatelyNormal) {
  const kernels::CounterNormal p = kernels::counter_normal_params(0x1234, 0.0, 1.0);
  const std::int64_t n = std::int64_t{1} << 22;
  double s = 0, ss = 0, s4 = 0, within1 = 0, max_abs = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double z = kernels::counter_normal(p, static_cast<std::uint64_t>(i));
    s += z;
    ss += z * z;
    s4 += z * z * z * z;
    within1 += std::fabs(z) < 1.0;
    max_abs = std::max(max_abs, std::fabs(z));
  }
  const double mean = s / n, var = ss / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5.0 / std::sqrt(double(n)));
  EXPECT_NEAR(var, 1.0, 3e-3);
  EXPECT_NEAR(s4 / n, 2.7, 0.02);  // Irwin-Hall(4) kurtosis, 3 - 6/20 (a normal's is 3)
  // P(|z| < 1) is 0.6693 for Irwin-Hall(4) (a normal's is 0.6827).
  EXPECT_NEAR(within1 / n, 0.6693, 0.003);
  EXPECT_LE(max_abs, 2 * 65535 / kernels::kIrwinHall4Std + 1e-6);
  EXPECT_GT(max_abs, 3.0);
}

TEST(RandomWeights, DifferentTensorsAndSeedsDiffer) {
  const LlamaConfig c = MediumConfig();
  const LlamaWeights a = LlamaWeights::random(c, 4), b = LlamaWeights::random(c, 5);
  // Same shapes, different names: uncorrelated streams.
  auto correlation = [](const RowMatrix& x, const RowMatrix& y) {
    const double n = static_cast<double>(x.size());
    const double mx = x.mean(), my = y.mean();
    double sxy = 0, sxx = 0, syy = 0;
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      const double dx = x.data()[i] - mx, dy = y.data()[i] - my;
      sxy += dx * dy;
      sxx += dx * dx;
      syy += dy * dy;
    }
    return std::pair<double, double>{sxy / std::sqrt(sxx * syy), 5 / std::sqrt(n)};
  };
  const std::vector<std::pair<const RowMatrix*, const RowMatrix*>> pairs = {
      {&a.layers[0].k_proj, &a.layers[0].v_proj},     {&a.layers[0].q_proj, &a.layers[1].q_proj},
      {&a.layers[0].gate_proj, &a.layers[0].up_proj}, {&a.embed_tokens, &a.lm_head},
      {&a.layers[0].q_proj, &b.layers[0].q_proj},  // another seed
  };
  for (const auto& [x, y] : pairs) {
    ASSERT_EQ(x->size(), y->size());
    EXPECT_NE(*x, *y);
    const auto [r, bound] = correlation(*x, *y);
    EXPECT_LT(std::fabs(r), bound);
  }
  EXPECT_NE(a.layers[0].input_layernorm, a.layers[0].post_attention_layernorm);
  EXPECT_NE(a.norm, a.layers[1].input_layernorm);
}

}  // namespace
}  // namespace servelab
