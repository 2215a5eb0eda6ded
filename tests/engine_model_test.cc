// The CPU executor against an independent dense implementation written here (no paging, no
// batching, no code shared with the executor besides the weights), and the engine's strongest
// property: scheduling, chunking, preemption and prefix caching never change a greedy answer.
//
// Tolerances:
// - logits: |paged - dense| <= 1e-4 * max(1, max |dense|). Both compute in fp32 with different
//   summation orders (batched GEMMs versus matrix-vector products); the observed error is ~1e-6
//   relative, so 1e-4 catches any real bug (a wrong position, block or head gives O(1) errors).
// - greedy tokens: compared exactly while the dense top-2 logit margin exceeds 1e-3 (a thousand
//   times the fp32 noise above); after a near-tie the rest of that request is not compared, and
//   near-ties must stay rare (below 5% of compared tokens).
#include <gtest/gtest.h>
#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/host_block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/radix_prefix_cache.h"
#include "core/request.h"
#include "core/rng.h"
#include "core/scheduler.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "policies/registry.h"
#include "serving/config_node.h"
#include "serving/home.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

// A prefix cache plugin's maker (comparable, unlike PrefixCacheFactory).
using CacheMaker = decltype(&make_hash_prefix_cache);

constexpr double kLogitRelTol = 1e-4;
constexpr float kTieMargin = 1e-3f;

// ---------------------------------------------------------------------------------------------
// The dense reference: one request, one token at a time, contiguous K/V per layer.
class DenseModel {
 public:
  explicit DenseModel(const LlamaWeights& w) : w_(w), k_(w.layers.size()), v_(w.layers.size()) {
    const ModelConfig& m = w.config.model;
    for (int j = 0; j < m.head_dim / 2; ++j) {
      inv_freq_.push_back(std::pow(m.rope_theta, -2.0 * j / m.head_dim));
    }
  }

  // Feeds `token` at the next position; returns the logits predicting the one after it.
  Eigen::VectorXf Step(std::int32_t token) {
    const ModelConfig& m = w_.config.model;
    const int pos = len_++;
    Eigen::VectorXf x = w_.embed_tokens.row(token).transpose();
    for (std::size_t l = 0; l < w_.layers.size(); ++l) {
      const LlamaLayerWeights& L = w_.layers[l];
      Eigen::VectorXf h = Norm(x, L.input_layernorm);
      Eigen::VectorXf q = L.q_proj * h, k = L.k_proj * h, v = L.v_proj * h;
      if (m.qkv_bias) {
        q += L.q_bias;
        k += L.k_bias;
        v += L.v_bias;
      }
      Rope(q, m.num_heads, pos);
      Rope(k, m.num_kv_heads, pos);
      k_[l].push_back(k);
      v_[l].push_back(v);
      Eigen::VectorXf att = Eigen::VectorXf::Zero(m.q_size());
      const int group = m.num_heads / m.num_kv_heads;
      for (int hq = 0; hq < m.num_heads; ++hq) {
        const int hk = hq / group;
        std::vector<double> s(pos + 1);
        double mx = -1e300;
        for (int p = 0; p <= pos; ++p) {
          s[p] = q.segment(hq * m.head_dim, m.head_dim)
                     .dot(k_[l][p].segment(hk * m.head_dim, m.head_dim)) /
                 std::sqrt(double(m.head_dim));
          mx = std::max(mx, s[p]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int p = 0; p <= pos; ++p) {
          att.segment(hq * m.head_dim, m.head_dim) +=
              float(s[p] / sum) * v_[l][p].segment(hk * m.head_dim, m.head_dim);
        }
      }
      x += L.o_proj * att;
      h = Norm(x, L.post_attention_layernorm);
      const Eigen::VectorXf g = L.gate_proj * h, u = L.up_proj * h;
      Eigen::VectorXf a(g.size());
      for (int i = 0; i < g.size(); ++i) a[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
      x += L.down_proj * a;
    }
    return w_.head() * Norm(x, w_.norm);
  }

 private:
  Eigen::VectorXf Norm(const Eigen::VectorXf& x, const Eigen::VectorXf& weight) const {
    double ss = 0;
    for (int i = 0; i < x.size(); ++i) ss += double(x[i]) * x[i];
    const float r = float(1.0 / std::sqrt(ss / x.size() + w_.config.model.rms_norm_eps));
    return (x * r).cwiseProduct(weight);
  }
  void Rope(Eigen::VectorXf& x, int heads, int pos) const {
    const int d = w_.config.model.head_dim, half = d / 2;
    for (int h = 0; h < heads; ++h) {
      for (int j = 0; j < half; ++j) {
        const float c = float(std::cos(pos * inv_freq_[j])),
                    s = float(std::sin(pos * inv_freq_[j]));
        const float a = x[h * d + j], b = x[h * d + j + half];
        x[h * d + j] = a * c - b * s;  // x * cos + rotate_half(x) * sin
        x[h * d + j + half] = b * c + a * s;
      }
    }
  }

  const LlamaWeights& w_;
  std::vector<double> inv_freq_;
  std::vector<std::vector<Eigen::VectorXf>> k_, v_;
  int len_ = 0;
};

std::vector<std::int32_t> PromptTokens(const RequestSpec& spec, std::int32_t vocab) {
  std::vector<std::int32_t> out;
  for (std::int32_t p = 0; p < spec.prompt_len; ++p) {
    const TokenId t = token_identity(spec, p);
    out.push_back(token_value(t.content_id, t.offset, vocab));
  }
  return out;
}

float TopTwoMargin(const Eigen::VectorXf& logits) {
  std::vector<float> v(logits.data(), logits.data() + logits.size());
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1];
}

void ExpectLogitsNear(const Eigen::VectorXf& got, const Eigen::VectorXf& want) {
  ASSERT_EQ(got.size(), want.size());
  const double tol = kLogitRelTol * std::max(1.0f, want.cwiseAbs().maxCoeff());
  for (int i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol) << "logit " << i;
  }
}

