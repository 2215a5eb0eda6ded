// `sim bench` (sim/bench.h) against a server that misbehaves: an in-process cpp-httplib server
// answers /v1/models, /v1/completions and /metrics as each test scripts it. What the server sends
// becomes a request's reason on one line, never a crash, a wrong count or a hang.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "serving/experiment.h"
#include "sim/bench.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using namespace servelab::test_util;

// A server on a free port of 127.0.0.1, stopped (and joined) on destruction.
class FakeServer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  FakeServer(Handler completions, Handler models = nullptr, Handler metrics = nullptr) {
    server_.Post("/v1/completions", std::move(completions));
    server_.Get(
        "/v1/models",
        models ? std::move(models) : Handler([](const httplib::Request&, httplib::Response& r) {
          r.set_content(R"({"data": [{"id": "tiny"}]})", "application/json");
        }));
    if (metrics) server_.Get("/metrics", std::move(metrics));
    server_.set_tcp_nodelay(true);  // as engine serve (vLLM's uvicorn too)
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

void stream(httplib::Response& r, const std::string& events) {
  r.set_content(events, "text/event-stream");
}

// Two requests of 4 output tokens.
ExperimentConfig experiment(const fs::path& dir) {
  fs::create_directories(dir);
  write_file(dir / "e.yaml",
             "name: fake\nseed: 1\nmodel: tiny\nhardware: H100-SXM\n"
             "workload: {type: synthetic, num_requests: 2, arrival: {process: poisson, rate: 100},"
             " prompt_len: {dist: fixed, value: 8}, output_len: {dist: fixed, value: 4}}\n");
  return load_experiment((dir / "e.yaml").string(), {});
}

BenchOutput bench(const fs::path& dir, const FakeServer& server, const std::string& out,
                  double timeout_s = 30) {
  BenchOptions o;
  o.url = server.url();
  o.out_dir = (dir / out).string();
  o.max_concurrency = 2;
  o.timeout_s = timeout_s;
  return run_bench(experiment(dir), o);
}

const char* kGood =
    "data: {\"choices\": [{\"index\": 0, \"text\": \"a\"}]}\n\n"
    "data: {\"choices\": [{\"index\": 0, \"text\": \"b\"}]}\n\n"
    "data: {\"choices\": [{\"index\": 0, \"text\": \"c\"}]}\n\n"
    "data: {\"choices\": [{\"index\": 0, \"text\": \"d\", \"finish_reason\": \"length\"}]}\n\n"
    "data: {\"choices\": [], \"usage\": {\"completion_tokens\": 4}}\n\n"
    "data: [DONE]\n\n";

// The reasons requests.csv gives, which must still be one row a request.
std::vector<std::string> reasons(const fs::path& run) {
  std::vector<std::string> out;
  for (const auto& row : read_csv(run / "requests.csv")) out.push_back(row.at("reason"));
  return out;
}

TEST(BenchClient, ErrorsInTheStreamOfAnyShapeAbortTheRequestWithTheirText) {
  const fs::path dir = temp_dir("bench_stream_errors");
  // An error as a string, as an object with a multi-line message, as a number: each one ends
  // its request (the client crashed on the first and third, and broke requests.csv's rows with
  // the second).
  for (const char* error :
       {R"("boom, it broke")", R"({"message": "engine died,\nline2 \"x\""})", "42"}) {
    SCOPED_TRACE(error);
    const FakeServer server([&](const httplib::Request&, httplib::Response& r) {
      stream(r, std::string("data: {\"error\": ") + error + "}\n\ndata: [DONE]\n\n");
    });
    const BenchOutput b = bench(dir, server, "out");
    EXPECT_EQ(b.run.summary.aborted, 2);
    for (const std::string& reason : reasons(dir / "out")) {
      EXPECT_EQ(reason.rfind("error in stream: ", 0), 0u) << reason;
      EXPECT_EQ(reason.find('\n'), std::string::npos) << reason;
    }
    fs::remove_all(dir / "out");
  }
  fs::remove_all(dir);
}

TEST(BenchClient, UsageOutsideWhatWasAskedIsAnError) {
  const fs::path dir = temp_dir("bench_usage");
  for (const char* usage : {"-5", "5000000000", "100", "3.5", "\"4\""}) {
    SCOPED_TRACE(usage);
    const FakeServer server([&](const httplib::Request&, httplib::Response& r) {
      stream(r, std::string("data: {\"choices\": [{\"index\": 0, \"text\": \"a\"}]}\n\n"
                            "data: {\"choices\": [], \"usage\": {\"completion_tokens\": ") +
                    usage + "}}\n\ndata: [DONE]\n\n");
    });
    const BenchOutput b = bench(dir, server, "out");
    EXPECT_EQ(b.run.summary.aborted, 2);
    EXPECT_EQ(b.first_failure, std::string("request 0: usage.completion_tokens ") + usage +
                                   " is not a token count in [0, 4] (max_tokens 4)");
    fs::remove_all(dir / "out");
  }
  fs::remove_all(dir);
}

