// LoRA adapters on the CPU engine (engine/lora_weights.h, engine/cpu_executor.h): the invariance
// property (a request under adapter a gives, greedy, the tokens of a dense run whose weights are
// merged W + scaling B A), with adapters and the base model mixed in one batch under max_loras;
// and cache isolation (the same prompt under the same adapter hits the prefix cache and gives the
// same tokens; under another adapter or none it does not hit).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "core/scheduler_invariants.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "engine/lora_weights.h"
#include "serving/home.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

constexpr std::uint64_t kSeed = 11;
constexpr std::int32_t kRank = 8;

class Capture : public SchedulerObserver {
 public:
  void on_finish(const Request& req, TimeNs) override {
    tokens[req.id()] = req.output_tokens;
    cached[req.id()] = req.num_cached_tokens;
  }
  std::map<RequestId, std::vector<std::int32_t>> tokens;
  std::map<RequestId, std::int32_t> cached;
};

RequestSpec Req(RequestId id, std::uint32_t lora, std::uint64_t content, std::int32_t prompt,
                std::int32_t outputs, TimeNs arrival = 0) {
  RequestSpec r =
      make_request(id, arrival, {{content, 0, static_cast<std::uint32_t>(prompt)}}, outputs);
  r.lora_id = lora;
  r.lora_rank = lora != 0 ? kRank : 0;
  return r;
}

// Runs `requests` (each added at its arrival step) to completion on `w`, with LoRA on when
// max_loras > 0; checks the scheduler's invariants every step.
Capture RunEngine(const LlamaWeights& w,
                  const std::vector<std::pair<std::int64_t, RequestSpec>>& requests,
                  std::int32_t max_loras, std::int32_t max_cached_loras = 0) {
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 32;  // prompts are chunked, decodes ride along
  sc.max_num_seqs = 8;
  sc.max_model_len = 256;
  sc.block_size = 8;
  sc.lora.max_loras = max_loras;
  sc.lora.max_lora_rank = 16;
  BlockPool pool(160);
  KvCacheManager kv(pool, sc.block_size, sc.max_model_len, sc.enable_prefix_caching);
  Capture cap;
  Scheduler s(sc, kv, &cap);
  CpuExecutorOptions eo;
  eo.block_size = sc.block_size;
  eo.num_blocks = 160;
  eo.enable_lora = max_loras > 0;
  eo.lora_seed = kSeed;
  eo.max_cached_loras = max_cached_loras;
  CpuExecutor ex(w, eo);
  std::size_t next = 0;
  TimeNs t = 0;
  for (std::int64_t step = 0; step < 10'000; ++step) {
    while (next < requests.size() && requests[next].first <= step) {
      s.add_request(requests[next++].second, t);
    }
    if (!s.has_unfinished() && next == requests.size()) break;
    const StepPlan& plan = s.schedule(t);
    check_scheduler_invariants(s, plan);
    t += 1000;
    if (plan.empty()) continue;
    s.complete(ex.execute(plan), t);
  }
  return cap;
}

TEST(LoraEngine, AdapterTokensEqualADenseRunWithMergedWeights) {
  const LlamaWeights w =
      LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), kSeed);
  // Adapters 1 and 2 and the base model in one batch; max_loras 1 makes adapter 2 wait while
  // adapter 1 runs (vLLM's skip), so batches mix adapter 1 or 2 with the base model.
  const std::vector<std::pair<std::int64_t, RequestSpec>> mixed = {
      {0, Req(0, 1, 501, 37, 12)}, {0, Req(1, 2, 502, 21, 10)}, {0, Req(2, 0, 503, 30, 9)},
      {0, Req(3, 1, 504, 15, 14)}, {1, Req(4, 2, 505, 26, 8)},  {2, Req(5, 0, 506, 19, 11)},
  };
  const Capture lora = RunEngine(w, mixed, 1);
  ASSERT_EQ(lora.tokens.size(), mixed.size());
  int differs = 0;
  for (const std::uint32_t adapter : {0u, 1u, 2u}) {
    // The requests of this adapter, alone, as base-model requests on the merged weights.
    std::vector<std::pair<std::int64_t, RequestSpec>> alone;
    for (const auto& [step, spec] : mixed) {
      if (spec.lora_id != adapter) continue;
      RequestSpec dense = spec;
      dense.lora_id = 0;
      dense.lora_rank = 0;
      alone.emplace_back(0, dense);
    }
    const LlamaWeights merged =
        adapter == 0 ? w : merge_lora(w, make_lora_adapter(w.config.model, kSeed, adapter, kRank));
    const Capture dense = RunEngine(merged, alone, 0);
    for (const auto& [step, spec] : alone) {
      EXPECT_EQ(lora.tokens.at(spec.id), dense.tokens.at(spec.id))
          << "request " << spec.id << " adapter " << adapter;
    }
    if (adapter != 0) {
      // The adapter changes what the model generates (so the comparison above means something).
      const Capture plain = RunEngine(w, alone, 0);
      for (const auto& [step, spec] : alone) {
        differs += plain.tokens.at(spec.id) != lora.tokens.at(spec.id) ? 1 : 0;
      }
    }
  }
  EXPECT_GE(differs, 3);
}

