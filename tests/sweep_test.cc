// `sim sweep`: the grid runs every point, writes one row per point with unit-named columns, the
// files do not depend on the number of workers, and a malformed sweep section is exit code 2
// naming file:line and the key. A `variant` axis crosses the experiment's `compare:` entries with
// the other axes: each point runs exactly the comparison's variant.
#include <gtest/gtest.h>

#include <string>

#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

const char* kExperiment = R"(name: tiny-sweep
seed: 5
model: Llama-3-8B
hardware: H100-SXM
serving: {gpu_memory_utilization: 0.3}
workload:
  type: synthetic
  num_requests: 150
  arrival: {process: poisson, rate: 8}
  prompt_len: {dist: uniform, min: 64, max: 2048}
  output_len: {dist: uniform, min: 8, max: 256}
sweep:
  workload.arrival.rate: [4, 16]
  policies.batch: [vllm, sarathi]
)";

std::string files_of(const fs::path& root) {
  // Every file under root, name and content, in name order.
  std::vector<fs::path> paths;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) paths.push_back(fs::relative(e.path(), root));
  }
  std::sort(paths.begin(), paths.end());
  std::string all;
  for (const fs::path& p : paths) all += p.string() + "\n" + read_file(root / p) + "\n";
  return all;
}

TEST(Sweep, RunsEveryPointAndIsIndependentOfWorkers) {
  const fs::path dir = temp_dir("sweep_jobs");
  write_file(dir / "exp.yaml", kExperiment);
  const std::string exp = (dir / "exp.yaml").string();
  const Cli one =
      run_sim("sweep " + exp + " --no-plot --quiet --jobs 1 --out " + (dir / "a").string(), dir);
  ASSERT_EQ(one.code, 0) << one.err;
  const Cli two =
      run_sim("sweep " + exp + " --no-plot --quiet --jobs 2 --out " + (dir / "b").string(), dir);
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_EQ(files_of(dir / "a"), files_of(dir / "b")) << "--jobs 1 and --jobs 2 differ";

  const auto rows = read_csv(dir / "a" / "sweep.csv");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].at("point"), "0_rate-4_batch-vllm");
  EXPECT_EQ(rows[1].at("policies.batch"), "sarathi");
  EXPECT_EQ(rows[3].at("workload.arrival.rate"), "16");
  for (const auto& r : rows) {
    EXPECT_EQ(r.at("completed"), "150");
    EXPECT_FALSE(r.at("ttft_p99_ms").empty());
    EXPECT_FALSE(r.at("requests_per_s").empty());
    EXPECT_TRUE(fs::exists(dir / "a" / r.at("point") / "summary.json"));
  }
  // A higher rate gives a higher throughput.
  EXPECT_GT(std::stod(rows[2].at("requests_per_s")), std::stod(rows[0].at("requests_per_s")));
  // One GPU at every point: no columns of GPUs.
  EXPECT_EQ(rows[0].count("gpus"), 0u);
  EXPECT_EQ(one.out.find("GPUs"), std::string::npos) << one.out;
  // A sweep into that folder whose trace is one of its point folders' requests.csv would remove
  // or replace it: refused, the folder as it was.
  const std::string points = files_of(dir / "a");
  write_file(dir / "replay.yaml",
             "name: replay\nmodel: Llama-3-8B\nhardware: H100-SXM\nworkload: {type: csv, path: "
             "a/0_rate-4_batch-vllm/requests.csv, columns: {arrival: arrival_s, prompt_tokens: "
             "prompt_tokens, output_tokens: output_tokens}}\nsweep:\n  serving.max_num_seqs: "
             "[64, 128]\n");
  const Cli replay = run_sim("sweep " + (dir / "replay.yaml").string() +
                                 " --no-plot --quiet --out " + (dir / "a").string(),
                             dir);
  EXPECT_EQ(replay.code, 2) << replay.err;
  EXPECT_NE(replay.err.find("an input of the run is in its output folder"), std::string::npos)
      << replay.err;
  EXPECT_EQ(files_of(dir / "a"), points);
}

