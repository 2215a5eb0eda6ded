// Speculative decoding on the CPU engine: real n-gram proposals (engine/ngram_proposer.h) and
// exact verification in one forward pass over 1 + d tokens. The invariance property: a mixed
// workload (chunked prompts, repetitive and random ones) yields the same tokens for every
// request with speculation as without, greedy and sampled, with drafts accepted on the
// repetitive prompts.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "engine/cpu_executor.h"
#include "engine/llama_weights.h"
#include "engine/ngram_proposer.h"
#include "serving/home.h"
#include "tests/speculation_workload.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

TEST(NgramProposer, LongestSuffixEarliestOccurrence) {
  std::vector<std::int32_t> out;
  // Suffix [2, 3] occurs at 1..2 and 5..6; the earliest (1..2) is followed by 4, 7 (vLLM v1's
  // choice among equally long matches).
  const std::vector<std::int32_t> t = {1, 2, 3, 4, 7, 2, 3, 9, 8, 2, 3};
  EXPECT_EQ(ngram_propose(t, 1, 3, 2, out), 2);
  EXPECT_EQ(out, (std::vector<std::int32_t>{4, 7}));
  // vLLM's own cases (tests/v1/spec_decode/test_ngram.py): [1 2 3 4 1 2 3] proposes 4 1 2.
  out.clear();
  EXPECT_EQ(ngram_propose(std::vector<std::int32_t>{1, 2, 3, 4, 1, 2, 3}, 2, 2, 3, out), 3);
  EXPECT_EQ(out, (std::vector<std::int32_t>{4, 1, 2}));
  out.clear();
  EXPECT_EQ(ngram_propose(std::vector<std::int32_t>{1, 2, 3, 4, 1, 2, 3, 5, 6}, 2, 2, 2, out), 0);
  // [1 2 7 1 2 8 1 2] proposes 7 (after the first [1 2]), not 8.
  out.clear();
  EXPECT_EQ(ngram_propose(std::vector<std::int32_t>{1, 2, 7, 1, 2, 8, 1, 2}, 2, 2, 1, out), 1);
  EXPECT_EQ(out, (std::vector<std::int32_t>{7}));
  // With min 3 the 2-token match does not count; [8, 2, 3] never occurred before.
  out.clear();
  EXPECT_EQ(ngram_propose(t, 3, 3, 2, out), 0);
  // The proposal stops at the end of the tokens.
  out.clear();
  const std::vector<std::int32_t> u = {5, 6, 5};
  EXPECT_EQ(ngram_propose(u, 1, 2, 4, out), 2);
  EXPECT_EQ(out, (std::vector<std::int32_t>{6, 5}));
}

struct Outcome {
  std::map<RequestId, std::vector<std::int32_t>> tokens;
  std::int64_t drafts = 0;
  std::int64_t accepted = 0;
  std::int64_t steps = 0;
};

Outcome RunEngine(const LlamaWeights& w, std::int32_t k, double temperature) {
  const SchedulerConfig sc = test_util::speculation_scheduler(k);
  BlockPool pool(128);
  KvCacheManager kv(pool, sc.block_size, sc.max_model_len, sc.enable_prefix_caching);
  test_util::FinishedTokens cap;
  Scheduler s(sc, kv, &cap);
  CpuExecutorOptions eo;
  eo.block_size = sc.block_size;
  eo.num_blocks = 128;
  eo.sampling.temperature = temperature;
  eo.sampling.seed = 3;
  eo.speculative = sc.speculative;
  CpuExecutor ex(w, eo);
  test_util::add_speculation_requests(s);
  TimeNs t = 0;
  Outcome o;
  while (s.has_unfinished()) {
    const StepPlan& plan = s.schedule(t);
    if (plan.empty()) break;
    const StepResult r = ex.execute(plan);
    t += 1000;
    s.complete(r, t);
    ++o.steps;
  }
  o.tokens = cap.tokens;
  o.drafts = s.counters().num_draft_tokens;
  o.accepted = s.counters().num_accepted_tokens;
  return o;
}