// A bounded adapter cache (the engine's: serving.lora.max_loras) drops adapters a step does not
// run and builds them again when needed: the same tokens as keeping every adapter.
TEST(LoraEngine, ABoundedAdapterCacheGivesTheSameTokens) {
  const LlamaWeights w =
      LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), kSeed);
  std::vector<std::pair<std::int64_t, RequestSpec>> requests;
  for (RequestId id = 0; id < 12; ++id) {
    requests.emplace_back(id, Req(id, static_cast<std::uint32_t>(1 + id % 4), 600 + id,
                                  10 + static_cast<std::int32_t>(id), 6));
  }
  const Capture all = RunEngine(w, requests, 2);
  const Capture bounded = RunEngine(w, requests, 2, 2);
  ASSERT_EQ(all.tokens.size(), requests.size());
  EXPECT_EQ(bounded.tokens, all.tokens);
}

TEST(LoraEngine, SamePromptHitsOnlyUnderTheSameAdapter) {
  const LlamaWeights w =
      LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), kSeed);
  // Request 0 runs first; then the same 40-token prompt under adapter 1 (hit: 32 tokens, the
  // last block is recomputed to sample), adapter 2 and the base model (no hit).
  const Capture c = RunEngine(w,
                              {{0, Req(0, 1, 777, 40, 6)},
                               {40, Req(1, 1, 777, 40, 6)},
                               {80, Req(2, 2, 777, 40, 6)},
                               {120, Req(3, 0, 777, 40, 6)}},
                              2);
  ASSERT_EQ(c.cached.size(), 4u);
  EXPECT_EQ(c.cached.at(0), 0);
  EXPECT_EQ(c.cached.at(1), 32);
  EXPECT_EQ(c.cached.at(2), 0);
  EXPECT_EQ(c.cached.at(3), 0);
  // The reused KV is adapter 1's: greedy, the same prompt gives the same tokens.
  EXPECT_EQ(c.tokens.at(1), c.tokens.at(0));
  EXPECT_NE(c.tokens.at(2), c.tokens.at(0));
}

TEST(LoraEngine, AnAdapterEntryNeedsLoraOnAndAConsistentRank) {
  const LlamaWeights w =
      LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), kSeed);
  const RequestSpec spec = Req(0, 1, 9, 8, 1);
  StepPlan plan;
  const std::vector<BlockId> table = {0};
  ScheduledRequest& e = plan.requests.emplace_back();
  e.id = 0;
  e.spec = &spec;
  e.num_tokens = 8;
  e.is_prefill = true;
  e.samples = true;
  e.block_table = table;
  plan.num_prefill_tokens = 8;
  CpuExecutorOptions eo;
  eo.block_size = 8;
  eo.num_blocks = 4;
  CpuExecutor off(w, eo);
  EXPECT_THROW(off.execute(plan), std::invalid_argument);
  eo.enable_lora = true;
  CpuExecutor on(w, eo);
  EXPECT_EQ(on.execute(plan).sampled_tokens.size(), 1u);
  RequestSpec other = spec;
  other.lora_rank = 4;  // adapter 1 was built with rank 8
  e.spec = &other;
  EXPECT_THROW(on.execute(plan), std::invalid_argument);
  // Also once the adapter has been dropped from a bounded cache: its id keeps its rank.
  eo.max_cached_loras = 1;
  CpuExecutor bounded(w, eo);
  e.spec = &spec;
  bounded.execute(plan);
  RequestSpec two = spec;
  two.lora_id = 2;  // replaces adapter 1 in the one-adapter cache
  e.spec = &two;
  bounded.execute(plan);
  e.spec = &other;
  EXPECT_THROW(bounded.execute(plan), std::invalid_argument);
  EXPECT_THROW(make_lora_adapter(w.config.model, 1, 0, 8), std::invalid_argument);
}

