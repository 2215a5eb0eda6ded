// SessionWorkload: DAG release protocol, prompt growth across turns, validation errors, the
// multiturn generator, the recorded-sessions JSON format, and an end-to-end multi-turn run.
#include "traces/session_workload.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "serving/experiment.h"
#include "sim/run.h"
#include "tests/test_util.h"
#include "traces/trace_readers.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
constexpr TimeNs kS = kNsPerS;

SessionNode node(std::string key, std::vector<std::string> parents, TimeNs time_ns,
                 std::int32_t fresh, std::int32_t output) {
  SessionNode n;
  n.key = std::move(key);
  n.parents = std::move(parents);
  n.time_ns = time_ns;
  n.fresh_tokens = fresh;
  n.output_tokens = output;
  return n;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

TEST(SessionWorkload, ChainReleasesEachTurnAtParentFinishPlusThinkAndGrowsThePrompt) {
  SessionWorkload w({node("a", {}, 1 * kS, 100, 10), node("b", {"a"}, 2 * kS, 20, 30),
                     node("c", {"b"}, 3 * kS, 5, 7)},
                    42, "test", "chain");
  EXPECT_TRUE(w.dependent());
  ASSERT_EQ(w.next_arrival(), 1 * kS);
  const RequestSpec a = *w.next();
  EXPECT_EQ(a.id, 0u);
  EXPECT_EQ(a.arrival_ns, 1 * kS);
  EXPECT_EQ(a.prompt_len, 100);
  EXPECT_EQ(a.max_output_tokens, 10);
  ASSERT_EQ(a.prompt.size(), 1u);
  EXPECT_EQ(a.prompt[0], (PromptSegment{unique_content_id(42, 0), 0, 100}));
  // b waits for a.
  EXPECT_FALSE(w.next_arrival());
  EXPECT_FALSE(w.next());
  EXPECT_FALSE(w.exhausted());
  w.on_finish(0, 5 * kS + 123);
  ASSERT_EQ(w.next_arrival(), 7 * kS + 123);  // finish + think 2 s
  const RequestSpec b = *w.next();
  EXPECT_EQ(b.id, 1u);
  EXPECT_EQ(b.arrival_ns, 7 * kS + 123);
  EXPECT_EQ(b.prompt_len, 100 + 10 + 20);
  std::vector<PromptSegment> want = a.prompt;
  want.push_back({output_content_id(0), 0, 10});
  want.push_back({unique_content_id(42, 1), 0, 20});
  EXPECT_EQ(b.prompt, want);

  w.on_finish(1, 9 * kS);
  const RequestSpec c = *w.next();
  EXPECT_EQ(c.id, 2u);
  EXPECT_EQ(c.arrival_ns, 12 * kS);
  EXPECT_EQ(c.prompt_len, 130 + 30 + 5);
  want = b.prompt;
  want.push_back({output_content_id(1), 0, 30});
  want.push_back({unique_content_id(42, 2), 0, 5});
  EXPECT_EQ(c.prompt, want);
  EXPECT_TRUE(w.exhausted());
  EXPECT_FALSE(w.next());
  w.on_finish(2, 20 * kS);
  EXPECT_FALSE(w.next_arrival());
}

TEST(SessionWorkload, JoinIsReleasedOnlyAfterBothParentsAtTheLaterFinishPlusThink) {
  SessionWorkload w({node("root", {}, 0, 50, 4), node("x", {"root"}, 0, 8, 6),
                     node("y", {"root"}, 0, 9, 11), node("join", {"x", "y"}, 1 * kS, 3, 2)},
                    7, "test", "fanout");
  const RequestSpec root = *w.next();
  w.on_finish(root.id, 1 * kS);
  const RequestSpec x = *w.next();  // both at 1 s: id order
  const RequestSpec y = *w.next();
  EXPECT_EQ(x.id, w.id_of("x"));
  EXPECT_EQ(y.id, w.id_of("y"));
  EXPECT_EQ(x.arrival_ns, 1 * kS);
  EXPECT_EQ(y.arrival_ns, 1 * kS);
  w.on_finish(y.id, 4 * kS);
  EXPECT_FALSE(w.next_arrival());  // join still waits for x
  w.on_finish(x.id, 3 * kS);       // earlier than y's finish: the later one counts
  const RequestSpec j = *w.next();
  EXPECT_EQ(j.id, w.id_of("join"));
  EXPECT_EQ(j.arrival_ns, 5 * kS);
  // First parent's full context, the other parent's output, then the join's own tokens.
  std::vector<PromptSegment> want = x.prompt;
  want.push_back({output_content_id(x.id), 0, 6});
  want.push_back({output_content_id(y.id), 0, 11});
  want.push_back({unique_content_id(7, j.id), 0, 3});
  EXPECT_EQ(j.prompt, want);
  EXPECT_EQ(j.prompt_len, 50 + 4 + 8 + 6 + 11 + 3);
  EXPECT_EQ(w.parents(j.id), (std::vector<RequestId>{x.id, y.id}));
  EXPECT_TRUE(w.exhausted());
}

TEST(SessionWorkload, RootsAreReleasedAtTheirArrivalTimesInOrder) {
  SessionWorkload w({node("late", {}, 9 * kS, 1, 1), node("early", {}, 2 * kS, 1, 1),
                     node("mid", {}, 5 * kS, 1, 1), node("tie", {}, 5 * kS, 1, 1)},
                    1, "test", "roots");
  std::vector<std::string> keys;
  std::vector<TimeNs> times;
  while (std::optional<RequestSpec> r = w.next()) {
    keys.push_back(w.node(r->id).key);
    times.push_back(r->arrival_ns);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"early", "mid", "tie", "late"}));
  EXPECT_EQ(times, (std::vector<TimeNs>{2 * kS, 5 * kS, 5 * kS, 9 * kS}));
  EXPECT_TRUE(w.exhausted());
  // Ids follow the given order among ready nodes: late=0, early=1, mid=2, tie=3.
  EXPECT_EQ(w.id_of("late"), 0u);
  EXPECT_EQ(w.id_of("tie"), 3u);
}

