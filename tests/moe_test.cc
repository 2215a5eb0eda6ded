// Tests of mixtures of experts: parameter counts of the shipped entries and of Hugging Face
// configs, the catalogue's checks, the roofline's price of a step (which experts' weights it
// reads), tensor parallelism, and what the engine and the LoRA model refuse. Expected values
// are computed by hand in the comments (docs/cost-model.md, "Mixture of experts").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/step_plan.h"
#include "engine/llama_weights.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/kv_capacity.h"
#include "serving/model_config.h"
#include "serving/parallel_config.h"
#include "sim/roofline_cost_model.h"
#include "tests/cost_fixtures.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

std::string catalog() { return servelab_home().string() + "/experiments/catalog"; }

// test_util::easy_model()'s shape (hidden = q_size = kv_size = vocab = 1000, 10 layers, bf16)
// with 4 experts of width 500, 2 per token; priced on easy_hardware() (1e12 FLOP/s, 1e11 B/s,
// GEMMs and memory at efficiency 1: the classic roofline).
//   per layer: attention 2*h*q + 2*h*kv = 4e6; experts 4 * 3*1000*500 = 6e6; router 1000*4 =
//   4,000; linear 10,004,000 (active: 4e6 + 2 * 1.5e6 + 4,000 = 7,004,000); norms 2,000.
//   num_params 10 * 10,006,000 + final norm 1,000 + embedding and LM head 2e6 = 102,061,000;
//   active 102,061,000 - 10 * 3e6 = 72,061,000.
ModelConfig easy_moe() {
  ModelConfig m = easy_model();
  m.name = "easy-moe";
  m.intermediate_size = 500;
  m.num_experts = 4;
  m.experts_per_token = 2;
  return m;
}

