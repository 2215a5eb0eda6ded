// Pinned prefixes and the KV offload host tier on the CPU engine (issue 22, items 4 and 5): the
// executor's real copies to and from the tier store, and whole engine runs whose greedy tokens
// must equal those of the same run without pinning or offload (paging, eviction, offload and
// load back never change the answer), with hits counted per tier in summary.json.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/kv_offload_tiers.h"
#include "engine/cpu_executor.h"
#include "engine/engine_driver.h"
#include "engine/llama_weights.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "serving/model_config.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;

using namespace servelab::test_util;

TEST(CpuExecutorTier, StoresAndLoadsRunInTheSchedulersOrder) {
  const LlamaConfig llama =
      load_llama_config("tiny", servelab_home().string() + "/experiments/catalog");
  const LlamaWeights w = LlamaWeights::random(llama, 1);
  CpuExecutorOptions o;
  o.block_size = 4;
  o.num_blocks = 4;
  o.num_tier_slots = 2;
  CpuExecutor ex(w, o);
  auto fill = [&](BlockId b, float v) {
    for (std::int32_t l = 0; l < llama.model.num_layers; ++l) {
      for (float& x : ex.mutable_key_block(l, b)) x = v;
      for (float& x : ex.mutable_value_block(l, b)) x = v;
    }
  };
  fill(1, 1.0f);
  fill(2, 2.0f);
  // Block 1 is evicted into slot 0 before an allocation that loads slot 0 into block 3 and
  // evicts block 2 into slot 1; a later allocation loads slot 1 into block 1.
  StepPlan plan;
  plan.tier_stores = {{1, 0}, {2, 1}};
  plan.tier_loads = {{kHostTier, 3, 0, 1}, {kHostTier, 1, 1, 2}};
  ex.execute(plan);
  EXPECT_EQ(ex.tier_key_block(0, 0)[0], 1.0f);
  EXPECT_EQ(ex.tier_key_block(0, 1)[0], 2.0f);
  EXPECT_EQ(ex.key_block(0, 3)[0], 1.0f);
  EXPECT_EQ(ex.value_block(llama.model.num_layers - 1, 1)[0], 2.0f);
  EXPECT_GE(ex.tier_copy_ns(), 0);
  // One allocation's loads read their slots before its stores write, and write their blocks
  // after its stores read: block 2 (holding 2) is evicted into slot 0 while slot 0's old content
  // (1) is loaded into block 3; then block 3 is evicted into slot 1 while slot 0 is loaded into
  // block 3 itself.
  fill(2, 2.0f);
  StepPlan reuse;
  reuse.tier_stores = {{2, 0}};
  reuse.tier_loads = {{kHostTier, 3, 0, 0}};
  ex.execute(reuse);
  EXPECT_EQ(ex.tier_key_block(0, 0)[0], 2.0f);
  EXPECT_EQ(ex.key_block(0, 3)[0], 1.0f);  // slot 0 as it was before the store
  StepPlan evicted_dst;
  evicted_dst.tier_stores = {{3, 1}};
  evicted_dst.tier_loads = {{kHostTier, 3, 0, 0}};
  ex.execute(evicted_dst);
  EXPECT_EQ(ex.tier_key_block(0, 1)[0], 1.0f);  // block 3 as it was before the load
  EXPECT_EQ(ex.key_block(0, 3)[0], 2.0f);
  // Out of range: a clear error before anything changes.
  StepPlan bad;
  bad.tier_stores = {{1, 2}};
  EXPECT_THROW(ex.execute(bad), std::invalid_argument);
  bad.tier_stores.clear();
  bad.tier_loads = {{kDiskTier, 1, 0, 0}};
  EXPECT_THROW(ex.execute(bad), std::invalid_argument);
}

// All 40 arrivals at t = 0 on a 24-block pool: recompute preemptions and evictions of shared
// prefixes (engine_run_test's experiment).
const std::string kExperiment =
    "name: tiers\nseed: 11\nmodel: tiny\nhardware: H100-SXM\n"
    "serving:\n  block_size: 16\n  num_gpu_blocks: 24\n  max_num_batched_tokens: 256\n"
    "  max_num_seqs: 16\n  max_model_len: 384\n"
    "policies: {prefix_cache: hash, preemption: recompute}\n"
    "workload:\n  type: synthetic\n  num_requests: 40\n  start_s: 0\n"
    "  arrival: {process: fixed, rate: 1.0e12}\n"
    "  prompt_len: {dist: uniform, min: 20, max: 120}\n"
    "  output_len: {dist: uniform, min: 5, max: 40}\n"
    "  shared_prefix: {num_prefixes: 3, length: 32, fraction: 0.6}\n";

struct EngineResult {
  std::string tokens;  // tokens.jsonl
  nlohmann::json summary;
};

EngineResult run(const fs::path& dir, const std::string& name, const std::string& extra) {
  write_file(dir / (name + ".yaml"), kExperiment + extra);
  const ExperimentConfig c = load_experiment((dir / (name + ".yaml")).string(), {});
  EngineOptions eo;
  eo.out_dir = (dir / name).string();
  eo.write_tokens = true;
  run_engine(c, eo);
  return {read_file(dir / name / "tokens.jsonl"),
          nlohmann::json::parse(read_file(dir / name / "summary.json"))};
}