TEST(SessionWorkload, IdsAreTopologicalWithGivenOrderBreakingTies) {
  // Children listed before their parents still get larger ids.
  SessionWorkload w({node("c", {"b"}, 0, 1, 1), node("b", {"a"}, 0, 1, 1), node("a", {}, 0, 1, 1),
                     node("z", {}, 0, 1, 1)},
                    1, "test", "order");
  EXPECT_EQ(w.id_of("a"), 0u);
  EXPECT_EQ(w.id_of("b"), 1u);
  EXPECT_EQ(w.id_of("c"), 2u);
  EXPECT_EQ(w.id_of("z"), 3u);
}

TEST(SessionWorkload, CycleIsAnErrorNamingARequestOnIt) {
  // "pre" is acyclic, "tail" hangs off the cycle but is not on it.
  const std::string e = error_of([] {
    SessionWorkload w(
        {node("pre", {}, 0, 1, 1), node("tail", {"q"}, 0, 1, 1), node("p", {"pre", "r"}, 0, 1, 1),
         node("q", {"p"}, 0, 1, 1), node("r", {"q"}, 0, 1, 1)},
        1, "f.json", "cycle");
  });
  EXPECT_NE(e.find("f.json: session request '"), std::string::npos) << e;
  EXPECT_NE(e.find("is part of a cycle"), std::string::npos) << e;
  EXPECT_TRUE(e.find("'p'") != std::string::npos || e.find("'q'") != std::string::npos ||
              e.find("'r'") != std::string::npos)
      << e;
  const std::string self =
      error_of([] { SessionWorkload w({node("me", {"me"}, 0, 1, 1)}, 1, "f", ""); });
  EXPECT_NE(self.find("'me' is part of a cycle"), std::string::npos) << self;
}

TEST(SessionWorkload, DanglingParentAndDuplicatesAreErrorsNamingTheRequest) {
  const std::string e = error_of([] {
    SessionWorkload w({node("a", {}, 0, 1, 1), node("b", {"ghost"}, 0, 1, 1)}, 1, "f", "");
  });
  EXPECT_NE(e.find("'b'"), std::string::npos) << e;
  EXPECT_NE(e.find("'ghost'"), std::string::npos) << e;
  const std::string dup = error_of([] {
    SessionWorkload w({node("a", {}, 0, 1, 1), node("a", {}, 0, 1, 1)}, 1, "f", "");
  });
  EXPECT_NE(dup.find("'a' is defined twice"), std::string::npos) << dup;
  const std::string twice = error_of([] {
    SessionWorkload w({node("a", {}, 0, 1, 1), node("b", {"a", "a"}, 0, 1, 1)}, 1, "f", "");
  });
  EXPECT_NE(twice.find("'b' lists parent 'a' twice"), std::string::npos) << twice;
  const std::string empty =
      error_of([] { SessionWorkload w({node("a", {}, 0, 0, 1)}, 1, "f", ""); });
  EXPECT_NE(empty.find("'a' has no parent and no prompt tokens"), std::string::npos) << empty;
}

