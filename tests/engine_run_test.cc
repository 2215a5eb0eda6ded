// End-to-end tests of the engine driver and the `engine run` command: backend agnosticism (the
// same schedule as the simulator when every request arrives at time zero, for one replica and for
// a cluster of two CPU replicas behind a router), the run folder, the block count it reports, and
// the refused CUDA device and P/D pools.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/scheduler_invariants.h"
#include "engine/engine_driver.h"
#include "engine/llama_weights.h"
#include "engine/run_support.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "serving/model_config.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;

using namespace servelab::test_util;

// All 40 arrivals at t = 0: fixed arrivals at 1e12 req/s put request i at round(i * 1e-3 ns).
// A 24-block pool (384 tokens) with a 256-token budget forces recompute preemptions, and shared
// prefixes make prefix caching hit.
const std::string kAllAtZero =
    "name: agnostic\nseed: 11\nmodel: tiny\nhardware: H100-SXM\n"
    "serving:\n  block_size: 16\n  num_gpu_blocks: 24\n  max_num_batched_tokens: 256\n"
    "  max_num_seqs: 16\n  max_model_len: 384\n"
    "policies: {prefix_cache: hash, preemption: recompute}\n"
    "workload:\n  type: synthetic\n  num_requests: 40\n  start_s: 0\n"
    "  arrival: {process: fixed, rate: 1.0e12}\n"
    "  prompt_len: {dist: uniform, min: 20, max: 120}\n"
    "  output_len: {dist: uniform, min: 5, max: 40}\n"
    "  shared_prefix: {num_prefixes: 3, length: 32, fraction: 0.6}\n";

ExperimentConfig write_experiment(const fs::path& dir) {
  write_file(dir / "exp.yaml", kAllAtZero);
  return load_experiment((dir / "exp.yaml").string(), {});
}

TEST(EngineRun, SameScheduleAsTheSimulatorWhenAllArriveAtZero) {
  const fs::path dir = temp_dir("engine_agnostic");
  ExperimentConfig c = write_experiment(dir);
  c.outputs.record_schedule = true;
  RunOptions so;
  so.out_dir = (dir / "sim").string();
  const RunOutput sim = run_simulation(c, so);
  EngineOptions eo;
  eo.out_dir = (dir / "engine").string();
  const RunOutput engine = run_engine(c, eo);
  // The experiment exercises what could make the backends diverge.
  EXPECT_GT(sim.summary.preemptions, 0);
  EXPECT_GT(sim.summary.prefix_hit_tokens, 0);
  EXPECT_EQ(sim.summary.completed, 40);
  const std::string a = read_file(dir / "sim" / "schedule.csv");
  const std::string b = read_file(dir / "engine" / "schedule.csv");
  EXPECT_GT(a.size(), 100u);
  EXPECT_EQ(a, b) << "schedule.csv differs between sim and engine";
  EXPECT_EQ(sim.summary.preemptions, engine.summary.preemptions);
  EXPECT_EQ(sim.summary.num_steps, engine.summary.num_steps);
  // Page churn is counted in the shared core: the same schedule churns the same blocks.
  EXPECT_GT(sim.summary.churn.allocated, 0);
  EXPECT_EQ(sim.summary.churn.allocated, engine.summary.churn.allocated);
  EXPECT_EQ(sim.summary.churn.freed, engine.summary.churn.freed);
  EXPECT_EQ(sim.summary.churn.evicted, engine.summary.churn.evicted);
  fs::remove_all(dir);
}

// kAllAtZero on two replicas of one pool behind `router`.
std::string two_replicas(const std::string& router) {
  return kAllAtZero + "cluster:\n  router: " + router + "\n  pools:\n    - {name: cpu, count: 2}\n";
}

ExperimentConfig write_cluster_experiment(const fs::path& dir, const std::string& router) {
  write_file(dir / "exp.yaml", two_replicas(router));
  ExperimentConfig c = load_experiment((dir / "exp.yaml").string(), {});
  c.outputs.record_schedule = true;
  c.outputs.record_events = true;
  return c;
}

