// Tensor and pipeline parallelism (serving/parallel_config.h) in the KV capacity, the roofline
// cost model and `sim run`: hand-computed capacities, the communication and pipeline terms,
// and the errors of a bad `parallel:` section.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serving/home.h"
#include "serving/kv_capacity.h"
#include "serving/parallel_config.h"
#include "sim/roofline_cost_model.h"
#include "tests/cost_fixtures.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using namespace servelab::test_util;

using test_util::expect_config_error;

// 4 layers, hidden 1024, 8 heads of 128 (8 KV heads), intermediate 4096, vocabulary 32000,
// bf16, untied: 132,654,080 parameters.
ModelConfig small_model() {
  ModelConfig m;
  m.name = "small";
  m.num_layers = 4;
  m.hidden_size = 1024;
  m.num_heads = 8;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  m.intermediate_size = 4096;
  m.vocab_size = 32000;
  return m;
}

// 1 GiB of memory, round peaks.
HardwareConfig small_gpu() {
  HardwareConfig hw;
  hw.name = "small-gpu";
  hw.peak_flops = 100e12;
  hw.peak_flops_fp32 = 10e12;
  hw.hbm_bandwidth = 1e12;
  hw.memory_bytes = std::int64_t{1} << 30;
  hw.host_link_bandwidth = 32e9;
  return hw;
}

// vLLM's get_pp_indices: the extra layers go to the stages before the last, from the one
// before the last back (the first stage only when every stage but the last takes one).
TEST(Parallelism, StageLayersSplitAsVllmSplitsThem) {
  const auto split = [](std::int32_t layers, std::int32_t stages) {
    std::vector<std::int32_t> out;
    for (std::int32_t s = 0; s < stages; ++s) out.push_back(stage_layers(layers, stages, s));
    return out;
  };
  EXPECT_EQ(split(32, 3), (std::vector<std::int32_t>{11, 11, 10}));
  EXPECT_EQ(split(28, 3), (std::vector<std::int32_t>{9, 10, 9}));  // was 10, 9, 9
  EXPECT_EQ(split(22, 4), (std::vector<std::int32_t>{5, 6, 6, 5}));
  EXPECT_EQ(split(80, 4), (std::vector<std::int32_t>{20, 20, 20, 20}));
  EXPECT_EQ(split(7, 1), (std::vector<std::int32_t>{7}));
}

TEST(Parallelism, TensorShardSplitsHeadsKvHeadsIntermediateAndVocabulary) {
  const ModelConfig llama = load_model("Llama-3-8B", default_catalog_dir());  // 32 / 8 heads
  const ModelConfig s2 = tensor_shard(llama, 2);
  EXPECT_EQ(s2.num_heads, 16);
  EXPECT_EQ(s2.num_kv_heads, 4);
  EXPECT_EQ(s2.intermediate_size, llama.intermediate_size / 2);
  EXPECT_EQ(s2.vocab_size, (llama.vocab_size + 1) / 2);
  EXPECT_EQ(s2.hidden_size, llama.hidden_size);
  // More GPUs than KV heads: each GPU keeps one KV head (replicated).
  EXPECT_EQ(tensor_shard(llama, 16).num_kv_heads, 1);
  EXPECT_EQ(tensor_shard(llama, 1).num_heads, 32);
  expect_config_error([&] { tensor_shard(llama, 3, "e.yaml:4:11: key 'parallel.tensor'"); },
                      {"e.yaml:4:11", "parallel.tensor", "32 attention heads", "3"});
}

