// Stop conditions and cache_salt in the simulator, through `sim run` and the workload keys
// `sampling:` and `cache_salt:` (traces/sampling_options.h): the workload's output length is where
// the simulated model samples EOS, max_tokens caps it, min_tokens and ignore_eos act as in vLLM,
// eos_probability draws the EOS point; requests.csv gives each request's reason. Bad values are
// exit code 2 naming the key.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "serving/home.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace servelab::test_util;

std::string Experiment(const std::string& extra) {
  return "name: stops\nseed: 7\nmodel: tiny\nhardware: H100-SXM\nserving:\n  block_size: 16\n"
         "  num_gpu_blocks: 256\n  max_model_len: 512\n"
         "workload:\n  type: synthetic\n  num_requests: 40\n"
         "  arrival: {process: poisson, rate: 50}\n"
         "  prompt_len: {dist: uniform, min: 20, max: 100}\n"
         "  output_len: {dist: fixed, value: 20}\n" +
         extra;
}

// Runs the experiment; returns requests.csv's rows (empty on failure, with the message in *err).
std::vector<std::map<std::string, std::string>> RunSim(const fs::path& dir, const std::string& name,
                                                       const std::string& extra) {
  write_file(dir / (name + ".yaml"), Experiment(extra));
  const Cli cli =
      run_sim("run " + (dir / (name + ".yaml")).string() + " --out " + (dir / name).string(), dir);
  EXPECT_EQ(cli.code, 0) << cli.err;
  return read_csv(dir / name / "requests.csv");
}

// (output tokens, reason) -> count.
std::map<std::pair<std::string, std::string>, int> Outcomes(
    const std::vector<std::map<std::string, std::string>>& rows) {
  std::map<std::pair<std::string, std::string>, int> out;
  for (const auto& r : rows) ++out[{r.at("output_tokens"), r.at("reason")}];
  return out;
}

using Outcome = std::map<std::pair<std::string, std::string>, int>;

TEST(SimStops, EosPointMaxTokensMinTokensAndIgnoreEos) {
  const fs::path dir = temp_dir("sim_stops");
  // Without sampling keys: every request runs to its output length ("length").
  EXPECT_EQ(Outcomes(RunSim(dir, "plain", "")), (Outcome{{{"20", "length"}, 40}}));
  // max_tokens above the EOS point: the model stops at 20.
  EXPECT_EQ(Outcomes(RunSim(dir, "eos", "  sampling: {max_tokens: 30}\n")),
            (Outcome{{{"20", "stop"}, 40}}));
  // max_tokens below it: capped.
  EXPECT_EQ(Outcomes(RunSim(dir, "cap", "  sampling: {max_tokens: 12}\n")),
            (Outcome{{{"12", "length"}, 40}}));
  // EOS exactly at max_tokens: vLLM checks the length last, so a "stop".
  EXPECT_EQ(Outcomes(RunSim(dir, "tie", "  sampling: {max_tokens: 20}\n")),
            (Outcome{{{"20", "stop"}, 40}}));
  // min_tokens past the EOS point: EOS is masked for the first 25 outputs, so the 26th.
  EXPECT_EQ(Outcomes(RunSim(dir, "min", "  sampling: {max_tokens: 30, min_tokens: 25}\n")),
            (Outcome{{{"26", "stop"}, 40}}));
  // ignore_eos: to max_tokens.
  EXPECT_EQ(Outcomes(RunSim(dir, "ignore", "  sampling: {max_tokens: 30, ignore_eos: true}\n")),
            (Outcome{{{"30", "length"}, 40}}));
  fs::remove_all(dir);
}

