// Model parallelism per cluster pool (`cluster.pools[i].parallel`, `.topology`): a pool of one
// replica prices its steps and sizes its KV cache as a single-replica run with the same
// `parallel:` does; pools report their GPUs; a P/D link's default bandwidth counts every GPU's
// host link; bad pools name the key and line (exit code 2 from `sim run` and `engine run`).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "serving/home.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using namespace servelab::test_util;

// Llama-3-8B on H100s, 60 requests at 20/s; `extra` goes after `serving:` (lines 1-6 fixed).
std::string experiment(const std::string& extra, const std::string& serving = "") {
  return "name: par\nseed: 5\nmodel: Llama-3-8B\nhardware: H100-SXM\nserving:\n"
         "  max_model_len: 4096\n" +
         serving + extra +
         "workload:\n  type: synthetic\n  num_requests: 60\n"
         "  arrival: {process: poisson, rate: 20}\n"
         "  prompt_len: {dist: uniform, min: 200, max: 1500}\n"
         "  output_len: {dist: uniform, min: 10, max: 60}\n";
}

nlohmann::json summary(const fs::path& run) {
  return nlohmann::json::parse(read_file(run / "summary.json"));
}

Cli run(const fs::path& dir, const std::string& name, const std::string& text) {
  write_file(dir / (name + ".yaml"), text);
  return run_sim("run " + (dir / (name + ".yaml")).string() + " --out " + (dir / name).string(),
                 dir);
}

// A pool of one replica with `parallel:` (and `topology:`) is the single-replica run with the
// same sections: the same KV blocks, the same step times, so the same requests.csv.
TEST(ClusterParallel, OneReplicaPoolMatchesTheParallelPlainRun) {
  const fs::path dir = temp_dir("cluster-par-one");
  const std::string par = "parallel: {tensor: 4, pipeline: 2}\n";
  const std::string topo = "topology: {nodes: 2, gpus_per_node: 4}\n";
  struct Case {
    std::string plain, pool;
  };
  for (const Case& c :
       {Case{par, "cluster:\n  pools:\n    - {name: tp, parallel: {tensor: 4, pipeline: 2}}\n"},
        Case{par + topo,
             "cluster:\n  pools:\n    - name: tp\n      parallel: {tensor: 4, pipeline: 2}\n"
             "      topology: {nodes: 2, gpus_per_node: 4}\n"}}) {
    Cli cli = run(dir, "plain", experiment(c.plain));
    ASSERT_EQ(cli.code, 0) << cli.err;
    cli = run(dir, "pool", experiment(c.pool));
    ASSERT_EQ(cli.code, 0) << cli.err;
    EXPECT_EQ(read_file(dir / "plain" / "requests.csv"), read_file(dir / "pool" / "requests.csv"));
    const nlohmann::json a = summary(dir / "plain"), b = summary(dir / "pool");
    EXPECT_EQ(a["run"]["num_gpu_blocks"], b["run"]["num_gpu_blocks"]);
    const nlohmann::json& pool = b["cluster"]["pools"][0];
    EXPECT_EQ(pool["tensor"], 4);
    EXPECT_EQ(pool["pipeline"], 2);
    EXPECT_EQ(pool["gpus"], 8);
    EXPECT_EQ(b["cluster"]["gpus"], 8);
    // config.yaml echoes the pool's sections.
    const std::string echoed = read_file(dir / "pool" / "config.yaml");
    EXPECT_NE(echoed.find("parallel: {tensor: 4, pipeline: 2, microbatches: 1}"), std::string::npos)
        << echoed;
    EXPECT_EQ(echoed.find("gpus_per_node: 4") != std::string::npos,
              c.pool.find("gpus_per_node") != std::string::npos)
        << echoed;
    for (const char* d : {"plain", "pool"}) fs::remove_all(dir / d);
  }
  fs::remove_all(dir);
}

