// Request classes: a `type: mix` workload's parts merged by arrival time (ids renumbered, each
// request carrying its class, tenant and priority), each part's requests independent of the
// others; per-class metrics and SLOs in summary.json, requests.csv and the printed summary; the
// fair and priority queue orders protecting one class from another's flood; and the errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/engine_driver.h"
#include "serving/config_node.h"
#include "serving/experiment.h"
#include "sim/run.h"
#include "tests/test_util.h"
#include "traces/mix_workload.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using namespace servelab::test_util;

std::vector<RequestSpec> Drain(Workload& w) {
  std::vector<RequestSpec> out;
  while (std::optional<RequestSpec> r = w.next()) out.push_back(std::move(*r));
  return out;
}

std::vector<RequestSpec> FromYaml(const std::string& yaml, std::uint64_t seed = 7) {
  const ConfigNode root = ConfigNode::load_string(yaml, "mix.yaml");
  std::unique_ptr<Workload> w = make_workload(root.at("workload"), seed, ".");
  return Drain(*w);
}

constexpr const char* kChat =
    "{type: synthetic, num_requests: 40, arrival: {process: poisson, rate: 4},"
    " prompt_len: {dist: uniform, min: 50, max: 400}, output_len: {dist: uniform, min: 8, max: "
    "64}}";
constexpr const char* kBatch =
    "{type: synthetic, num_requests: 30, start_s: 2, arrival: {process: poisson, rate: 10},"
    " prompt_len: {dist: fixed, value: 900}, output_len: {dist: fixed, value: 100}}";

std::string Mix(const std::string& parts) { return "workload:\n  type: mix\n  parts:\n" + parts; }

std::string Part(const std::string& name, const std::string& workload,
                 const std::string& extra = "") {
  return "    - {class: " + name + extra + ", workload: " + workload + "}\n";
}

TEST(RequestClasses, MixMergesByArrivalAndRenumbers) {
  const std::vector<RequestSpec> rs =
      FromYaml(Mix(Part("chat", kChat) + Part("batch", kBatch, ", priority: 3")));
  ASSERT_EQ(rs.size(), 70u);
  std::map<std::uint32_t, int> per_class;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i].id, i);
    if (i > 0) {
      EXPECT_GE(rs[i].arrival_ns, rs[i - 1].arrival_ns);
    }
    ++per_class[rs[i].request_class];
    // Tenant: the part's index by default; priority: the part's when given.
    EXPECT_EQ(rs[i].tenant, rs[i].request_class);
    EXPECT_EQ(rs[i].priority, rs[i].request_class == 1 ? 3 : 0);
    if (rs[i].request_class == 1) {
      EXPECT_EQ(rs[i].prompt_len, 900);
    }
  }
  EXPECT_EQ(per_class[0], 40);
  EXPECT_EQ(per_class[1], 30);
  // The batch part starts at 2 s: the first request is a chat one.
  EXPECT_EQ(rs.front().request_class, 0u);
}

// A part's requests depend on the experiment seed and its class name only: dropping or
// reordering another part changes none of them.
TEST(RequestClasses, APartsRequestsDoNotDependOnTheOtherParts) {
  const auto chat_of = [](const std::vector<RequestSpec>& rs, std::uint32_t cls) {
    std::vector<std::tuple<TimeNs, std::int32_t, std::int32_t, std::uint64_t>> out;
    for (const RequestSpec& r : rs) {
      if (r.request_class == cls) {
        out.emplace_back(r.arrival_ns, r.prompt_len, r.max_output_tokens, r.prompt[0].content_id);
      }
    }
    return out;
  };
  const auto both = FromYaml(Mix(Part("chat", kChat) + Part("batch", kBatch)));
  const auto alone = FromYaml(Mix(Part("chat", kChat)));
  const auto swapped = FromYaml(Mix(Part("batch", kBatch) + Part("chat", kChat)));
  EXPECT_EQ(chat_of(both, 0), chat_of(alone, 0));
  EXPECT_EQ(chat_of(both, 0), chat_of(swapped, 1));
  // A different class name is a different stream; a different seed too.
  const auto renamed = FromYaml(Mix(Part("talk", kChat)));
  EXPECT_NE(chat_of(alone, 0), chat_of(renamed, 0));
  EXPECT_NE(chat_of(alone, 0), chat_of(FromYaml(Mix(Part("chat", kChat)), 8), 0));
  // Same configuration and seed: the same stream.
  EXPECT_EQ(chat_of(both, 1),
            chat_of(FromYaml(Mix(Part("chat", kChat) + Part("batch", kBatch))), 1));
  // Two parts with the same settings do not share prompt content.
  const auto twins = FromYaml(Mix(Part("a", kBatch) + Part("b", kBatch)));
  std::set<std::uint64_t> contents;
  for (const RequestSpec& r : twins) contents.insert(r.prompt[0].content_id);
  EXPECT_EQ(contents.size(), twins.size());
}