TEST(MoeModel, ParametersCountEveryExpertAndTheActiveOnes) {
  const ModelConfig easy = easy_moe();
  EXPECT_NO_THROW(easy.validate());
  EXPECT_EQ(easy.linear_params_per_layer(), 10'004'000);
  EXPECT_EQ(easy.active_linear_params_per_layer(), 7'004'000);
  EXPECT_EQ(easy.num_params(), 102'061'000);
  EXPECT_EQ(easy.active_params(), 72'061'000);
  EXPECT_EQ(easy.mlp_width_per_token(), 1'000);
  EXPECT_EQ(easy.expert_weight_bytes(), 3'000'000);
  // Mixtral 8x7B: per layer attention 2*4096*4096 + 2*4096*1024 = 41,943,040, experts
  // 8 * 3*4096*14336 = 1,409,286,144, router 32,768, norms 8,192: 1,451,270,144; x32 =
  // 46,440,644,608; + final norm 4,096 + embedding and LM head 2*32000*4096 = 262,144,000 ->
  // 46,702,792,704 (published 46.7e9). Active: per layer 41,943,040 + 2 * 176,160,768 + 32,768
  // + 8,192 = 394,305,536; x32 + 262,148,096 = 12,879,925,248 (published 12.9e9).
  const ModelConfig mixtral = load_model("Mixtral-8x7B", catalog());
  EXPECT_TRUE(mixtral.is_moe());
  EXPECT_EQ(mixtral.num_params(), 46'702'792'704);
  EXPECT_EQ(mixtral.active_params(), 12'879'925'248);
  EXPECT_EQ(mixtral.weight_bytes(), 2 * 46'702'792'704);
  // Qwen3 30B-A3B: per layer attention 2*2048*4096 + 2*2048*512 = 18,874,368, experts
  // 128 * 3*2048*768 = 603,979,776, router 262,144, norms 4,096 + q/k norms 256: 623,120,640;
  // x48 = 29,909,790,720; + 2,048 + 2*151936*2048 = 622,329,856 -> 30,532,122,624 (published
  // 30.5e9). Active: per layer 18,874,368 + 8 * 4,718,592 + 262,144 + 4,352 = 56,889,600; x48
  // + 622,331,904 = 3,353,032,704 (published 3.3e9).
  const ModelConfig qwen3 = load_model("Qwen3-30B-A3B", catalog());
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_EQ(qwen3.num_params(), 30'532'122'624);
  EXPECT_EQ(qwen3.active_params(), 3'353'032'704);
  // A dense model's active parameters are all of them.
  const ModelConfig llama = load_model("Llama-3-8B", catalog());
  EXPECT_EQ(llama.active_params(), llama.num_params());
  EXPECT_EQ(llama.expert_weight_bytes(), 0);
}

TEST(MoeModel, HuggingFaceConfigsOfEachArchitectureParse) {
  const fs::path dir = temp_dir("moe_hf");
  const fs::path mixtral = dir / "mixtral.json";
  write_file(mixtral, R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
    "vocab_size": 32000, "torch_dtype": "bfloat16", "rope_theta": 1000000.0})");
  const ModelConfig m = load_model(mixtral.string(), catalog());
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.experts_per_token, 2);
  EXPECT_EQ(m.intermediate_size, 14336);
  EXPECT_EQ(m.num_params(), 46'702'792'704);
  // Qwen3-MoE: the experts' width is moe_intermediate_size, q/k norms implied.
  const fs::path qwen3 = dir / "qwen3moe.json";
  write_file(qwen3, R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_attention_heads": 32,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
    "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "tie_word_embeddings": false})");
  const ModelConfig q3 = load_model(qwen3.string(), catalog());
  EXPECT_EQ(q3.intermediate_size, 768);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.num_params(), 30'532'122'624);
  // Qwen1.5-MoE-A2.7B (Qwen2MoeForCausalLM): q/k/v biases and a shared expert with its gate.
  //   per layer attention 4 * 2048^2 = 16,777,216, biases 6,144, experts 60 * 3*2048*1408 =
  //   519,045,120, router 122,880, shared 3*2048*5632 + 2048 = 34,605,056, norms 4,096:
  //   570,560,512; x24 = 13,693,452,288; + 2,048 + 2*151936*2048 -> 14,315,784,192 (published
  //   14.3e9). Active: 16,777,216 + 6,144 + 4 * 8,650,752 + 122,880 + 34,605,056 + 4,096 =
  //   86,118,400; x24 + 622,331,904 = 2,689,173,504 (published 2.7e9).
  const fs::path qwen2 = dir / "qwen2moe.json";
  write_file(qwen2, R"({"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 2048,
    "intermediate_size": 5632, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_attention_heads": 16, "num_hidden_layers": 24,
    "num_key_value_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
    "vocab_size": 151936})");
  const ModelConfig q2 = load_model(qwen2.string(), catalog());
  EXPECT_TRUE(q2.qkv_bias);
  EXPECT_EQ(q2.shared_expert_intermediate_size, 5632);
  EXPECT_EQ(q2.num_params(), 14'315'784'192);
  EXPECT_EQ(q2.active_params(), 2'689'173'504);
  EXPECT_EQ(q2.mlp_width_per_token(), 4 * 1408 + 5632);
  // Dense Qwen3: q/k norms, no experts.
  const fs::path dense = dir / "qwen3.json";
  write_file(dense, R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 256})");
  const ModelConfig d = load_model(dense.string(), catalog());
  EXPECT_TRUE(d.qk_norm);
  EXPECT_FALSE(d.is_moe());

  // What is refused, naming the file and the key.
  const std::string base = R"("hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 256)";
  const fs::path missing = dir / "missing.json";
  write_file(missing, R"({"architectures": ["MixtralForCausalLM"], "num_experts_per_tok": 2, )" +
                          base + "}");
  expect_config_error([&] { load_model(missing.string(), catalog()); },
                      {missing.string(), "num_local_experts", "missing"});
  const fs::path topk = dir / "topk.json";
  write_file(topk, R"({"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4,
    "num_experts_per_tok": 5, )" +
                       base + "}");
  expect_config_error([&] { load_model(topk.string(), catalog()); },
                      {topk.string(), "num_experts_per_tok", "[1, 4]", "5"});
  const fs::path sparse = dir / "sparse.json";
  write_file(sparse, R"({"architectures": ["Qwen2MoeForCausalLM"], "num_experts": 4,
    "num_experts_per_tok": 2, "decoder_sparse_step": 2, )" +
                         base + "}");
  expect_config_error([&] { load_model(sparse.string(), catalog()); },
                      {sparse.string(), "decoder_sparse_step", "only 1"});
  const fs::path mlp_only = dir / "mlp_only.json";
  write_file(mlp_only, R"({"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4,
    "num_experts_per_tok": 2, "mlp_only_layers": [0], )" +
                           base + "}");
  expect_config_error([&] { load_model(mlp_only.string(), catalog()); },
                      {mlp_only.string(), "mlp_only_layers", "[0]"});
  const fs::path deepseek = dir / "deepseek.json";
  write_file(deepseek, R"({"architectures": ["DeepseekV3ForCausalLM"], )" + base + "}");
  expect_config_error([&] { load_model(deepseek.string(), catalog()); },
                      {"DeepseekV3ForCausalLM", "MixtralForCausalLM", "Qwen3MoeForCausalLM"});
}

TEST(MoeModel, CatalogueKeysAreCheckedWithFileAndLine) {
  const fs::path dir = temp_dir("moe_catalog");
  fs::create_directories(dir / "models");
  const std::string base =
      "num_layers: 2\nhidden_size: 64\nnum_heads: 4\nhead_dim: 16\nintermediate_size: 128\n"
      "vocab_size: 256\n";
  // Lines 1-6 are `base`; the key under test is on line 7 or 8.
  write_file(dir / "models" / "orphan.yaml", base + "experts_per_token: 2\n");
  expect_config_error([&] { load_model("orphan", dir.string()); },
                      {"orphan.yaml:7:", "experts_per_token", "needs num_experts"});
  write_file(dir / "models" / "topk.yaml", base + "num_experts: 8\nexperts_per_token: 9\n");
  expect_config_error([&] { load_model("topk", dir.string()); },
                      {"topk.yaml:8:", "experts_per_token"});
  write_file(dir / "models" / "nok.yaml", base + "num_experts: 8\n");
  expect_config_error([&] { load_model("nok", dir.string()); }, {"nok.yaml", "experts_per_token"});
  write_file(dir / "models" / "awq.yaml",
             base + "num_experts: 8\nexperts_per_token: 2\nquantization: awq\n");
  expect_config_error([&] { load_model("awq", dir.string()); },
                      {"awq.yaml:9:", "quantization", "mixture of experts", "fp8"});
  write_file(dir / "models" / "marlin.yaml",
             base + "num_experts: 8\nexperts_per_token: 2\nquantization: awq_marlin\n");
  expect_config_error([&] { load_model("marlin", dir.string()); },
                      {"marlin.yaml:9:", "quantization", "awq_marlin is not modelled", "fp8"});
  write_file(dir / "models" / "ok.yaml",
             base +
                 "num_experts: 8\nexperts_per_token: 2\nshared_expert_intermediate_size: 64\n"
                 "quantization: fp8\n");
  const ModelConfig ok = load_model("ok", dir.string());
  EXPECT_EQ(ok.shared_expert_intermediate_size, 64);
  // validate() on a config built in code.
  ModelConfig bad = easy_moe();
  bad.experts_per_token = 5;
  expect_config_error([&] { bad.validate(); }, {"experts_per_token", "[1, num_experts (4)]"});
  bad = easy_moe();
  bad.num_experts = 0;
  expect_config_error([&] { bad.validate(); }, {"experts_per_token", "needs num_experts"});
}

TEST(MoeRoofline, ExpertsTouchedGrowFromTopKToAllWithTheBatch) {
  const RooflineCostModel cm(easy_moe(), easy_hardware(), 10);
  // 4 (1 - (1 - 2/4)^T): 2, 3, 3.5, 3.75, ... 4.
  EXPECT_DOUBLE_EQ(cm.experts_touched(1), 2.0);
  EXPECT_DOUBLE_EQ(cm.experts_touched(2), 3.0);
  EXPECT_DOUBLE_EQ(cm.experts_touched(3), 3.5);
  EXPECT_DOUBLE_EQ(cm.experts_touched(4), 3.75);
  EXPECT_DOUBLE_EQ(cm.experts_touched(1000), 4.0);
  EXPECT_EQ(cm.experts_touched(0), 0.0);
  // Qwen3-30B-A3B, 8 of 128: 8 for one token; 128 (1 - (15/16)^32) = 111.77 at 32.
  const RooflineCostModel q3(load_model("Qwen3-30B-A3B", catalog()),
                             load_hardware("H200", catalog()), 16);
  EXPECT_NEAR(q3.experts_touched(1), 8.0, 1e-12);
  EXPECT_NEAR(q3.experts_touched(32), 128 * (1 - std::pow(15.0 / 16.0, 32)), 1e-9);
  EXPECT_NEAR(q3.experts_touched(32), 111.77, 0.01);
  // Dense: none.
  const RooflineCostModel dense(load_model("Llama-3-8B", catalog()),
                                load_hardware("H200", catalog()), 16);
  EXPECT_EQ(dense.experts_touched(32), 0.0);
}

TEST(MoeRoofline, DecodeReadsOnlyTheExpertsItsTokensAreRoutedTo) {
  const RooflineCostModel cm(easy_moe(), easy_hardware(), 10);
  // One decode token. GEMM launches per layer (bytes = weights + rows * (out + in) * 2):
  //   QKV 6e6 + 8,000; O 2e6 + 4,000; router 8,000 + 2,008; experts gate/up 2 touched * 1e6 *
  //   2 + 2 rows * 2,000 * 2 = 4,008,000; down 2 * 1e6 + 2 * 1,500 * 2 = 2,006,000:
  //   14,036,008 per layer, 140,360,080 in all -> 1.4036008 ms; FLOPs 2 * 7,004,000 * 10 =
  //   140,080,000 -> 0.14008 ms: memory-bound.
  const StepCostBreakdown one = cm.breakdown(decode_plan(1, 100));
  EXPECT_NEAR(one.gemm, 1.4036008e-3, 1e-12);
  // Elementwise per layer: (8h + 2(q + kv) + 3 * 2 experts * 500) * 2 = 30,000; routing
  // 4 * 2 + 8 * 2 = 24; the weighted sum (2 + 1) * 1000 * 2 = 6,000: 36,024; x10 + embedding
  // 4,000 = 364,240 B -> 3.6424 us.
  EXPECT_NEAR(one.elementwise, 3.6424e-6, 1e-15);
  // Two tokens touch 3 experts: 2 * 140,080,000 FLOPs; bytes 10 * (6e6 + 2e6 + 8,000) + 3 *
  // 3e6 * 10 + 2 * 280,080 = 80,080,000 + 90,000,000 + 560,160 = 170,640,160 -> 1.7064016 ms,
  // where a dense model's weights cost the same at any batch.
  const StepCostBreakdown two = cm.breakdown(decode_plan(2, 100));
  EXPECT_NEAR(two.gemm, 1.7064016e-3, 1e-12);
  // A 1000-token prefill touches all 4: FLOPs 1.4008e11 -> 140.08 ms (compute-bound; bytes
  // 80,080,000 + 120,000,000 + 280,080,000 = 4.8016e8 -> 4.8 ms).
  const StepCostBreakdown pre = cm.breakdown(prefill_plan(0, 1000, true));
  EXPECT_NEAR(pre.gemm, 0.14008, 1e-12);
  // Bytes reported: the GEMMs' as above, the elementwise launches', attention's and the LM
  // head's (1000 * 1000 * 2 + 2,000 * 2 = 2,004,000); decode attention at context 100:
  // KV 2 * 10 * 1000 * 2 = 40,000 B per token * 101 + Q and O 40,000 = 4,080,000.
  EXPECT_NEAR(one.bytes, 140'360'080.0 + 364'240 + 4'080'000 + 2'004'000, 1e-3);
  // The same shape with every expert dense (intermediate 4 * 500 = 2000, all used): its GEMMs
  // read all experts' weights even for one token and compute 10,004,000-parameter layers.
  ModelConfig dense = easy_moe();
  dense.num_experts = 0;
  dense.experts_per_token = 0;
  dense.intermediate_size = 2000;
  const RooflineCostModel all(dense, easy_hardware(), 10);
  EXPECT_GT(all.breakdown(decode_plan(1, 100)).gemm, one.gemm);
}

// A shared expert (Qwen2-MoE) adds three launches a layer; with the routed two that made eight,
// one past the array the layer's launches went into (ASan: stack-buffer-overflow).
TEST(MoeRoofline, ASharedExpertAddsItsLaunches) {
  ModelConfig m = easy_moe();
  m.shared_expert_intermediate_size = 600;
  const RooflineCostModel cm(m, easy_hardware(), 10);
  // One decode token: the routed model's 1.4036008 ms plus, a layer, the shared gate/up
  // 2 * 600 * 1000 * 2 + (1200 + 1000) * 2 = 2,404,400 B, down 1,200,000 + 3,200 and the shared
  // gate 2,000 + 2,002: 3,611,602 B, x10 layers at 1e11 B/s = 0.3611602 ms.
  EXPECT_NEAR(cm.breakdown(decode_plan(1, 100)).gemm, 1.4036008e-3 + 3.611602e-4, 1e-12);
  EXPECT_GT(cm.breakdown(prefill_plan(0, 1000, true)).gemm, 0.14008);
}

TEST(MoeRoofline, TensorParallelismShardsEveryExpertAndReplicatesTheRouter) {
  ModelConfig m = easy_moe();
  m.shared_expert_intermediate_size = 600;
  const ModelConfig shard = tensor_shard(m, 2);
  EXPECT_EQ(shard.num_experts, 4);
  EXPECT_EQ(shard.experts_per_token, 2);
  EXPECT_EQ(shard.intermediate_size, 250);
  EXPECT_EQ(shard.shared_expert_intermediate_size, 300);
  // Per GPU: attention 2e6, experts 4 * 3 * 1000 * 250 = 3e6, router 4,000 (whole), shared
  // 3 * 1000 * 300 + 1,000 = 901,000.
  EXPECT_EQ(shard.linear_params_per_layer(), 2'000'000 + 3'000'000 + 4'000 + 901'000);
  m.intermediate_size = 503;
  expect_config_error([&] { (void)tensor_shard(m, 5); }, {"intermediate_size 503"});
  m.intermediate_size = 500;
  m.shared_expert_intermediate_size = 101;
  expect_config_error([&] { (void)tensor_shard(m, 5); },
                      {"shared_expert_intermediate_size 101", "not divisible by 5"});
  // Mixtral needs two H100s: its 93 GB do not fit one, and two hold half each.
  const ModelConfig mixtral = load_model("Mixtral-8x7B", catalog());
  const HardwareConfig h100 = load_hardware("H100-SXM", catalog());
  EXPECT_THROW(compute_kv_capacity(mixtral, h100, {}), ConfigError);
  KvCapacityOptions tp2;
  tp2.tensor_parallel = 2;
  EXPECT_GT(compute_kv_capacity(mixtral, h100, tp2).num_gpu_blocks, 1000);
}

TEST(MoeRoofline, LoraOnAMixtureOfExpertsIsRefused) {
  expect_config_error([] { RooflineCostModel cm(easy_moe(), easy_hardware(), 10, {}, 16); },
                      {"serving.lora", "mixture of experts", "easy-moe"});
}

TEST(MoeEngine, RefusesMixturesOfExpertsAndQkNorm) {
  expect_config_error([] { (void)load_llama_config("Mixtral-8x7B", catalog()); },
                      {"Mixtral-8x7B", "mixture of experts", "num_experts 8", "sim run"});
  expect_config_error([] { (void)load_llama_config("Qwen3-30B-A3B", catalog()); },
                      {"Qwen3-30B-A3B", "mixture of experts"});
  const fs::path dir = temp_dir("moe_engine");
  const fs::path dense = dir / "qwen3.json";
  write_file(dense, R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 256})");
  expect_config_error([&] { (void)load_llama_config(dense.string(), catalog()); },
                      {"qk_norm", "Llama, Mistral and Qwen2"});
  // Through the command: exit code 2 with the reason, nothing written.
  const std::string tiny = servelab_home().string() + "/experiments/burst-tiny.yaml";
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = servelab_program("engine") + " run " + tiny +
                          " --set model=Mixtral-8x7B --out " + (dir / "e").string() + " > " +
                          out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 2);
  EXPECT_NE(read_file(err).find("mixture of experts"), std::string::npos) << read_file(err);
  EXPECT_FALSE(fs::exists(dir / "e"));
}