LlamaConfig TinyConfig() {
  return load_llama_config("tiny", servelab_home().string() + "/experiments/catalog");
}

// A Qwen2-like variant: q/k/v biases, tied embeddings, 4 query heads per KV head.
LlamaConfig BiasedTiedConfig() {
  LlamaConfig c = TinyConfig();
  c.model.name = "tiny-qwen";
  c.model.num_kv_heads = 1;
  c.model.qkv_bias = true;
  c.model.tie_word_embeddings = true;
  c.model.rope_theta = 1e6;
  return c;
}

// Runs one request alone through the executor: its prompt in chunks of `chunk` tokens over a
// shuffled block table, then until `decode` tokens are sampled. Returns the logits of every
// sampling step (and the sampled tokens in `tokens` when given).
std::vector<Eigen::VectorXf> RunAlone(CpuExecutor& exec, const RequestSpec& spec,
                                      std::int32_t chunk, std::int32_t decode,
                                      std::vector<BlockId> table,
                                      std::vector<std::int32_t>* tokens = nullptr) {
  std::vector<std::int32_t> outputs;
  std::vector<Eigen::VectorXf> logits;
  std::int32_t done = 0;
  while (static_cast<std::int32_t>(outputs.size()) < decode) {
    const std::int32_t known = spec.prompt_len + static_cast<std::int32_t>(outputs.size());
    StepPlan plan;
    ScheduledRequest e;
    e.id = spec.id;
    e.spec = &spec;
    e.output_tokens = outputs;
    e.first_token = done;
    e.num_tokens = std::min(chunk, known - done);
    e.samples = done + e.num_tokens == known;
    e.block_table = table;
    plan.requests.push_back(e);
    const StepResult r = exec.execute(plan);
    done += e.num_tokens;
    if (e.samples) {
      logits.push_back(exec.last_logits()[0]);
      outputs.push_back(r.sampled_tokens[0]);
    }
  }
  if (tokens != nullptr) *tokens = outputs;
  return logits;
}

// The allocator policy a CpuExecutor sets (engine/cpu_executor.h keep_freed_memory_mapped): a
// step-sized allocation (8 MiB) comes from the heap, not from a fresh mapping, and freeing it
// keeps its pages. Not under ASan, whose allocator is its own.
#if defined(__SANITIZE_ADDRESS__)
#define SERVELAB_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SERVELAB_TEST_UNDER_ASAN 1
#endif
#endif
TEST(EngineModelTest, StepSizedAllocationsStayMapped) {
#if defined(SERVELAB_TEST_UNDER_ASAN) || !defined(__GLIBC__)
  GTEST_SKIP() << "glibc's allocator only (ASan replaces it)";
#else
  const LlamaWeights w = LlamaWeights::random(TinyConfig(), 7);
  CpuExecutorOptions opt;
  opt.block_size = 4;
  opt.num_blocks = 8;
  const CpuExecutor exec(w, opt);
  const std::size_t bytes = std::size_t{8} << 20;
  ASSERT_LT(bytes, static_cast<std::size_t>(kHeapAllocationMaxBytes));
  const struct mallinfo2 before = mallinfo2();
  struct mallinfo2 during {};
  {
    std::vector<float> step(bytes / sizeof(float), 1.0f);
    during = mallinfo2();
    EXPECT_EQ(during.hblks, before.hblks) << "an 8 MiB allocation was mapped afresh";
    EXPECT_GE(during.uordblks, before.uordblks + bytes);
  }
  EXPECT_EQ(mallinfo2().arena, during.arena) << "the freed pages went back to the OS";
#endif
}

// (a) Paged, chunked logits equal the dense ones at every sampled position.
TEST(EngineModelTest, PagedLogitsMatchDenseReference) {
  for (const LlamaConfig& config : {TinyConfig(), BiasedTiedConfig()}) {
    SCOPED_TRACE(config.model.name);
    const LlamaWeights w = LlamaWeights::random(config, 7);
    CpuExecutorOptions opt;
    opt.block_size = 4;
    opt.num_blocks = 32;
    CpuExecutor exec(w, opt);
    const RequestSpec spec = make_request(3, 0, {{11, 0, 20}, {12, 5, 17}}, 6);
    // A scattered table: positions land in non-adjacent, descending blocks.
    std::vector<BlockId> table;
    for (int b = 0; b < 12; ++b) table.push_back(31 - 2 * b);
    const std::vector<Eigen::VectorXf> paged = RunAlone(exec, spec, 5, 6, table);

    DenseModel dense(w);
    Eigen::VectorXf want;
    for (std::int32_t t : PromptTokens(spec, config.model.vocab_size)) want = dense.Step(t);
    for (std::size_t k = 0; k < paged.size(); ++k) {
      SCOPED_TRACE("output " + std::to_string(k));
      ExpectLogitsNear(paged[k], want);
      Eigen::Index best;
      want.maxCoeff(&best);
      if (k + 1 < paged.size()) want = dense.Step(static_cast<std::int32_t>(best));
    }
  }
}