// Trace parts read their content ids from their files: Mooncake hash ids 0, 1, ... (or a
// converted trace's segments) are the same numbers in every file, yet two files' prompts are
// not the same text. Each trace part has a namespace of its own: within a part, equal ids still
// share; across parts, none does (a mix of two Mooncake slices shared 6,752 cached tokens).
TEST(RequestClasses, TraceFilesInTwoPartsShareNoContent) {
  const fs::path dir = temp_dir("mix_trace_ns");
  fs::create_directories(dir);
  const std::string rows =
      "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 4, \"hash_ids\": [0, 1]}\n"
      "{\"timestamp\": 10, \"input_length\": 1024, \"output_length\": 4, \"hash_ids\": [0, 2]}\n";
  write_file(dir / "a.jsonl", rows);
  write_file(dir / "b.jsonl", rows);
  const std::string yaml =
      Mix(Part("a", "{type: mooncake, path: " + (dir / "a.jsonl").string() + "}") +
          Part("b", "{type: mooncake, path: " + (dir / "b.jsonl").string() + "}"));
  const std::vector<RequestSpec> rs = FromYaml(yaml);
  ASSERT_EQ(rs.size(), 4u);
  std::map<std::uint32_t, std::vector<std::uint64_t>> first;  // each part's first-block ids
  for (const RequestSpec& r : rs) first[r.request_class].push_back(r.prompt[0].content_id);
  ASSERT_EQ(first[0].size(), 2u);
  EXPECT_EQ(first[0][0], first[0][1]);  // hash id 0 twice in one file: one prompt prefix
  EXPECT_EQ(first[1][0], first[1][1]);
  EXPECT_NE(first[0][0], first[1][0]);  // the other file's hash id 0 is another text
  fs::remove_all(dir);
}

TEST(RequestClasses, TenantsCanBeKeptOrSet) {
  const auto rs =
      FromYaml(Mix(Part("a", kChat, ", tenant: 17") + Part("b", kBatch, ", tenant: workload")));
  for (const RequestSpec& r : rs) EXPECT_EQ(r.tenant, r.request_class == 0 ? 17u : 0u);
}

void ExpectWorkloadError(const std::string& yaml, const std::string& what) {
  try {
    FromYaml(yaml);
    ADD_FAILURE() << "no error for:\n" << yaml;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("mix.yaml:"), std::string::npos) << e.what();
  }
}

TEST(RequestClasses, BadMixesAreErrorsNamingTheKey) {
  ExpectWorkloadError(Mix(Part("chat", kChat) + Part("chat", kBatch)),
                      "key 'workload.parts[1].class': class 'chat' is named by an earlier part");
  ExpectWorkloadError(Mix(Part("a/b", kChat)), "key 'workload.parts[0].class'");
  ExpectWorkloadError("workload: {type: mix, parts: []}", "a list of at least one part");
  ExpectWorkloadError(Mix("    - {workload: " + std::string(kChat) + "}\n"),
                      "key 'workload.parts[0].class' is required but missing");
  ExpectWorkloadError(Mix(Part("a", kChat, ", tenant: -1")),
                      "or 'workload' to keep the workload's tenants");
  ExpectWorkloadError(Mix(Part("a", kChat, ", weight: 2")),
                      "unknown key 'workload.parts[0].weight'");
  // A part with nothing to serve (its window past its arrivals) is an error naming it.
  ExpectWorkloadError(
      Mix(Part("chat", kChat) +
          Part("late",
               "{type: synthetic, num_requests: 5, arrival: {process: poisson, rate: 10}, "
               "prompt_len: {dist: fixed, value: 9}, output_len: {dist: fixed, value: 3}, "
               "transforms: {window_s: [100, 200]}}")),
      "key 'workload.parts[1].workload': class 'late' produced no requests");
  ExpectWorkloadError(
      Mix(Part("s",
               "{type: multiturn, num_sessions: 2, session_arrival: {process: poisson, rate: "
               "1}, turns: {dist: fixed, value: 2}, think_time_s: {dist: fixed, value: 1}, "
               "first_prompt_len: {dist: fixed, value: 10}, new_tokens: {dist: fixed, value: "
               "5}, output_len: {dist: fixed, value: 5}}")),
      "a mix part must be open loop");
  ExpectWorkloadError(
      Mix(Part("m", "{type: mix, parts: [{class: x, workload: " + std::string(kChat) + "}]}")),
      "a mix part must be open loop");
}

