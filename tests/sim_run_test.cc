// End-to-end tests of `sim run`: determinism, consistency of the outputs, and bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "serving/experiment.h"
#include "serving/home.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;

using namespace servelab::test_util;

const std::string kBurst = servelab_home().string() + "/experiments/burst.yaml";

// A small experiment on the tiny model; `workload` is the YAML body of the workload section.
std::string small_experiment(const std::string& workload, const std::string& serving = "") {
  return "name: small\nseed: 7\nmodel: tiny\nhardware: H100-SXM\nserving:\n  block_size: 16\n"
         "  num_gpu_blocks: 64\n  max_model_len: 512\n" +
         serving + "workload:\n" + workload;
}

const std::string kSmallWorkload =
    "  type: synthetic\n  num_requests: 60\n  arrival: {process: poisson, rate: 50}\n"
    "  prompt_len: {dist: uniform, min: 20, max: 200}\n"
    "  output_len: {dist: uniform, min: 5, max: 60}\n";

TEST(SimRun, SameSeedGivesByteIdenticalFiles) {
  const fs::path dir = temp_dir("determinism");
  ExperimentConfig c = load_experiment(kBurst, {});
  c.outputs.record_schedule = true;
  RunOptions o;
  o.out_dir = (dir / "a").string();
  run_simulation(c, o);
  o.out_dir = (dir / "b").string();
  run_simulation(c, o);
  for (const char* f :
       {"summary.json", "requests.csv", "steps.csv", "schedule.csv", "config.yaml"}) {
    const std::string a = read_file(dir / "a" / f), b = read_file(dir / "b" / f);
    EXPECT_FALSE(a.empty()) << f;
    EXPECT_EQ(a, b) << f << " differs between two runs with the same seed";
  }
  // A different seed gives a different run.
  ExperimentConfig c2 = load_experiment(kBurst, {}, 43);
  o.out_dir = (dir / "c").string();
  run_simulation(c2, o);
  EXPECT_NE(read_file(dir / "a" / "requests.csv"), read_file(dir / "c" / "requests.csv"));
  fs::remove_all(dir);
}