TEST(EngineTiers, OffloadAndPinningNeverChangeTheTokens) {
  const fs::path dir = temp_dir("engine_tiers");
  const EngineResult plain = run(dir, "plain", "");
  const EngineResult host = run(dir, "host", "kv_offload: {host: {blocks: 64}}\n");
  // A host tier smaller than the pool: its slots are reused while the run goes on.
  const EngineResult small = run(dir, "small", "kv_offload: {host: {blocks: 6}}\n");
  const EngineResult pinned = run(dir, "pinned",
                                  "prefix_cache:\n  pinned:\n"
                                  "    - {shared_prefix: 0, length: 32}\n"
                                  "    - {shared_prefix: 1, length: 32}\n"
                                  "kv_offload: {host: {blocks: 64}}\n");
  ASSERT_GT(plain.tokens.size(), 100u);
  EXPECT_EQ(host.tokens, plain.tokens);
  EXPECT_EQ(small.tokens, plain.tokens);
  EXPECT_EQ(pinned.tokens, plain.tokens);
  // The runs did what they are about: loads back from the host tier, counted per tier.
  EXPECT_FALSE(plain.summary.contains("kv_offload"));
  const nlohmann::json& h = host.summary;
  EXPECT_GT(h["kv_offload"]["host"]["loaded_blocks"].get<std::int64_t>(), 0);
  EXPECT_GT(h["prefix_cache"]["hit_tokens_host"].get<std::int64_t>(), 0);
  EXPECT_EQ(h["prefix_cache"]["hit_tokens_gpu"].get<std::int64_t>() +
                h["prefix_cache"]["hit_tokens_host"].get<std::int64_t>(),
            h["prefix_cache"]["hit_tokens"].get<std::int64_t>());
  EXPECT_GT(h["prefix_cache"]["hit_tokens"].get<std::int64_t>(),
            plain.summary["prefix_cache"]["hit_tokens"].get<std::int64_t>());
  EXPECT_EQ(h["kv_cache"]["offloaded_blocks"], h["kv_cache"]["evicted_blocks"]);
  EXPECT_GT(small.summary["kv_offload"]["dropped_blocks"].get<std::int64_t>(), 0);
  EXPECT_GT(small.summary["kv_offload"]["host"]["loaded_blocks"].get<std::int64_t>(), 0);
  EXPECT_EQ(pinned.summary["prefix_cache"]["pinned_blocks"], 4);
  EXPECT_GT(pinned.summary["prefix_cache"]["pinned_prefill_s"].get<double>(), 0);
  fs::remove_all(dir);
}

TEST(EngineTiers, SimulatedOnlyPartsAreClearErrors) {
  const fs::path dir = temp_dir("engine_tiers_errors");
  auto error_of = [&](const std::string& extra) {
    write_file(dir / "e.yaml", kExperiment + extra);
    try {
      const ExperimentConfig c = load_experiment((dir / "e.yaml").string(), {});
      EngineOptions eo;
      eo.out_dir = (dir / "out").string();
      run_engine(c, eo);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string disk = error_of("kv_offload: {host: {blocks: 8}, disk: {blocks: 8}}\n");
  EXPECT_NE(disk.find("e.yaml:20:"), std::string::npos) << disk;
  EXPECT_NE(disk.find("disk tier is simulated only"), std::string::npos) << disk;
  // Idle-session offload needs sessions (on this synthetic workload it would do nothing), and the
  // engine does not run it.
  const std::string none = error_of("kv_offload: {host: {blocks: 8}, idle_offload_s: 5}\n");
  EXPECT_NE(none.find("idle-session offload needs sessions"), std::string::npos) << none;
  write_file(dir / "s.yaml",
             kExperiment.substr(0, kExperiment.find("workload:")) +
                 "workload:\n  type: multiturn\n  num_sessions: 2\n"
                 "  session_arrival: {process: poisson, rate: 10}\n"
                 "  turns: {dist: fixed, value: 2}\n  think_time_s: {dist: fixed, value: 0}\n"
                 "  first_prompt_len: {dist: fixed, value: 40}\n"
                 "  new_tokens: {dist: fixed, value: 8}\n  output_len: {dist: fixed, value: 8}\n"
                 "kv_offload: {host: {blocks: 8}, idle_offload_s: 5}\n");
  std::string idle = "no error";
  try {
    const ExperimentConfig c = load_experiment((dir / "s.yaml").string(), {});
    EngineOptions eo;
    eo.out_dir = (dir / "out").string();
    run_engine(c, eo);
  } catch (const ConfigError& e) {
    idle = e.what();
  }
  EXPECT_NE(idle.find("idle_offload_s"), std::string::npos) << idle;
  EXPECT_NE(idle.find("simulated only"), std::string::npos) << idle;
  // A pinned token id past the model's vocabulary (tiny: 256) was embedded by row (a crash).
  const std::string token = error_of(
      "prefix_cache:\n  pinned:\n    - {tokens: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, "
      "13, 14, 15, 256]}\n");
  EXPECT_NE(token.find("e.yaml:"), std::string::npos) << token;
  EXPECT_NE(token.find("token id 256 is not in the model's vocabulary (ids 0 .. 255)"),
            std::string::npos)
      << token;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