const std::string kExperiment = R"(name: classes
model: Llama-3-8B
hardware: H100-SXM
seed: 3
workload:
  type: mix
  parts:
    - class: chat
      workload: {type: synthetic, duration_s: 30, arrival: {process: poisson, rate: 3},
                 prompt_len: {dist: lognormal, mean: 500, stddev: 200, max: 2048},
                 output_len: {dist: lognormal, mean: 150, stddev: 60, max: 512}}
    - class: flood
      workload: {type: synthetic, num_requests: 1200, start_s: 5, arrival: {process: poisson, rate: 150},
                 prompt_len: {dist: fixed, value: 1500}, output_len: {dist: fixed, value: 300}}
slo:
  ttft_ms: 1000
  classes:
    flood: {ttft_ms: 600000, e2e_ms: 900000}
)";

ExperimentConfig Load(const std::vector<std::string>& overrides = {}) {
  const fs::path dir = temp_dir("request_classes_load");
  write_file(dir / "classes.yaml", kExperiment);
  return load_experiment((dir / "classes.yaml").string(), overrides);
}

RunOutput Simulate(const ExperimentConfig& c, const fs::path& out) {
  RunOptions o;
  o.out_dir = out.string();
  return run_simulation(c, o);
}

TEST(RequestClasses, SummarySplitsEveryRequestMetricByClass) {
  const fs::path dir = temp_dir("request_classes_summary");
  const ExperimentConfig c = Load();
  ASSERT_EQ(c.request_classes, (std::vector<std::string>{"chat", "flood"}));
  const RunOutput run = Simulate(c, dir / "run");
  const RunSummary& s = run.summary;
  ASSERT_EQ(s.classes.size(), 2u);
  EXPECT_EQ(s.classes[0].name, "chat");
  EXPECT_EQ(s.classes[1].num_requests, 1200);
  EXPECT_EQ(s.classes[0].num_requests + s.classes[1].num_requests, s.num_requests);
  EXPECT_EQ(s.classes[0].completed + s.classes[1].completed, s.completed);
  EXPECT_EQ(s.classes[0].output_tokens + s.classes[1].output_tokens, s.output_tokens);
  EXPECT_EQ(s.classes[0].ttft_ms.count + s.classes[1].ttft_ms.count, s.ttft_ms.count);
  EXPECT_NEAR(s.classes[0].requests_per_s + s.classes[1].requests_per_s, s.requests_per_s, 1e-9);
  EXPECT_NEAR(s.classes[0].goodput_requests_per_s + s.classes[1].goodput_requests_per_s,
              s.goodput_requests_per_s, 1e-9);

  // requests.csv ends with the class; each class's TTFT p50 is that of its rows, and each
  // request is held to its class's SLO (flood: 600 s TTFT and 900 s E2E; chat: 1 s TTFT).
  const auto rows = read_csv(dir / "run" / "requests.csv");
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(s.num_requests));
  std::map<std::string, std::vector<double>> ttft;
  std::map<std::string, int> good;
  // A request's token gaps add up to its time from first token to finish: per class, the ITL
  // count and mean sum that over the class's rows (every gap went to its own request's class).
  std::map<std::string, double> gaps_ms, gaps;
  for (const auto& r : rows) {
    ASSERT_TRUE(r.at("class") == "chat" || r.at("class") == "flood") << r.at("class");
    if (r.at("status") != "finished") continue;
    const double t = std::stod(r.at("ttft_ms")), e2e = std::stod(r.at("e2e_ms"));
    ttft[r.at("class")].push_back(t);
    gaps_ms[r.at("class")] += e2e - t;
    gaps[r.at("class")] += std::stod(r.at("output_tokens")) - 1;
    const bool ok = r.at("class") == "chat" ? t <= 1000 : t <= 600000 && e2e <= 900000;
    good[r.at("class")] += ok ? 1 : 0;
  }
  EXPECT_EQ(s.classes[0].itl_ms.count + s.classes[1].itl_ms.count, s.itl_ms.count);
  EXPECT_EQ(std::max(s.classes[0].itl_ms.max, s.classes[1].itl_ms.max), s.itl_ms.max);
  EXPECT_GT(s.classes[0].itl_ms.count, 0);
  for (std::size_t k = 0; k < 2; ++k) {
    const ClassSummary& cs = s.classes[k];
    EXPECT_EQ(static_cast<double>(cs.itl_ms.count), gaps[cs.name]) << cs.name;
    EXPECT_NEAR(cs.itl_ms.mean * static_cast<double>(cs.itl_ms.count), gaps_ms[cs.name],
                1e-3 * static_cast<double>(cs.completed))
        << cs.name;  // requests.csv's milliseconds have 3 decimals
    std::vector<double> v = ttft[cs.name];
    EXPECT_DOUBLE_EQ(summarize(v).p50, cs.ttft_ms.p50) << cs.name;
    EXPECT_NEAR(cs.slo_attainment, good[cs.name] / static_cast<double>(cs.completed), 1e-12)
        << cs.name;
  }

  // summary.json's `classes`, and config.yaml echoes the per-class targets.
  const auto j = nlohmann::json::parse(read_file(dir / "run" / "summary.json"));
  ASSERT_TRUE(j.contains("classes"));
  EXPECT_EQ(j["classes"]["flood"]["requests"]["total"], 1200);
  EXPECT_DOUBLE_EQ(j["classes"]["chat"]["ttft_ms"]["p99"].get<double>(), s.classes[0].ttft_ms.p99);
  EXPECT_DOUBLE_EQ(j["classes"]["flood"]["itl_ms"]["p99"].get<double>(), s.classes[1].itl_ms.p99);
  EXPECT_DOUBLE_EQ(j["classes"]["chat"]["goodput"]["slo_attainment"].get<double>(),
                   s.classes[0].slo_attainment);
  const std::string config_yaml = read_file(dir / "run" / "config.yaml");
  EXPECT_NE(config_yaml.find("flood: {ttft_ms: 600000, e2e_ms: 900000}"), std::string::npos)
      << config_yaml;

  // Same experiment and seed: byte-identical files.
  Simulate(c, dir / "again");
  for (const char* f : {"summary.json", "requests.csv", "steps.csv"}) {
    EXPECT_EQ(read_file(dir / "run" / f), read_file(dir / "again" / f)) << f;
  }
}