TEST(BenchClient, ErrorStatusesGiveTheServersMessage) {
  const fs::path dir = temp_dir("bench_status");
  const struct {
    int status;
    const char* body;
    const char* reason;
  } cases[] = {
      {400, "{\"error\": {\"message\": \"bad prompt\"}}\n", "HTTP 400: bad prompt"},
      {400, "{\"object\": \"error\", \"message\": \"old vLLM\"}", "HTTP 400: old vLLM"},
      {400, "plain refusal\n", "HTTP 400: plain refusal"},
      {503, "{\"error\": {\"message\": \"overloaded\"}}", "HTTP 503: overloaded"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.reason);
    const FakeServer server([&](const httplib::Request&, httplib::Response& r) {
      r.status = c.status;
      r.set_content(c.body, "application/json");
    });
    const BenchOutput b = bench(dir, server, "out");
    EXPECT_EQ(b.first_failure, std::string("request 0: ") + c.reason);
    fs::remove_all(dir / "out");
  }
  fs::remove_all(dir);
}

TEST(BenchClient, AnswersThatAreNoStreamAreNamed) {
  const fs::path dir = temp_dir("bench_no_stream");
  {
    // A non-streamed JSON answer.
    const FakeServer server([](const httplib::Request&, httplib::Response& r) {
      r.set_content(R"({"choices": [{"text": "abcd"}]})", "application/json");
    });
    EXPECT_EQ(bench(dir, server, "a").first_failure,
              "request 0: the answer is no event stream (Content-Type 'application/json')");
  }
  {
    // [DONE] with no chunk of choices.
    const FakeServer server(
        [](const httplib::Request&, httplib::Response& r) { stream(r, "data: [DONE]\n\n"); });
    EXPECT_EQ(bench(dir, server, "b").first_failure,
              "request 0: stream ended without a chunk of choices");
  }
  {
    // What comes after [DONE] is no part of the answer: 4 tokens, finished.
    const FakeServer server([](const httplib::Request&, httplib::Response& r) {
      stream(r, std::string(kGood) + "data: {\"choices\": [{\"index\": 0, \"text\": \"e\"}]}\n\n");
    });
    const BenchOutput b = bench(dir, server, "c");
    EXPECT_EQ(b.run.summary.completed, 2);
    for (const auto& row : read_csv(dir / "c" / "requests.csv")) {
      EXPECT_EQ(row.at("output_tokens"), "4");
    }
  }
  fs::remove_all(dir);
}

TEST(BenchClient, ModelListsThatAreNoneAreErrors) {
  const fs::path dir = temp_dir("bench_models");
  for (const char* list : {R"({"data": {"x": {"id": "weird"}}})", R"({"data": [{"id": ""}]})",
                           R"({"data": [{"id": 5}]})", "not json"}) {
    SCOPED_TRACE(list);
    const FakeServer server([](const httplib::Request&, httplib::Response& r) { stream(r, kGood); },
                            [&](const httplib::Request&, httplib::Response& r) {
                              r.set_content(list, "application/json");
                            });
    try {
      bench(dir, server, "out");
      FAIL() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("/v1/models: the answer is no model list ("),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(fs::exists(dir / "out"));
  }
  // A long id is an id (it was taken for one with control characters past 300 characters).
  const std::string long_id(400, 'm');
  const FakeServer server([](const httplib::Request&, httplib::Response& r) { stream(r, kGood); },
                          [&](const httplib::Request&, httplib::Response& r) {
                            r.set_content(R"({"data": [{"id": ")" + long_id + "\"}]}",
                                          "application/json");
                          });
  EXPECT_EQ(bench(dir, server, "long").run.summary.completed, 2);
  fs::remove_all(dir);
}