// Pools of different parallelism side by side: the tensor-parallel pool decodes faster, and a
// pool's GPUs are count x tensor x pipeline.
TEST(ClusterParallel, HeterogeneousPoolsCountTheirGpus) {
  const fs::path dir = temp_dir("cluster-par-mixed");
  const Cli cli = run(dir, "mixed",
                      experiment("cluster:\n  router: round_robin\n  pools:\n"
                                 "    - {name: one, count: 2}\n"
                                 "    - {name: four, count: 2, parallel: {tensor: 4}}\n"));
  ASSERT_EQ(cli.code, 0) << cli.err;
  // The printed summary has a line per pool: its shape, GPUs and requests routed.
  EXPECT_NE(cli.out.find("replicas  GPUs    routed"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("four unified       2 x TP4     8        30"), std::string::npos)
      << cli.out;
  const nlohmann::json s = summary(dir / "mixed");
  EXPECT_EQ(s["requests"]["completed"], 60);
  const nlohmann::json& pools = s["cluster"]["pools"];
  EXPECT_EQ(pools[0]["gpus"], 2);
  EXPECT_EQ(pools[1]["gpus"], 8);
  EXPECT_EQ(s["cluster"]["gpus"], 10);
  // Each GPU of the tensor-parallel replica holds a quarter of the weights and of every block.
  EXPECT_GT(pools[1]["num_gpu_blocks"].get<std::int64_t>(),
            4 * pools[0]["num_gpu_blocks"].get<std::int64_t>());
  // Round robin sends request i to replica i mod 4 (replicas 0-1 are pool `one`): both pools
  // get the same mix of requests, and the TP pool's steps are shorter.
  std::map<std::string, std::pair<double, int>> tpot;  // pool -> (sum, n)
  for (const auto& r : read_csv(dir / "mixed" / "requests.csv")) {
    if (r.at("tpot_ms").empty()) continue;
    auto& [sum, n] = tpot[std::stoi(r.at("id")) % 4 < 2 ? "one" : "four"];
    sum += std::stod(r.at("tpot_ms"));
    ++n;
  }
  ASSERT_GT(tpot["one"].second, 0);
  ASSERT_GT(tpot["four"].second, 0);
  EXPECT_LT(tpot["four"].first / tpot["four"].second, tpot["one"].first / tpot["one"].second);
  fs::remove_all(dir);
}

// With no kv_transfer bandwidth, a P/D link is the lesser side's host links, one per GPU: prefill
// and decode replicas of two GPUs each move the same bytes in half the time.
TEST(ClusterParallel, DefaultTransferBandwidthCountsEveryGpu) {
  const fs::path dir = temp_dir("cluster-par-pd");
  const auto pd = [](const std::string& parallel) {
    return "cluster:\n  kv_transfer: {latency_us: 0}\n  pools:\n"
           "    - {name: p, count: 1, role: prefill" +
           parallel + "}\n    - {name: d, count: 1, role: decode" + parallel + "}\n";
  };
  Cli cli = run(dir, "tp1", experiment(pd("")));
  ASSERT_EQ(cli.code, 0) << cli.err;
  cli = run(dir, "tp2", experiment(pd(", parallel: {tensor: 2}")));
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_NE(cli.out.find("KV transfers 60, "), std::string::npos) << cli.out;
  const nlohmann::json a = summary(dir / "tp1")["cluster"]["kv_transfers"];
  const nlohmann::json b = summary(dir / "tp2")["cluster"]["kv_transfers"];
  ASSERT_GT(a["count"].get<std::int64_t>(), 0);
  EXPECT_EQ(a["count"], b["count"]);
  EXPECT_EQ(a["bytes"], b["bytes"]);  // the whole model's KV, whatever its split
  EXPECT_NEAR(b["transfer_mean_ms"].get<double>(), a["transfer_mean_ms"].get<double>() / 2,
              1e-3 * a["transfer_mean_ms"].get<double>());
  // The prefill pool of two GPUs computes prompts faster: lower TTFT.
  EXPECT_LT(summary(dir / "tp2")["ttft_ms"]["mean"].get<double>(),
            summary(dir / "tp1")["ttft_ms"]["mean"].get<double>());
  fs::remove_all(dir);
}

TEST(ClusterParallel, BadPoolsNameKeyAndLine) {
  const fs::path dir = temp_dir("cluster-par-errors");
  struct Case {
    std::string extra, serving;
    std::vector<std::string> parts;
  };
  // Lines 1-6 are fixed; `cluster:` is line 7, `pools:` line 8, the first pool line 9.
  const std::string pools = "cluster:\n  pools:\n";
  const std::vector<Case> cases = {
      {pools + "    - {name: a, parallel: {tensor: 3}}\n",
       "",
       {"e.yaml:9:", "cluster.pools[0].parallel.tensor", "32 attention heads"}},
      {pools + "    - {name: a}\n    - {name: b, parallel: {tensor: 16}}\n",
       "",
       {"e.yaml:10:", "cluster.pools[1].parallel.tensor", "larger than a node's GPUs (8)"}},
      {pools + "    - {name: a, parallel: {tensor: 2, pipeline: 4}, topology: {nodes: 1, "
               "gpus_per_node: 4}}\n",
       "",
       {"e.yaml:9:", "cluster.pools[0].parallel.pipeline", "needs 8 GPUs"}},
      {pools + "    - {name: a, topology: {nodes: 1, intra: nvlnk}}\n",
       "",
       {"e.yaml:9:", "cluster.pools[0].topology.intra", "nvlink"}},
      {pools + "    - {name: a, tensor_parallel: 2}\n",
       "",
       {"e.yaml:9:", "tensor_parallel", "parallel: {tensor: N"}},
      {pools + "    - {name: a, parallel: {microbatches: 2}}\n",
       "",
       {"e.yaml:9:", "microbatches", "pipeline"}},
      // Async scheduling refuses a pipeline anywhere (vLLM does).
      {pools + "    - {name: a, parallel: {pipeline: 2}}\n",
       "  async_scheduling: true\n",
       {"async_scheduling", "cluster.pools[0].parallel.pipeline"}},
      // Top-level parallel: with a cluster points at the pool's key.
      {"parallel: {tensor: 2}\n" + pools + "    - {name: a}\n",
       "",
       {"e.yaml:7:", "cluster.pools[i].parallel"}},
      // Too large for its GPUs even split in two: found when the pool is sized.
      {pools + "    - {name: a, model: Llama-3-70B, hardware: L40S, parallel: {tensor: 2}}\n",
       "",
       {"e.yaml:9:", "cluster.pools[0].parallel' (pool 'a')", "no room"}},
      // A calibrated profile was measured on one device.
      {pools + "    - {name: a, parallel: {tensor: 2}}\n"
               "cost_model: {file: experiments/catalog/calibrated/llama-3-8b-h200.yaml}\n",
       "",
       {"e.yaml:9:", "cluster.pools[0].parallel", "calibrated"}},
  };
  for (const Case& c : cases) {
    write_file(dir / "e.yaml", experiment(c.extra, c.serving));
    const Cli cli =
        run_sim("run " + (dir / "e.yaml").string() + " --out " + (dir / "o").string(), dir);
    EXPECT_EQ(cli.code, 2) << c.extra << cli.err;
    for (const std::string& p : c.parts) {
      EXPECT_NE(cli.err.find(p), std::string::npos) << "'" << p << "' not in: " << cli.err;
    }
    EXPECT_FALSE(fs::exists(dir / "o")) << c.extra;  // nothing written
  }
  fs::remove_all(dir);
}

// The engine runs each replica on one device: a pool's parallelism is refused by name.
TEST(ClusterParallel, EngineRefusesParallelPools) {
  const fs::path dir = temp_dir("cluster-par-engine");
  write_file(dir / "e.yaml",
             "name: e\nseed: 1\nmodel: tiny\nhardware: H100-SXM\nserving: {num_gpu_blocks: 64}\n"
             "workload: {type: synthetic, num_requests: 2, arrival: {process: poisson, rate: 5},"
             " prompt_len: 8, output_len: 2}\n"
             "cluster:\n  pools:\n    - {name: a, parallel: {tensor: 2}}\n");
  const std::string cmd = servelab_program("engine") + " run " + (dir / "e.yaml").string() +
                          " --out " + (dir / "o").string() + " > " + (dir / "out.txt").string() +
                          " 2> " + (dir / "err.txt").string();
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  const std::string err = read_file(dir / "err.txt");
  EXPECT_NE(err.find("cluster.pools[0].parallel"), std::string::npos) << err;
  EXPECT_NE(err.find("can only be simulated"), std::string::npos) << err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