// The lesson of the feature: behind a flood, FCFS makes the chat class wait for it; VTC's fair
// share and a priority class both keep the chat class's first tokens fast.
TEST(RequestClasses, FairAndPriorityQueuesProtectTheChatClassFromAFlood) {
  const fs::path dir = temp_dir("request_classes_fair");
  std::map<std::string, ClassSummary> chat;
  for (const std::string q : {"fcfs", "fair", "priority"}) {
    std::vector<std::string> set = {"policies.queue=" + q};
    if (q == "priority") set.push_back("workload.parts[1].priority=1");
    chat[q] = Simulate(Load(set), dir / q).summary.classes[0];
  }
  EXPECT_GT(chat["fcfs"].ttft_ms.p50, 10'000);
  EXPECT_LT(chat["fair"].ttft_ms.p50, 1'000);
  EXPECT_LT(chat["priority"].ttft_ms.p50, 1'000);
  EXPECT_LT(chat["fcfs"].slo_attainment, 0.5);
  EXPECT_GT(chat["fair"].slo_attainment, 0.7);
  EXPECT_GT(chat["priority"].slo_attainment, 0.7);
}

// edf ranks by the classes' TTFT objectives, with no priorities set: the flood's 600 s puts its
// deadlines behind every chat request's 1 s, so chat is protected as by priority. Give the flood
// the chat's objective and every deadline is arrival + 1 s: arrival order, the chat behind the
// flood, as under fcfs. Without any TTFT objective, edf is refused at loading.
TEST(RequestClasses, EdfRanksByTheClassesTtftObjectives) {
  const fs::path dir = temp_dir("request_classes_edf");
  const ClassSummary edf = Simulate(Load({"policies.queue=edf"}), dir / "edf").summary.classes[0];
  EXPECT_LT(edf.ttft_ms.p50, 1'000);
  EXPECT_GT(edf.slo_attainment, 0.7);
  const ClassSummary equal =
      Simulate(Load({"policies.queue=edf", "slo.classes.flood.ttft_ms=1000"}), dir / "equal")
          .summary.classes[0];
  EXPECT_GT(equal.ttft_ms.p50, 10'000);
  EXPECT_LT(equal.slo_attainment, 0.5);
  // Demoting the late: with one objective for both classes, the flood's late requests go behind
  // every request still on time, so the chat class competes only with the flood's newest
  // requests (here 18.5 % -> 48.9 % meet the SLO, TTFT p50 64.9 s -> 1.0 s).
  const ClassSummary demoted =
      Simulate(Load({"policies.queue={name: edf, late: demote}", "slo.classes.flood.ttft_ms=1000"}),
               dir / "demote")
          .summary.classes[0];
  EXPECT_LT(demoted.ttft_ms.p50, equal.ttft_ms.p50 / 10);
  EXPECT_GT(demoted.slo_attainment, 2 * equal.slo_attainment);
  // config.yaml names the queue with its parameters.
  EXPECT_NE(
      read_file(dir / "edf" / "config.yaml").find("queue: {name: edf, late: keep, slack_ms: 0}"),
      std::string::npos);
  EXPECT_NE(read_file(dir / "demote" / "config.yaml")
                .find("queue: {name: edf, late: demote, slack_ms: 0}"),
            std::string::npos);

  try {
    Load({"policies.queue=edf", "slo={tpot_ms: 100}"});
    FAIL() << "edf without a TTFT objective was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "classes.yaml: policies.queue: edf orders requests by their TTFT deadline"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("set slo.ttft_ms (or slo.classes.NAME.ttft_ms)"),
              std::string::npos)
        << e.what();
  }
}

TEST(RequestClasses, SloClassesMustNameTheWorkloadsClasses) {
  const fs::path dir = temp_dir("request_classes_slo");
  const auto error_of = [&](const std::vector<std::string>& set) -> std::string {
    try {
      Load(set);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of({"slo.classes={chatty: {ttft_ms: 5}}"})
                .find("no class 'chatty' in the workload (its classes: chat, flood)"),
            std::string::npos);
  EXPECT_NE(error_of({"slo.classes.chat={ttft: 5}"}).find("unknown key 'slo.classes.chat.ttft'"),
            std::string::npos);
  EXPECT_NE(error_of({"workload={type: synthetic, num_requests: 3, arrival: {process: poisson, "
                      "rate: 1}, prompt_len: {dist: fixed, value: 5}, output_len: {dist: fixed, "
                      "value: 5}}"})
                .find("the workload has no request classes"),
            std::string::npos);
  // Through the command: exit 2 with the file, line and key.
  write_file(dir / "bad.yaml", kExperiment + "    chatty: {ttft_ms: 5}\n");
  const Cli cli = run_sim(
      "run " + (dir / "bad.yaml").string() + " --out " + (dir / "out").string() + " --quiet", dir);
  EXPECT_EQ(cli.code, 2) << cli.err;
  EXPECT_NE(cli.err.find("bad.yaml:19:"), std::string::npos) << cli.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// A part's `lora:` is checked against serving.lora as the workload's own is: no silent adapters.
TEST(RequestClasses, APartsLoraNeedsServingLora) {
  const fs::path dir = temp_dir("request_classes_lora");
  const std::string part =
      "workload:\n  type: mix\n  parts:\n    - class: a\n      workload: {type: synthetic, "
      "num_requests: 5, arrival: {process: poisson, rate: 4}, prompt_len: {dist: fixed, value: "
      "100}, output_len: {dist: fixed, value: 10}, lora: {adapters: 2, rank: 64}}\n";
  const auto error_of = [&](const std::string& serving) -> std::string {
    write_file(dir / "lora.yaml",
               "name: lora\nmodel: Llama-3-8B\nhardware: H100-SXM\n" + serving + part);
    try {
      load_experiment((dir / "lora.yaml").string(), {});
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  std::string e = error_of("");
  EXPECT_NE(e.find("key 'workload.parts[0].workload.lora': requests under LoRA adapters need "
                   "serving.lora"),
            std::string::npos)
      << e;
  e = error_of("serving: {lora: {max_loras: 2, max_lora_rank: 16}}\n");
  EXPECT_NE(e.find("key 'workload.parts[0].workload.lora.rank': expected a rank up to "
                   "serving.lora.max_lora_rank (16)"),
            std::string::npos)
      << e;
  EXPECT_EQ(error_of("serving: {lora: {max_loras: 2, max_lora_rank: 64}}\n"), "");
}

// A part's stop conditions end its requests in the simulator (EOS with probability 0.05 per
// token: about 20 tokens of the 200 allowed), and a part's size is held to `limits:` before the
// run, naming the part's key.
TEST(RequestClasses, APartsSamplingAndSizeAreHonoured) {
  const fs::path dir = temp_dir("request_classes_sampling");
  write_file(dir / "eos.yaml",
             "name: eos\nmodel: Llama-3-8B\nhardware: H100-SXM\nworkload:\n  type: mix\n"
             "  parts:\n    - class: a\n      workload: {type: synthetic, num_requests: 50, "
             "arrival: {process: poisson, rate: 4}, prompt_len: {dist: fixed, value: 100}, "
             "output_len: {dist: fixed, value: 200}, sampling: {max_tokens: 200, "
             "eos_probability: 0.05}}\n");
  const RunOutput run = Simulate(load_experiment((dir / "eos.yaml").string(), {}), dir / "run");
  EXPECT_EQ(run.summary.completed, 50);
  EXPECT_LT(run.summary.output_tokens, 50 * 60);
  EXPECT_GT(run.summary.output_tokens, 50 * 5);
  try {
    load_experiment((dir / "eos.yaml").string(), {"limits.max_requests=40"});
    ADD_FAILURE() << "a part above limits.max_requests was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'workload.parts[0].workload.num_requests': expected "
                                         "at most limits.max_requests (40)"),
              std::string::npos)
        << e.what();
  }
}

TEST(RequestClasses, SimRunPrintsAClassTable) {
  const fs::path dir = temp_dir("request_classes_cli");
  write_file(dir / "classes.yaml", kExperiment);
  const Cli cli =
      run_sim("run " + (dir / "classes.yaml").string() + " --out " + (dir / "out").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_NE(cli.out.find("class completed   TTFT p50   TTFT p99   TPOT p50    ITL p99"),
            std::string::npos)
      << cli.out;
  EXPECT_NE(cli.out.find("\n  chat "), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("\n  flood "), std::string::npos) << cli.out;
}

// The engine (CPU, tiny model) reports the same classes as the simulator: the split is the
// Recorder's, fed by the shared core, so one schedule gives one per-class count.
TEST(RequestClasses, TheEngineSplitsItsRunByClassAsTheSimulatorDoes) {
  const fs::path dir = temp_dir("request_classes_engine");
  write_file(dir / "exp.yaml",
             "name: engine-classes\nseed: 5\nmodel: tiny\nhardware: H100-SXM\n"
             "serving: {num_gpu_blocks: 64, max_num_seqs: 8, max_model_len: 512}\n"
             "workload:\n  type: mix\n  parts:\n"
             "    - {class: a, workload: {type: synthetic, num_requests: 6, arrival: {process: "
             "fixed, rate: 1.0e12}, prompt_len: {dist: uniform, min: 10, max: 60}, output_len: "
             "{dist: uniform, min: 3, max: 12}}}\n"
             "    - {class: b, priority: 1, workload: {type: synthetic, num_requests: 4, arrival: "
             "{process: fixed, rate: 1.0e12}, prompt_len: {dist: fixed, value: 40}, output_len: "
             "{dist: fixed, value: 8}}}\n"
             "slo: {ttft_ms: 1.0e6, classes: {b: {ttft_ms: 1.0e-6}}}\n");
  const ExperimentConfig c = load_experiment((dir / "exp.yaml").string(), {});
  const RunOutput sim = Simulate(c, dir / "sim");
  EngineOptions eo;
  eo.out_dir = (dir / "engine").string();
  const RunOutput engine = run_engine(c, eo);
  ASSERT_EQ(engine.summary.classes.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(engine.summary.classes[k].name, sim.summary.classes[k].name);
    EXPECT_EQ(engine.summary.classes[k].completed, sim.summary.classes[k].completed);
    EXPECT_EQ(engine.summary.classes[k].output_tokens, sim.summary.classes[k].output_tokens);
  }
  EXPECT_EQ(engine.summary.classes[0].completed, 6);
  // Class b's 1e-6 ms TTFT target fails every b request; a's 1000 s target none.
  EXPECT_EQ(engine.summary.classes[1].slo_attainment, 0.0);
  EXPECT_EQ(engine.summary.classes[0].slo_attainment, 1.0);
  const auto sim_rows = read_csv(dir / "sim" / "requests.csv");
  const auto engine_rows = read_csv(dir / "engine" / "requests.csv");
  ASSERT_EQ(sim_rows.size(), engine_rows.size());
  for (std::size_t i = 0; i < sim_rows.size(); ++i) {
    EXPECT_EQ(sim_rows[i].at("class"), engine_rows[i].at("class")) << i;
  }
}

TEST(RequestClasses, SimCompareShowsEachVariantsClasses) {
  const fs::path dir = temp_dir("request_classes_compare");
  write_file(dir / "classes.yaml", kExperiment +
                                       "compare:\n  - {name: fcfs, set: {policies.queue: fcfs}}\n"
                                       "  - {name: flood-last, set: {policies.queue: priority, "
                                       "\"workload.parts[1].priority\": 1}}\n");
  const Cli cli = run_sim(
      "compare " + (dir / "classes.yaml").string() + " --out " + (dir / "out").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_NE(cli.out.find("by class         class     req/s  TTFT p50"), std::string::npos)
      << cli.out;
  EXPECT_NE(cli.out.find("\nflood-last       flood "), std::string::npos) << cli.out;
  // The variant's override reached the part: its chat class no longer waits behind the flood.
  const auto fcfs = nlohmann::json::parse(read_file(dir / "out" / "fcfs" / "summary.json"));
  const auto last = nlohmann::json::parse(read_file(dir / "out" / "flood-last" / "summary.json"));
  EXPECT_LT(last["classes"]["chat"]["ttft_ms"]["p50"].get<double>(),
            fcfs["classes"]["chat"]["ttft_ms"]["p50"].get<double>() / 10);

  // classes.csv: a row per variant and class, the class's summary.json values.
  const auto rows = read_csv(dir / "out" / "classes.csv");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].at("variant"), "fcfs");
  EXPECT_EQ(rows[0].at("class"), "chat");
  EXPECT_EQ(rows[3].at("variant"), "flood-last");
  EXPECT_EQ(rows[3].at("class"), "flood");
  EXPECT_NEAR(std::stod(rows[2].at("ttft_p50_ms")),
              last["classes"]["chat"]["ttft_ms"]["p50"].get<double>(), 1e-6);
  EXPECT_NEAR(std::stod(rows[1].at("itl_p99_ms")),
              fcfs["classes"]["flood"]["itl_ms"]["p99"].get<double>(), 1e-6);
  EXPECT_EQ(rows[1].at("completed"),
            std::to_string(fcfs["classes"]["flood"]["requests"]["completed"].get<int>()));

  // A comparison without classes into the same folder leaves no stale classes.csv.
  write_file(dir / "plain.yaml",
             "name: plain\nmodel: tiny\nhardware: H100-SXM\n"
             "workload: {type: synthetic, num_requests: 5, arrival: {process: poisson, rate: 5}, "
             "prompt_len: {dist: fixed, value: 20}, output_len: {dist: fixed, value: 4}}\n"
             "compare:\n  - {name: a, set: {}}\n");
  Cli plain =
      run_sim("compare " + (dir / "plain.yaml").string() + " --out " + (dir / "out").string(), dir);
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_FALSE(fs::exists(dir / "out" / "classes.csv"));
  EXPECT_TRUE(fs::exists(dir / "out" / "compare.csv"));
  // A classes.csv of the user's (not one ServeLab wrote) is never overwritten nor removed.
  fs::create_directories(dir / "mine");
  write_file(dir / "mine" / "classes.csv", "tenant,budget\nchat,10\n");
  plain = run_sim("compare " + (dir / "plain.yaml").string() + " --out " + (dir / "mine").string(),
                  dir);
  EXPECT_EQ(plain.code, 2);
  EXPECT_NE(plain.err.find("classes.csv' is not a ServeLab comparison output"), std::string::npos)
      << plain.err;
  EXPECT_EQ(read_file(dir / "mine" / "classes.csv"), "tenant,budget\nchat,10\n");
}

}  // namespace
}  // namespace servelab