// ---- multiturn generator ----

const std::string kMultiturn =
    "  type: multiturn\n  num_sessions: 6\n"
    "  session_arrival: {process: poisson, rate: 2}\n"
    "  turns: {dist: uniform, min: 2, max: 5}\n"
    "  think_time_s: {dist: exponential, mean: 1.5, max: 10}\n"
    "  first_prompt_len: {dist: lognormal, mean: 300, stddev: 100, min: 16, max: 1000}\n"
    "  new_tokens: {dist: uniform, min: 10, max: 60}\n"
    "  output_len: {dist: uniform, min: 5, max: 40}\n";

std::unique_ptr<Workload> from_yaml(const std::string& body, std::uint64_t seed) {
  const ConfigNode root = ConfigNode::load_string("workload:\n" + body, "test.yaml");
  return make_workload(root.at("workload"), seed, ".");
}

// All requests, releasing each child by finishing every request `gap` after it arrives.
std::vector<RequestSpec> drain(Workload& w, TimeNs gap = kS) {
  std::vector<RequestSpec> out;
  std::multimap<TimeNs, RequestId> running;
  while (true) {
    const std::optional<TimeNs> t = w.next_arrival();
    if (t && (running.empty() || *t <= running.begin()->first)) {
      RequestSpec r = *w.next();
      running.emplace(r.arrival_ns + gap, r.id);
      out.push_back(std::move(r));
    } else if (!running.empty()) {
      w.on_finish(running.begin()->second, running.begin()->first);
      running.erase(running.begin());
    } else {
      break;
    }
  }
  return out;
}

TEST(MultiturnWorkload, DeterministicPerSeedWithTheConfiguredSessionsAndTurns) {
  auto w1 =
      from_yaml(kMultiturn + "  system_prompt: {num_prefixes: 2, length: 64, fraction: 1}\n", 5);
  auto w2 =
      from_yaml(kMultiturn + "  system_prompt: {num_prefixes: 2, length: 64, fraction: 1}\n", 5);
  auto w3 =
      from_yaml(kMultiturn + "  system_prompt: {num_prefixes: 2, length: 64, fraction: 1}\n", 6);
  const auto* s1 = dynamic_cast<const SessionWorkload*>(w1.get());
  ASSERT_NE(s1, nullptr);
  const std::vector<RequestSpec> a = drain(*w1), b = drain(*w2), c = drain(*w3);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), s1->size());
  EXPECT_TRUE(w1->exhausted());
  bool differs = a.size() != c.size();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_EQ(a[i].arrival_ns, b[i].arrival_ns);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].max_output_tokens, b[i].max_output_tokens);
    if (i < c.size() && (a[i].prompt_len != c[i].prompt_len)) differs = true;
  }
  EXPECT_TRUE(differs) << "another seed should give another workload";

  // 6 sessions, each a chain of 2..5 turns keyed s<i>t<k>; every root has a system prompt.
  std::map<std::string, int> turns;
  for (RequestId id = 0; id < s1->size(); ++id) {
    const SessionNode& n = s1->node(id);
    const std::string session = n.key.substr(0, n.key.find('t'));
    ++turns[session];
    const int k = std::stoi(n.key.substr(n.key.find('t') + 1));
    if (k == 0) {
      EXPECT_TRUE(n.parents.empty());
      ASSERT_EQ(n.content.size(), 1u);
      EXPECT_EQ(n.content[0].length, 64u);
      EXPECT_GE(n.fresh_tokens, 16);
      EXPECT_LE(n.fresh_tokens, 1000);
    } else {
      EXPECT_EQ(n.parents, (std::vector<std::string>{session + "t" + std::to_string(k - 1)}));
      EXPECT_GE(n.fresh_tokens, 10);
      EXPECT_LE(n.fresh_tokens, 60);
      EXPECT_LE(n.time_ns, 10 * kS);
    }
  }
  EXPECT_EQ(turns.size(), 6u);
  for (const auto& [session, count] : turns) {
    EXPECT_GE(count, 2) << session;
    EXPECT_LE(count, 5) << session;
  }
  // Chains given session by session: ids are that order, so session 0 holds ids 0..k-1.
  EXPECT_EQ(s1->node(0).key, "s0t0");
  EXPECT_EQ(s1->node(1).key, "s0t1");
}

