// The GPU validation workloads (experiments/validation/gpu, run by `gpu-check validate`) test what
// their headers claim: simulated with the H200 roofline under gpu-check's two policy mixes, the
// Mooncake slice takes at least 30 % of its prompt tokens from the prefix cache, the Azure slice
// holds a few hundred requests, the Sarathi mix cuts prompts into chunks on every workload and
// preempts on the bursty one, no run saturates, and the six runs fit the mode's time budget.
// experiments/validation/gpu/workload_stats.py prints the same figures as a table.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "serving/home.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using test_util::Cli;
using test_util::read_csv;
using test_util::read_file;
using test_util::run_sim;
using test_util::temp_dir;

// scripts/gpu-check mode_validate's sarathi-recompute mix, word for word (checked below).
const std::string kSarathiSets =
    "--set 'policies.batch={name: sarathi, chunk_size: 512}' --set policies.prefix_cache=none";

struct Measured {
  nlohmann::json summary;
  int chunked_prompts = 0;  // requests with a prefill row that stops short of the prompt's end
  int partial_chunks = 0;   // such rows
};

Measured simulate(const std::string& workload, const std::string& mix) {
  const fs::path dir = temp_dir("validation_workloads_" + workload + "_" + mix);
  const fs::path exp = servelab_home() / "experiments/validation/gpu" / (workload + ".yaml");
  const std::string sets = mix == "sarathi-recompute" ? " " + kSarathiSets : "";
  const Cli r = run_sim(
      "run " + exp.string() + sets + " --record-schedule --quiet --out " + (dir / "run").string(),
      dir);
  EXPECT_EQ(r.code, 0) << workload << " " << mix << ": " << r.err;
  Measured m;
  m.summary = nlohmann::json::parse(read_file(dir / "run/summary.json"));
  std::map<std::string, long> prompt;
  for (const auto& row : read_csv(dir / "run/requests.csv")) {
    prompt[row.at("id")] = std::stol(row.at("prompt_tokens"));
  }
  std::set<std::string> chunked;
  for (const auto& row : read_csv(dir / "run/schedule.csv")) {
    if (row.at("kind") != "prefill") continue;
    if (std::stol(row.at("first_token")) + std::stol(row.at("num_tokens")) <
        prompt.at(row.at("request"))) {
      ++m.partial_chunks;
      chunked.insert(row.at("request"));
    }
  }
  m.chunked_prompts = static_cast<int>(chunked.size());
  fs::remove_all(dir);
  return m;
}

int preemptions(const Measured& m) { return m.summary["preemption"]["preemptions"].get<int>(); }

TEST(ValidationWorkloads, GpuCheckRunsTheSameSarathiMix) {
  const std::string script = read_file(servelab_home() / "scripts/gpu-check");
  EXPECT_NE(script.find(kSarathiSets), std::string::npos)
      << "scripts/gpu-check's sarathi-recompute mix changed: update this test, workload_stats.py "
         "and the workload headers' figures";
}

TEST(ValidationWorkloads, MooncakeSliceTakesAThirdOfItsPromptFromTheCache) {
  const Measured v = simulate("mooncake-8b", "vllm-hash");
  EXPECT_GE(v.summary["prefix_cache"]["hit_rate"].get<double>(), 0.30);
  EXPECT_GE(v.summary["requests"]["completed"].get<int>(), 100);
  // Without a prefix cache the Sarathi mix computes every prompt token.
  const Measured s = simulate("mooncake-8b", "sarathi-recompute");
  EXPECT_EQ(s.summary["prefix_cache"]["hit_tokens"].get<long>(), 0);
}

TEST(ValidationWorkloads, AzureSliceHoldsAFewHundredRequests) {
  const Measured v = simulate("azure-conv-8b", "vllm-hash");
  EXPECT_GE(v.summary["requests"]["completed"].get<int>(), 250);
  EXPECT_LE(v.summary["requests"]["completed"].get<int>(), 400);
  // Moderate load: several sequences a step, not one at a time.
  EXPECT_GE(v.summary["batch"]["seqs_mean"].get<double>(), 5.0);
}

TEST(ValidationWorkloads, SarathiMixChunksEveryWorkloadAndPreemptsTheBurstyOne) {
  for (const std::string w : {"burst-8b", "azure-conv-8b", "mooncake-8b"}) {
    const Measured s = simulate(w, "sarathi-recompute");
    EXPECT_GE(s.chunked_prompts, 50) << w;
    EXPECT_GT(s.partial_chunks, s.chunked_prompts) << w << ": prompts cut more than once";
  }
  // burst-8b's fixed KV cache fills in its bursts: both mixes recompute preempted requests.
  EXPECT_GE(preemptions(simulate("burst-8b", "sarathi-recompute")), 2);
  EXPECT_GE(preemptions(simulate("burst-8b", "vllm-hash")), 3);
}

TEST(ValidationWorkloads, NoRunSaturatesAndAllFitTheModesBudget) {
  double total_s = 0;
  for (const std::string w : {"burst-8b", "azure-conv-8b", "mooncake-8b"}) {
    for (const std::string mix : {"vllm-hash", "sarathi-recompute"}) {
      const Measured m = simulate(w, mix);
      const auto& s = m.summary;
      EXPECT_EQ(s["requests"]["completed"], s["requests"]["total"]) << w << " " << mix;
      // A saturated run queues for seconds; these wait at most a burst's prefill.
      EXPECT_LT(s["ttft_ms"]["p50"].get<double>(), 500.0) << w << " " << mix;
      EXPECT_LT(s["duration_s"].get<double>(), 35.0) << w << " " << mix;
      total_s += s["duration_s"].get<double>();
    }
  }
  // gpu-check validate's budget is 450 s: twice the engine time the simulator predicts (the
  // engine replays arrivals in real time), plus the profile (about 41 s on the roofline) and the
  // calibration run (about 14 s, twice) and 20 s for the sims, validations, figure and report,
  // must fit it.
  EXPECT_LE(2 * total_s + 41 + 2 * 14 + 20, 450.0) << "simulated total " << total_s << " s";
}

}  // namespace
}  // namespace servelab