// schedule.csv's rows of each replica, in order, without the replica column (rows of different
// replicas interleave by time in a cluster run).
std::map<std::string, std::vector<std::string>> schedule_by_replica(const fs::path& file) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& r : read_csv(file)) {
    out[r.at("replica")].push_back(r.at("step") + "," + r.at("request") + "," +
                                   r.at("first_token") + "," + r.at("num_tokens") + "," +
                                   r.at("kind"));
  }
  return out;
}

// events.csv's routing decisions: request id -> replica.
std::map<std::string, std::string> routes(const fs::path& file) {
  std::map<std::string, std::string> out;
  for (const auto& r : read_csv(file)) {
    if (r.at("event") == "route") out[r.at("request")] = r.at("detail");
  }
  return out;
}

class EngineCluster : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineCluster, EachReplicaHasTheSimulatedClustersScheduleWhenAllArriveAtZero) {
  const fs::path dir = temp_dir(std::string("engine_cluster_") + GetParam());
  const ExperimentConfig c = write_cluster_experiment(dir, GetParam());
  RunOptions so;
  so.out_dir = (dir / "sim").string();
  const RunOutput sim = run_simulation(c, so);
  EXPECT_EQ(sim.summary.completed, 40);
  EXPECT_GT(sim.summary.prefix_hit_tokens, 0);
  EXPECT_GT(sim.summary.preemptions, 0);

  // Every plan of both replicas passes the scheduler's invariants (and the KV manager's).
  std::mutex mu;
  std::set<const Scheduler*> checked;
  std::int64_t plans = 0;
  EngineOptions eo;
  eo.write_tokens = true;
  eo.before_step = [&](const Scheduler& s, const StepPlan& plan) {
    check_scheduler_invariants(s, plan);
    s.kv().check_invariants();
    std::lock_guard<std::mutex> l(mu);
    checked.insert(&s);
    ++plans;
  };
  eo.out_dir = (dir / "engine").string();
  const RunOutput engine = run_engine(c, eo);
  EXPECT_EQ(checked.size(), 2u);
  EXPECT_EQ(plans, engine.summary.num_steps);
  EXPECT_EQ(engine.summary.completed, 40);
  EXPECT_EQ(engine.backend, "engine-cpu");

  // The same routing decisions, and each replica's plans equal the simulated replica's.
  const auto sim_routes = routes(dir / "sim" / "events.csv");
  EXPECT_EQ(sim_routes.size(), 40u);
  EXPECT_EQ(sim_routes, routes(dir / "engine" / "events.csv"));
  const auto a = schedule_by_replica(dir / "sim" / "schedule.csv");
  const auto b = schedule_by_replica(dir / "engine" / "schedule.csv");
  ASSERT_EQ(a.size(), 2u) << "both replicas ran";
  EXPECT_EQ(a, b) << "a replica's schedule differs between sim and engine";
  EXPECT_EQ(sim.summary.num_steps, engine.summary.num_steps);
  EXPECT_EQ(sim.summary.preemptions, engine.summary.preemptions);
  EXPECT_EQ(sim.summary.prefix_hit_tokens, engine.summary.prefix_hit_tokens);

  // summary.json's cluster object counts the same per replica.
  const nlohmann::json js = nlohmann::json::parse(read_file(dir / "sim" / "summary.json"));
  const nlohmann::json je = nlohmann::json::parse(read_file(dir / "engine" / "summary.json"));
  EXPECT_EQ(je["run"]["backend"], "engine-cpu");
  ASSERT_EQ(je["cluster"]["replicas"], 2);
  for (int i = 0; i < 2; ++i) {
    for (const char* k : {"requests_routed", "steps", "prefill_tokens", "decode_tokens"}) {
      EXPECT_EQ(js["cluster"]["pools"][0]["replicas"][i][k],
                je["cluster"]["pools"][0]["replicas"][i][k])
          << k << " of replica " << i;
    }
  }