TEST(MultiturnWorkload, FanoutSplitsATurnAndTheNextTurnJoinsIt) {
  auto w = from_yaml(
      "  type: multiturn\n  num_sessions: 1\n  session_arrival: {process: fixed, rate: 1}\n"
      "  turns: {dist: fixed, value: 4}\n  think_time_s: {dist: fixed, value: 0.5}\n"
      "  first_prompt_len: {dist: fixed, value: 100}\n  new_tokens: {dist: fixed, value: 10}\n"
      "  output_len: {dist: fixed, value: 20}\n  fanout: {every: 2, width: 3}\n",
      1);
  const auto& s = dynamic_cast<const SessionWorkload&>(*w);
  ASSERT_EQ(s.size(), 1u + 1 + 3 + 1);
  const RequestId join = s.id_of("s0t3");
  EXPECT_EQ(s.node(join).parents, (std::vector<std::string>{"s0t2.0", "s0t2.1", "s0t2.2"}));
  EXPECT_EQ(s.node(s.id_of("s0t2.1")).parents, (std::vector<std::string>{"s0t1"}));
  const std::vector<RequestSpec> all = drain(*w);
  ASSERT_EQ(all.size(), 6u);
  // t0 100 -> t1 100+20+10 -> t2.x 130+20+10 -> t3 160+20 + 20 + 20 + 10.
  EXPECT_EQ(all.back().id, join);
  EXPECT_EQ(all.back().prompt_len, 230);
}

TEST(MultiturnWorkload, BadKeysAreConfigErrors) {
  EXPECT_NE(error_of([] { from_yaml(kMultiturn + "  bogus: 1\n", 1); }).find("bogus"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              from_yaml(kMultiturn + "  transforms: {time_scale: 2}\n", 1);
            }).find("transforms"),
            std::string::npos);
  const std::string e = error_of([] {
    from_yaml(
        "  type: multiturn\n  num_sessions: 1\n  session_arrival: {process: poisson, rate: 1}\n"
        "  turns: {dist: uniform, min: 3, max: 2}\n  think_time_s: {dist: fixed, value: 1}\n"
        "  first_prompt_len: {dist: fixed, value: 1}\n  new_tokens: {dist: fixed, value: 1}\n"
        "  output_len: {dist: fixed, value: 1}\n",
        1);
  });
  EXPECT_NE(e.find("turns.max"), std::string::npos) << e;
  // A session rate so small that arrivals pass the simulator's clock: an error naming the rate,
  // not an overflowed time.
  const std::string late = error_of([] {
    from_yaml(
        "  type: multiturn\n  num_sessions: 30\n  session_arrival: {process: poisson, rate: "
        "1e-10}\n"
        "  turns: {dist: fixed, value: 1}\n  think_time_s: {dist: fixed, value: 1}\n"
        "  first_prompt_len: {dist: fixed, value: 1}\n  new_tokens: {dist: fixed, value: 1}\n"
        "  output_len: {dist: fixed, value: 1}\n",
        1);
  });
  EXPECT_NE(late.find("session_arrival.rate': session "), std::string::npos) << late;
  EXPECT_NE(late.find("would arrive more than 146 years after the start"), std::string::npos)
      << late;
}