// Points of different sizes: sweep.csv and the table add the GPUs and the goodput each buys
// (goodput / GPUs), and every point's summary.json states them.
TEST(Sweep, PointsOfSeveralGpusReportGoodputPerGpu) {
  const fs::path dir = temp_dir("sweep_gpus");
  std::string text = kExperiment;
  text.replace(text.find("  policies.batch: [vllm, sarathi]"), 33, "  parallel.tensor: [1, 2]");
  text.replace(text.find("[4, 16]"), 7, "[16]");
  write_file(dir / "exp.yaml", text + "slo: {ttft_ms: 400}\n");
  const Cli cli = run_sim(
      "sweep " + (dir / "exp.yaml").string() + " --no-plot --jobs 2 --out " + (dir / "s").string(),
      dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  const auto rows = read_csv(dir / "s" / "sweep.csv");
  ASSERT_EQ(rows.size(), 2u);
  double per_gpu[2];
  for (int i = 0; i < 2; ++i) {
    const auto& r = rows[i];
    EXPECT_EQ(r.at("gpus"), std::to_string(i + 1));
    const double goodput = std::stod(r.at("goodput_requests_per_s"));
    per_gpu[i] = std::stod(r.at("goodput_per_gpu"));
    EXPECT_NEAR(per_gpu[i], goodput / (i + 1), 1e-6);
    const std::string summary = read_file(dir / "s" / r.at("point") / "summary.json");
    EXPECT_NE(summary.find("\"gpus\": " + std::to_string(i + 1)), std::string::npos) << summary;
    EXPECT_NE(summary.find("\"requests_per_s_per_gpu\""), std::string::npos) << summary;
  }
  // A second GPU raises goodput here, but not twofold: each GPU buys less.
  EXPECT_GT(2 * per_gpu[1], per_gpu[0]);
  EXPECT_LT(per_gpu[1], per_gpu[0]);
  // The table: both columns, with the per-GPU figure to three decimals.
  EXPECT_NE(cli.out.find("GPUs"), std::string::npos) << cli.out;
  char expected[32];
  std::snprintf(expected, sizeof expected, " %5d %9.3f", 2, per_gpu[1]);
  EXPECT_NE(cli.out.find(expected), std::string::npos) << expected << "\n" << cli.out;
}

TEST(Sweep, MalformedSectionIsExitTwoNamingLineAndKey) {
  const fs::path dir = temp_dir("sweep_errors");
  std::string text = kExperiment;
  text.replace(text.find("[vllm, sarathi]"), 15, "vllm");
  write_file(dir / "scalar.yaml", text);
  const Cli scalar = run_sim("sweep " + (dir / "scalar.yaml").string() + " --no-plot", dir);
  EXPECT_EQ(scalar.code, 2);
  EXPECT_NE(scalar.err.find("scalar.yaml:14"), std::string::npos) << scalar.err;
  EXPECT_NE(scalar.err.find("policies.batch"), std::string::npos) << scalar.err;

  text = kExperiment;
  text.replace(text.find("workload.arrival.rate"), 21, "workload.arival.rate");
  write_file(dir / "typo.yaml", text);
  const Cli typo = run_sim("sweep " + (dir / "typo.yaml").string() + " --no-plot", dir);
  EXPECT_EQ(typo.code, 2);
  EXPECT_NE(typo.err.find("typo.yaml:13"), std::string::npos) << typo.err;
  EXPECT_NE(typo.err.find("workload.arival.rate"), std::string::npos) << typo.err;

  text = kExperiment;
  text.replace(text.find("policies.batch: [vllm, sarathi]"), 31, "policies.bach: [vllm]");
  write_file(dir / "unknown.yaml", text);
  const Cli unknown = run_sim("sweep " + (dir / "unknown.yaml").string() + " --no-plot", dir);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("policies.bach"), std::string::npos) << unknown.err;

  text = kExperiment;
  text = text.substr(0, text.find("sweep:"));
  write_file(dir / "none.yaml", text);
  const Cli none = run_sim("sweep " + (dir / "none.yaml").string() + " --no-plot", dir);
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("sweep"), std::string::npos) << none.err;

  EXPECT_EQ(run_sim("sweep " + (dir / "none.yaml").string() + " --jobs 0", dir).code, 2);

  // A list index as --set takes it; a malformed one names the sweep key's line.
  text = kExperiment;
  text.replace(text.find("policies.batch: [vllm, sarathi]"), 31, "cluster.pools[x].count: [1, 2]");
  write_file(dir / "index.yaml", text);
  const Cli index = run_sim("sweep " + (dir / "index.yaml").string() + " --no-plot", dir);
  EXPECT_EQ(index.code, 2);
  EXPECT_NE(index.err.find("index.yaml:14"), std::string::npos) << index.err;
  EXPECT_NE(index.err.find("malformed list index"), std::string::npos) << index.err;

  // One axis inside another: the outer one's value replaced the inner one's at every point.
  text = kExperiment;
  text.replace(text.find("policies.batch: [vllm, sarathi]"), 31,
               "workload.arrival: [{process: poisson, rate: 2}]");
  write_file(dir / "overlap.yaml", text);
  const Cli overlap = run_sim("sweep " + (dir / "overlap.yaml").string() + " --no-plot", dir);
  EXPECT_EQ(overlap.code, 2);
  EXPECT_NE(overlap.err.find("overlap.yaml:14"), std::string::npos) << overlap.err;
  EXPECT_NE(overlap.err.find("overlaps the axis workload.arrival.rate ("), std::string::npos)
      << overlap.err;
  EXPECT_NE(overlap.err.find("overlap.yaml:13:"), std::string::npos) << overlap.err;
  // And the derived: section, a run's record, is not a setting.
  text = kExperiment;
  text.replace(text.find("policies.batch: [vllm, sarathi]"), 31, "derived.num_gpu_blocks: [9]");
  write_file(dir / "derived.yaml", text);
  const Cli derived = run_sim("sweep " + (dir / "derived.yaml").string() + " --no-plot", dir);
  EXPECT_EQ(derived.code, 2);
  EXPECT_NE(derived.err.find("cannot set the `derived` section"), std::string::npos) << derived.err;
  // A bad --set is the command line's, not the first sweep value's (it was blamed on
  // "sweep key 'workload.arrival.rate', value ..."); one that only a sweep value makes bad
  // still names that value.
  write_file(dir / "ok.yaml", kExperiment);
  for (const std::string set : {"sweep.workload.arrival.rate=[1]", "workload.num_requests=abc"}) {
    const Cli bad = run_sim("sweep " + (dir / "ok.yaml").string() + " --no-plot --set '" + set +
                                "' --out " + (dir / "bad").string(),
                            dir);
    EXPECT_EQ(bad.code, 2) << set;
    EXPECT_TRUE(bad.err.starts_with("sim: error: --set " + set.substr(0, set.find('='))))
        << bad.err;
    EXPECT_EQ(bad.err.find("sweep key"), std::string::npos) << bad.err;
  }
  const Cli clash = run_sim("compare " + (dir / "ok.yaml").string() +
                                " --variant a:seed=1 --variant 'b:workload.arrival.rate=2' "
                                "--set workload.arrival.rate=abc --out " +
                                (dir / "cmp").string(),
                            dir);
  EXPECT_EQ(clash.code, 2);
  EXPECT_TRUE(clash.err.starts_with("sim: error: --set workload.arrival.rate")) << clash.err;
  EXPECT_FALSE(fs::exists(dir / "bad"));
}