TEST(SimStops, EosProbabilityDrawsGeometricLengths) {
  const fs::path dir = temp_dir("sim_stops_p");
  const auto rows = RunSim(dir, "p", "  sampling: {max_tokens: 40, eos_probability: 0.1}\n");
  ASSERT_EQ(rows.size(), 40u);
  int stopped = 0, capped = 0;
  double total = 0;
  for (const auto& r : rows) {
    const int n = std::stoi(r.at("output_tokens"));
    total += n;
    if (r.at("reason") == "stop") {
      ++stopped;
      EXPECT_LT(n, 40);
    } else {
      ++capped;
      EXPECT_EQ(n, 40);
      EXPECT_EQ(r.at("reason"), "length");
    }
  }
  // Geometric(0.1) capped at 40: mean about 9.9, P(reach 40) about 1.5 %.
  EXPECT_GT(stopped, 30);
  EXPECT_GT(total / 40, 5.0);
  EXPECT_LT(total / 40, 16.0);
  // Deterministic: the same seed, the same lengths.
  EXPECT_EQ(read_file(dir / "p" / "requests.csv"),
            (RunSim(dir, "p2", "  sampling: {max_tokens: 40, eos_probability: 0.1}\n"),
             read_file(dir / "p2" / "requests.csv")));
  // transforms.max_output_tokens caps the outputs whatever sampling draws (max_tokens 1000 with
  // an EOS draw ran past the cap).
  const auto capped_rows = RunSim(dir, "cap",
                                  "  transforms: {max_output_tokens: 8}\n"
                                  "  sampling: {max_tokens: 1000, eos_probability: 0.01}\n");
  ASSERT_EQ(capped_rows.size(), 40u);
  for (const auto& r : capped_rows) EXPECT_LE(std::stoi(r.at("output_tokens")), 8);
  fs::remove_all(dir);
}

TEST(SimStops, CacheSaltSeparatesSharedPrefixes) {
  const fs::path dir = temp_dir("sim_salt");
  const std::string prefix = "  shared_prefix: {num_prefixes: 1, length: 64, fraction: 1.0}\n";
  const auto cached = [&](const std::string& name, const std::string& extra) {
    int total = 0;
    for (const auto& r : RunSim(dir, name, prefix + extra))
      total += std::stoi(r.at("cached_tokens"));
    return total;
  };
  const int plain = cached("plain", "");
  EXPECT_GT(plain, 0);
  // One salt for every request: the same hits.
  EXPECT_EQ(cached("one", "  cache_salt: {value: tenant-a}\n"), plain);
  fs::remove_all(dir);
}

// The engine's draws (temperature, top_p, top_k, min_p, seed, penalties) cost the simulator
// nothing: its requests.csv is the plain run's, and alone they leave the stop conditions off
// ("length").
TEST(SimStops, DrawKeysChangeNothingInTheSimulator) {
  const fs::path dir = temp_dir("sim_draws");
  RunSim(dir, "plain", "");
  RunSim(dir, "draws",
         "  sampling: {temperature: 0.7, top_p: 0.9, seed: 3, frequency_penalty: 0.5, top_k: 40, "
         "min_p: 0.05, repetition_penalty: 1.1}\n");
  EXPECT_EQ(read_file(dir / "draws" / "requests.csv"), read_file(dir / "plain" / "requests.csv"));
  fs::remove_all(dir);
}