// limits.max_requests is checked before multiturn builds its sessions when even their fewest
// turns pass it (200,000 sessions of 10 turns took a minute and gigabytes before).
TEST(MultiturnWorkload, TooManySessionsForTheLimitAreRefusedUpFront) {
  const fs::path dir = servelab::test_util::temp_dir("multiturn_limit");
  servelab::test_util::write_file(
      dir / "mt.yaml",
      "name: mt\nmodel: tiny\nhardware: H100-SXM\nlimits: {max_requests: 1000}\n"
      "workload:\n" +
          std::string("  type: multiturn\n  num_sessions: 200000\n") +
          "  session_arrival: {process: poisson, rate: 2}\n"
          "  turns: {dist: fixed, value: 10}\n  think_time_s: {dist: fixed, value: 1}\n"
          "  first_prompt_len: {dist: fixed, value: 10}\n  new_tokens: {dist: fixed, value: 5}\n"
          "  output_len: {dist: fixed, value: 5}\n");
  const std::string e = error_of([&] { load_experiment((dir / "mt.yaml").string(), {}); });
  EXPECT_NE(e.find("key 'workload.num_sessions': sessions of at least 10 turns each make more "
                   "requests than limits.max_requests (1000)"),
            std::string::npos)
      << e;
  // A fan-out's turns count `width` requests each: 10 sessions of 10 turns fanned 100 ways at
  // every turn make 9,010 requests (it was accepted, built whole and refused only once running;
  // 100,000 such sessions ran out of memory). Within the limit it is accepted.
  const std::string fan = "  turns: {dist: fixed, value: 10}\n  fanout: {every: 1, width: 100}\n";
  std::string text = servelab::test_util::read_file(dir / "mt.yaml");
  text.replace(text.find("200000"), 6, "10");
  text.replace(text.find("  turns: {dist: fixed, value: 10}\n"), 34, fan);
  servelab::test_util::write_file(dir / "fan.yaml", text);
  const std::string f = error_of([&] { load_experiment((dir / "fan.yaml").string(), {}); });
  EXPECT_NE(f.find("sessions of at least 10 turns each (901 with the fan-outs) make more requests "
                   "than limits.max_requests (1000)"),
            std::string::npos)
      << f;
  text.replace(text.find("max_requests: 1000"), 18, "max_requests: 9010");
  servelab::test_util::write_file(dir / "fan.yaml", text);
  EXPECT_NO_THROW(load_experiment((dir / "fan.yaml").string(), {}));
  fs::remove_all(dir);
}

// ---- recorded sessions JSON ----

TEST(SessionJson, ParsesRequestsWithParentsThinkTimesAndHashIds) {
  const std::string text = R"({"requests": [
    {"id": "s1t1", "parents": [], "arrival_s": 0.5, "input_tokens": 600, "output_tokens": 40,
     "hash_ids": [7, 8], "priority": 1, "tenant": 3},
    {"id": "s1t2", "parents": ["s1t1"], "think_time_s": 2.0, "input_tokens": 12,
     "output_tokens": 5},
    {"id": 9, "arrival_s": 1, "input_tokens": 3, "output_tokens": 1}]})";
  std::vector<SessionNode> nodes = parse_session_json(text, "rec.json", 512);
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].time_ns, kS / 2);
  ASSERT_EQ(nodes[0].content.size(), 2u);
  EXPECT_EQ(nodes[0].content[0], (PromptSegment{mooncake_content_id(7), 0, 512}));
  EXPECT_EQ(nodes[0].content[1], (PromptSegment{mooncake_content_id(8), 0, 88}));
  EXPECT_EQ(nodes[0].fresh_tokens, 0);
  EXPECT_EQ(nodes[0].priority, 1);
  EXPECT_EQ(nodes[0].tenant, 3u);
  EXPECT_EQ(nodes[1].parents, (std::vector<std::string>{"s1t1"}));
  EXPECT_EQ(nodes[1].time_ns, 2 * kS);
  EXPECT_EQ(nodes[1].fresh_tokens, 12);
  EXPECT_EQ(nodes[2].key, "9");

  SessionWorkload w(std::move(nodes), 3, "rec.json", "rec");
  const RequestSpec r0 = *w.next();
  EXPECT_EQ(r0.prompt_len, 600);
  EXPECT_EQ(r0.priority, 1);
  EXPECT_EQ(r0.tenant, 3u);
  w.on_finish(r0.id, 4 * kS);
  EXPECT_EQ(w.next()->id, w.id_of("9"));  // arrives at 1 s
  const RequestSpec r1 = *w.next();
  EXPECT_EQ(r1.arrival_ns, 6 * kS);
  EXPECT_EQ(r1.prompt_len, 600 + 40 + 12);
}