// An axis over a list entry (`cluster.pools[0].count`): each point sets that entry, as --set
// does, and names its folder after the key's last name.
TEST(Sweep, AxisOverAListEntrySetsThatEntry) {
  const fs::path dir = temp_dir("sweep_index");
  std::string text = kExperiment;
  text.replace(text.find("  policies.batch: [vllm, sarathi]"), 33,
               "  cluster.pools[0].count: [1, 3]");
  text.replace(text.find("[4, 16]"), 7, "[16]");
  write_file(dir / "exp.yaml", text + "cluster:\n  pools: [{name: r, count: 2}]\n");
  const Cli cli = run_sim("sweep " + (dir / "exp.yaml").string() +
                              " --no-plot --quiet --jobs 2 --out " + (dir / "s").string(),
                          dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  const auto rows = read_csv(dir / "s" / "sweep.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].at("point"), "1_rate-16_count-3");
  EXPECT_EQ(rows[1].at("cluster.pools[0].count"), "3");
  EXPECT_EQ(rows[0].at("gpus"), "1");
  EXPECT_EQ(rows[1].at("gpus"), "3");
  const std::string summary = read_file(dir / "s" / rows[1].at("point") / "summary.json");
  EXPECT_NE(summary.find("\"replicas\": 3"), std::string::npos) << summary;
}

// kExperiment with three variants and a sweep over two of them.
const std::string kVariantExperiment =
    std::string(kExperiment).substr(0, std::string(kExperiment).find("sweep:")) + R"(compare:
  - name: plain
    set: {}
  - name: sarathi-512
    set: {policies.batch: sarathi, serving.max_num_batched_tokens: 512}
  - name: fifo-swap
    set: {policies.preemption: swap}
sweep:
  variant: [sarathi-512, plain]
  workload.arrival.rate: [4, 16]
)";

TEST(Sweep, VariantAxisRunsTheComparisonsVariants) {
  const fs::path dir = temp_dir("sweep_variants");
  write_file(dir / "exp.yaml", kVariantExperiment);
  const std::string exp = (dir / "exp.yaml").string();
  const Cli sweep =
      run_sim("sweep " + exp + " --no-plot --quiet --jobs 2 --out " + (dir / "s").string(), dir);
  ASSERT_EQ(sweep.code, 0) << sweep.err;
  const auto rows = read_csv(dir / "s" / "sweep.csv");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].at("point"), "0_variant-sarathi-512_rate-4");
  EXPECT_EQ(rows[0].at("variant"), "sarathi-512");
  EXPECT_EQ(rows[3].at("variant"), "plain");
  EXPECT_EQ(rows[3].at("workload.arrival.rate"), "16");
  // Both keys of the variant's `set:` reached the run.
  const std::string config = read_file(dir / "s" / rows[1].at("point") / "config.yaml");
  EXPECT_NE(config.find("max_num_batched_tokens: 512"), std::string::npos) << config;
  EXPECT_NE(config.find("sarathi"), std::string::npos) << config;
  EXPECT_EQ(read_file(dir / "s" / rows[3].at("point") / "config.yaml").find("sarathi"),
            std::string::npos);
  // A point is the comparison's variant at that rate, byte for byte.
  const Cli compare = run_sim(
      "compare " + exp + " --quiet --set workload.arrival.rate=16 --out " + (dir / "c").string(),
      dir);
  ASSERT_EQ(compare.code, 0) << compare.err;
  for (const char* file : {"summary.json", "requests.csv", "steps.csv"}) {
    EXPECT_EQ(read_file(dir / "s" / rows[1].at("point") / file),
              read_file(dir / "c" / "sarathi-512" / file))
        << file;
  }
  // Chunks of 512 tokens cost the long prompts' TTFT.
  EXPECT_GT(std::stod(rows[1].at("ttft_p99_ms")), std::stod(rows[3].at("ttft_p99_ms")));

  // `all`: every variant, in the section's order.
  std::string text = kVariantExperiment;
  text.replace(text.find("[sarathi-512, plain]"), 20, "all");
  write_file(dir / "all.yaml", text);
  const Cli all = run_sim("sweep " + (dir / "all.yaml").string() +
                              " --no-plot --quiet --jobs 2 --out " + (dir / "a").string(),
                          dir);
  ASSERT_EQ(all.code, 0) << all.err;
  const auto all_rows = read_csv(dir / "a" / "sweep.csv");
  ASSERT_EQ(all_rows.size(), 6u);
  EXPECT_EQ(all_rows[0].at("variant"), "plain");
  EXPECT_EQ(all_rows[4].at("variant"), "fifo-swap");
}