// `engine run` of an experiment with adapters: real adapters on the CPU executor, the summary's
// lora object, one prefix computation per adapter. The CUDA executor applies adapters too
// (Emu.EngineCuda, GpuExecutor.LoraAdaptersMatchCpuExecutor): here `--device cuda` is refused
// (exit code 2) for the device alone (no usable device, or the tiny model's head_dim 16), not
// for the adapters.
TEST(LoraEngine, EngineRunAppliesAdapters) {
  namespace fs = std::filesystem;
  const fs::path dir = test_util::temp_dir("lora_engine_run");
  test_util::write_file(dir / "e.yaml",
                        "name: lora-engine\nseed: 3\nmodel: tiny\nhardware: H100-SXM\n"
                        "serving:\n  max_num_seqs: 8\n  max_model_len: 512\n"
                        "  num_gpu_blocks: 256\n  lora: {max_loras: 2, max_lora_rank: 8}\n"
                        "workload:\n  type: synthetic\n  num_requests: 12\n"
                        "  arrival: {process: poisson, rate: 50}\n"
                        "  prompt_len: {dist: fixed, value: 40}\n"
                        "  output_len: {dist: fixed, value: 8}\n"
                        "  shared_prefix: {num_prefixes: 1, length: 32, fraction: 1.0}\n"
                        "  lora: {adapters: 3, rank: 8}\n");
  const auto engine = [&](const std::string& args) {
    const std::string cmd = servelab_program("engine") + " run " + (dir / "e.yaml").string() + " " +
                            args + " > " + (dir / "out.txt").string() + " 2> " +
                            (dir / "err.txt").string();
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(engine("--out " + (dir / "o").string()), 0) << test_util::read_file(dir / "err.txt");
  const auto s = nlohmann::json::parse(test_util::read_file(dir / "o/summary.json"));
  EXPECT_EQ(s["requests"]["completed"], 12);
  EXPECT_EQ(s["lora"]["max_loras"], 2);
  EXPECT_EQ(s["lora"]["requests_by_adapter"]["base"], 0);
  const int adapted = s["lora"]["requests_by_adapter"]["1"].get<int>() +
                      s["lora"]["requests_by_adapter"]["2"].get<int>() +
                      s["lora"]["requests_by_adapter"]["3"].get<int>();
  EXPECT_EQ(adapted, 12);
  // The 32-token system prompt (two blocks) hits for every request but each adapter's first;
  // every other token (40 prompt and 7 decode tokens each) is computed under an adapter.
  EXPECT_EQ(s["prefix_cache"]["hit_tokens"], (12 - 3) * 32);
  EXPECT_EQ(s["lora"]["lora_tokens"].get<int>(), 12 * (40 + 7) - (12 - 3) * 32);
  EXPECT_EQ(engine("--device cuda --out " + (dir / "c").string()), 2);
  const std::string err = test_util::read_file(dir / "err.txt");
  EXPECT_NE(err.find("--device cuda"), std::string::npos) << err;
  EXPECT_EQ(err.find("LoRA"), std::string::npos) << err;
}

// experiments/lora-tiny.yaml (docs/serving.md "LoRA adapters"): `sim run` and `engine run` both
// complete it with the same requests under the same adapters, and count adapter loads into the
// max_loras 2 slots (summary.json lora.adapter_loads: at least the 3 adapters, more as the two
// slots turn over).
TEST(LoraEngine, ShippedTinyExperimentRunsOnBothBackends) {
  namespace fs = std::filesystem;
  const fs::path dir = test_util::temp_dir("lora_tiny_shipped");
  const std::string exp = servelab_home().string() + "/experiments/lora-tiny.yaml";
  const test_util::Cli sim =
      test_util::run_sim("run " + exp + " --quiet --out " + (dir / "sim").string(), dir);
  ASSERT_EQ(sim.code, 0) << sim.err;
  const std::string cmd = servelab_program("engine") + " run " + exp + " --quiet --out " +
                          (dir / "eng").string() + " 2> " + (dir / "err.txt").string();
  const int status = std::system(cmd.c_str());
  ASSERT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0)
      << test_util::read_file(dir / "err.txt");
  const auto s = nlohmann::json::parse(test_util::read_file(dir / "sim/summary.json"));
  const auto e = nlohmann::json::parse(test_util::read_file(dir / "eng/summary.json"));
  for (const auto* j : {&s, &e}) {
    EXPECT_EQ((*j)["requests"]["completed"], 120);
    EXPECT_GE((*j)["lora"]["adapter_loads"].get<int>(), 3);
    EXPECT_LE((*j)["lora"]["adapters_per_step_mean"].get<double>(), 2.0);
  }
  EXPECT_EQ(e["lora"]["requests_by_adapter"], s["lora"]["requests_by_adapter"]);
  EXPECT_GT(s["lora"]["requests_by_adapter"]["base"].get<int>(), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