TEST(SessionJson, ErrorsNameTheFileAndTheRequest) {
  auto err = [](const std::string& requests) {
    return error_of([&] { parse_session_json("{\"requests\": [" + requests + "]}", "rec.json"); });
  };
  std::string e = err(R"({"id": "a", "arrival_s": 0, "input_tokens": 5})");
  EXPECT_NE(e.find("rec.json: request 'a': missing field 'output_tokens'"), std::string::npos) << e;
  e = err(R"({"id": "a", "arrival_s": 0, "input_tokens": "many", "output_tokens": 1})");
  EXPECT_NE(e.find("rec.json: request 'a': field 'input_tokens': expected an integer"),
            std::string::npos)
      << e;
  e = err(R"({"id": "a", "arrival_s": "soon", "input_tokens": 1, "output_tokens": 1})");
  EXPECT_NE(e.find("request 'a': field 'arrival_s'"), std::string::npos) << e;
  e = err(R"({"id": "a", "parents": "b", "input_tokens": 1, "output_tokens": 1})");
  EXPECT_NE(e.find("request 'a': field 'parents'"), std::string::npos) << e;
  e = err(R"({"id": "a", "input_tokens": 1, "output_tokens": 1})");
  EXPECT_NE(e.find("request 'a': missing field 'arrival_s'"), std::string::npos) << e;
  e = err(R"({"id": "a", "arrival_s": 0, "input_tokens": 1, "output_tokens": 1, "extra": 2})");
  EXPECT_NE(e.find("request 'a': unknown field 'extra'"), std::string::npos) << e;
  e = err(R"({"arrival_s": 0, "input_tokens": 1, "output_tokens": 1})");
  EXPECT_NE(e.find("rec.json: request #1: missing field 'id'"), std::string::npos) << e;
  e = err(R"({"id": "a", "arrival_s": 0, "input_tokens": 600, "output_tokens": 1,
              "hash_ids": [1, 2, 3]})");
  EXPECT_NE(e.find("request 'a': field 'input_tokens'"), std::string::npos) << e;
  // A number too large for a double is malformed JSON, not an exception out of the reader.
  e = err(R"({"id": "a", "arrival_s": 1e99999, "input_tokens": 1, "output_tokens": 1})");
  EXPECT_NE(e.find("rec.json: malformed JSON"), std::string::npos) << e;
  // Bytes that are not UTF-8 in what the parser last read are escaped, never printed raw.
  e = err("{\"id\": \"a\xff\", \"arrival_s\": 0, \"input_tokens\": 1, \"output_tokens\": 1}");
  EXPECT_NE(e.find("rec.json: malformed JSON"), std::string::npos) << e;
  EXPECT_EQ(e.find('\xff'), std::string::npos) << e;
  e = error_of([] { parse_session_json("{\"requests\": 3}", "rec.json"); });
  EXPECT_NE(e.find("rec.json: expected an object with a \"requests\" array"), std::string::npos)
      << e;
  // A top-level key beside "requests" (as a request's unknown field is), and no requests at all.
  e = error_of([] {
    parse_session_json(
        R"({"requests": [{"id": "a", "arrival_s": 0, "input_tokens": 1, "output_tokens": 1}],
            "bar": 2})",
        "rec.json");
  });
  EXPECT_NE(e.find("rec.json: unknown top-level key 'bar'"), std::string::npos) << e;
  e = error_of([] { parse_session_json(R"({"requests": []})", "rec.json"); });
  EXPECT_NE(e.find("rec.json: the \"requests\" array is empty"), std::string::npos) << e;
  // A key twice (the last would silently win: here an empty second list of requests).
  e = error_of([] {
    parse_session_json(
        R"({"requests": [{"id": "a", "arrival_s": 0, "input_tokens": 1, "output_tokens": 1}],
            "requests": []})",
        "rec.json");
  });
  EXPECT_NE(e.find("rec.json: key \"requests\" appears twice"), std::string::npos) << e;
  e = error_of([] {
    parse_session_json(
        R"({"requests": [{"id": "a", "arrival_s": 1e9, "input_tokens": 1, "output_tokens": 1}]})",
        "rec.json", 512, 4.7);
  });
  EXPECT_NE(e.find("rec.json: request 'a': field 'arrival_s': expected a time that, scaled by "
                   "time_scale 4.7, is within the simulator's clock"),
            std::string::npos)
      << e;
  e = err(R"({"id": "a", "arrival_s": 0, "input_tokens": 1, "output_tokens": 1,
              "output_tokens": 7})");
  EXPECT_NE(e.find("key \"output_tokens\" appears twice"), std::string::npos) << e;
}