  // Greedy tokens do not depend on which replica ran a request: the one-replica engine's.
  fs::create_directories(dir / "one-config");
  const ExperimentConfig one = write_experiment(dir / "one-config");
  EngineOptions o1;
  o1.write_tokens = true;
  o1.out_dir = (dir / "one").string();
  run_engine(one, o1);
  const std::string tokens = read_file(dir / "engine" / "tokens.jsonl");
  EXPECT_GT(tokens.size(), 100u);
  EXPECT_EQ(tokens, read_file(dir / "one" / "tokens.jsonl"));

  // A second run: the same tokens, routes and schedules, byte for byte.
  eo.out_dir = (dir / "again").string();
  run_engine(c, eo);
  EXPECT_EQ(tokens, read_file(dir / "again" / "tokens.jsonl"));
  EXPECT_EQ(routes(dir / "engine" / "events.csv"), routes(dir / "again" / "events.csv"));
  EXPECT_EQ(b, schedule_by_replica(dir / "again" / "schedule.csv"));
  fs::remove_all(dir);
}

// What a run depended on beyond its experiment is in config.yaml's `derived:` record: the KV
// budget that sized the cache (--kv-memory-gb; it was recorded nowhere, so the folder's
// config.yaml reran on the default 1 GiB and gave other tokens) and a checkpoint's path. The
// record stays a record: the simulator reads the file back.
TEST(EngineRun, ConfigYamlRecordsTheKvBudgetAndTheWeights) {
  const fs::path dir = temp_dir("engine_derived");
  write_file(dir / "exp.yaml",
             "name: derived\nseed: 3\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {block_size: 16, max_num_batched_tokens: 256, max_num_seqs: 8}\n"
             "workload: {type: synthetic, num_requests: 6, arrival: {process: fixed, rate: 100},\n"
             "  prompt_len: {dist: fixed, value: 40}, output_len: {dist: fixed, value: 4}}\n");
  ExperimentConfig c = load_experiment((dir / "exp.yaml").string(), {});
  LlamaConfig lc;
  lc.model = load_model(c.model, default_catalog_dir());
  LlamaWeights::random(lc, 5).save((dir / "w.safetensors").string());
  const Cli cli = run_engine_cli(
      "run " + (dir / "exp.yaml").string() + " -q --kv-memory-gb 0.0002" + " --weights " +
          (dir / "w.safetensors").string() + " --out " + (dir / "run").string(),
      dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  const std::string yaml = read_file(dir / "run" / "config.yaml");
  const std::string derived = yaml.substr(yaml.find("derived:"));
  EXPECT_NE(derived.find("kv_memory_gb: 0.0002"), std::string::npos) << derived;
  EXPECT_NE(derived.find("weights: " + (dir / "w.safetensors").string()), std::string::npos)
      << derived;
  const Cli sim = run_sim(
      "run " + (dir / "run" / "config.yaml").string() + " -q --out " + (dir / "sim").string(), dir);
  EXPECT_EQ(sim.code, 0) << sim.err;
  fs::remove_all(dir);
}

// On the GPU the device's free memory sizes the KV cache, not --kv-memory-gb: config.yaml does not
// record a budget that sized nothing (a CUDA run recorded the 1 GiB default beside its 3.5 GiB of
// blocks), nor where serving.num_gpu_blocks sized it.
TEST(EngineRun, TheKvBudgetIsRecordedOnlyWhereItSizedTheCache) {
  ExperimentConfig c;
  const auto has_budget = [](const std::vector<std::pair<std::string, std::string>>& r) {
    for (const auto& [k, v] : r) {
      if (k == "kv_memory_gb") return true;
    }
    return false;
  };
  EXPECT_TRUE(has_budget(engine_options_record(c, "cpu", 0.5, "")));
  EXPECT_FALSE(has_budget(engine_options_record(c, "cuda", 0.5, "")));
  c.num_gpu_blocks = 100;
  EXPECT_FALSE(has_budget(engine_options_record(c, "cpu", 0.5, "")));
  // The command says so when the option was given.
  const fs::path dir = temp_dir("engine_kv_budget_cuda");
  std::string text = read_file(home_path("experiments/burst-tiny.yaml"));
  const std::size_t at = text.find("  num_gpu_blocks:");
  ASSERT_NE(at, std::string::npos);
  text.erase(at, text.find('\n', at) + 1 - at);
  write_file(dir / "exp.yaml", text);
  const Cli cli =
      run_engine_cli("run " + (dir / "exp.yaml").string() +
                         " --device cuda --kv-memory-gb 0.5 --set workload.num_requests=1 --out " +
                         (dir / "run").string() + " -q",
                     dir);
  EXPECT_NE(cli.err.find("--kv-memory-gb is not used on --device cuda"), std::string::npos)
      << cli.err;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Routers, EngineCluster,
                         ::testing::Values("round_robin", "least_outstanding"));

TEST(EngineRun, ClusterOutputsHaveTheReplicaColumns) {
  const fs::path dir = temp_dir("engine_cluster_cli");
  write_file(dir / "exp.yaml", two_replicas("round_robin"));
  const Cli cli = run_engine_cli("run " + (dir / "exp.yaml").string() + " --out " +
                                     (dir / "run").string() + " --record-events",
                                 dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_EQ(routes(dir / "run" / "events.csv").size(), 40u);
  const auto steps = read_csv(dir / "run" / "steps.csv");
  std::set<std::string> replicas;
  for (const auto& r : steps) replicas.insert(r.at("replica"));
  EXPECT_EQ(replicas, (std::set<std::string>{"0", "1"}));
  const nlohmann::json s = nlohmann::json::parse(read_file(dir / "run" / "summary.json"));
  EXPECT_EQ(s["cluster"]["router"], "round_robin");
  EXPECT_EQ(s["cluster"]["pools"][0]["name"], "cpu");
  EXPECT_EQ(s["cluster"]["pools"][0]["requests_routed"], 40);
  EXPECT_EQ(s["cluster"]["pools"][0]["replicas"][1]["requests_routed"], 20);
  fs::remove_all(dir);
}

// Sessions (a dependent workload: a turn is released when the previous one finishes, on
// whichever replica) behind a front end, on three replicas of two pools: the routing thread
// waits for releases while replicas run, and the run ends when every session is done.
TEST(EngineRun, ClusterRunsSessionsThroughTheFrontEnd) {
  const fs::path dir = temp_dir("engine_cluster_sessions");
  write_file(dir / "exp.yaml",
             "name: sessions\nseed: 7\nmodel: tiny\nhardware: H100-SXM\n"
             "serving:\n  block_size: 16\n  num_gpu_blocks: 64\n  max_num_batched_tokens: 256\n"
             "  max_num_seqs: 16\n  max_model_len: 1024\n  frontend: {per_prompt_token_us: 20}\n"
             "policies: {prefix_cache: hash}\n"
             "workload:\n  type: multiturn\n  num_sessions: 8\n"
             "  session_arrival: {process: poisson, rate: 40}\n"
             "  turns: {dist: uniform, min: 2, max: 3}\n"
             "  think_time_s: {dist: exponential, mean: 0.02, max: 0.05}\n"
             "  first_prompt_len: {dist: uniform, min: 16, max: 60}\n"
             "  new_tokens: {dist: uniform, min: 4, max: 20}\n"
             "  output_len: {dist: uniform, min: 4, max: 12}\n"
             "cluster:\n  router: session_affinity\n  pools:\n"
             "    - {name: a, count: 2}\n    - {name: b, count: 1}\n");
  ExperimentConfig c = load_experiment((dir / "exp.yaml").string(), {});
  c.outputs.record_events = true;
  EngineOptions eo;
  eo.out_dir = (dir / "run").string();
  const RunOutput run = run_engine(c, eo);
  EXPECT_GT(run.summary.num_requests, 8);
  EXPECT_EQ(run.summary.completed, run.summary.num_requests);
  EXPECT_EQ(routes(dir / "run" / "events.csv").size(),
            static_cast<std::size_t>(run.summary.num_requests));
  const nlohmann::json s = nlohmann::json::parse(read_file(dir / "run" / "summary.json"));
  EXPECT_EQ(s["cluster"]["replicas"], 3);
  EXPECT_EQ(s["cluster"]["pools"][0]["requests_routed"].get<std::int64_t>() +
                s["cluster"]["pools"][1]["requests_routed"].get<std::int64_t>(),
            run.summary.num_requests);
  fs::remove_all(dir);
}

// A session's next turn quotes its earlier replies; the engine feeds the tokens the model really
// sampled there (engine/reply_tokens.h), whose KV the earlier turn's cached blocks hold, so
// greedy outputs do not depend on the prefix cache (they did: a turn hit KV of the sampled tokens
// but computed, without the cache, hash-derived values in their place). One replica and a
// cluster of two behind session affinity.
TEST(EngineRun, SessionTurnsGiveTheSameTokensWithOrWithoutThePrefixCache) {
  const fs::path dir = temp_dir("engine_session_tokens");
  const std::string text =
      "name: turns\nseed: 7\nmodel: tiny\nhardware: H100-SXM\n"
      "serving:\n  block_size: 16\n  num_gpu_blocks: 96\n  max_num_batched_tokens: 256\n"
      "  max_num_seqs: 8\n  max_model_len: 512\n"
      "policies: {prefix_cache: hash}\n"
      "workload:\n  type: multiturn\n  num_sessions: 3\n"
      "  session_arrival: {process: poisson, rate: 10}\n"
      "  turns: {dist: fixed, value: 3}\n  think_time_s: {dist: fixed, value: 0}\n"
      "  first_prompt_len: {dist: fixed, value: 40}\n"
      "  new_tokens: {dist: fixed, value: 8}\n  output_len: {dist: fixed, value: 40}\n";
  write_file(dir / "exp.yaml", text);
  for (const std::string cluster :
       {"", "cluster:\n  router: session_affinity\n  pools: [{name: a, count: 2}]\n"}) {
    std::map<std::string, std::string> tokens;
    std::int64_t cached = 0;
    for (const char* cache : {"hash", "none"}) {
      write_file(dir / "exp.yaml", text + cluster);
      ExperimentConfig c = load_experiment((dir / "exp.yaml").string(),
                                           {std::string("policies.prefix_cache=") + cache});
      EngineOptions eo;
      eo.out_dir = (dir / cache).string();
      eo.write_tokens = true;
      fs::remove_all(dir / cache);
      const RunOutput run = run_engine(c, eo);
      EXPECT_EQ(run.summary.completed, 9) << cache << cluster;
      tokens[cache] = read_file(dir / cache / "tokens.jsonl");
      if (std::string(cache) == "hash") {
        for (const auto& r : read_csv(dir / cache / "requests.csv")) {
          cached += std::stoll(r.at("cached_tokens"));
        }
      }
    }
    EXPECT_GT(cached, 0) << "no turn hit the cache: the comparison shows nothing" << cluster;
    EXPECT_EQ(tokens["hash"], tokens["none"]) << cluster;
  }
  fs::remove_all(dir);
}

// A failure on one replica's thread stops the others and reaches the caller; nothing is written.
TEST(EngineRun, ClusterStopsWhenAReplicaFails) {
  const fs::path dir = temp_dir("engine_cluster_fail");
  ExperimentConfig c = write_cluster_experiment(dir, "round_robin");
  std::mutex mu;
  int calls = 0;
  EngineOptions eo;
  eo.out_dir = (dir / "run").string();
  eo.before_step = [&](const Scheduler&, const StepPlan&) {
    std::lock_guard<std::mutex> l(mu);
    if (++calls == 7) throw std::logic_error("replica broke");
  };
  EXPECT_THROW(
      {
        try {
          run_engine(c, eo);
        } catch (const std::logic_error& e) {
          EXPECT_STREQ(e.what(), "replica broke");
          throw;
        }
      },
      std::logic_error);
  // The other replica stopped before its next plan (or the one after, when it had already
  // admitted its work when the first failed).
  EXPECT_GE(calls, 7);
  EXPECT_LE(calls, 8);
  EXPECT_FALSE(fs::exists(dir / "run"));
  fs::remove_all(dir);
}

TEST(EngineRun, ClusterTheEngineCannotRunIsAClearErrorWithExitCode2) {
  const fs::path dir = temp_dir("engine_cluster_errors");
  // Prefill/decode pools: refused at the pool, naming the key.
  write_file(dir / "pd.yaml", kAllAtZero +
                                  "cluster:\n  pools:\n    - {name: p, role: prefill}\n"
                                  "    - {name: d, role: decode}\n");
  const Cli pd =
      run_engine_cli("run " + (dir / "pd.yaml").string() + " --out " + (dir / "run").string(), dir);
  EXPECT_EQ(pd.code, 2) << pd.err;
  EXPECT_NE(pd.err.find("pd.yaml:22:7: key 'cluster.pools[0].role' (pool 'p'): role prefill"),
            std::string::npos)
      << pd.err;
  EXPECT_FALSE(fs::exists(dir / "run"));
  // A cluster on the CUDA executor.
  write_file(dir / "two.yaml", two_replicas("round_robin"));
  const Cli cuda = run_engine_cli("run " + (dir / "two.yaml").string() + " --device cuda", dir);
  EXPECT_EQ(cuda.code, 2) << cuda.err;
  EXPECT_NE(cuda.err.find("two.yaml:23:7: key 'cluster': --device cuda"), std::string::npos)
      << cuda.err;
  fs::remove_all(dir);
}

// Parallel sampling: tokens.jsonl keeps every sample's tokens ("samples"), not sample 0's alone,
// and they add up to requests.csv's output_tokens.
TEST(EngineRun, TokensOfEverySampleAreWritten) {
  const fs::path dir = temp_dir("engine_samples");
  write_experiment(dir);
  const Cli cli =
      run_engine_cli("run " + (dir / "exp.yaml").string() + " --out " + (dir / "run").string() +
                         " --tokens --quiet --set workload.n=3 --set "
                         "workload.num_requests=6",
                     dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  std::map<std::int64_t, std::int64_t> output_tokens;
  for (const auto& r : read_csv(dir / "run" / "requests.csv")) {
    output_tokens[std::stoll(r.at("id"))] = std::stoll(r.at("output_tokens"));
  }
  std::istringstream lines(read_file(dir / "run" / "tokens.jsonl"));
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("samples")) << line;
    ASSERT_EQ(j["samples"].size(), 3u) << line;
    EXPECT_EQ(j["samples"][0], j["tokens"]) << line;
    std::int64_t total = 0;
    for (const auto& s : j["samples"]) total += static_cast<std::int64_t>(s.size());
    EXPECT_EQ(total, output_tokens.at(j["id"].get<std::int64_t>())) << line;
    ++n;
  }
  EXPECT_EQ(n, 6);
  fs::remove_all(dir);
}

TEST(EngineRun, WritesTheRunFolderWithTokensAndTheAllocatedBlockCount) {
  const fs::path dir = temp_dir("engine_cli");
  write_experiment(dir);
  const Cli cli = run_engine_cli("run " + (dir / "exp.yaml").string() + " --out " +
                                     (dir / "run").string() + " --tokens" + " --record-events",
                                 dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  std::int64_t finishes = 0;
  for (const auto& e : read_csv(dir / "run" / "events.csv")) finishes += e.at("event") == "finish";
  EXPECT_EQ(finishes, 40);
  EXPECT_NE(cli.out.find("TTFT"), std::string::npos);
  for (const char* f : {"summary.json", "requests.csv", "steps.csv", "config.yaml"}) {
    EXPECT_TRUE(fs::exists(dir / "run" / f)) << f;
  }
  EXPECT_FALSE(fs::exists(dir / "run" / "schedule.csv"));
  const nlohmann::json s = nlohmann::json::parse(read_file(dir / "run" / "summary.json"));
  EXPECT_EQ(s["run"]["backend"], "engine-cpu");
  EXPECT_EQ(s["run"]["num_gpu_blocks"], "24");
  EXPECT_NE(read_file(dir / "run" / "config.yaml").find("num_gpu_blocks: 24"), std::string::npos);

  // tokens.jsonl: one line per request, sorted by id, as many tokens as requests.csv says.
  std::map<std::string, std::string> expected;
  for (const auto& r : read_csv(dir / "run" / "requests.csv")) {
    expected[r.at("id")] = r.at("output_tokens");
  }
  ASSERT_EQ(expected.size(), 40u);
  std::istringstream lines(read_file(dir / "run" / "tokens.jsonl"));
  std::int64_t prev = -1, n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::int64_t id = j["id"].get<std::int64_t>();
    EXPECT_GT(id, prev);
    prev = id;
    ASSERT_TRUE(expected.count(std::to_string(id))) << id;
    EXPECT_EQ(std::to_string(j["tokens"].size()), expected[std::to_string(id)]) << id;
    for (const auto& t : j["tokens"]) {
      EXPECT_GE(t.get<int>(), 0);
      EXPECT_LT(t.get<int>(), 256);  // the tiny model's vocabulary
    }
  }
  EXPECT_EQ(n, 40);
  fs::remove_all(dir);
}

TEST(EngineRun, BlockCountFromTheMemoryBudgetIsReported) {
  const fs::path dir = temp_dir("engine_budget");
  ExperimentConfig c = write_experiment(dir);
  c.num_gpu_blocks.reset();
  EngineOptions eo;
  eo.out_dir = (dir / "run").string();
  eo.kv_memory_gib = 1.0 / 1024;  // 1 MiB
  const RunOutput run = run_engine(c, eo);
  // tiny: 2 (K, V) x 2 layers x 16 slots x 2 KV heads x 16 dims x 4 bytes = 8 KiB per block.
  EXPECT_EQ(run.block_bytes, 8192);
  EXPECT_EQ(run.num_gpu_blocks, 128);
  const nlohmann::json s = nlohmann::json::parse(read_file(dir / "run" / "summary.json"));
  EXPECT_EQ(s["run"]["num_gpu_blocks"], "128");
  fs::remove_all(dir);
}

// A model with a sliding window (Mistral v0.1's config.json) runs only up to the window's length:
// the engine's full attention is windowed attention there, and a longer serving.max_model_len is
// refused before anything runs, naming the key and the window.
TEST(EngineRun, SlidingWindowBoundsTheModelLength) {
  const fs::path dir = temp_dir("engine_window");
  fs::create_directories(dir / "mistral");
  write_file(dir / "mistral" / "config.json",
             R"({"architectures": ["MistralForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 256, "rms_norm_eps": 1e-5, "torch_dtype": "float32",
      "max_position_embeddings": 2048, "sliding_window": 256})");
  std::string text = kAllAtZero;
  text.replace(text.find("model: tiny"), 11, "model: " + (dir / "mistral").string());
  write_file(dir / "exp.yaml", text);
  const Cli over = run_engine_cli(
      "run " + (dir / "exp.yaml").string() + " --out " + (dir / "run").string(), dir);
  EXPECT_EQ(over.code, 2) << over.err;
  EXPECT_NE(over.err.find("key 'serving.max_model_len': mistral attends within a sliding window "
                          "of 256 tokens"),
            std::string::npos)
      << over.err;
  EXPECT_NE(over.err.find("expected at most 256, got 384"), std::string::npos) << over.err;
  EXPECT_FALSE(fs::exists(dir / "run"));
  const Cli within =
      run_engine_cli("run " + (dir / "exp.yaml").string() +
                         " --set serving.max_model_len=256 --quiet --out " + (dir / "run").string(),
                     dir);
  EXPECT_EQ(within.code, 0) << within.err;
  fs::remove_all(dir);
}