TEST(Sweep, VariantAxisErrorsNameTheLineAndTheKnownVariants) {
  const fs::path dir = temp_dir("sweep_variant_errors");
  auto sweep_of = [&](const std::string& name, const std::string& text) {
    write_file(dir / name, text);
    return run_sim("sweep " + (dir / name).string() + " --no-plot", dir);
  };
  std::string text = kVariantExperiment;
  text.replace(text.find("[sarathi-512, plain]"), 20, "[sarathi-512, plian]");
  const Cli unknown = sweep_of("unknown.yaml", text);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("unknown.yaml:20"), std::string::npos) << unknown.err;
  EXPECT_NE(unknown.err.find("plain, sarathi-512, fifo-swap"), std::string::npos) << unknown.err;

  text = kVariantExperiment;
  text.replace(text.find("[sarathi-512, plain]"), 20, "[plain, plain]");
  const Cli twice = sweep_of("twice.yaml", text);
  EXPECT_EQ(twice.code, 2);
  EXPECT_NE(twice.err.find("listed twice"), std::string::npos) << twice.err;

  text = kVariantExperiment;
  text.replace(text.find("[sarathi-512, plain]"), 20, "every");
  const Cli scalar = sweep_of("scalar.yaml", text);
  EXPECT_EQ(scalar.code, 2);
  EXPECT_NE(scalar.err.find("or all"), std::string::npos) << scalar.err;

  text = kVariantExperiment;
  text.erase(text.find("compare:"), text.find("sweep:") - text.find("compare:"));
  const Cli none = sweep_of("none.yaml", text);
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("has none"), std::string::npos) << none.err;

  // A variant whose settings the experiment rejects is named with the sweep key.
  text = kVariantExperiment;
  text.replace(text.find("policies.preemption: swap"), 25, "policies.preemption: swop");
  text.replace(text.find("[sarathi-512, plain]"), 20, "all");
  const Cli bad = sweep_of("bad.yaml", text);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("fifo-swap"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("swop"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace servelab