TEST(SpeculativeEngine, SameTokensAsWithoutSpeculation) {
  const LlamaWeights w = LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), 9);
  for (const double temperature : {0.0, 0.8}) {
    const Outcome base = RunEngine(w, 0, temperature);
    const Outcome spec = RunEngine(w, 3, temperature);
    ASSERT_EQ(base.tokens.size(), 4u);
    EXPECT_EQ(spec.tokens, base.tokens) << "temperature " << temperature;
    EXPECT_EQ(base.drafts, 0);
    EXPECT_GT(spec.drafts, 0);
    if (temperature == 0.0) {
      // Greedy decoding of a repetitive prompt repeats: the n-grams are accepted, and the run
      // needs fewer steps.
      EXPECT_GT(spec.accepted, 0);
      EXPECT_LT(spec.steps, base.steps);
    }
  }
}

// `engine run` end to end: n-gram speculation runs on the CPU executor and writes the same
// tokens as without it; the methods it cannot run are refused with exit code 2, naming the key.
TEST(SpeculativeEngine, EngineRunsNgramAndRefusesOtherMethods) {
  using namespace test_util;
  const fs::path dir = temp_dir("specdec_engine");
  const std::string head =
      "model: tiny\nhardware: H100-SXM\nseed: 4\nserving:\n  num_gpu_blocks: 64\n  max_model_len: "
      "512\n";
  const std::string workload =
      "workload: {type: synthetic, num_requests: 3, arrival: {process: fixed, rate: 100}, "
      "prompt_len: {dist: fixed, value: 24}, output_len: {dist: fixed, value: 12}}\n";
  write_file(dir / "plain.yaml", head + workload);
  write_file(dir / "ngram.yaml", head +
                                     "  speculative_config: {method: ngram, "
                                     "num_speculative_tokens: 3}\n" +
                                     workload);
  write_file(dir / "eagle.yaml", head +
                                     "  speculative_config: {method: eagle, "
                                     "num_speculative_tokens: 3}\n" +
                                     workload);
  const auto run_engine = [&](const std::string& args) {
    const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
    const std::string cmd =
        servelab_program("engine") + " run " + args + " > " + out.string() + " 2> " + err.string();
    const int status = std::system(cmd.c_str());
    return Cli{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
  };
  for (const char* name : {"plain", "ngram"}) {
    const Cli c = run_engine((dir / (std::string(name) + ".yaml")).string() +
                             " --quiet --tokens --out " + (dir / name).string());
    ASSERT_EQ(c.code, 0) << name << c.err;
  }
  EXPECT_EQ(read_file(dir / "plain" / "tokens.jsonl"), read_file(dir / "ngram" / "tokens.jsonl"));
  // summary.json's spec_decode counters (docs/metrics.md): with speculation only, consistent.
  EXPECT_EQ(read_file(dir / "plain" / "summary.json").find("spec_decode"), std::string::npos);
  const std::string ngram = read_file(dir / "ngram" / "summary.json");
  const std::size_t at = ngram.find("\"spec_decode\"");
  ASSERT_NE(at, std::string::npos) << ngram;
  const std::string tail = ngram.substr(at);
  EXPECT_NE(tail.find("\"num_drafts\""), std::string::npos);
  EXPECT_NE(tail.find("\"num_accepted_tokens_per_pos\": ["), std::string::npos);
  EXPECT_NE(tail.find("\"mean_acceptance_length\""), std::string::npos);
  const Cli eagle =
      run_engine((dir / "eagle.yaml").string() + " --quiet --tokens --out " + (dir / "e").string());
  EXPECT_EQ(eagle.code, 2);
  EXPECT_NE(eagle.err.find("eagle.yaml:7:"), std::string::npos) << eagle.err;
  EXPECT_NE(eagle.err.find("serving.speculative_config.method"), std::string::npos) << eagle.err;
  EXPECT_FALSE(fs::exists(dir / "e"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