TEST(SimRun, BurstSummaryMatchesTheCsvFiles) {
  const fs::path dir = temp_dir("burst");
  const Cli cli = run_sim("run " + kBurst + " --out " + (dir / "run").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_NE(cli.out.find("TTFT"), std::string::npos);
  EXPECT_NE(cli.out.find("preemptions"), std::string::npos);
  const nlohmann::json s = nlohmann::json::parse(read_file(dir / "run" / "summary.json"));
  const auto requests = read_csv(dir / "run" / "requests.csv");
  const auto steps = read_csv(dir / "run" / "steps.csv");
  ASSERT_EQ(requests.size(), 2000u);
  std::int64_t completed = 0, out_tokens = 0, preempt = 0;
  double ttft_sum = 0;
  for (const auto& r : requests) {
    if (r.at("status") != "finished") continue;
    ++completed;
    out_tokens += std::stoll(r.at("output_tokens"));
    preempt += std::stoll(r.at("preemptions"));
    ttft_sum += std::stod(r.at("ttft_ms"));
  }
  EXPECT_EQ(s["requests"]["completed"].get<std::int64_t>(), completed);
  EXPECT_EQ(s["throughput"]["output_tokens"].get<std::int64_t>(), out_tokens);
  EXPECT_NEAR(s["ttft_ms"]["mean"].get<double>(), ttft_sum / completed, 1e-3);
  EXPECT_EQ(s["num_steps"].get<std::size_t>(), steps.size());
  std::int64_t step_preempt = 0, decode_tokens = 0;
  for (const auto& st : steps) {
    step_preempt += std::stoll(st.at("preempted"));
    decode_tokens += std::stoll(st.at("decode_tokens"));
  }
  // Every preemption is counted once in the steps and once on the request it hit.
  EXPECT_EQ(s["preemption"]["preemptions"].get<std::int64_t>(), step_preempt);
  EXPECT_EQ(step_preempt, preempt);
  // The experiment is sized so the cache fills: preemptions happen and usage reaches 100 %.
  EXPECT_GT(step_preempt, 0);
  EXPECT_DOUBLE_EQ(s["kv_cache"]["usage_max"].get<double>(), 1.0);
  EXPECT_GT(s["prefix_cache"]["hit_tokens"].get<std::int64_t>(), 0);
  EXPECT_LE(decode_tokens, out_tokens);
  fs::remove_all(dir);
}

// Parallel samples under a preemption cap: a sibling given up makes the group aborted, reported
// through sample 0; when sample 0 finished last it stayed in the running list after its group
// was deleted (a use after free the sanitizer build caught). Every request ends, counted once.
TEST(SimRun, ParallelSamplesGivenUpUnderAPreemptionCapEndCleanly) {
  const fs::path dir = temp_dir("samples_cap");
  const Cli cli = run_sim(
      "run " + servelab_home().string() + "/experiments/burst-tiny.yaml --out " +
          (dir / "run").string() +
          " -q --set workload.num_requests=100 --set serving.num_gpu_blocks=26 --set workload.n=3 "
          "--set 'policies.preemption={name: recompute, victim: most-blocks, max_preemptions: 1}'",
      dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  const nlohmann::json s = nlohmann::json::parse(read_file(dir / "run" / "summary.json"));
  const auto requests = read_csv(dir / "run" / "requests.csv");
  ASSERT_EQ(requests.size(), 100u);
  std::int64_t finished = 0, aborted = 0, rejected = 0, sibling_given_up = 0;
  for (const auto& r : requests) {
    finished += r.at("status") == "finished";
    aborted += r.at("status") == "aborted";
    rejected += r.at("status") == "rejected";  // too long for 26 blocks
    sibling_given_up += r.at("reason").starts_with("sample ");
  }
  EXPECT_EQ(finished + aborted + rejected, 100);
  EXPECT_GT(sibling_given_up, 0);  // the case above happens in this run
  EXPECT_EQ(s["requests"]["completed"].get<std::int64_t>(), finished);
  EXPECT_EQ(s["requests"]["aborted"].get<std::int64_t>(), aborted);
  fs::remove_all(dir);
}

// Two requests that each need more than half of an 11-block cache. Arriving at the same
// nanosecond under lowest-priority, the first of equals (vLLM's max) was the one making progress,
// so they preempted each other forever: ties go to the larger id now, and both finish. Under
// most-blocks the one nearest the end holds the most blocks, so they evict each other before
// either samples: the run stops with a clear error (it ran until the clock overflowed).
TEST(SimRun, VictimRulesThatLivelockEndOrSaySo) {
  const fs::path dir = temp_dir("livelock");
  const auto run = [&](const std::string& name, const std::string& second_arrival_ns,
                       const std::string& victim, const std::string& queue) {
    test_util::write_file(dir / (name + ".csv"),
                          "arrival_ns,prompt_tokens,output_tokens,priority,tenant,segments\n"
                          "0,120,8,0,0,1:0:120\n" +
                              second_arrival_ns + ",120,8,0,0,2:0:120\n");
    test_util::write_file(
        dir / (name + ".yaml"),
        "name: " + name +
            "\nmodel: Llama-3-8B\nhardware: H100-SXM\nserving: {block_size: 16, "
            "num_gpu_blocks: 11, max_num_batched_tokens: 64, long_prefill_token_threshold: 16}\n"
            "policies:\n  queue: " +
            queue + "\n  preemption: {name: recompute, victim: " + victim +
            "}\n  prefix_cache: none\nworkload: {type: servelab, path: " + name + ".csv}\n");
    return run_sim("run " + (dir / (name + ".yaml")).string() + " -q --out " +
                       (dir / ("out-" + name)).string(),
                   dir);
  };
  const Cli tie = run("tie", "0", "lowest-priority", "priority");
  ASSERT_EQ(tie.code, 0) << tie.err;
  const nlohmann::json s = nlohmann::json::parse(read_file(dir / "out-tie" / "summary.json"));
  EXPECT_EQ(s["requests"]["completed"], 2);
  EXPECT_GT(s["preemption"]["preemptions"].get<std::int64_t>(), 0);
  const Cli most = run("most", "5000000", "most-blocks", "fcfs");
  EXPECT_EQ(most.code, 2) << most.err;
  // 100,000 + 4 x max_model_len (8,192, the model's) steps, plus the one that tripped it.
  EXPECT_NE(most.err.find("no request sampled a token in the last 132769 steps"), std::string::npos)
      << most.err;
  EXPECT_NE(most.err.find("victim rule 'most-blocks'"), std::string::npos) << most.err;
  EXPECT_FALSE(fs::exists(dir / "out-most"));
  fs::remove_all(dir);
}

// blocks.csv with parallel sampling: each sample's intervals close when that sample ends (its
// blocks are freed then), never after its request's finish (samples 1..n-1 were held to the end
// of the run). Sample ids are the request's id plus k << 48.
TEST(SimRun, ParallelSamplesReleaseTheirBlocksInBlocksCsv) {
  const fs::path dir = temp_dir("samples_blocks");
  const Cli cli = run_sim("run " + servelab_home().string() +
                              "/experiments/burst-tiny.yaml -q --record-blocks --set "
                              "workload.num_requests=40 --set workload.n=4 --out " +
                              (dir / "run").string(),
                          dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  std::map<std::uint64_t, double> finish;
  for (const auto& r : read_csv(dir / "run" / "requests.csv")) {
    finish[std::stoull(r.at("id"))] = std::stod(r.at("finish_s"));
  }
  std::int64_t sample_rows = 0;
  for (const auto& b : read_csv(dir / "run" / "blocks.csv")) {
    const std::uint64_t id = std::stoull(b.at("request"));
    const std::uint64_t base = id & ((std::uint64_t{1} << 48) - 1);
    sample_rows += id != base;
    ASSERT_TRUE(finish.count(base)) << id;
    EXPECT_LE(std::stod(b.at("end_s")), finish[base] + 1e-9) << "request " << id;
  }
  EXPECT_GT(sample_rows, 0);
  fs::remove_all(dir);
}

// events.csv names an admission policy's refusal `shed`, a rejection `reject`: their counts are
// summary.json's requests.shed and requests.rejected (both were `reject`).
TEST(SimRun, EventsTellShedFromRejected) {
  const fs::path dir = temp_dir("events_shed");
  const Cli cli =
      run_sim("run " + servelab_home().string() +
                  "/experiments/burst-tiny.yaml -q --record-events --set serving.num_gpu_blocks=40 "
                  "--set serving.max_model_len=300 "
                  "--set 'policies.admission={name: queue-length, max_waiting: 6}' --out " +
                  (dir / "run").string(),
              dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  const nlohmann::json s = nlohmann::json::parse(read_file(dir / "run" / "summary.json"));
  std::int64_t shed = 0, rejected = 0;
  for (const auto& e : read_csv(dir / "run" / "events.csv")) {
    shed += e.at("event") == "shed";
    rejected += e.at("event") == "reject";
  }
  EXPECT_GT(shed, 0);
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(shed, s["requests"]["shed"].get<std::int64_t>());
  EXPECT_EQ(rejected, s["requests"]["rejected"].get<std::int64_t>());
  fs::remove_all(dir);
}

// The same experiment reached by three spellings of its path (relative, absolute, from a
// subfolder) writes the same summary.json and config.yaml: its trace has one name in the
// workload's description (it was the path as spelled).
TEST(SimRun, AnExperimentsPathSpellingDoesNotChangeItsFiles) {
  const fs::path dir = temp_dir("path_spelling");
  fs::create_directories(dir / "sub");
  test_util::write_file(dir / "t.csv",
                        "arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,80,12\n");
  test_util::write_file(dir / "e.yaml",
                        "name: e\nmodel: tiny\nhardware: H100-SXM\nserving: {num_gpu_blocks: 64}\n"
                        "workload: {type: csv, path: t.csv, columns: {arrival: arrival_s, "
                        "prompt_tokens: prompt_tokens, output_tokens: output_tokens}}\n");
  const auto run_from = [&](const fs::path& cwd, const std::string& exp, const std::string& out) {
    return run_program("sim", "run " + exp + " -q --out " + (dir / out).string(), dir / "o.txt",
                       dir / "e.txt", "cd '" + cwd.string() + "' && ");
  };
  ASSERT_EQ(run_from(dir, "e.yaml", "a").code, 0);
  ASSERT_EQ(run_from(dir, (dir / "e.yaml").string(), "b").code, 0);
  ASSERT_EQ(run_from(dir / "sub", "../e.yaml", "c").code, 0);
  for (const char* f : {"summary.json", "config.yaml", "requests.csv"}) {
    EXPECT_EQ(read_file(dir / "a" / f), read_file(dir / "b" / f)) << f;
    EXPECT_EQ(read_file(dir / "a" / f), read_file(dir / "c" / f)) << f;
  }
  // And the run's own config.yaml, run again, gives that summary.json.
  ASSERT_EQ(run_from(dir, (dir / "a" / "config.yaml").string(), "d").code, 0);
  EXPECT_EQ(read_file(dir / "a" / "summary.json"), read_file(dir / "d" / "summary.json"));
  fs::remove_all(dir);
}

TEST(SimRun, MissingExperimentFileIsExitCode2) {
  const fs::path dir = temp_dir("missing");
  const Cli cli = run_sim("run /nonexistent/exp.yaml", dir);
  EXPECT_EQ(cli.code, 2);
  EXPECT_NE(cli.err.find("/nonexistent/exp.yaml: cannot open"), std::string::npos) << cli.err;
  fs::remove_all(dir);
}

TEST(SimRun, MalformedYamlNamesTheLine) {
  const fs::path dir = temp_dir("malformed");
  write_file(dir / "e.yaml", "name: x\nmodel: [tiny\nhardware: H100-SXM\n");
  const Cli cli = run_sim("run " + (dir / "e.yaml").string(), dir);
  EXPECT_EQ(cli.code, 2);
  EXPECT_NE(cli.err.find("e.yaml:"), std::string::npos) << cli.err;
  EXPECT_NE(cli.err.find("malformed YAML"), std::string::npos) << cli.err;
  fs::remove_all(dir);
}

TEST(SimRun, UnknownKeyNamesKeyAndLine) {
  const fs::path dir = temp_dir("unknown");
  write_file(dir / "e.yaml", small_experiment(kSmallWorkload, "  max_num_seq: 4\n"));
  const Cli cli = run_sim("run " + (dir / "e.yaml").string(), dir);
  EXPECT_EQ(cli.code, 2);
  EXPECT_NE(cli.err.find("e.yaml:9:3"), std::string::npos) << cli.err;
  EXPECT_NE(cli.err.find("unknown key 'serving.max_num_seq'"), std::string::npos) << cli.err;
  fs::remove_all(dir);
}

TEST(SimRun, NegativeRateIsAnError) {
  const fs::path dir = temp_dir("negrate");
  write_file(dir / "e.yaml", small_experiment(kSmallWorkload));
  const Cli cli =
      run_sim("run " + (dir / "e.yaml").string() + " --set workload.arrival.rate=-3", dir);
  EXPECT_EQ(cli.code, 2);
  EXPECT_NE(cli.err.find("workload.arrival.rate"), std::string::npos) << cli.err;
  fs::remove_all(dir);
}

TEST(SimRun, EmptyTraceIsAnError) {
  const fs::path dir = temp_dir("empty");
  write_file(dir / "empty.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n");
  write_file(dir / "e.yaml", small_experiment("  type: azure\n  path: empty.csv\n"));
  const Cli cli = run_sim("run " + (dir / "e.yaml").string(), dir);
  EXPECT_EQ(cli.code, 2);
  EXPECT_NE(cli.err.find("empty.csv"), std::string::npos) << cli.err;
  fs::remove_all(dir);
}

TEST(SimRun, LenientTraceRowsAreSkippedAndCountedInTheSummary) {
  const fs::path dir = temp_dir("lenient");
  write_file(dir / "t.csv",
             "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,40,5\n0.1,oops,5\n"
             "0.2,30,4\n0.3,20\n0.4,25,6\n");
  write_file(dir / "e.yaml", small_experiment("  type: vidur\n  path: t.csv\n  lenient: true\n"));
  ExperimentConfig c = load_experiment((dir / "e.yaml").string(), {});
  RunOptions o;
  o.out_dir = (dir / "run").string();
  const RunOutput run = run_simulation(c, o);
  EXPECT_EQ(run.summary.completed, 3);
  EXPECT_EQ(run.summary.skipped_trace_rows, 2);
  const nlohmann::json s = nlohmann::json::parse(read_file(dir / "run" / "summary.json"));
  EXPECT_EQ(s["requests"]["skipped_trace_rows"].get<int>(), 2);
  // Without lenient the first malformed row is an error naming file and line.
  write_file(dir / "strict.yaml", small_experiment("  type: vidur\n  path: t.csv\n"));
  const Cli cli =
      run_sim("run " + (dir / "strict.yaml").string() + " --out " + (dir / "r2").string(), dir);
  EXPECT_EQ(cli.code, 2);
  EXPECT_NE(cli.err.find("t.csv:3"), std::string::npos) << cli.err;
  fs::remove_all(dir);
}

TEST(SimRun, ContiguousAllocationReservesAndWastesWhatPagingDoesNot) {
  const fs::path dir = temp_dir("contiguous");
  write_file(dir / "e.yaml", small_experiment(kSmallWorkload, "  max_num_seqs: 64\n"));
  RunOptions o;
  o.write_files = false;
  const RunOutput paged = run_simulation(load_experiment((dir / "e.yaml").string(), {}), o);
  const RunOutput max_tokens = run_simulation(
      load_experiment((dir / "e.yaml").string(),
                      {"policies.allocation={name: contiguous, reserve: max_tokens}"}),
      o);
  const RunOutput max_len = run_simulation(
      load_experiment((dir / "e.yaml").string(), {"policies.allocation=contiguous"}), o);
  // Paging wastes at most the tail of each request's last block; reservations waste far more,
  // and reserving max_model_len (512 tokens = 32 blocks of the 63) wastes the most.
  EXPECT_EQ(paged.summary.kv_reserved_unused_blocks_mean, 0.0);
  EXPECT_LT(paged.summary.kv_internal_fragmentation_mean, 0.1);
  EXPECT_GT(max_tokens.summary.kv_internal_fragmentation_mean,
            paged.summary.kv_internal_fragmentation_mean);
  EXPECT_GT(max_len.summary.kv_internal_fragmentation_mean,
            max_tokens.summary.kv_internal_fragmentation_mean);
  EXPECT_GT(max_len.summary.kv_reserved_unused_blocks_mean,
            max_tokens.summary.kv_reserved_unused_blocks_mean);
  // No sharing without pages: the prefix cache is off, and fewer requests fit, so they queue.
  EXPECT_EQ(max_len.summary.prefix_queried_tokens, 0);
  EXPECT_GT(max_len.summary.queueing_ms.mean, paged.summary.queueing_ms.mean);
  EXPECT_EQ(max_len.summary.completed, paged.summary.completed);
  fs::remove_all(dir);
}

TEST(SimRun, TooLongRequestsAreRejectedAndCounted) {
  const fs::path dir = temp_dir("toolong");
  write_file(dir / "e.yaml", small_experiment(kSmallWorkload, "  max_num_seqs: 8\n"));
  ExperimentConfig c = load_experiment((dir / "e.yaml").string(), {"serving.max_model_len=200"});
  RunOptions o;
  o.out_dir = (dir / "run").string();
  const RunOutput run = run_simulation(c, o);
  std::int64_t rejected_rows = 0;
  for (const auto& r : read_csv(dir / "run" / "requests.csv")) {
    const bool over = std::stoll(r.at("prompt_tokens")) + std::stoll(r.at("output_tokens")) > 200;
    if (r.at("status") == "rejected") {
      ++rejected_rows;
      EXPECT_NE(r.at("reason").find("max_model_len"), std::string::npos);
    } else {
      EXPECT_FALSE(over) << "request " << r.at("id") << " should have been rejected";
    }
  }
  EXPECT_GT(run.summary.rejected, 0);
  EXPECT_EQ(run.summary.rejected, rejected_rows);
  EXPECT_EQ(run.summary.completed + run.summary.rejected, 60);
  fs::remove_all(dir);
}

// serving.max_model_len left out: 8192, or fewer for a model of fewer positions (tiny: 2048;
// a cluster takes its models' fewest); written out, the limit is checked as before.
TEST(SimRun, MaxModelLenDefaultsToTheModelsPositions) {
  const fs::path dir = temp_dir("model_len");
  const std::string workload =
      "workload: {type: synthetic, num_requests: 5, arrival: {process: poisson, rate: 5}, "
      "prompt_len: {dist: fixed, value: 20}, output_len: {dist: fixed, value: 4}}\n";
  write_file(dir / "tiny.yaml", "model: tiny\nhardware: H100-SXM\n" + workload);
  EXPECT_EQ(load_experiment((dir / "tiny.yaml").string(), {}).scheduler.max_model_len, 2048);
  const Cli cli = run_sim(
      "run " + (dir / "tiny.yaml").string() + " --quiet --out " + (dir / "run").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_NE(read_file(dir / "run" / "config.yaml").find("max_model_len: 2048"), std::string::npos);
  write_file(dir / "big.yaml", "model: Llama-3-8B\nhardware: H100-SXM\n" + workload);
  EXPECT_EQ(load_experiment((dir / "big.yaml").string(), {}).scheduler.max_model_len, 8192);
  EXPECT_EQ(load_experiment((dir / "big.yaml").string(),
                            {"cluster.pools=[{name: a}, {name: b, model: tiny}]"})
                .scheduler.max_model_len,
            2048);
  const Cli over = run_sim("run " + (dir / "tiny.yaml").string() +
                               " --set serving.max_model_len=4096 --out " + (dir / "over").string(),
                           dir);
  EXPECT_EQ(over.code, 2);
  EXPECT_NE(over.err.find("max_position_embeddings (2048), got 4096"), std::string::npos)
      << over.err;
  EXPECT_NE(over.err.find("--set serving.max_model_len"), std::string::npos) << over.err;
  // Written in the file: its line is named.
  write_file(dir / "long.yaml",
             "model: tiny\nhardware: H100-SXM\nserving:\n  max_model_len: 4096\n" + workload);
  const Cli line =
      run_sim("run " + (dir / "long.yaml").string() + " --out " + (dir / "long").string(), dir);
  EXPECT_EQ(line.code, 2);
  EXPECT_NE(line.err.find("long.yaml:4:18: key 'serving.max_model_len'"), std::string::npos)
      << line.err;
  fs::remove_all(dir);
}

TEST(SimRun, RefusesToOverwriteForeignFiles) {
  const fs::path dir = temp_dir("foreign");
  write_file(dir / "e.yaml", small_experiment(kSmallWorkload));
  fs::create_directories(dir / "mine");
  write_file(dir / "mine" / "thesis.tex", "precious");
  const Cli cli =
      run_sim("run " + (dir / "e.yaml").string() + " --out " + (dir / "mine").string(), dir);
  EXPECT_EQ(cli.code, 2);
  EXPECT_NE(cli.err.find("thesis.tex"), std::string::npos) << cli.err;
  EXPECT_EQ(read_file(dir / "mine" / "thesis.tex"), "precious");
  // Files named like a run's are not a run without ServeLab's summary.json: a user's steps.csv,
  // a figures/ folder of their own, a summary.json of something else.
  const std::string run = "run " + (dir / "e.yaml").string() + " --quiet --out ";
  fs::create_directories(dir / "own");
  write_file(dir / "own" / "steps.csv", "mine");
  Cli c = run_sim(run + (dir / "own").string(), dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("no summary.json of a ServeLab run"), std::string::npos) << c.err;
  EXPECT_EQ(read_file(dir / "own" / "steps.csv"), "mine");
  fs::create_directories(dir / "figs" / "figures");
  write_file(dir / "figs" / "figures" / "my.png", "mine");
  EXPECT_EQ(run_sim(run + (dir / "figs").string(), dir).code, 2);
  EXPECT_EQ(read_file(dir / "figs" / "figures" / "my.png"), "mine");
  fs::create_directories(dir / "other");
  write_file(dir / "other" / "summary.json", "{\"accuracy\": 0.9}");
  EXPECT_EQ(run_sim(run + (dir / "other").string(), dir).code, 2);
  EXPECT_EQ(read_file(dir / "other" / "summary.json"), "{\"accuracy\": 0.9}");
  // A comparison's folder: a compare.csv of the user's is not ours to replace.
  fs::create_directories(dir / "cmp");
  write_file(dir / "cmp" / "compare.csv", "my own spreadsheet\n");
  c = run_sim("compare " + (dir / "e.yaml").string() +
                  " --quiet --variant a:serving.block_size=32 --out " + (dir / "cmp").string(),
              dir);
  EXPECT_EQ(c.code, 2);
  EXPECT_NE(c.err.find("its 'compare.csv' is not a ServeLab comparison output"), std::string::npos)
      << c.err;
  EXPECT_EQ(read_file(dir / "cmp" / "compare.csv"), "my own spreadsheet\n");
  // A previous run's folder is fine to overwrite.
  EXPECT_EQ(
      run_sim("run " + (dir / "e.yaml").string() + " --out " + (dir / "r").string(), dir).code, 0);
  EXPECT_EQ(
      run_sim("run " + (dir / "e.yaml").string() + " --out " + (dir / "r").string(), dir).code, 0);
  fs::remove_all(dir);
}

TEST(SimRun, SetOverridesAnyKeyAndIsRecordedInConfig) {
  const fs::path dir = temp_dir("set");
  write_file(dir / "e.yaml", small_experiment(kSmallWorkload));
  const Cli cli = run_sim("run " + (dir / "e.yaml").string() + " --out " + (dir / "r").string() +
                              " --set serving.max_num_seqs=3 --seed 99"
                              " --set 'workload.arrival={process: poisson, rate: 60}'",
                          dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  const std::string cfg = read_file(dir / "r" / "config.yaml");
  EXPECT_NE(cfg.find("arrival: {process: poisson, rate: 60}"), std::string::npos) << cfg;
  EXPECT_EQ(cfg.find("!"), std::string::npos) << "override marks leaked: " << cfg;
  EXPECT_NE(cfg.find("max_num_seqs: 3"), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("seed: 99"), std::string::npos) << cfg;
  for (const auto& st : read_csv(dir / "r" / "steps.csv")) {
    EXPECT_LE(std::stoi(st.at("num_seqs")), 3);
  }
  fs::remove_all(dir);
}

// A run's config.yaml names its data files by absolute path: run again from another folder it
// reads the same trace (a shipped lesson's trace beside its experiment) and gives the same files.
TEST(SimRun, ConfigYamlReadsTheSameDataFilesFromAnyFolder) {
  const fs::path dir = temp_dir("config_paths");
  fs::create_directories(dir / "elsewhere");
  const Cli first =
      run_sim("run " + servelab_home().string() +
                  "/experiments/lessons/scoring-prompts.yaml -q --out " + (dir / "r1").string(),
              dir);
  ASSERT_EQ(first.code, 0) << first.err;
  const Cli again = run_program(
      "sim", "run " + (dir / "r1" / "config.yaml").string() + " -q --out " + (dir / "r2").string(),
      dir / "stdout.txt", dir / "stderr.txt", "cd '" + (dir / "elsewhere").string() + "' && ");
  ASSERT_EQ(again.code, 0) << again.err;
  for (const char* f : {"requests.csv", "steps.csv", "summary.json"}) {
    EXPECT_EQ(read_file(dir / "r1" / f), read_file(dir / "r2" / f)) << f;
  }
  EXPECT_NE(read_file(dir / "r1" / "config.yaml")
                .find("path: " + (servelab_home() / "experiments/lessons/scoring-prompts.jsonl")
                                     .lexically_normal()
                                     .string()),
            std::string::npos);
  fs::remove_all(dir);
}

// Reached through a linked folder, `../data/t.csv` is the link target's sibling: the file the
// run read. config.yaml named the lexical one (the link's sibling), another file, and its rerun
// read that one (other requests) or failed.
TEST(SimRun, ConfigYamlNamesTheFileReadThroughALinkedFolder) {
  const fs::path dir = temp_dir("config_symlink");
  const std::string header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  for (const char* d : {"real/data", "real/exp", "other/data"}) fs::create_directories(dir / d);
  write_file(dir / "real/data/t.csv", header +
                                          "2023-11-16 18:15:46.6805900,100,10\n"
                                          "2023-11-16 18:15:47.0000000,200,20\n");
  write_file(dir / "other/data/t.csv", header + "2023-11-16 18:15:46.6805900,300,30\n");
  write_file(dir / "real/exp/e.yaml",
             "name: linked\nseed: 1\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {num_gpu_blocks: 256}\nworkload: {type: azure, path: ../data/t.csv}\n");
  fs::create_directory_symlink(dir / "real/exp", dir / "other/exp");
  const Cli first = run_sim(
      "run " + (dir / "other/exp/e.yaml").string() + " -q --out " + (dir / "a").string(), dir);
  ASSERT_EQ(first.code, 0) << first.err;
  const std::string cfg = read_file(dir / "a" / "config.yaml");
  EXPECT_NE(cfg.find("path: " + fs::weakly_canonical(dir / "real/data/t.csv").string()),
            std::string::npos)
      << cfg;
  const Cli again = run_sim(
      "run " + (dir / "a" / "config.yaml").string() + " -q --out " + (dir / "b").string(), dir);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(read_file(dir / "a" / "requests.csv"), read_file(dir / "b" / "requests.csv"));
  fs::remove_all(dir);
}

TEST(SimRun, UsageErrorsAreExitCode2) {
  const fs::path dir = temp_dir("usage");
  EXPECT_EQ(run_sim("", dir).code, 2);
  EXPECT_EQ(run_sim("frobnicate", dir).code, 2);
  EXPECT_EQ(run_sim("run", dir).code, 2);
  EXPECT_EQ(run_sim("run " + kBurst + " --seed -1", dir).code, 2);
  EXPECT_EQ(run_sim("run " + kBurst + " --bogus", dir).code, 2);
  EXPECT_EQ(run_sim("help", dir).code, 0);
  fs::remove_all(dir);
}

// A distribution with no values prints "-" in the summary (its zeros read as the best latency);
// summary.json keeps the zeros beside `count: 0`. Every prompt here is longer than the model.
TEST(SimRun, SummaryPrintsNoLatenciesWhenNothingCompletes) {
  const fs::path dir = temp_dir("nothing-completes");
  write_file(dir / "exp.yaml", small_experiment("  type: synthetic\n  num_requests: 5\n"
                                                "  arrival: {process: poisson, rate: 50}\n"
                                                "  prompt_len: {dist: fixed, value: 600}\n"
                                                "  output_len: {dist: fixed, value: 4}\n"));
  const Cli cli =
      run_sim("run " + (dir / "exp.yaml").string() + " --out " + (dir / "run").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_NE(cli.out.find("(0 completed, 5 rejected"), std::string::npos) << cli.out;
  for (const char* name : {"TTFT", "TPOT", "ITL", "E2E", "queueing"}) {
    const std::size_t at = cli.out.find(std::string("  ") + name + " ");
    ASSERT_NE(at, std::string::npos) << name;
    const std::string line = cli.out.substr(at, cli.out.find('\n', at) - at);
    EXPECT_EQ(line.find("0.00"), std::string::npos) << line;
    EXPECT_NE(line.find("         -          -"), std::string::npos) << line;
  }
  const nlohmann::json s = nlohmann::json::parse(read_file(dir / "run" / "summary.json"));
  EXPECT_EQ(s["ttft_ms"]["count"], 0) << s.dump();
  fs::remove_all(dir);
}

// An unknown model or hardware name is an error at its key when the experiment is read (it was
// one without a file or line when the run started).
TEST(SimRun, UnknownModelOrHardwareNamesTheKey) {
  const fs::path dir = temp_dir("unknown-model");
  const auto error_of = [&](const std::string& text) {
    write_file(dir / "exp.yaml", text);
    try {
      load_experiment((dir / "exp.yaml").string(), {});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string msg = error_of("seed: 1\nmodel: Llama-4-400B\nhardware: H100-SXM\n");
  EXPECT_NE(msg.find("exp.yaml:2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("key 'model': unknown model 'Llama-4-400B'"), std::string::npos) << msg;
  msg = error_of("model: {name: Llama-4-400B, kv_cache_dtype: fp8}\nhardware: H100-SXM\n");
  EXPECT_NE(msg.find("key 'model.name': unknown model"), std::string::npos) << msg;
  msg = error_of("model: tiny\nhardware: B300\n");
  EXPECT_NE(msg.find("exp.yaml:2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("key 'hardware': unknown hardware 'B300'"), std::string::npos) << msg;
  fs::remove_all(dir);
}

// Sections a --set would change without effect are refused, naming the key and what to do:
// `compare:` and `sweep:` (read from the file by their commands) and `derived:` (a run's record:
// `--set derived.num_gpu_blocks=100` was accepted and the run kept its 3,607 blocks).
TEST(SimRun, SetIntoSectionsItCannotChangeIsRefused) {
  const auto error_of = [](const std::string& o) {
    try {
      load_experiment(kBurst, {o});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("derived.num_gpu_blocks=100")
                .find("--set derived.num_gpu_blocks: the derived: "
                      "section cannot be set"),
            std::string::npos);
  EXPECT_NE(error_of("derived.num_gpu_blocks=100").find("serving.num_gpu_blocks"),
            std::string::npos);
  EXPECT_NE(error_of("derived={}").find("the derived: section"), std::string::npos);
  EXPECT_NE(error_of("compare.a.seed=1").find("--variant"), std::string::npos);
  EXPECT_NE(error_of("sweep[0]=1").find("the sweep: section"), std::string::npos);
  // A key that only starts with the same letters is not the section.
  EXPECT_EQ(error_of("description=derived"), "");
}

}  // namespace
}  // namespace servelab