// workload.sampling.prompt_logprobs: as in vLLM v1, such requests read no prefix-cache block, and
// their prompt rows reach the LM head, so a shared-prefix workload loses its hits and its steps
// cost more; `logprobs` alone changes nothing the simulator computes.
TEST(SimStops, PromptLogprobsTurnPrefixHitsOffAndCostLmHeadRows) {
  const fs::path dir = temp_dir("sim_prompt_logprobs");
  const std::string shared = "  shared_prefix: {num_prefixes: 1, length: 64, fraction: 1.0}\n";
  const auto plain = RunSim(dir, "plain", shared);
  const auto scored = RunSim(dir, "scored", shared + "  sampling: {prompt_logprobs: 1}\n");
  RunSim(dir, "outputs", shared + "  sampling: {logprobs: 5}\n");
  EXPECT_EQ(read_file(dir / "outputs" / "requests.csv"), read_file(dir / "plain" / "requests.csv"));
  const auto summary = [&](const std::string& name) {
    return nlohmann::json::parse(read_file(dir / name / "summary.json"));
  };
  EXPECT_GT(summary("plain")["prefix_cache"]["hit_tokens"].get<double>(), 0);
  EXPECT_EQ(summary("scored")["prefix_cache"]["hit_tokens"].get<double>(), 0);
  EXPECT_EQ(summary("scored")["prefix_cache"]["queried_tokens"].get<double>(), 0);
  ASSERT_EQ(plain.size(), scored.size());
  double ttft_plain = 0, ttft_scored = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(scored[i].at("cached_tokens"), "0");
    ttft_plain += std::stod(plain[i].at("ttft_ms"));
    ttft_scored += std::stod(scored[i].at("ttft_ms"));
  }
  EXPECT_GT(ttft_scored, ttft_plain);
  // The LM head's rows: the same steps with prompt rows cost more (steps.csv's first step, the
  // first request's whole prefill in both runs, alone).
  const auto steps_plain = read_csv(dir / "plain" / "steps.csv");
  const auto steps_scored = read_csv(dir / "scored" / "steps.csv");
  ASSERT_FALSE(steps_plain.empty());
  ASSERT_FALSE(steps_scored.empty());
  EXPECT_EQ(steps_plain[0].at("prefill_tokens"), steps_scored[0].at("prefill_tokens"));
  EXPECT_GT(std::stod(steps_scored[0].at("duration_ms")),
            std::stod(steps_plain[0].at("duration_ms")));
  fs::remove_all(dir);
}

TEST(SimStops, BadKeysAreExitCode2NamingTheKey) {
  const fs::path dir = temp_dir("sim_stops_bad");
  const auto err = [&](const std::string& extra) {
    write_file(dir / "bad.yaml", Experiment(extra));
    const Cli cli =
        run_sim("run " + (dir / "bad.yaml").string() + " --out " + (dir / "out").string(), dir);
    EXPECT_EQ(cli.code, 2) << extra;
    return cli.err;
  };
  EXPECT_NE(err("  sampling: {max_tokens: 0}\n").find("workload.sampling.max_tokens"),
            std::string::npos);
  EXPECT_NE(err("  sampling: {eos_probability: 0}\n").find("workload.sampling.eos_probability"),
            std::string::npos);
  EXPECT_NE(err("  sampling: {stop: x}\n").find("workload.sampling.stop"), std::string::npos);
  EXPECT_NE(err("  cache_salt: {value: a, per_tenant: true}\n").find("workload.cache_salt"),
            std::string::npos);
  EXPECT_NE(err("  cache_salt: salt\n").find("workload.cache_salt"), std::string::npos);
  EXPECT_NE(err("  sampling: {temperature: -1}\n").find("workload.sampling.temperature"),
            std::string::npos);
  EXPECT_NE(err("  sampling: {top_p: 0}\n").find("workload.sampling.top_p"), std::string::npos);
  EXPECT_NE(err("  sampling: {seed: -3}\n").find("workload.sampling.seed"), std::string::npos);
  EXPECT_NE(err("  sampling: {presence_penalty: 2.5}\n").find("workload.sampling.presence_penalty"),
            std::string::npos);
  EXPECT_NE(err("  sampling: {prompt_logprobs: 21}\n").find("workload.sampling.prompt_logprobs"),
            std::string::npos);
  EXPECT_NE(err("  sampling: {logprobs: -1}\n").find("workload.sampling.logprobs"),
            std::string::npos);
  EXPECT_NE(err("  sampling: {top_k: -1}\n").find("workload.sampling.top_k"), std::string::npos);
  EXPECT_NE(err("  sampling: {min_p: 2}\n").find("workload.sampling.min_p"), std::string::npos);
  EXPECT_NE(
      err("  sampling: {repetition_penalty: 0}\n").find("workload.sampling.repetition_penalty"),
      std::string::npos);
  // vLLM refuses min_tokens above max_tokens; accepted, every request ended at max_tokens.
  EXPECT_NE(
      err("  sampling: {max_tokens: 5, min_tokens: 50}\n")
          .find("key 'workload.sampling.min_tokens': expected at most max_tokens (5), got '50'"),
      std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