// Weights survive a safetensors round trip; a checkpoint whose shape disagrees names the tensor.
TEST(EngineModelTest, WeightsLoadFromSafetensors) {
  const LlamaConfig config = BiasedTiedConfig();
  const LlamaWeights w = LlamaWeights::random(config, 3);
  const auto dir = servelab::test_util::temp_dir("engine_weights");
  const std::string path = (dir / "model.safetensors").string();
  w.save(path);
  const LlamaWeights back = LlamaWeights::load(config, dir.string());
  EXPECT_EQ(back.embed_tokens, w.embed_tokens);
  EXPECT_EQ(back.layers[1].k_bias, w.layers[1].k_bias);
  EXPECT_EQ(back.layers[0].down_proj, w.layers[0].down_proj);
  EXPECT_EQ(back.norm, w.norm);
  EXPECT_EQ(back.lm_head.size(), 0);

  LlamaConfig wider = config;
  wider.model.intermediate_size = 96;
  try {
    LlamaWeights::load(wider, path);
    ADD_FAILURE() << "shape mismatch accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layers.0.mlp.gate_proj.weight'"),
              std::string::npos)
        << e.what();
  }
  LlamaConfig untied = config;
  untied.model.tie_word_embeddings = false;
  try {
    LlamaWeights::load(untied, path);
    ADD_FAILURE() << "missing lm_head accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'lm_head.weight'"), std::string::npos) << e.what();
  }
  // A bias the forward pass would not apply (here q/k/v biases for a config without them; a
  // Llama checkpoint's o_proj or MLP biases alike) is refused, not dropped.
  LlamaConfig unbiased = config;
  unbiased.model.qkv_bias = false;
  try {
    LlamaWeights::load(unbiased, path);
    ADD_FAILURE() << "biases dropped";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("_proj.bias' is a bias the engine does not apply"),
              std::string::npos)
        << e.what();
  }
  // A checkpoint of a deeper model: its layers past the config's are refused, not skipped (a
  // model of fewer layers ran the first ones and gave another model's outputs).
  LlamaConfig shallower = config;
  shallower.model.num_layers = config.model.num_layers - 1;
  try {
    LlamaWeights::load(shallower, path);
    ADD_FAILURE() << "a layer past num_layers ignored";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "is of layer " + std::to_string(shallower.model.num_layers) + ", but model " +
                  shallower.model.name + " has " + std::to_string(shallower.model.num_layers) +
                  " layers (num_layers)"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

// Llama 3.1 rope scaling (factor 8, low 1, high 4, original 8192, theta 500000, head_dim 128):
// short wavelengths unchanged, long ones divided by 8, the band between blended.
TEST(EngineModelTest, Llama3RopeScaling) {
  LlamaConfig c;
  c.model.head_dim = 128;
  c.model.rope_theta = 500000.0;
  const std::vector<double> plain = rope_inv_freq(c);
  c.rope_scaling = RopeScaling{};
  const std::vector<double> scaled = rope_inv_freq(c);
  ASSERT_EQ(scaled.size(), 64u);
  const double pi = 3.14159265358979323846;
  int kept = 0, divided = 0, blended = 0;
  for (int j = 0; j < 64; ++j) {
    const double wavelen = 2 * pi / plain[j];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(scaled[j], plain[j]);
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_DOUBLE_EQ(scaled[j], plain[j] / 8);
      ++divided;
    } else {
      const double smooth = (8192.0 / wavelen - 1) / 3;
      EXPECT_DOUBLE_EQ(scaled[j], (1 - smooth) * plain[j] / 8 + smooth * plain[j]);
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

// A Hugging Face directory (config.json + model.safetensors) loads end to end, rope_scaling
// included; an unsupported rope type is a ConfigError naming the file.
TEST(EngineModelTest, LoadsAHuggingFaceDirectory) {
  const auto dir = servelab::test_util::temp_dir("engine_hf");
  auto write_config = [&](const std::string& rope) {
    std::ofstream out(dir / "config.json");
    out << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "float32",
      "tie_word_embeddings": false, "rope_scaling": )"
        << rope << "}";
  };
  write_config(R"({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192, "rope_type": "llama3"})");
  const LlamaConfig config = load_llama_config(dir.string(), "");
  ASSERT_TRUE(config.rope_scaling.has_value());
  EXPECT_EQ(config.rope_scaling->type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(config.rope_scaling->factor, 8.0);
  EXPECT_EQ(config.model.num_kv_heads, 2);
  const LlamaWeights w = LlamaWeights::random(config, 1);
  w.save((dir / "model.safetensors").string(), "BF16");
  const LlamaWeights back = LlamaWeights::load(config, dir.string());
  // BF16 keeps 8 significant bits: relative error at most 2^-9.
  EXPECT_TRUE(back.layers[1].q_proj.isApprox(w.layers[1].q_proj, 1.0f / 256));
  EXPECT_EQ(back.lm_head.rows(), 256);

  write_config("null");
  EXPECT_FALSE(load_llama_config(dir.string(), "").rope_scaling.has_value());
  write_config(R"({"type": "yarn", "factor": 4.0})");
  try {
    load_llama_config(dir.string(), "");
    ADD_FAILURE() << "yarn accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("yarn"), std::string::npos) << e.what();
  }
  // Scaling the engine would drop or misread is refused, naming the key.
  for (const auto& [rope, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"factor": 8.0})", "a factor without rope_type"},
           {R"({"rope_type": 5, "factor": 8.0})", "'rope_scaling.rope_type': expected a string"},
           {R"("linear")", "'rope_scaling': expected an object"},
           {R"({"factor": 8.0, "low_freq_factor": -1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192, "rope_type": "llama3"})",
            "must be positive"},
           {R"(null, "hidden_act": "gelu")", "'hidden_act': the engine computes silu"},
           {R"(null, "sliding_window": 0)", "'sliding_window': expected a positive token count"},
           {R"(null, "sliding_window": "4096")", "'sliding_window': expected a positive"},
           {R"(null, "sliding_window": 4096, "use_sliding_window": "yes")",
            "'use_sliding_window': expected true or false"},
           {R"(null, "head_dim": 15)", "head_dim 15 is odd"}}) {
    write_config(rope);
    try {
      load_llama_config(dir.string(), "");
      ADD_FAILURE() << rope << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  // A sliding window is read (Mistral v0.1), unless switched off (Qwen2's use_sliding_window).
  write_config(R"(null, "sliding_window": 4096)");
  EXPECT_EQ(load_llama_config(dir.string(), "").sliding_window, 4096);
  write_config(R"(null, "sliding_window": 4096, "use_sliding_window": false)");
  EXPECT_EQ(load_llama_config(dir.string(), "").sliding_window, 0);
  write_config(R"(null, "sliding_window": null)");
  EXPECT_EQ(load_llama_config(dir.string(), "").sliding_window, 0);
  std::filesystem::remove_all(dir);
}

// Same-step prefix sharing: an entry may attend to blocks another entry writes in the same step,
// even one later in the plan, because every entry's K/V is written before any attention.
TEST(EngineModelTest, SameStepPrefixSharing) {
  const LlamaWeights w = LlamaWeights::random(TinyConfig(), 8);
  CpuExecutorOptions opt;
  opt.block_size = 4;
  opt.num_blocks = 16;
  CpuExecutor exec(w, opt);
  // Both prompts start with the same 8 tokens (two full blocks); the reader's own tail follows.
  const RequestSpec owner = make_request(1, 0, {{42, 0, 8}, {43, 0, 3}}, 1);
  const RequestSpec reader = make_request(2, 0, {{42, 0, 8}, {44, 0, 5}}, 1);
  const std::vector<BlockId> owner_table = {3, 6, 9}, reader_table = {3, 6, 12, 13};
  StepPlan plan;
  ScheduledRequest r;  // listed first: it reads blocks 3 and 6 before the owner's entry
  r.id = reader.id;
  r.spec = &reader;
  r.first_token = 8;
  r.num_tokens = 5;
  r.num_cached_prefix = 8;
  r.samples = true;
  r.block_table = reader_table;
  ScheduledRequest o;
  o.id = owner.id;
  o.spec = &owner;
  o.num_tokens = 11;
  o.samples = true;
  o.block_table = owner_table;
  plan.requests = {r, o};
  exec.execute(plan);
  for (std::size_t i = 0; i < 2; ++i) {
    DenseModel dense(w);
    Eigen::VectorXf want;
    for (std::int32_t t : PromptTokens(i == 0 ? reader : owner, 256)) want = dense.Step(t);
    ExpectLogitsNear(exec.last_logits()[i], want);
  }
}

// A malformed plan is refused before anything changes.
TEST(EngineModelTest, RejectsMalformedPlans) {
  const LlamaWeights w = LlamaWeights::random(TinyConfig(), 4);
  CpuExecutorOptions opt;
  opt.block_size = 4;
  opt.num_blocks = 8;
  opt.num_host_blocks = 2;
  CpuExecutor exec(w, opt);
  const RequestSpec spec = make_request(1, 0, {{5, 0, 8}}, 1);
  const std::vector<BlockId> good = {1, 2}, short_table = {1}, outside = {1, 8};
  auto plan_with = [&](const std::vector<BlockId>& table, std::int32_t tokens) {
    StepPlan plan;
    ScheduledRequest e;
    e.id = 1;
    e.spec = &spec;
    e.num_tokens = tokens;
    e.samples = true;
    e.block_table = table;
    plan.requests.push_back(e);
    return plan;
  };
  EXPECT_THROW(exec.execute(plan_with(short_table, 8)), std::invalid_argument);
  EXPECT_THROW(exec.execute(plan_with(outside, 8)), std::invalid_argument);
  EXPECT_THROW(exec.execute(plan_with(good, 9)), std::invalid_argument);  // no output 0 yet
  StepPlan swap = plan_with(good, 8);
  swap.swap_out = {{1, 2}};  // host block 2 does not exist
  EXPECT_THROW(exec.execute(swap), std::invalid_argument);
  EXPECT_TRUE(std::ranges::all_of(exec.key_block(0, 1), [](float f) { return f == 0.0f; }));
  EXPECT_GE(exec.execute(plan_with(good, 8)).sampled_tokens[0], 0);
  CpuExecutorOptions bad = opt;
  bad.block_size = 0;
  EXPECT_THROW(CpuExecutor(w, bad), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// (b) The invariance property through the real scheduler.

struct WorkloadStats {
  std::int64_t compared = 0, near_ties = 0, preemptions = 0, cached_tokens = 0, steps = 0;
  // Swap runs: blocks moved out and back in, and victims swapped versus recomputed (the
  // fallback when the host pool cannot take a victim's blocks).
  std::int64_t swap_out_blocks = 0, swap_in_blocks = 0, swapped_victims = 0, recomputed_victims = 0;
  // Parallel sampling: forks and copy-on-write copies executed.
  std::int64_t forks = 0, cow_copies = 0;
};

// How preemption treats a victim's KV: recompute (no host pool), or swap to a host pool of
// `host_blocks` blocks.
struct PreemptionSetup {
  std::string mode = "recompute";
  std::int32_t host_blocks = 0;
};

// Which token's KV each cache slot holds, by token identity, following the plans: block moves,
// then every entry's writes. A prefix hit on a block whose KV was never computed for the hitting
// request's tokens (a stale or unwritten slot) fails check() whatever the weights are, while the
// greedy comparison catches it only when the stale KV flips an argmax.
struct KvLedger {
  using Slot = std::pair<BlockId, std::int32_t>;  // (block, offset in block)
  std::map<Slot, std::pair<std::uint64_t, std::uint32_t>> device, host;

  static void move(const std::map<Slot, std::pair<std::uint64_t, std::uint32_t>>& src, BlockId from,
                   std::map<Slot, std::pair<std::uint64_t, std::uint32_t>>& dst, BlockId to,
                   std::int32_t block_size) {
    for (std::int32_t o = 0; o < block_size; ++o) {
      const auto it = src.find({from, o});
      if (it == src.end()) {
        dst.erase({to, o});
      } else {
        dst[{to, o}] = it->second;
      }
    }
  }
  // The executor's order: swap out, swap in, copies, then all entries' K/V before any attention.
  void apply(const StepPlan& plan, std::int32_t bs) {
    for (const BlockMove& m : plan.swap_out) move(device, m.src, host, m.dst, bs);
    for (const BlockMove& m : plan.swap_in) move(host, m.src, device, m.dst, bs);
    for (const BlockMove& m : plan.copies) move(device, m.src, device, m.dst, bs);
    for (const ScheduledRequest& e : plan.requests) {
      for (std::int32_t p = e.first_token; p < e.context_len(); ++p) {
        const TokenId id = token_identity(*e.spec, p);
        device[{e.block_table[p / bs], p % bs}] = {id.content_id, id.offset};
      }
    }
  }
  void check(const StepPlan& plan, std::int32_t bs, std::int64_t step) const {
    for (const ScheduledRequest& e : plan.requests) {
      for (std::int32_t p = 0; p < e.first_token; ++p) {
        const BlockId b = e.block_table[p / bs];
        const TokenId want = token_identity(*e.spec, p);
        const auto it = device.find({b, p % bs});
        ASSERT_TRUE(it != device.end() && it->second.first == want.content_id &&
                    it->second.second == want.offset)
            << "step " << step << ": request " << e.id << " attends to position " << p
            << " in block " << b << ", whose KV was not computed for that token (first_token "
            << e.first_token << ", num_cached_prefix " << e.num_cached_prefix << ")";
      }
    }
  }
};

// Runs a random workload through the scheduler and checks every request's outputs against the
// same request run alone: the dense reference when greedy, the executor with the same sampling
// options (one request, no preemption, fresh cache) otherwise.
void RunWorkload(const LlamaWeights& w, std::uint64_t seed, const SamplingParams& sampling,
                 WorkloadStats& stats, std::string formation = "vllm",
                 std::string victim = "last-running", PreemptionSetup preemption = {},
                 CacheMaker cache = make_hash_prefix_cache, std::int32_t max_n = 1,
                 const PolicySpec* queue = nullptr) {
  Rng rng = Rng::stream(seed, "engine_model_test");
  const std::int32_t vocab = w.config.model.vocab_size;
  SchedulerConfig c;
  use_policy(c, PolicyKind::kBatch, formation);
  if (queue != nullptr) use_policy(c, PolicyKind::kQueue, queue->name, queue->params);
  use_policy(c, PolicyKind::kPreemption, preemption.mode);  // before the victim: it sets one
  use_policy(c, PolicyKind::kVictim, victim);
  c.block_size = static_cast<std::int32_t>(rng.uniform_int(2, 5));
  c.max_num_batched_tokens = static_cast<std::int32_t>(rng.uniform_int(12, 40));
  c.long_prefill_token_threshold = static_cast<std::int32_t>(rng.uniform_int(4, 16));
  c.max_num_seqs = static_cast<std::int32_t>(rng.uniform_int(3, 8));
  c.max_model_len = 128;
  // Orca, Sarathi and prefill-first take whole prompts (up to 50 tokens here) in one step.
  if (formation != "vllm" && formation != "static") {
    c.max_num_batched_tokens = std::max(c.max_num_batched_tokens, 64);
  }
  c.enable_chunked_prefill = true;
  c.enable_prefix_caching = true;
  const std::int32_t num_blocks = static_cast<std::int32_t>(64 / c.block_size) + 2;
  SCOPED_TRACE("formation " + formation + " victim " + victim + " seed " + std::to_string(seed) +
               " block_size " + std::to_string(c.block_size) + " budget " +
               std::to_string(c.max_num_batched_tokens) + " threshold " +
               std::to_string(c.long_prefill_token_threshold) + " blocks " +
               std::to_string(num_blocks) + " mode " + preemption.mode + " host_blocks " +
               std::to_string(preemption.host_blocks) + " cache " +
               (cache == make_radix_prefix_cache ? "radix" : "hash") + " max_n " +
               std::to_string(max_n));

  // Requests: a shared system prompt (one of two) for most, then a unique tail.
  std::vector<RequestSpec> specs;
  const std::int32_t num_requests = static_cast<std::int32_t>(rng.uniform_int(6, 10));
  for (RequestId id = 0; id < static_cast<RequestId>(num_requests); ++id) {
    std::vector<PromptSegment> segs;
    const std::int64_t shared = rng.uniform_int(0, 2);
    if (shared > 0) {
      segs.push_back({1000 + static_cast<std::uint64_t>(shared), 0,
                      static_cast<std::uint32_t>(rng.uniform_int(6, 20))});
    }
    segs.push_back(
        {unique_content_id(seed, id), 0, static_cast<std::uint32_t>(rng.uniform_int(1, 30))});
    specs.push_back(make_request(id, 0, segs, static_cast<std::int32_t>(rng.uniform_int(4, 12))));
    // Parallel sampling, derived without drawing from `rng` (the streams stay as they were).
    if (max_n > 1) specs.back().n = 1 + static_cast<std::int32_t>(mix64(seed * 977 + id) % max_n);
  }

  BlockPool pool(num_blocks);
  HostBlockPool host(preemption.host_blocks);
  KvCacheOptions kv_opt;
  if (preemption.mode != "recompute") kv_opt.host_pool = &host;
  kv_opt.prefix_cache = cache;
  KvCacheManager kv(pool, c.block_size, c.max_model_len, c.enable_prefix_caching, kv_opt);
  Scheduler s(c, kv, nullptr);
  CpuExecutorOptions opt;
  opt.block_size = c.block_size;
  opt.num_blocks = num_blocks;
  opt.num_host_blocks = preemption.host_blocks;
  opt.sampling = sampling;
  CpuExecutor exec(w, opt);
  for (const RequestSpec& spec : specs) s.add_request(spec, 0);
  ASSERT_EQ(s.counters().num_rejected, 0);

  std::map<RequestId, std::vector<std::int32_t>> outputs;
  TimeNs now = 0;
  KvLedger ledger;
  while (s.has_unfinished()) {
    const StepPlan& plan = s.schedule(now);
    ASSERT_FALSE(plan.empty()) << "stalled";
    for (const ScheduledRequest& e : plan.requests) stats.cached_tokens += e.num_cached_prefix;
    stats.swap_out_blocks += static_cast<std::int64_t>(plan.swap_out.size());
    stats.swap_in_blocks += static_cast<std::int64_t>(plan.swap_in.size());
    for (RequestId id : plan.preempted) {
      const bool swapped = std::ranges::any_of(s.swapped(), [&](const Request* r) {
        return r->id() == id && r->status == RequestStatus::kSwapped;
      });
      ++(swapped ? stats.swapped_victims : stats.recomputed_victims);
    }
    stats.cow_copies += static_cast<std::int64_t>(plan.copies.size());
    // Weight-independent: every position an entry attends to holds KV written for that token.
    ledger.apply(plan, c.block_size);
    ASSERT_NO_FATAL_FAILURE(ledger.check(plan, c.block_size, stats.steps));
    const StepResult result = exec.execute(plan);
    std::size_t fork_at = 0;
    for (std::size_t i = 0; i < plan.requests.size(); ++i) {
      const ScheduledRequest& e = plan.requests[i];
      if (!e.samples) continue;
      std::vector<std::int32_t>& out = outputs[e.id];
      ASSERT_EQ(e.output_tokens.size(), out.size()) << "request " << e.id;
      out.push_back(result.sampled_tokens[i]);
      // A fork: samples 1 .. n-1 get their first tokens from the same logits.
      for (std::int32_t k = 1; k < e.num_samples; ++k) {
        outputs[sample_request_id(e.id, k)].push_back(result.fork_tokens.at(fork_at++));
      }
      if (e.num_samples > 1) ++stats.forks;
    }
    ASSERT_EQ(fork_at, result.fork_tokens.size());
    now += std::max<TimeNs>(result.duration_ns, 1);
    s.complete(result, now);
    ASSERT_LT(++stats.steps, 100'000);
  }
  stats.preemptions += s.counters().num_preemptions;

  // Each sample k of a request is checked as the request run alone with sample k's identity.
  std::vector<RequestSpec> sequences;
  for (const RequestSpec& spec : specs) {
    for (std::int32_t k = 0; k < spec.n; ++k) {
      RequestSpec one = spec;
      one.id = sample_request_id(spec.id, k);
      one.sample = k;
      one.n = 1;
      sequences.push_back(one);
    }
  }
  for (const RequestSpec& spec : sequences) {
    SCOPED_TRACE("request " + std::to_string(base_request_id(spec.id)) + " sample " +
                 std::to_string(spec.sample));
    const std::vector<std::int32_t>& got = outputs[spec.id];
    ASSERT_EQ(static_cast<std::int32_t>(got.size()), spec.max_output_tokens);
    if (sampling.temperature > 0) {
      CpuExecutorOptions alone_opt = opt;
      alone_opt.num_blocks = 64;
      CpuExecutor alone(w, alone_opt);
      std::vector<BlockId> table(32);
      std::iota(table.begin(), table.end(), 32);
      std::vector<std::int32_t> want;
      RunAlone(alone, spec, 7, spec.max_output_tokens, table, &want);
      EXPECT_EQ(got, want);
      stats.compared += static_cast<std::int64_t>(got.size());
      continue;
    }
    DenseModel dense(w);
    Eigen::VectorXf logits;
    for (std::int32_t t : PromptTokens(spec, vocab)) logits = dense.Step(t);
    for (std::size_t k = 0; k < got.size(); ++k) {
      if (TopTwoMargin(logits) <= kTieMargin) {
        ++stats.near_ties;
        break;  // the two answers may legitimately part here
      }
      Eigen::Index best;
      logits.maxCoeff(&best);
      ASSERT_EQ(got[k], best) << "output " << k << ", top-two margin " << TopTwoMargin(logits)
                              << ", logit of the engine's token " << logits[got[k]];
      ++stats.compared;
      if (k + 1 < got.size()) logits = dense.Step(got[k]);
    }
  }
}

TEST(EngineModelTest, SchedulingNeverChangesGreedyOutputs) {
  const LlamaWeights w = LlamaWeights::random(TinyConfig(), 11);
  WorkloadStats stats;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    RunWorkload(w, seed, SamplingParams{}, stats);
    if (HasFatalFailure()) return;
  }
  // The workloads must reach the paths the property is about.
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.cached_tokens, 0);
  EXPECT_GT(stats.compared, 200);
  EXPECT_LT(stats.near_ties * 20, stats.compared) << "near-ties are not rare";
  RecordProperty("compared", static_cast<int>(stats.compared));
  RecordProperty("preemptions", static_cast<int>(stats.preemptions));
  RecordProperty("near_ties", static_cast<int>(stats.near_ties));
  RecordProperty("cached_tokens", static_cast<int>(stats.cached_tokens));
}

// The same property under every batch formation and preemption victim the scheduler offers.
TEST(EngineModelTest, EveryBatchFormationKeepsGreedyOutputs) {
  const LlamaWeights w = LlamaWeights::random(TinyConfig(), 13);
  for (std::string f : {"vllm", "static", "orca", "sarathi", "prefill-first", "sglang"}) {
    for (std::string v : {"last-running", "lowest-priority", "fewest-computed", "most-blocks"}) {
      WorkloadStats stats;
      for (std::uint64_t seed = 31; seed <= 32; ++seed) {
        RunWorkload(w, seed, SamplingParams{}, stats, f, v);
        if (HasFatalFailure()) return;
      }
      EXPECT_GT(stats.compared, 20);
    }
  }
}

// The same property with preemption by swap: victims' KV goes to host blocks through the
// executor's swap store and comes back (to other device blocks) instead of being recomputed.
// A host pool as large as the device pool takes every victim; a small one forces the recompute
// fallback for the victims it cannot take, so both kinds of victim mix in one run.
TEST(EngineModelTest, SwapPreemptionKeepsGreedyOutputs) {
  const LlamaWeights w = LlamaWeights::random(TinyConfig(), 11);
  for (const std::int32_t host_blocks : {64, 4}) {
    SCOPED_TRACE("host_blocks " + std::to_string(host_blocks));
    WorkloadStats stats;
    for (std::string v : {"last-running", "lowest-priority", "fewest-computed", "most-blocks"}) {
      for (std::uint64_t seed = 1; seed <= 6; ++seed) {
        RunWorkload(w, seed, SamplingParams{}, stats, "vllm", v, {"swap", host_blocks});
        if (HasFatalFailure()) return;
      }
    }
    EXPECT_GT(stats.swap_out_blocks, 0);
    EXPECT_GT(stats.swap_in_blocks, 0);
    EXPECT_GT(stats.swapped_victims, 0);
    if (host_blocks < 64) {
      EXPECT_GT(stats.recomputed_victims, 0) << "no recompute fallback";
    }
    EXPECT_GT(stats.compared, 200);
    EXPECT_LT(stats.near_ties * 20, stats.compared) << "near-ties are not rare";
    const std::string key = "host" + std::to_string(host_blocks) + "_";
    RecordProperty(key + "compared", static_cast<int>(stats.compared));
    RecordProperty(key + "near_ties", static_cast<int>(stats.near_ties));
    RecordProperty(key + "swapped_victims", static_cast<int>(stats.swapped_victims));
    RecordProperty(key + "recomputed_victims", static_cast<int>(stats.recomputed_victims));
    RecordProperty(key + "swap_out_blocks", static_cast<int>(stats.swap_out_blocks));
    RecordProperty(key + "swap_in_blocks", static_cast<int>(stats.swap_in_blocks));
  }
}

// The same property under the preemptive formation: running requests displaced for
// better-ranked waiting or swapped ones, by recompute or by swap (a step may swap victims out and
// a swapped request in), under oracle SJF and under an MLFQ whose 1 us quanta demote every
// running request every step, so that waiting requests displace running ones all the time.
TEST(EngineModelTest, PreemptiveFormationKeepsGreedyOutputs) {
  const LlamaWeights w = LlamaWeights::random(TinyConfig(), 11);
  PolicySpec sjf = default_policy_spec(PolicyKind::kQueue, "sjf");
  PolicySpec mlfq = default_policy_spec(PolicyKind::kQueue, "mlfq");
  mlfq.params["levels"] = std::int64_t{3};
  mlfq.params["quantum_ms"] = 0.001;
  mlfq.params["skip_join"] = false;
  for (const PolicySpec* queue : {&sjf, &mlfq}) {
    WorkloadStats stats;
    for (const PreemptionSetup& setup :
         {PreemptionSetup{}, PreemptionSetup{"swap", 64}, PreemptionSetup{"swap", 4}}) {
      for (std::uint64_t seed = 1; seed <= 4; ++seed) {
        RunWorkload(w, seed, SamplingParams{}, stats, "preemptive", "last-running", setup,
                    make_hash_prefix_cache, 1, queue);
        if (HasFatalFailure()) return;
      }
    }
    EXPECT_GT(stats.preemptions, 0) << queue->name;
    EXPECT_GT(stats.swapped_victims, 0) << queue->name;
    EXPECT_GT(stats.swap_in_blocks, 0) << queue->name;
    EXPECT_GT(stats.compared, 200) << queue->name;
    EXPECT_LT(stats.near_ties * 20, stats.compared) << "near-ties are not rare";
  }
}

// With temperature and top-p, a request's draws depend on (seed, request, output index) only:
// scheduled with others, chunked and preempted, it samples what it samples alone.
TEST(EngineModelTest, SchedulingNeverChangesSampledOutputs) {
  const LlamaWeights w = LlamaWeights::random(TinyConfig(), 12);
  WorkloadStats stats;
  const SamplingParams sampling{.temperature = 1.0, .top_p = 0.95, .seed = 99};
  for (std::uint64_t seed = 21; seed <= 24; ++seed) {
    RunWorkload(w, seed, sampling, stats);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.compared, 100);
}

// The same property with the radix prefix cache and with parallel sampling (n up to 3, forks
// sharing the prompt blocks, copy-on-write copies of the shared tail, samples preempted by
// recompute or swapped): each sample's tokens equal those of the same request and sample run
// alone, greedy against the dense reference and sampled against the executor alone.
TEST(EngineModelTest, RadixCacheAndParallelSamplingKeepOutputs) {
  const LlamaWeights w = LlamaWeights::random(TinyConfig(), 17);
  WorkloadStats greedy, sampled, radix;
  for (std::uint64_t seed = 41; seed <= 46; ++seed) {
    RunWorkload(w, seed, SamplingParams{}, radix, "vllm", "last-running", {},
                make_radix_prefix_cache, 1);
    if (HasFatalFailure()) return;
    for (const CacheMaker cache : {make_hash_prefix_cache, make_radix_prefix_cache}) {
      RunWorkload(w, seed, SamplingParams{}, greedy, "vllm", "last-running", {}, cache, 3);
      if (HasFatalFailure()) return;
      RunWorkload(w, seed, SamplingParams{.temperature = 1.0, .top_p = 0.95, .seed = 5}, sampled,
                  seed % 2 == 0 ? "vllm" : "sarathi", "most-blocks",
                  {seed % 2 == 0 ? "swap" : "recompute", 16}, cache, 3);
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GT(radix.cached_tokens, 0);
  EXPECT_GT(radix.compared, 100);
  for (const WorkloadStats* s : {&greedy, &sampled}) {
    EXPECT_GT(s->forks, 0);
    EXPECT_GT(s->cow_copies, 0);
    EXPECT_GT(s->preemptions, 0);
    EXPECT_GT(s->compared, 200);
  }
  EXPECT_LT(greedy.near_ties * 20, greedy.compared) << "near-ties are not rare";
  RecordProperty("forks", static_cast<int>(greedy.forks + sampled.forks));
  RecordProperty("cow_copies", static_cast<int>(greedy.cow_copies + sampled.cow_copies));
}

// ---------------------------------------------------------------------------------------------
// (c) Block copies and swaps preserve KV contents bit for bit, and decoding over moved blocks
// gives the same logits as over the originals.

TEST(EngineModelTest, CopyAndSwapRestoreKv) {
  const LlamaWeights w = LlamaWeights::random(TinyConfig(), 5);
  const std::int32_t layers = w.config.model.num_layers;
  CpuExecutorOptions opt;
  opt.block_size = 4;
  opt.num_blocks = 16;
  opt.num_host_blocks = 8;
  CpuExecutor exec(w, opt);
  const RequestSpec spec = make_request(9, 0, {{77, 3, 10}}, 2);
  const std::vector<BlockId> table = {2, 5, 7};

  // Prefill the 10-token prompt into blocks 2, 5, 7.
  std::vector<std::int32_t> outputs;
  StepPlan prefill;
  ScheduledRequest e;
  e.id = spec.id;
  e.spec = &spec;
  e.first_token = 0;
  e.num_tokens = 10;
  e.samples = true;
  e.block_table = table;
  prefill.requests.push_back(e);
  outputs.push_back(exec.execute(prefill).sampled_tokens[0]);

  // The decode step over the original blocks, for reference.
  auto decode = [&](std::span<const BlockId> t) {
    StepPlan plan;
    ScheduledRequest d = e;
    d.output_tokens = outputs;
    d.first_token = 10;
    d.num_tokens = 1;
    d.block_table = t;
    plan.requests.push_back(d);
    exec.execute(plan);
    return exec.last_logits()[0];
  };
  const Eigen::VectorXf reference = decode(table);
  // The contents to restore: prompt and the decoded token (re-decoding rewrites the same bits).
  std::vector<std::vector<float>> saved_k, saved_v;  // [layer * 3 + i]
  for (std::int32_t l = 0; l < layers; ++l) {
    for (BlockId b : table) {
      saved_k.emplace_back(exec.key_block(l, b).begin(), exec.key_block(l, b).end());
      saved_v.emplace_back(exec.value_block(l, b).begin(), exec.value_block(l, b).end());
    }
  }

  // Copy-on-write: copy the three blocks to 10, 11, 12 and decode over the copies.
  StepPlan copy;
  copy.copies = {{2, 10}, {5, 11}, {7, 12}};
  exec.execute(copy);
  const std::vector<BlockId> copied = {10, 11, 12};
  EXPECT_EQ(decode(copied), reference);

  // Swap out to host blocks 6, 0, 3; scribble over the device blocks; swap in to 13, 14, 15.
  StepPlan out;
  out.swap_out = {{2, 6}, {5, 0}, {7, 3}};
  exec.execute(out);
  const std::vector<BlockId> host = {6, 0, 3};
  for (std::int32_t l = 0; l < layers; ++l) {
    for (BlockId b : table) {
      std::ranges::fill(exec.mutable_key_block(l, b), 9.0f);
      std::ranges::fill(exec.mutable_value_block(l, b), -9.0f);
    }
  }
  StepPlan in;
  in.swap_in = {{6, 13}, {0, 14}, {3, 15}};
  exec.execute(in);
  const std::vector<BlockId> swapped = {13, 14, 15};
  for (std::int32_t l = 0; l < layers; ++l) {
    for (std::size_t i = 0; i < 3; ++i) {
      const auto& k = saved_k[l * 3 + i];
      const auto& v = saved_v[l * 3 + i];
      EXPECT_TRUE(std::ranges::equal(exec.host_key_block(l, host[i]), k));
      EXPECT_TRUE(std::ranges::equal(exec.host_value_block(l, host[i]), v));
      EXPECT_TRUE(std::ranges::equal(exec.key_block(l, swapped[i]), k));
      EXPECT_TRUE(std::ranges::equal(exec.value_block(l, swapped[i]), v));
      EXPECT_TRUE(std::ranges::equal(exec.key_block(l, copied[i]), k));
    }
  }
  EXPECT_EQ(decode(swapped), reference);
}

// Sampled draws depend on (seed, request, output index) only: the same request sampled alone
// or beside others draws the same token; greedy is the default.
TEST(EngineModelTest, SamplingStreamsIgnoreTheBatch) {
  const LlamaWeights w = LlamaWeights::random(TinyConfig(), 2);
  CpuExecutorOptions opt;
  opt.block_size = 4;
  opt.num_blocks = 32;
  opt.sampling.temperature = 1.5;
  opt.sampling.top_p = 0.9;
  opt.sampling.seed = 42;
  std::vector<RequestSpec> specs;
  for (RequestId id = 0; id < 4; ++id) {
    specs.push_back(make_request(id, 0, {{500 + id, 0, 6}}, 1));
  }
  auto entry = [&](std::size_t i) {
    ScheduledRequest e;
    e.id = specs[i].id;
    e.spec = &specs[i];
    e.num_tokens = 6;
    e.samples = true;
    return e;
  };
  std::vector<std::vector<BlockId>> tables = {{1, 2}, {3, 4}, {5, 6}, {7, 8}};
  CpuExecutor batched(w, opt);
  StepPlan all;
  for (std::size_t i = 0; i < 4; ++i) {
    all.requests.push_back(entry(i));
    all.requests.back().block_table = tables[i];
  }
  const StepResult together = batched.execute(all);
  std::set<std::int32_t> distinct;
  for (std::size_t i = 0; i < 4; ++i) {
    CpuExecutor alone(w, opt);
    StepPlan one;
    one.requests.push_back(entry(i));
    one.requests.back().block_table = tables[3 - i];
    EXPECT_EQ(alone.execute(one).sampled_tokens[0], together.sampled_tokens[i]);
    distinct.insert(together.sampled_tokens[i]);
  }
  EXPECT_GT(distinct.size(), 1u);
}

}  // namespace
}  // namespace servelab