TEST(SessionJson, FileThroughMakeWorkloadAndItsErrors) {
  const fs::path dir = servelab::test_util::temp_dir("sessions");
  {
    std::ofstream f(dir / "rec.json");
    f << R"({"requests": [{"id": "a", "arrival_s": 1, "input_tokens": 4, "output_tokens": 2},
                          {"id": "b", "parents": ["a"], "think_time_s": 0.5,
                           "input_tokens": 3, "output_tokens": 1}]})";
  }
  {
    std::ofstream f(dir / "dangling.json");
    f << R"({"requests": [{"id": "a", "arrival_s": 1, "input_tokens": 4, "output_tokens": 2},
                          {"id": "b", "parents": ["nobody"], "input_tokens": 3,
                           "output_tokens": 1}]})";
  }
  const ConfigNode root = ConfigNode::load_string(
      "workload:\n  type: sessions\n  path: rec.json\n  time_scale: 2\n", "test.yaml");
  auto w = make_workload(root.at("workload"), 1, dir.string());
  ASSERT_TRUE(w->dependent());
  const RequestSpec a = *w->next();
  EXPECT_EQ(a.arrival_ns, 2 * kS);  // time_scale 2
  w->on_finish(a.id, 3 * kS);
  EXPECT_EQ(w->next()->arrival_ns, 4 * kS);
  const ConfigNode bad =
      ConfigNode::load_string("workload:\n  type: sessions\n  path: dangling.json\n", "test.yaml");
  const std::string e = error_of([&] { make_workload(bad.at("workload"), 1, dir.string()); });
  EXPECT_NE(e.find("dangling.json: session request 'b' has parent 'nobody'"), std::string::npos)
      << e;
  fs::remove_all(dir);
}

// ---- end to end ----

using servelab::test_util::read_csv;
using servelab::test_util::temp_dir;

// "12.345678901" (the exact 9-decimal format of requests.csv) to nanoseconds.
TimeNs parse_seconds(const std::string& s) {
  const std::size_t dot = s.find('.');
  std::string frac = dot == std::string::npos ? "" : s.substr(dot + 1);
  frac.resize(9, '0');
  return std::stoll(s.substr(0, dot)) * kS + std::stoll(frac);
}

TEST(SessionRun, MultiturnChildrenArriveAtParentFinishPlusThinkAndHitTheCache) {
  const fs::path dir = temp_dir("multiturn");
  const std::string workload =
      kMultiturn + "  system_prompt: {num_prefixes: 2, length: 128, fraction: 1}\n";
  {
    std::ofstream f(dir / "exp.yaml");
    f << "name: mt\nseed: 11\nmodel: tiny\nhardware: H100-SXM\nserving:\n  block_size: 16\n"
         "  num_gpu_blocks: 256\n  max_model_len: 2048\nworkload:\n"
      << workload;
  }
  const ExperimentConfig c = load_experiment((dir / "exp.yaml").string(), {});
  RunOptions o;
  o.out_dir = (dir / "run").string();
  const RunOutput out = run_simulation(c, o);

  // The same workload again, for its DAG (same config and seed: same nodes and ids).
  const auto w = from_yaml(workload, 11);
  const auto& s = dynamic_cast<const SessionWorkload&>(*w);
  const auto rows = read_csv(dir / "run" / "requests.csv");
  ASSERT_EQ(rows.size(), s.size());
  EXPECT_EQ(out.summary.completed, static_cast<std::int64_t>(s.size()));
  std::map<RequestId, const std::map<std::string, std::string>*> by_id;
  for (const auto& r : rows) by_id[std::stoull(r.at("id"))] = &r;
  int children = 0, cached_children = 0;
  for (RequestId id = 0; id < s.size(); ++id) {
    const auto& r = *by_id.at(id);
    EXPECT_EQ(r.at("status"), "finished") << id;
    EXPECT_EQ(std::stoll(r.at("output_tokens")), s.node(id).output_tokens) << id;
    if (s.parents(id).empty()) {
      EXPECT_EQ(parse_seconds(r.at("arrival_s")), s.node(id).time_ns) << id;
      continue;
    }
    ++children;
    const RequestId parent = s.parents(id)[0];
    EXPECT_EQ(parse_seconds(r.at("arrival_s")),
              parse_seconds(by_id.at(parent)->at("finish_s")) + s.node(id).time_ns)
        << "request " << id;
    if (std::stoi(r.at("cached_tokens")) > 0) ++cached_children;
  }
  EXPECT_GT(children, 0);
  // The parent's context is in the cache when a later turn arrives (256 blocks suffice here).
  EXPECT_EQ(cached_children, children);
  EXPECT_GT(out.summary.prefix_hit_rate, 0.3);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