TEST(EngineRun, CheckpointWeightsGiveTheSameTokensAsTheSeed) {
  const fs::path dir = temp_dir("engine_weights");
  ExperimentConfig c = write_experiment(dir);
  LlamaWeights::random(load_llama_config("tiny", default_catalog_dir()), c.seed)
      .save((dir / "tiny.safetensors").string());
  EngineOptions eo;
  eo.write_tokens = true;
  eo.out_dir = (dir / "random").string();
  run_engine(c, eo);
  eo.out_dir = (dir / "loaded").string();
  eo.weights = (dir / "tiny.safetensors").string();
  run_engine(c, eo);
  const std::string a = read_file(dir / "random" / "tokens.jsonl");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, read_file(dir / "loaded" / "tokens.jsonl"));
  fs::remove_all(dir);
}

TEST(EngineRun, CudaDeviceIsAClearErrorWithExitCode2) {
  const fs::path dir = temp_dir("engine_cuda");
  write_experiment(dir);
  const Cli cli = run_engine_cli(
      "run " + (dir / "exp.yaml").string() + " --device cuda --out " + (dir / "run").string(), dir);
  EXPECT_EQ(cli.code, 2) << cli.err;
  // Without CUDA in the build, without a device, or (on a GPU) with the tiny model's head_dim
  // of 16, which the kernels do not support: always a usage error naming the device.
  EXPECT_NE(cli.err.find("engine: error: --device cuda: "), std::string::npos) << cli.err;
  EXPECT_FALSE(fs::exists(dir / "run"));
  const Cli bad = run_engine_cli("run " + (dir / "exp.yaml").string() + " --device tpu", dir);
  EXPECT_EQ(bad.code, 2);
  fs::remove_all(dir);
}

