// The front end (serving.frontend): per-request HTTP and tokenisation time between a request's
// arrival and the moment it reaches the scheduler. The queue's arithmetic, and in runs: the
// delay shifts first scheduling while TTFT, E2E and queueing delay still count from arrival;
// defaults are byte-identical; bad values are ConfigErrors.
#include "serving/frontend.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "serving/experiment.h"
#include "serving/home.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using namespace servelab::test_util;

RequestSpec At(RequestId id, TimeNs arrival, std::int32_t prompt_len) {
  return make_request(id, arrival,
                      {{unique_content_id(3, id), 0, static_cast<std::uint32_t>(prompt_len)}}, 4);
}

FrontendConfig Costs(double per_request_us, double per_token_us, std::int32_t concurrency) {
  FrontendConfig c;
  c.per_request_us = per_request_us;
  c.per_prompt_token_us = per_token_us;
  c.concurrency = concurrency;
  return c;
}

TEST(FrontEnd, ServiceTimeIsPerRequestPlusPerPromptToken) {
  EXPECT_EQ(Costs(100, 1, 1).service_ns(100), 200'000);
  EXPECT_EQ(Costs(0, 0.5, 1).service_ns(3), 1'500);
  EXPECT_EQ(Costs(0.0004, 0, 1).service_ns(1), 0);  // rounded once to the nearest ns
  EXPECT_FALSE(Costs(0, 0, 1).enabled());
  EXPECT_TRUE(Costs(0, 0.1, 1).enabled());
}

// Three 100-token requests arriving together, 200 us each: one server queues them (200, 400,
// 600 us), two servers take two at once, an unbounded front end none.
TEST(FrontEnd, ABurstQueuesInFrontOfOneServer) {
  const std::vector<std::pair<std::int32_t, std::vector<TimeNs>>> cases = {
      {1, {200'000, 400'000, 600'000}},
      {2, {200'000, 200'000, 400'000}},
      {0, {200'000, 200'000, 200'000}}};
  for (const auto& [k, want] : cases) {
    FrontEnd fe(Costs(100, 1, k));
    std::vector<TimeNs> ready;
    for (RequestId id = 0; id < 3; ++id) ready.push_back(fe.push(At(id, 0, 100)));
    EXPECT_EQ(ready, want) << "concurrency " << k;
    // Pops in ready order, ties in arrival order.
    std::vector<RequestId> order;
    while (!fe.empty()) order.push_back(fe.pop().id);
    EXPECT_EQ(order, (std::vector<RequestId>{0, 1, 2})) << "concurrency " << k;
  }
}

// A long request ahead of a short one: with one server the short one waits behind it; with two
// it is ready first and leaves first.
TEST(FrontEnd, ReadyOrderFollowsServiceWithSeveralServers) {
  FrontEnd one(Costs(0, 1, 1)), two(Costs(0, 1, 2));
  for (FrontEnd* fe : {&one, &two}) {
    fe->push(At(0, 0, 1000));  // 1 ms
    fe->push(At(1, 10, 100));  // 0.1 ms
  }
  EXPECT_EQ(*one.next_ready(), 1'000'000);
  EXPECT_EQ(one.pop().id, 0u);
  EXPECT_EQ(*one.next_ready(), 1'100'000);
  EXPECT_EQ(*two.next_ready(), 100'010);
  EXPECT_EQ(two.pop().id, 1u);
  EXPECT_EQ(two.pop().id, 0u);
  // A server that went idle takes the next arrival at once.
  FrontEnd idle(Costs(10, 0, 1));
  EXPECT_EQ(idle.push(At(0, 0, 5)), 10'000);
  EXPECT_EQ(idle.push(At(1, 50'000, 5)), 60'000);
  EXPECT_THROW(idle.push(At(2, 40'000, 5)), std::logic_error);  // out of arrival order
  EXPECT_THROW(FrontEnd(Costs(-1, 0, 1)), std::invalid_argument);
}

// ---- Runs ----

std::string experiment(const std::string& serving_extra, std::int64_t requests,
                       const std::string& arrival) {
  return "name: fe\nseed: 3\nmodel: tiny\nhardware: H100-SXM\nserving:\n  num_gpu_blocks: 256\n"
         "  max_model_len: 512\n" +
         serving_extra +
         "workload:\n  type: synthetic\n  num_requests: " + std::to_string(requests) +
         "\n  arrival: " + arrival +
         "\n  prompt_len: {dist: fixed, value: 100}\n  output_len: {dist: fixed, value: 8}\n";
}

RunOutput run(const fs::path& file, const fs::path& out, bool events = false) {
  ExperimentConfig c = load_experiment(file.string(), {});
  c.outputs.record_events = events;
  RunOptions o;
  o.out_dir = out.string();
  return run_simulation(c, o);
}

// One request on an idle server: with 1 ms + 10 us/token of front end (2 ms for 100 tokens) it
// is first scheduled 2 ms after its arrival, and TTFT, E2E and queueing delay, all counted from
// the arrival, grow by exactly 2 ms; TPOT does not change.
TEST(FrontEndRun, DelayShiftsFirstScheduledWhileTtftCountsFromArrival) {
  const fs::path dir = temp_dir("frontend_shift");
  write_file(dir / "plain.yaml", experiment("", 1, "{process: fixed, rate: 1}"));
  write_file(dir / "fe.yaml",
             experiment("  frontend: {per_request_us: 1000, per_prompt_token_us: 10}\n", 1,
                        "{process: fixed, rate: 1}"));
  run(dir / "plain.yaml", dir / "plain");
  run(dir / "fe.yaml", dir / "fe", /*events=*/true);
  const auto a = read_csv(dir / "plain" / "requests.csv").at(0);
  const auto b = read_csv(dir / "fe" / "requests.csv").at(0);
  EXPECT_EQ(a.at("arrival_s"), b.at("arrival_s"));
  const double shift_ms =
      (std::stod(b.at("first_scheduled_s")) - std::stod(a.at("first_scheduled_s"))) * 1e3;
  EXPECT_NEAR(shift_ms, 2.0, 1e-9);
  EXPECT_NEAR(std::stod(b.at("queueing_ms")), std::stod(a.at("queueing_ms")) + 2.0, 1e-9);
  EXPECT_NEAR(std::stod(b.at("ttft_ms")), std::stod(a.at("ttft_ms")) + 2.0, 1e-9);
  EXPECT_NEAR(std::stod(b.at("e2e_ms")), std::stod(a.at("e2e_ms")) + 2.0, 1e-9);
  EXPECT_EQ(a.at("tpot_ms"), b.at("tpot_ms"));
  // events.csv says when it left the front end, and how long it spent there.
  const auto events = read_csv(dir / "fe" / "events.csv");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.at(0).at("event"), "ready");
  EXPECT_EQ(events.at(0).at("detail"), "2.000000");
  EXPECT_EQ(events.at(0).at("time_s"), b.at("first_scheduled_s"));
  EXPECT_NE(read_file(dir / "fe" / "config.yaml").find("frontend:"), std::string::npos);
  fs::remove_all(dir);
}

// Ten requests at the same instant and one tokenizer: they reach the scheduler 2 ms apart, each
// no earlier than its turn; with concurrency 0 all at once.
TEST(FrontEndRun, ABurstQueuesForTheFrontEnd) {
  const fs::path dir = temp_dir("frontend_burst");
  write_file(dir / "fifo.yaml",
             experiment("  frontend: {per_request_us: 2000}\n", 10, "{process: fixed, rate: 1e6}"));
  write_file(dir / "inf.yaml", experiment("  frontend: {per_request_us: 2000, concurrency: 0}\n",
                                          10, "{process: fixed, rate: 1e6}"));
  run(dir / "fifo.yaml", dir / "fifo", true);
  run(dir / "inf.yaml", dir / "inf", true);
  const auto fifo = read_csv(dir / "fifo" / "requests.csv");
  ASSERT_EQ(fifo.size(), 10u);
  for (std::size_t i = 0; i < fifo.size(); ++i) {
    const double arrival = std::stod(fifo[i].at("arrival_s"));
    const double scheduled = std::stod(fifo[i].at("first_scheduled_s"));
    // Arrivals are 1 us apart and service 2 ms: request i is ready at arrival_0 + 2 ms (i + 1).
    const double ready = std::stod(fifo[0].at("arrival_s")) + 2e-3 * static_cast<double>(i + 1);
    EXPECT_GE(scheduled + 1e-12, ready) << i;
    EXPECT_GE(std::stod(fifo[i].at("queueing_ms")), (ready - arrival) * 1e3 - 1e-6) << i;
  }
  std::vector<std::string> ready_fifo, ready_inf;
  for (const auto& e : read_csv(dir / "fifo" / "events.csv")) {
    if (e.at("event") == "ready") ready_fifo.push_back(e.at("detail"));
  }
  for (const auto& e : read_csv(dir / "inf" / "events.csv")) {
    if (e.at("event") == "ready") ready_inf.push_back(e.at("detail"));
  }
  ASSERT_EQ(ready_fifo.size(), 10u);
  ASSERT_EQ(ready_inf.size(), 10u);
  // Front-end time: 2 ms of service plus the wait for the requests ahead (1 us apart).
  EXPECT_EQ(ready_fifo[0], "2.000000");
  EXPECT_EQ(ready_fifo[1], "3.999000");
  EXPECT_EQ(ready_fifo[9], "19.991000");
  for (const std::string& d : ready_inf) EXPECT_EQ(d, "2.000000");
  fs::remove_all(dir);
}

// No front end, or one that costs nothing, gives the same files as before it existed
// (config.yaml shows the section when it is given).
TEST(FrontEndRun, ZeroCostIsByteIdenticalToNone) {
  const fs::path dir = temp_dir("frontend_zero");
  const std::string arrival = "{process: poisson, rate: 200}";
  write_file(dir / "none.yaml", experiment("", 50, arrival));
  write_file(dir / "zero.yaml",
             experiment("  frontend: {per_request_us: 0, per_prompt_token_us: 0}\n", 50, arrival));
  run(dir / "none.yaml", dir / "none", true);
  run(dir / "zero.yaml", dir / "zero", true);
  for (const char* f : {"summary.json", "requests.csv", "steps.csv", "events.csv"}) {
    EXPECT_EQ(read_file(dir / "none" / f), read_file(dir / "zero" / f)) << f;
  }
  EXPECT_EQ(read_file(dir / "none" / "config.yaml").find("frontend"), std::string::npos);
  fs::remove_all(dir);
}

// A front end in front of a multi-turn workload (arrivals released by finishes) and under load:
// every request completes and the run is deterministic.
TEST(FrontEndRun, SessionsAndLoadRunDeterministically) {
  const fs::path dir = temp_dir("frontend_sessions");
  const std::string exp = servelab_home().string() + "/experiments/multiturn.yaml";
  ExperimentConfig c =
      load_experiment(exp, {"serving.frontend={per_request_us: 300, per_prompt_token_us: 2}"});
  RunOptions o;
  o.out_dir = (dir / "a").string();
  const RunOutput a = run_simulation(c, o);
  o.out_dir = (dir / "b").string();
  run_simulation(c, o);
  EXPECT_EQ(a.summary.completed + a.summary.rejected + a.summary.aborted, a.summary.num_requests);
  for (const char* f : {"summary.json", "requests.csv", "steps.csv"}) {
    EXPECT_EQ(read_file(dir / "a" / f), read_file(dir / "b" / f)) << f;
  }
  const ExperimentConfig plain = load_experiment(exp, {});
  o.out_dir = (dir / "plain").string();
  const RunOutput p = run_simulation(plain, o);
  EXPECT_GT(a.summary.ttft_ms.mean, p.summary.ttft_ms.mean);
  fs::remove_all(dir);
}

// The engine hands requests over at the same ready times: with 20 ms of front end per request
// and one tokenizer, three requests arriving together are first scheduled no earlier than 20,
// 40 and 60 ms after their arrival (wall-clock: a lower bound only).
TEST(FrontEndRun, EngineAppliesTheFrontEnd) {
  const fs::path dir = temp_dir("frontend_engine");
  write_file(dir / "e.yaml",
             experiment("  frontend: {per_request_us: 20000}\n", 3, "{process: fixed, rate: 1e6}"));
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = servelab_program("engine") + " run " + (dir / "e.yaml").string() +
                          " --quiet --out " + (dir / "run").string() + " > " + out.string() +
                          " 2> " + err.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(err);
  const auto rows = read_csv(dir / "run" / "requests.csv");
  ASSERT_EQ(rows.size(), 3u);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].at("status"), "finished");
    const double arrival0 = std::stod(rows[0].at("arrival_s"));
    EXPECT_GE(std::stod(rows[i].at("first_scheduled_s")),
              arrival0 + 0.020 * static_cast<double>(i + 1) - 1e-9)
        << i;
    EXPECT_GE(std::stod(rows[i].at("ttft_ms")), 20.0 * static_cast<double>(i + 1) - 0.01) << i;
  }
  fs::remove_all(dir);
}

TEST(FrontEndRun, BadValuesAreConfigErrors) {
  const fs::path dir = temp_dir("frontend_errors");
  const auto expect_error = [&](const std::string& frontend, const std::string& key,
                                const std::string& where) {
    write_file(dir / "e.yaml",
               experiment("  frontend: " + frontend + "\n", 2, "{process: fixed, rate: 1}"));
    const Cli cli =
        run_sim("run " + (dir / "e.yaml").string() + " -q --out " + (dir / "out").string(), dir);
    EXPECT_EQ(cli.code, 2) << frontend;
    EXPECT_NE(cli.err.find(key), std::string::npos) << cli.err;
    EXPECT_NE(cli.err.find(where), std::string::npos) << cli.err;
  };
  expect_error("{per_request_us: -5}", "serving.frontend.per_request_us", "e.yaml:8:");
  expect_error("{per_prompt_token_us: abc}", "serving.frontend.per_prompt_token_us", "e.yaml:8:");
  expect_error("{concurrency: -1}", "serving.frontend.concurrency", "e.yaml:8:");
  expect_error("{per_request: 5}", "per_request", "e.yaml:8:");  // a typo: unknown key
  expect_error("5", "serving.frontend", "e.yaml:8:");            // not a mapping
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