// A server that never answers: the request is given up at --timeout, with that reason.
TEST(BenchClient, ASilentServerIsGivenUpAtTheTimeout) {
  const fs::path dir = temp_dir("bench_silent");
  std::atomic<bool> done{false};
  const FakeServer server([&](const httplib::Request&, httplib::Response& r) {
    for (int i = 0; i < 100 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stream(r, kGood);
  });
  const auto start = std::chrono::steady_clock::now();
  const BenchOutput b = bench(dir, server, "out", 0.3);
  done = true;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(b.first_failure, "request 0: the server sent nothing for the --timeout of 0.3 s");
  fs::remove_all(dir);
}

// The energy counter of GET /metrics: summed over its series, a sample's timestamp not taken for
// its value.
TEST(BenchClient, EnergyIsTheCountersSumOverItsSeries) {
  const fs::path dir = temp_dir("bench_energy");
  std::atomic<int> scrapes{0};
  const FakeServer server([](const httplib::Request&, httplib::Response& r) { stream(r, kGood); },
                          nullptr,
                          [&](const httplib::Request&, httplib::Response& r) {
                            const int k = scrapes++;
                            r.set_content(
                                "# TYPE servelab:gpu_energy_joules_total counter\n"
                                "servelab:gpu_energy_joules_total{gpu=\"0\"} " +
                                    std::to_string(100 + 3 * k) + " 1733500000000\n" +
                                    "servelab:gpu_energy_joules_total{gpu=\"1\"} " +
                                    std::to_string(200 + 5 * k) + " 1733500000000\n",
                                "text/plain");
                          });
  bench(dir, server, "out");
  const auto summary = nlohmann::json::parse(read_file(dir / "out" / "summary.json"));
  EXPECT_EQ(summary["energy"]["joules"].get<double>(), 8.0) << summary["energy"];
  fs::remove_all(dir);
}

// One connection for two requests that arrive 10 ms apart, each answered in 300 ms: the second
// waits in the client. Its latencies count from its send (vLLM's benchmark), its arrival is when
// it was sent, and the run's duration is the wall clock's (it was the arrival plus the latency:
// 0.31 s for 0.6 s of serving, throughput twice too high); the command warns.
TEST(BenchClient, RequestsWaitingForAConnectionKeepTheWallClock) {
  const fs::path dir = temp_dir("bench_client_wait");
  const FakeServer server([&](const httplib::Request&, httplib::Response& r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stream(r, kGood);
  });
  BenchOptions o;
  o.url = server.url();
  o.out_dir = (dir / "out").string();
  o.max_concurrency = 1;
  const BenchOutput b = run_bench(experiment(dir), o);
  EXPECT_EQ(b.run.summary.completed, 2);
  EXPECT_GE(b.run.summary.duration_s, 0.6) << "the duration lost the wait in the client";
  EXPECT_LT(b.run.summary.ttft_ms.max, 550) << "a latency counted the wait in the client";
  EXPECT_EQ(b.client_waits, 1);  // the first one was sent on time
  EXPECT_GE(b.client_wait_max_s, 0.25);
  const auto rows = read_csv(dir / "out" / "requests.csv");
  ASSERT_EQ(rows.size(), 2u);
  // The second request arrives, for the server, once the first one's answer has ended.
  EXPECT_GE(std::stod(rows[1].at("arrival_s")), std::stod(rows[0].at("finish_s")) - 1e-3);
  // The command says so.
  const Cli cli = run_sim("bench " + (dir / "e.yaml").string() + " --url " + server.url() +
                              " --max-concurrency 1 --out " + (dir / "out2").string(),
                          dir);
  EXPECT_EQ(cli.code, 0) << cli.err;
  EXPECT_NE(cli.err.find("1 requests waited in the client for a free connection"),
            std::string::npos)
      << cli.err;
  fs::remove_all(dir);
}

// A request on a reused connection reaches the server at once: cpp-httplib writes a POST's
// headers and body apart, and without TCP_NODELAY Nagle held the body for the server's delayed
// ACK (40 ms on Linux), which the bench counted as the server's TTFT.
TEST(BenchClient, RequestsOnAReusedConnectionAreNotHeldBack) {
  const fs::path dir = temp_dir("bench_nodelay");
  const FakeServer server([](const httplib::Request&, httplib::Response& r) { stream(r, kGood); });
  BenchOptions o;
  o.url = server.url();
  o.out_dir = (dir / "out").string();
  o.max_concurrency = 1;  // one keep-alive connection for both requests
  // Up to three tries: Nagle's 40 ms come back on every try, a loaded machine's slow wake-up of
  // a thread (a wall-clock TTFT past 30 ms) not.
  double best = 1e9;
  for (int attempt = 0; attempt < 3 && best >= 30.0; ++attempt) {
    fs::remove_all(dir / "out");
    const BenchOutput b = run_bench(experiment(dir), o);
    EXPECT_EQ(b.run.summary.completed, 2);
    best = std::min(best, b.run.summary.ttft_ms.max);
  }
  EXPECT_LT(best, 30.0);
  fs::remove_all(dir);
}

// Ctrl-C while every request waits on a silent server: the bench stops at once (exit 130),
// writing nothing, instead of waiting out the requests' timeouts.
TEST(BenchClient, AnInterruptEndsRequestsWaitingOnASilentServer) {
  const fs::path dir = temp_dir("bench_interrupt");
  std::atomic<bool> done{false};
  const FakeServer server([&](const httplib::Request&, httplib::Response& r) {
    for (int i = 0; i < 1500 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stream(r, kGood);
  });
  experiment(dir);
  const auto start = std::chrono::steady_clock::now();
  const Cli r = run_program("sim",
                            "bench " + (dir / "e.yaml").string() + " --url " + server.url() +
                                " --out " + (dir / "out").string() + " --timeout 600",
                            dir / "stdout.txt", dir / "stderr.txt",
                            "timeout --foreground --preserve-status -s INT 1 ");
  done = true;
  EXPECT_EQ(r.code, 130) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_NE(r.err.find("interrupted; no output written"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
  fs::remove_all(dir);
}

// One conversation of three turns (8 prompt tokens, 4 new ones a turn, 4 output tokens, 50 ms of
// thinking) against a server that answers each turn with ids id_base + 10 x turn + k and, with
// `ids`, says so in token_ids.
struct SessionRun {
  std::vector<nlohmann::json> bodies;  // as the server received them
  BenchOutput out;
  std::vector<std::map<std::string, std::string>> rows;  // requests.csv
};
SessionRun bench_session(const fs::path& dir, bool ids, int id_base = 100, double think_s = 0.05,
                         int done_delay_ms = 0) {
  SessionRun s;
  std::mutex mu;
  const FakeServer server([&](const httplib::Request& q, httplib::Response& r) {
    std::size_t turn = 0;
    {
      std::lock_guard lock(mu);
      turn = s.bodies.size();
      s.bodies.push_back(nlohmann::json::parse(q.body));
    }
    std::string events;
    for (int k = 0; k < 4; ++k) {
      const std::string id = std::to_string(id_base + static_cast<int>(10 * turn) + k);
      events += "data: {\"choices\": [{\"index\": 0, \"text\": \"x\"" +
                (ids ? ", \"token_ids\": [" + id + "]" : std::string()) +
                (k == 3 ? ", \"finish_reason\": \"length\"" : "") + "}]}\n\n";
    }
    const std::string tail =
        "data: {\"choices\": [], \"usage\": {\"completion_tokens\": 4}}\n\ndata: [DONE]\n\n";
    if (done_delay_ms == 0) {
      stream(r, events + tail);
      return;
    }
    // The last token's chunk, then a pause before the stream ends.
    r.set_chunked_content_provider(
        "text/event-stream", [=, step = 0](std::size_t, httplib::DataSink& sink) mutable {
          if (step++ == 0) {
            sink.write(events.data(), events.size());
          } else {
            std::this_thread::sleep_for(std::chrono::milliseconds(done_delay_ms));
            sink.write(tail.data(), tail.size());
            sink.done();
          }
          return true;
        });
  });
  fs::create_directories(dir);
  write_file(dir / "s.yaml",
             "name: chat\nseed: 1\nmodel: tiny\nhardware: H100-SXM\n"
             "workload: {type: multiturn, num_sessions: 1,"
             " session_arrival: {process: poisson, rate: 10}, turns: {dist: fixed, value: 3},"
             " think_time_s: {dist: fixed, value: " +
                 std::to_string(think_s) +
                 "},"
                 " first_prompt_len: {dist: fixed, value: 8}, new_tokens: {dist: fixed, value: 4},"
                 " output_len: {dist: fixed, value: 4}}\n");
  BenchOptions o;
  o.url = server.url();
  o.out_dir = (dir / "out").string();
  s.out = run_bench(load_experiment((dir / "s.yaml").string(), {}), o);
  s.rows = read_csv(dir / "out" / "requests.csv");
  return s;
}

std::vector<int> ids(const nlohmann::json& prompt, std::size_t from, std::size_t to) {
  std::vector<int> out;
  for (std::size_t i = from; i < to; ++i) out.push_back(prompt.at(i).get<int>());
  return out;
}

// A session's turns go out one after another, each once the turn before was answered plus its
// think time, and each prompt is the conversation so far: the turn before's prompt, its reply as
// the server sampled it (return_token_ids) and the new tokens, so a server's prefix cache sees
// one growing conversation. (sim bench refused dependent workloads before.)
TEST(BenchClient, SessionTurnsWaitForTheirRepliesAndQuoteThem) {
  const fs::path dir = temp_dir("bench_session");
  const SessionRun s = bench_session(dir, true);
  ASSERT_EQ(s.bodies.size(), 3u);
  EXPECT_EQ(s.out.unquoted_replies, 0);
  for (std::size_t t = 0; t < 3; ++t) {
    const nlohmann::json& prompt = s.bodies[t].at("prompt");
    EXPECT_EQ(s.bodies[t].value("return_token_ids", false), true);
    ASSERT_EQ(prompt.size(), 8 + 8 * t);
    if (t == 0) continue;
    const nlohmann::json& before = s.bodies[t - 1].at("prompt");
    EXPECT_EQ(ids(prompt, 0, before.size()), ids(before, 0, before.size())) << t;
    const int first = static_cast<int>(100 + 10 * (t - 1));
    const std::vector<int> reply = {first, first + 1, first + 2, first + 3};
    EXPECT_EQ(ids(prompt, before.size(), before.size() + 4), reply) << t;
  }
  // requests.csv: every turn finished, and each arrived no earlier than 50 ms after the one
  // before finished (the arrivals come from the answers, not from the workload alone).
  ASSERT_EQ(s.rows.size(), 3u);
  std::vector<std::pair<double, double>> times;  // (arrival, finish) in arrival order
  for (const auto& row : s.rows) {
    EXPECT_EQ(row.at("status"), "finished");
    times.emplace_back(std::stod(row.at("arrival_s")), std::stod(row.at("finish_s")));
  }
  std::sort(times.begin(), times.end());
  for (std::size_t t = 1; t < 3; ++t) {
    EXPECT_GE(times[t].first, times[t - 1].second + 0.05 - 1e-6) << t;
    EXPECT_LT(times[t].first, times[t - 1].second + 0.05 + 0.03) << t;  // and sent on time
  }
  fs::remove_all(dir);
}

// A server that does not answer return_token_ids (an older vLLM): the turns still go out in
// order, quoting the replies by their identities' values, and the bench counts the replies it
// could not quote (the command warns: the server's cache cannot hit past them).
TEST(BenchClient, RepliesWithoutTokenIdsAreCounted) {
  const fs::path dir = temp_dir("bench_session_noids");
  const SessionRun s = bench_session(dir, false);
  ASSERT_EQ(s.bodies.size(), 3u);
  EXPECT_EQ(s.out.unquoted_replies, 3);
  EXPECT_EQ(s.out.run.summary.completed, 3);
  EXPECT_NE(ids(s.bodies[1].at("prompt"), 8, 12), (std::vector<int>{100, 101, 102, 103}));
  fs::remove_all(dir);
}

// A turn is due at its parent's last chunk (plus its think time, here none) but handed over when
// the parent's stream has ended, 60 ms later: that is no wait for a free connection (it was
// reported as one, and the turn's arrival moved), and the turn keeps its arrival.
TEST(BenchClient, ATurnReleasedAfterItsParentsStreamEndedWaitedForNoConnection) {
  const fs::path dir = temp_dir("bench_session_late_done");
  const SessionRun s = bench_session(dir, true, 100, 0.0, 60);
  ASSERT_EQ(s.bodies.size(), 3u);
  EXPECT_EQ(s.out.client_waits, 0);
  ASSERT_EQ(s.rows.size(), 3u);
  std::vector<std::pair<double, double>> times;
  for (const auto& row : s.rows) {
    times.emplace_back(std::stod(row.at("arrival_s")), std::stod(row.at("finish_s")));
  }
  std::sort(times.begin(), times.end());
  for (std::size_t t = 1; t < 3; ++t) {
    EXPECT_NEAR(times[t].first, times[t - 1].second, 1e-6) << t;  // its parent's last chunk
  }
  fs::remove_all(dir);
}

// Ids outside the model's vocabulary (256 tokens) are no reply to quote: each turn is aborted,
// saying so, and still releases the next, as a failed request does in the simulator.
TEST(BenchClient, TokenIdsOutsideTheVocabularyAbortTheRequest) {
  const fs::path dir = temp_dir("bench_session_badids");
  const SessionRun s = bench_session(dir, true, 256);
  ASSERT_EQ(s.bodies.size(), 3u);
  ASSERT_EQ(s.rows.size(), 3u);
  for (const auto& row : s.rows) {
    EXPECT_EQ(row.at("status"), "aborted");
    EXPECT_NE(row.at("reason").find("is not a list of token ids below the model's vocabulary "
                                    "size 256"),
              std::string::npos)
        << row.at("reason");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