TEST(MoeSim, ShippedMixturesRunAndMoreTokensPerStepCostMore) {
  const fs::path dir = temp_dir("moe_sim");
  const std::string exp = servelab_home().string() +
                          "/experiments/burst.yaml --set workload.num_requests=60 "
                          "--set serving.gpu_memory_utilization=0.9";
  const Cli r = run_sim("run " + exp + " --set model=Qwen3-30B-A3B --set hardware=H200 --out " +
                            (dir / "q3").string(),
                        dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Qwen3-30B-A3B on H200"), std::string::npos) << r.out;
  // Decode-only steps with more sequences read more experts' weights: they take longer.
  double small = 0, large = 0;
  for (const auto& step : read_csv(dir / "q3" / "steps.csv")) {
    if (step.at("prefill_tokens") != "0") continue;
    const int decodes = std::stoi(step.at("decode_tokens"));
    const double ms = std::stod(step.at("duration_ms"));
    if (decodes == 1 && small == 0) small = ms;
    if (decodes >= 8) large = std::max(large, ms);
  }
  ASSERT_GT(small, 0);
  ASSERT_GT(large, 0);
  EXPECT_GT(large, 1.5 * small);
  // Mixtral on one H100 does not fit: exit code 2 naming the model and the GPU.
  const Cli no = run_sim("run " + exp + " --set model=Mixtral-8x7B --set hardware=H100-SXM --out " +
                             (dir / "mx").string(),
                         dir);
  EXPECT_EQ(no.code, 2);
  EXPECT_NE(no.err.find("Mixtral-8x7B"), std::string::npos) << no.err;
  // An experiment asking for AWQ weights on a mixture of experts: the experiment's key named.
  const Cli awq = run_sim("run " + exp +
                              " --set model.name=Qwen3-30B-A3B --set model.quantization=awq "
                              "--set hardware=H200 --out " +
                              (dir / "awq").string(),
                          dir);
  EXPECT_EQ(awq.code, 2);
  EXPECT_NE(awq.err.find("--set model.quantization: key 'model.quantization': awq is not "
                         "modelled for a mixture of experts"),
            std::string::npos)
      << awq.err;
  EXPECT_FALSE(fs::exists(dir / "awq"));
  // LoRA on a mixture of experts is refused too.
  const Cli lora = run_sim("run " + servelab_home().string() +
                               "/experiments/lora.yaml --set model=Qwen3-30B-A3B --set "
                               "hardware=H200 --out " +
                               (dir / "lora").string(),
                           dir);
  EXPECT_EQ(lora.code, 2);
  EXPECT_NE(lora.err.find("serving.lora"), std::string::npos) << lora.err;
  EXPECT_FALSE(fs::exists(dir / "mx"));
}

}  // namespace
}  // namespace servelab