// The CUDA executor's environment switches (engine/gpu_switches.h) are checked before anything
// else of --device cuda: a bad value is a usage error naming the variable, GPU or not.
TEST(EngineRun, BadCudaSwitchIsAnErrorNamingTheVariable) {
  const fs::path dir = temp_dir("engine_cuda_switch");
  write_experiment(dir);
  ::setenv("SERVELAB_CUDA_GRAPHS", "maybe", 1);
  const Cli cli = run_engine_cli(
      "run " + (dir / "exp.yaml").string() + " --device cuda --out " + (dir / "run").string(), dir);
  ::unsetenv("SERVELAB_CUDA_GRAPHS");
  EXPECT_EQ(cli.code, 2) << cli.err;
  EXPECT_NE(cli.err.find("SERVELAB_CUDA_GRAPHS='maybe': expected 0 (off) or 1 (on)"),
            std::string::npos)
      << cli.err;
  EXPECT_FALSE(fs::exists(dir / "run"));
  fs::remove_all(dir);
}

// Workload draws (workload.sampling: temperature, top_p, seed; traces/sampling_options.h):
// `engine run` samples every request with them, reproducibly (the same tokens twice), other than
// greedy, other with another seed; request i is seeded seed + i, so its tokens do not depend on
// the others. The stop conditions stay off: every request runs to its length.
TEST(EngineRun, WorkloadDrawsSampleEveryRequestReproducibly) {
  const fs::path dir = temp_dir("engine_draws");
  const auto tokens = [&](const std::string& name, const std::string& sampling, int requests = 6) {
    std::string exp = kAllAtZero;
    exp.replace(exp.find("num_requests: 40"), 16, "num_requests: " + std::to_string(requests));
    write_file(dir / (name + ".yaml"), exp + sampling);
    const Cli cli = run_engine_cli(
        "run " + (dir / (name + ".yaml")).string() + " -q --tokens --out " + (dir / name).string(),
        dir);
    EXPECT_EQ(cli.code, 0) << cli.err;
    for (const auto& r : read_csv(dir / name / "requests.csv")) EXPECT_EQ(r.at("reason"), "length");
    return read_file(dir / name / "tokens.jsonl");
  };
  const std::string greedy = tokens("greedy", "");
  const std::string drawn =
      tokens("drawn", "  sampling: {temperature: 1.0, top_p: 0.9, seed: 5}\n");
  EXPECT_NE(drawn, greedy);
  EXPECT_EQ(tokens("again", "  sampling: {temperature: 1.0, top_p: 0.9, seed: 5}\n"), drawn);
  EXPECT_NE(tokens("other", "  sampling: {temperature: 1.0, top_p: 0.9, seed: 6}\n"), drawn);
  // Request 0's line alone: the same with fewer requests beside it.
  const std::string first = drawn.substr(0, drawn.find('\n'));
  const std::string alone =
      tokens("alone", "  sampling: {temperature: 1.0, top_p: 0.9, seed: 5}\n", 1);
  EXPECT_EQ(alone.substr(0, alone.find('\n')), first);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