TEST(Parallelism, KvCapacityPerGpuHandComputed) {
  const ModelConfig m = small_model();
  const HardwareConfig hw = small_gpu();
  KvCapacityOptions o;
  o.gpu_memory_utilization = 1.0;
  o.activation_reserve_bytes = 0;
  // One GPU: 1 GiB - 265,308,160 B of weights = 808,433,664 B; blocks of 16 tokens are
  // 2 * 4 * 1024 * 2 * 16 = 262,144 B: 3,083 blocks.
  const KvCapacity one = compute_kv_capacity(m, hw, o);
  EXPECT_EQ(one.weight_bytes, 265'308'160);
  EXPECT_EQ(one.num_gpu_blocks, 3083);
  // Tensor 2: per GPU 66,331,648 parameters (half of every matrix, the norms whole) =
  // 132,663,296 B; half the KV heads: 131,072 B a block: 941,078,528 / 131,072 = 7,179 blocks.
  o.tensor_parallel = 2;
  const KvCapacity tp2 = compute_kv_capacity(m, hw, o);
  EXPECT_EQ(tp2.num_gpus, 2);
  EXPECT_EQ(tp2.weight_bytes, 132'663'296);
  EXPECT_EQ(tp2.gpu_block_bytes, 131'072);
  EXPECT_EQ(tp2.block_bytes, 262'144);  // a block of the whole model
  EXPECT_EQ(tp2.num_gpu_blocks, 7179);
  // Pipeline 2: stage 0 holds 2 layers + the embedding (132,653,056 B), stage 1 2 layers, the
  // final norm and the LM head (132,655,104 B); each has blocks of 131,072 B:
  // 941,088,768 / 131,072 and 941,086,720 / 131,072 are both 7,179 blocks (the terms reported
  // are the first stage's, on a tie).
  o.tensor_parallel = 1;
  o.pipeline_parallel = 2;
  const KvCapacity pp2 = compute_kv_capacity(m, hw, o);
  EXPECT_EQ(pp2.weight_bytes, 132'653'056);
  EXPECT_EQ(pp2.gpu_block_bytes, 131'072);
  EXPECT_EQ(pp2.num_gpu_blocks, 7179);
  // Llama-3-70B does not fit one H100; over four it does.
  const HardwareConfig h100 = load_hardware("H100-SXM", default_catalog_dir());
  const ModelConfig big = load_model("Llama-3-70B", default_catalog_dir());
  EXPECT_THROW(compute_kv_capacity(big, h100, {}), ConfigError);
  KvCapacityOptions four;
  four.tensor_parallel = 4;
  EXPECT_GT(compute_kv_capacity(big, h100, four).num_gpu_blocks, 10000);
  KvCapacityOptions on_l40s;
  on_l40s.tensor_parallel = 2;
  expect_config_error(
      [&] { compute_kv_capacity(big, load_hardware("L40S", default_catalog_dir()), on_l40s); },
      {"Llama-3-70B", "tensor 2", "no room"});
}

TEST(Parallelism, TensorParallelStepIsTheShardPlusAllReducesHandComputed) {
  const ModelConfig m = small_model();
  const HardwareConfig hw = small_gpu();
  ParallelConfig p;
  p.tensor = 2;
  p.tp_all_reduce = {10e-6, 1e-12};  // 10 us + 1 ps per byte
  const RooflineCostModel tp(m, hw, 16, p);
  const RooflineCostModel shard(tensor_shard(m, 2), hw, 16);
  StepFeatures f;
  f.num_tokens = f.prefill_tokens = 100;
  f.prefill_pairs = 100 * 101 / 2;
  f.num_sampled = 1;
  const StepCostBreakdown a = tp.breakdown(f), b = shard.breakdown(f);
  EXPECT_DOUBLE_EQ(a.gemm, b.gemm);
  EXPECT_DOUBLE_EQ(a.prefill_attention, b.prefill_attention);
  EXPECT_DOUBLE_EQ(a.lm_head, b.lm_head);
  // 2 * 4 + 1 = 9 all-reduces of 100 tokens x 1024 x 2 B = 204,800 B: 9 x 10.2048 us.
  EXPECT_NEAR(a.communication, 9 * (10e-6 + 204800e-12), 1e-15);
  EXPECT_EQ(a.pipeline, 0);
  EXPECT_NEAR(a.total(), b.total() + a.communication, 1e-12);
  EXPECT_EQ(tp.step_time(StepPlan{}), 0);
  // Two GPUs do twice the shard's FLOPs.
  EXPECT_DOUBLE_EQ(a.flops, 2 * b.flops);
  // Half the KV per GPU: a block swaps in half the time.
  EXPECT_EQ(tp.block_bytes() * 2, RooflineCostModel(m, hw, 16).block_bytes());
}

TEST(Parallelism, PipelineStagesAndMicroBatches) {
  const ModelConfig m = small_model();
  const HardwareConfig hw = small_gpu();
  const RooflineCostModel single(m, hw, 16);
  StepFeatures f;
  f.num_tokens = f.decode_tokens = 64;
  f.decode_pairs = f.decode_context_tokens = 64 * 500;
  f.num_sampled = 64;
  // One micro-batch, a 5 us send: the stages run one after the other, the same work plus one
  // send.
  ParallelConfig p;
  p.pipeline = 2;
  p.stage_send = {5e-6, 0};
  const StepCostBreakdown one = RooflineCostModel(m, hw, 16, p).breakdown(f);
  EXPECT_NEAR(one.total(), single.breakdown(f).total() + 5e-6, 1e-12);
  EXPECT_NEAR(one.communication, 5e-6, 1e-15);
  // A send moves the hidden states and the residual (vLLM's IntermediateTensors): 2 T h b.
  p.stage_send = {0, 1e-9};
  EXPECT_NEAR(RooflineCostModel(m, hw, 16, p).breakdown(f).communication,
              2.0 * 64 * m.hidden_size * m.dtype_bytes * 1e-9, 1e-15);
  p.stage_send = {5e-6, 0};
  // Two micro-batches of 32 decode tokens: each is priced as a step of 32, and the second
  // waits behind the slowest stage (at least half, at most all of one micro-batch's time).
  p.microbatches = 2;
  const StepCostBreakdown two = RooflineCostModel(m, hw, 16, p).breakdown(f);
  StepFeatures half = f;
  half.num_tokens = half.decode_tokens = half.num_sampled = 32;
  half.decode_pairs = half.decode_context_tokens = 32 * 500;
  EXPECT_DOUBLE_EQ(two.gemm, single.breakdown(half).gemm);
  const double pass =
      two.gemm + two.elementwise + two.decode_attention + two.lm_head + two.communication;
  EXPECT_GE(two.pipeline, pass / 2 - 1e-12);
  EXPECT_LE(two.pipeline, pass);
  // Short contexts: the step streams the weights, once per micro-batch, so micro-batches cost
  // more than they save.
  StepFeatures light = f;
  light.decode_pairs = light.decode_context_tokens = 64 * 10;
  p.microbatches = 1;
  const double light_one = RooflineCostModel(m, hw, 16, p).breakdown(light).total();
  p.microbatches = 2;
  EXPECT_GT(RooflineCostModel(m, hw, 16, p).breakdown(light).total(), light_one);
  // The default is the single-GPU model, term for term.
  const StepCostBreakdown d = RooflineCostModel(m, hw, 16, ParallelConfig{}).breakdown(f);
  EXPECT_EQ(d.total(), single.breakdown(f).total());
}

TEST(Parallelism, PlaceReplicaPricesCollectivesOverTheTopology) {
  InterconnectSpec ports;
  ports.gpus_per_node = 8;
  ports[LinkKind::kNvlink] = {450e9, 1e-6};
  ports[LinkKind::kInfiniband] = {50e9, 2.5e-6};
  UniformTopologySpec s;
  s.nodes = 2;
  s.gpus_per_node = 8;
  const Topology t = build_uniform_topology(s, ports, "test");
  // Tensor 8 in each node, pipeline 2 across: all-reduce on NVLink, send over InfiniBand.
  const ParallelConfig p = place_replica(8, 2, 1, t);
  EXPECT_NEAR(p.tp_all_reduce.latency_s, 2 * 7 * 2e-6, 1e-15);
  EXPECT_NEAR(p.tp_all_reduce.s_per_byte, 1.75 / 450e9, 1e-24);
  EXPECT_NEAR(p.stage_send.latency_s, 5e-6, 1e-15);
  EXPECT_NEAR(p.stage_send.s_per_byte, 1 / 50e9, 1e-24);
  expect_config_error([&] { place_replica(8, 3, 1, t); }, {"24 GPUs", "16"});
  // A second replica of tensor 4 from GPU 4 stays in node 0; from GPU 6 it would span two.
  check_replica_placement(4, 1, t, 4, "x.yaml:3:5: key 'cluster.tp'", "p");
  expect_config_error(
      [&] { check_replica_placement(4, 1, t, 6, "x.yaml:3:5: key 'cluster.tp'", "p"); },
      {"x.yaml:3:5", "cluster.tp", "node0.gpu6 to node1.gpu1", "spans two nodes"});
  expect_config_error([&] { check_replica_placement(4, 2, t, 12, "t", "x.yaml:4:1: key 'pp'"); },
                      {"x.yaml:4:1", "needs 8 GPUs from GPU 12", "has 16"});
  expect_config_error([&] { check_replica_placement(16, 1, t, 0, "x.yaml:2:1: key 'tp'", "p"); },
                      {"x.yaml:2:1", "larger than a node's GPUs (8)"});
}

// `sim run` with a `parallel:` section: it runs, decodes faster with more GPUs, and refuses bad
// sections by key and line.
std::string experiment(const std::string& model, const std::string& hardware,
                       const std::string& extra) {
  return "name: par\nseed: 3\nmodel: " + model + "\nhardware: " + hardware +
         "\nserving:\n  max_model_len: 2048\n" + extra +
         "workload:\n  type: synthetic\n  num_requests: 40\n"
         "  arrival: {process: poisson, rate: 20}\n"
         "  prompt_len: {dist: uniform, min: 100, max: 400}\n"
         "  output_len: {dist: uniform, min: 20, max: 80}\n";
}

double mean_tpot_ms(const fs::path& run) {
  const nlohmann::json s = nlohmann::json::parse(read_file(run / "summary.json"));
  return s.at("tpot_ms").at("mean").get<double>();
}

TEST(Parallelism, SimRunWithTensorAndPipelineParallelism) {
  const fs::path dir = temp_dir("parallel-run");
  write_file(dir / "tp1.yaml", experiment("Llama-3-8B", "H100-SXM", ""));
  write_file(dir / "tp4.yaml",
             experiment("Llama-3-8B", "H100-SXM", "parallel: {tensor: 4, pipeline: 2}\n"));
  Cli cli = run_sim("run " + (dir / "tp1.yaml").string() + " --out " + (dir / "a").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  cli = run_sim("run " + (dir / "tp4.yaml").string() + " --out " + (dir / "b").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_LT(mean_tpot_ms(dir / "b"), mean_tpot_ms(dir / "a"));
  EXPECT_NE(read_file(dir / "b" / "config.yaml").find("parallel: {tensor: 4, pipeline: 2"),
            std::string::npos);
  // Same again: byte-identical.
  cli = run_sim("run " + (dir / "tp4.yaml").string() + " --out " + (dir / "c").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_EQ(read_file(dir / "b" / "steps.csv"), read_file(dir / "c" / "steps.csv"));
  // A model too large for one GPU runs over four, with an explicit topology.
  write_file(dir / "big.yaml",
             experiment("Llama-3-70B", "H100-SXM",
                        "parallel:\n  tensor: 4\ntopology: {nodes: 1, gpus_per_node: 4}\n"));
  cli = run_sim("run " + (dir / "big.yaml").string() + " --out " + (dir / "d").string(), dir);
  EXPECT_EQ(cli.code, 0) << cli.err;
  fs::remove_all(dir);
}

// The shipped experiment: Llama-3-70B over 4-8 H100s. More tensor-parallel GPUs decode faster;
// a pipeline of sequential stages does not; micro-batches re-read the weights.
TEST(Parallelism, ShippedExperimentComparesTensorAndPipeline) {
  const fs::path dir = temp_dir("parallel-compare");
  const Cli cli = run_sim("compare " + (servelab_home() / "experiments/parallelism.yaml").string() +
                              " --quiet --out " + (dir / "c").string(),
                          dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  std::map<std::string, double> tpot;
  for (const auto& row : read_csv(dir / "c" / "compare.csv")) {
    EXPECT_EQ(row.at("completed"), "1000") << row.at("variant");
    tpot[row.at("variant")] = std::stod(row.at("tpot_p50_ms"));
  }
  ASSERT_EQ(tpot.size(), 6u);
  EXPECT_LT(tpot["tp8"], tpot["tp4"]);
  EXPECT_GT(tpot["tp8"], tpot["tp4"] / 2);  // the all-reduces do not shrink
  // Sequential stages: about tp4's TPOT (each step a little longer by the sends; the p50 over
  // requests moves with the batching by less than that), whether the stages share a node or not.
  EXPECT_NEAR(tpot["tp4-pp2"], tpot["tp4"], 0.02 * tpot["tp4"]);
  EXPECT_NEAR(tpot["tp4-pp2-two-nodes"], tpot["tp4-pp2"], 0.02 * tpot["tp4"]);
  EXPECT_GT(tpot["tp4-pp2-mb2"], 1.2 * tpot["tp4-pp2"]);
  EXPECT_GT(tpot["tp2-pp4"], tpot["tp4"]);
  fs::remove_all(dir);
}

TEST(Parallelism, BadParallelSectionsNameKeyAndLine) {
  const fs::path dir = temp_dir("parallel-errors");
  struct Case {
    std::string extra, model, hardware;
    std::vector<std::string> parts;
  };
  // The experiment's first 6 lines are fixed; the section under test starts on line 7.
  const std::vector<Case> cases = {
      // Heads not divisible by tensor (line 8: the key's line).
      {"parallel:\n  tensor: 3\n",
       "Llama-3-8B",
       "H100-SXM",
       {"e.yaml:8:", "parallel.tensor", "32 attention heads"}},
      // Wider than a node (8 GPUs on an HGX H100).
      {"parallel:\n  tensor: 16\n",
       "Llama-3-8B",
       "H100-SXM",
       {"e.yaml:8:", "parallel.tensor", "larger than a node's GPUs (8)"}},
      // More GPUs than the topology has.
      {"parallel:\n  tensor: 2\n  pipeline: 4\ntopology: {nodes: 1, gpus_per_node: 4}\n",
       "Llama-3-8B",
       "H100-SXM",
       {"e.yaml:9:", "parallel.pipeline", "needs 8 GPUs"}},
      // The model does not fit even split in two.
      {"parallel:\n  tensor: 2\n",
       "Llama-3-70B",
       "L40S",
       {"e.yaml:8:", "key 'parallel'", "no room"}},
      // Unknown key, micro-batches without a pipeline, a bad topology.
      {"parallel:\n  tensors: 2\n", "Llama-3-8B", "H100-SXM", {"e.yaml:8:", "tensors"}},
      {"parallel:\n  microbatches: 2\n",
       "Llama-3-8B",
       "H100-SXM",
       {"e.yaml:8:", "microbatches", "pipeline"}},
      {"parallel: {tensor: 2}\ntopology: {nodes: 1, intra: nvlnk}\n",
       "Llama-3-8B",
       "H100-SXM",
       {"e.yaml:8:", "topology.intra", "nvlink"}},
      // A model that does not fit one GPU, without a parallel section: the experiment is named.
      {"", "Llama-3-70B", "L40S", {"e.yaml: model Llama-3-70B on L40S: no room"}},
      // A topology is checked even without parallelism.
      {"topology: {nodes: 1, intra: nvlnk}\n",
       "Llama-3-8B",
       "H100-SXM",
       {"e.yaml:7:", "topology.intra", "nvlink"}},
      // A calibrated cost model has no communication terms.
      {"parallel: {tensor: 2}\ncost_model: {file: experiments/catalog/calibrated/tiny-cpu.yaml}\n",
       "tiny",
       "H100-SXM",
       {"e.yaml:7:", "parallel", "calibrated"}},
  };
  for (const Case& c : cases) {
    write_file(dir / "e.yaml", experiment(c.model, c.hardware, c.extra));
    const Cli cli =
        run_sim("run " + (dir / "e.yaml").string() + " --out " + (dir / "out").string(), dir);
    EXPECT_EQ(cli.code, 2) << c.extra << cli.err;
    for (const std::string& p : c.parts) {
      EXPECT_NE(cli.err.find(p), std::string::npos) << "'" << p << "' not in: " << cli.err;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
