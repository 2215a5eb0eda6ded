// Policy plugins: the registry (parsing, errors, catalogue) and each queue order's admission
// order on hand-built scenarios, including vLLM's priority preemption (reference
// schedulers.md section 6, scenario 25).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "core/stop_conditions.h"
#include "policies/queue_order.h"
#include "policies/registry.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "sim/run.h"

namespace servelab {
namespace {

constexpr std::uint64_t kSeed = 777;

// ---------------------------------------------------------------- registry

PolicySpec Parse(PolicyKind kind, const std::string& yaml_value) {
  const ConfigNode root = ConfigNode::load_string(
      "policies:\n  " + std::string(to_string(kind)) + ": " + yaml_value + "\n", "exp.yaml");
  return parse_policy_spec(kind, root.at("policies").at(to_string(kind)));
}

std::string ParseError(PolicyKind kind, const std::string& yaml_value) {
  try {
    Parse(kind, yaml_value);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for " << yaml_value;
  return "";
}

TEST(PolicyRegistryTest, ScalarNameTakesDefaults) {
  const PolicySpec fcfs = Parse(PolicyKind::kQueue, "fcfs");
  EXPECT_EQ(fcfs.name, "fcfs");
  EXPECT_TRUE(fcfs.params.empty());
  const PolicySpec fair = Parse(PolicyKind::kQueue, "fair");
  EXPECT_EQ(fair.get_double("input_weight"), 1.0);
  EXPECT_EQ(fair.get_double("output_weight"), 2.0);
  EXPECT_EQ(Parse(PolicyKind::kPreemption, "recompute").get_string("victim"), "last-running");
  EXPECT_EQ(Parse(PolicyKind::kQueue, "predicted-sjf").get_double("error"), 0.5);
}

TEST(PolicyRegistryTest, MappingSetsParameters) {
  const PolicySpec p = Parse(PolicyKind::kQueue, "{name: predicted-sjf, error: 0.25}");
  EXPECT_EQ(p.name, "predicted-sjf");
  EXPECT_EQ(p.get_double("error"), 0.25);
  const PolicySpec f = Parse(PolicyKind::kQueue, "{name: fair, output_weight: 4}");
  EXPECT_EQ(f.get_double("input_weight"), 1.0);
  EXPECT_EQ(f.get_double("output_weight"), 4.0);
  EXPECT_EQ(Parse(PolicyKind::kPreemption, "{name: recompute, victim: lowest-priority}")
                .get_string("victim"),
            "lowest-priority");
  EXPECT_EQ(Parse(PolicyKind::kQueue, "{name: sjf}"),
            default_policy_spec(PolicyKind::kQueue, "sjf"));
}

TEST(PolicyRegistryTest, UnknownNameListsTheAvailableOnes) {
  const std::string e = ParseError(PolicyKind::kQueue, "lifo");
  EXPECT_NE(e.find("exp.yaml:2"), std::string::npos) << e;
  EXPECT_NE(e.find("policies.queue"), std::string::npos) << e;
  EXPECT_NE(e.find("fcfs, priority, sjf, predicted-sjf, fair"), std::string::npos) << e;
  EXPECT_NE(e.find("lifo"), std::string::npos) << e;
  const std::string m = ParseError(PolicyKind::kBatch, "{name: fastserve}");
  EXPECT_NE(m.find("policies.batch.name"), std::string::npos) << m;
  EXPECT_NE(m.find("vllm, static, orca, sarathi, prefill-first"), std::string::npos) << m;
  EXPECT_NE(ParseError(PolicyKind::kPrefixCache, "lru").find("hash, radix, none"),
            std::string::npos);
  EXPECT_EQ(default_policy_spec(PolicyKind::kPrefixCache, "radix").name, "radix");
  EXPECT_THROW(default_policy_spec(PolicyKind::kAllocation, "buddy"), ConfigError);
  EXPECT_EQ(default_policy_spec(PolicyKind::kAllocation, "contiguous").get_string("reserve"),
            "max_model_len");
}

TEST(PolicyRegistryTest, BadParameterNamesTheKeyAndTheExpectedType) {
  const std::string unknown = ParseError(PolicyKind::kQueue, "{name: predicted-sjf, eror: 1}");
  EXPECT_NE(unknown.find("exp.yaml:2"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("policies.queue.eror"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("name, error"), std::string::npos) << unknown;

  const std::string type = ParseError(PolicyKind::kQueue, "{name: predicted-sjf, error: big}");
  EXPECT_NE(type.find("exp.yaml:2"), std::string::npos) << type;
  EXPECT_NE(type.find("policies.queue.error"), std::string::npos) << type;
  EXPECT_NE(type.find("a double in [0, 10]"), std::string::npos) << type;

  const std::string range = ParseError(PolicyKind::kQueue, "{name: predicted-sjf, error: -1}");
  EXPECT_NE(range.find("a double in [0, 10]"), std::string::npos) << range;

  const std::string choice =
      ParseError(PolicyKind::kPreemption, "{name: recompute, victim: youngest}");
  EXPECT_NE(choice.find("policies.preemption.victim"), std::string::npos) << choice;
  EXPECT_NE(choice.find("one of last-running, lowest-priority"), std::string::npos) << choice;

  // A parameter of another plugin is unknown here; a mapping needs its name.
  EXPECT_NE(ParseError(PolicyKind::kQueue, "{name: fcfs, error: 1}").find("policies.queue.error"),
            std::string::npos);
  EXPECT_NE(ParseError(PolicyKind::kQueue, "{error: 1}").find("'policies.queue.name' is required"),
            std::string::npos);
  EXPECT_NE(ParseError(PolicyKind::kQueue, "[fcfs]").find("policies.queue"), std::string::npos);
}

TEST(PolicyRegistryTest, CatalogueListsEveryPlugin) {
  const std::string cat = format_catalogue();
  std::size_t plugins = 0;
  for (PolicyKind kind : kAllPolicyKinds) {
    EXPECT_NE(cat.find(std::string(to_string(kind)) + ":\n"), std::string::npos) << to_string(kind);
    for (const PluginInfo* p : PolicyRegistry::instance().list(kind)) {
      ++plugins;
      EXPECT_NE(cat.find("  " + p->name + "\n"), std::string::npos) << p->name;
      EXPECT_NE(cat.find(p->description), std::string::npos) << p->name;
      EXPECT_NE(cat.find("origin: " + p->origin), std::string::npos) << p->name;
      EXPECT_FALSE(p->description.empty());
      EXPECT_FALSE(p->origin.empty());
      for (const ParamInfo& q : p->params) {
        EXPECT_NE(cat.find("      " + q.name + " ("), std::string::npos) << q.name;
      }
    }
  }
  // vllm, static, orca, sarathi, prefill-first, sglang, preemptive; 11 queue orders; recompute,
  // swap, auto; hash, radix, none; paged, contiguous; admit-all, queue-length, predicted-wait;
  // off, queue-length
  EXPECT_EQ(plugins, 31u);
  EXPECT_NE(cat.find("SGLang (RadixAttention)"), std::string::npos) << cat;
  EXPECT_NE(cat.find("error (a double in [0, 10], default 0.5)"), std::string::npos) << cat;
  EXPECT_NE(cat.find("victim (one of last-running, lowest-priority, fewest-computed, most-blocks, "
                     "default last-running)"),
            std::string::npos)
      << cat;
  EXPECT_EQ(format_policy_spec(Parse(PolicyKind::kQueue, "{name: fair, output_weight: 3}")),
            "{name: fair, input_weight: 1, output_weight: 3}");
  EXPECT_EQ(format_policy_spec(Parse(PolicyKind::kQueue, "fcfs")), "fcfs");
  EXPECT_EQ(format_policy_spec(Parse(PolicyKind::kQueue, "sjf")), "{name: sjf, max_wait_s: 0}");
}

// ---------------------------------------------------------------- queue orders, alone

// Requests owned by the test; queues only hold pointers.
class Pool {
 public:
  Request* Add(RequestId id, TimeNs arrival, std::int32_t max_out, std::int32_t priority = 0,
               std::uint32_t tenant = 0, std::int32_t prompt = 100) {
    RequestSpec s = make_request(
        id, arrival, {{unique_content_id(kSeed, id), 0, static_cast<std::uint32_t>(prompt)}},
        max_out);
    s.priority = priority;
    s.tenant = tenant;
    reqs_.push_back(std::make_unique<Request>(std::move(s)));
    return reqs_.back().get();
  }

 private:
  std::vector<std::unique_ptr<Request>> reqs_;
};

std::unique_ptr<WaitingQueue> Queue(const std::string& yaml, std::uint64_t seed = kSeed) {
  return make_waiting_queue(Parse(PolicyKind::kQueue, yaml), seed);
}

std::vector<RequestId> Ids(const WaitingQueue& q) {
  std::vector<RequestId> ids;
  for (const Request* r : q.snapshot()) ids.push_back(r->id());
  return ids;
}

// Pops everything, reporting each admission's prompt as served prefill tokens (as the
// scheduler does), and returns the admission order.
std::vector<RequestId> Drain(WaitingQueue& q) {
  std::vector<RequestId> ids;
  while (!q.empty()) {
    Request* r = q.front();
    EXPECT_EQ(q.front(), r);  // stable
    q.pop_front();
    q.on_tokens_scheduled(*r, r->spec.prompt_len, 0);
    ids.push_back(r->id());
  }
  return ids;
}

TEST(PolicyQueueOrderTest, FcfsKeepsArrivalOrderAndPutsVictimsFirst) {
  Pool p;
  auto q = Queue("fcfs");
  for (RequestId id = 0; id < 4; ++id) q->push_back(p.Add(id, 10 - id, 10, 3 - id));
  q->push_front(p.Add(9, 0, 10));
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{9, 0, 1, 2, 3}));
  EXPECT_EQ(q->size(), 5u);
  EXPECT_EQ(Drain(*q), (std::vector<RequestId>{9, 0, 1, 2, 3}));
}

// edf: arrival + the class's TTFT objective, then arrival, then id. Classes 0 (1 s) and 1 (600 s);
// class 2 has none (kNoTtftTarget) and class 3 is past the table's end: both after every
// deadline, in arrival order. A request whose deadline passed still goes first.
TEST(PolicyQueueOrderTest, EdfOrdersByTtftDeadline) {
  constexpr TimeNs kS = kNsPerS;
  const std::vector<TimeNs> targets = {1 * kS, 600 * kS, kNoTtftTarget};
  Pool p;
  auto q = make_waiting_queue(Parse(PolicyKind::kQueue, "edf"), kSeed, targets);
  EXPECT_STREQ(q->name(), "edf");
  // (id: class, arrival s) = 0: (1, 0) deadline 600, 1: (0, 10) 11, 2: (0, 700) 701,
  // 3: (2, 0) none, 4: (1, 100) 700, 5: (3, 1) none, 6: (0, 599) 600 (ties 0: arrival first).
  const std::uint32_t cls[] = {1, 0, 0, 2, 1, 3, 0};
  const TimeNs arrival_s[] = {0, 10, 700, 0, 100, 1, 599};
  std::vector<Request*> r;
  for (RequestId id = 0; id < 7; ++id) {
    r.push_back(p.Add(id, arrival_s[id] * kS, 10));
    r.back()->spec.request_class = cls[id];
    q->push_back(r.back());
  }
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{1, 0, 6, 4, 2, 3, 5}));
  q->pop_front();
  q->pop_front();
  q->push_front(r[0]);  // preempted: back at its deadline (600 s), before 6's (arrival breaks it)
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{0, 6, 4, 2, 3, 5}));
  EXPECT_EQ(Drain(*q), (std::vector<RequestId>{0, 6, 4, 2, 3, 5}));
  // Without targets (a queue built outside an experiment) every class has none: arrival order.
  auto plain = Queue("edf");
  for (Request* x : r) plain->push_back(x);
  EXPECT_EQ(Ids(*plain), (std::vector<RequestId>{0, 3, 5, 1, 4, 6, 2}));
  // The deadline saturates instead of overflowing.
  RequestSpec late = r[0]->spec;
  late.arrival_ns = std::numeric_limits<TimeNs>::max() - 5;
  EXPECT_EQ(ttft_deadline(late, targets), std::numeric_limits<TimeNs>::max());
  EXPECT_EQ(ttft_deadline(r[1]->spec, targets), 11 * kS);
}

// edf with late: demote. At each step start (reorder), a waiting request without its first token
// whose deadline is less than slack_ms away joins the best-effort tier (arrival order, with the
// classes that have no objective); a request that has its first token keeps its place.
TEST(PolicyQueueOrderTest, EdfDemotesLateRequestsBehindTheOnTimeOnes) {
  constexpr TimeNs kS = kNsPerS;
  const std::vector<TimeNs> targets = {1 * kS, 600 * kS, kNoTtftTarget};
  Pool p;
  auto q =
      make_waiting_queue(Parse(PolicyKind::kQueue, "{name: edf, late: demote}"), kSeed, targets);
  EXPECT_STREQ(q->name(), "edf");
  ASSERT_TRUE(q->reorders());
  // (id: class, arrival s, deadline s) = 0: (1, 0, 600), 1: (0, 10, 11), 2: (2, 5, none),
  // 3: (0, 12, 13), 4: (1, 3, 603).
  const std::uint32_t cls[] = {1, 0, 2, 0, 1};
  const TimeNs arrival_s[] = {0, 10, 5, 12, 3};
  std::vector<Request*> r;
  for (RequestId id = 0; id < 5; ++id) {
    r.push_back(p.Add(id, arrival_s[id] * kS, 10));
    r.back()->spec.request_class = cls[id];
    q->push_back(r.back());
  }
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{1, 3, 0, 4, 2}));
  q->reorder(nullptr, 11 * kS);  // 1's deadline is now, not passed: nothing moves
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{1, 3, 0, 4, 2}));
  q->reorder(nullptr, 11 * kS + 1);  // 1 is late: after 0 and 4, by arrival among 2 (5 s)
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{3, 0, 4, 2, 1}));
  // A request back from preemption with its first token keeps its (past) deadline: first.
  q->pop_front();
  r[3]->first_token_ns = 12 * kS;
  q->push_front(r[3]);
  q->reorder(nullptr, 700 * kS);  // 0 and 4 are late now; 3 is not demoted
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{3, 0, 4, 2, 1}));
  EXPECT_EQ(Drain(*q), (std::vector<RequestId>{3, 0, 4, 2, 1}));
  // A demoted request pushed again returns at its deadline and is demoted at the next step.
  q->push_back(r[1]);
  q->push_back(r[2]);
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{1, 2}));
  q->reorder(nullptr, 20 * kS);
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{2, 1}));
  EXPECT_TRUE(q->erase(r[1]));
  EXPECT_EQ(Drain(*q), (std::vector<RequestId>{2}));

  // slack_ms: late once the deadline is less than that far away.
  auto s = make_waiting_queue(Parse(PolicyKind::kQueue, "{name: edf, late: demote, slack_ms: 500}"),
                              kSeed, targets);
  s->push_back(r[0]);
  s->push_back(r[1]);
  s->reorder(nullptr, 10 * kS + 499'999'999);  // 1 s deadline, 500 ms + 1 ns left: kept
  EXPECT_EQ(Ids(*s), (std::vector<RequestId>{1, 0}));
  s->reorder(nullptr, 10 * kS + 500'000'001);
  EXPECT_EQ(Ids(*s), (std::vector<RequestId>{0, 1}));

  // The default keeps late requests first and never reorders; slack_ms alone is refused.
  EXPECT_FALSE(make_waiting_queue(Parse(PolicyKind::kQueue, "edf"), kSeed, targets)->reorders());
  SchedulerConfig sc;
  PolicyTarget t{&sc, nullptr, kSeed};
  try {
    build_policy(PolicyKind::kQueue, Parse(PolicyKind::kQueue, "{name: edf, slack_ms: 5}"), t);
    ADD_FAILURE() << "slack_ms without late: demote was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("policies.queue: edf: slack_ms needs late: demote"),
              std::string::npos)
        << e.what();
  }
  // Each parameter in range, the product not: refused with the experiment (it was an internal
  // error when the run built its queue).
  try {
    build_policy(PolicyKind::kQueue, Parse(PolicyKind::kQueue, "{name: mlfq, levels: 64}"), t);
    ADD_FAILURE() << "mlfq with a last quantum past 292 years was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("policies.queue: mlfq: quantum_ms * growth^(levels - 1) "
                                         "is too long"),
              std::string::npos)
        << e.what();
  }
  const std::string bad = ParseError(PolicyKind::kQueue, "{name: edf, late: drop}");
  EXPECT_NE(bad.find("'policies.queue.late': expected one of keep, demote, got 'drop'"),
            std::string::npos)
      << bad;
}

TEST(PolicyQueueOrderTest, PriorityOrdersByPriorityArrivalThenId) {
  Pool p;
  auto q = Queue("priority");
  // (id: priority, arrival) = 0: (2, 0), 1: (0, 3), 2: (1, 0), 3: (0, 1), 4: (2, 0), 5: (1, 0).
  const std::int32_t prio[] = {2, 0, 1, 0, 2, 1};
  const TimeNs arrival[] = {0, 3, 0, 1, 0, 0};
  std::vector<Request*> r;
  for (RequestId id = 0; id < 6; ++id) {
    r.push_back(p.Add(id, arrival[id], 10, prio[id]));
    q->push_back(r.back());
  }
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{3, 1, 2, 5, 0, 4}));
  EXPECT_EQ(q->front()->id(), 3u);
  q->pop_front();
  EXPECT_EQ(q->front()->id(), 1u);
  q->pop_front();
  // A preempted request has no head to go to: it is re-inserted by its key, so 1 (priority 0)
  // goes first again while 0 (priority 2) would go behind 5.
  q->push_front(r[1]);
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{1, 2, 5, 0, 4}));
  EXPECT_TRUE(q->erase(r[5]));
  EXPECT_FALSE(q->erase(r[5]));
  EXPECT_EQ(Drain(*q), (std::vector<RequestId>{1, 2, 0, 4}));
}

TEST(PolicyQueueOrderTest, SjfOrdersByRemainingOutput) {
  Pool p;
  auto q = Queue("sjf");
  q->push_back(p.Add(0, 0, 50));
  q->push_back(p.Add(1, 0, 10));
  q->push_back(p.Add(2, 0, 30));
  q->push_back(p.Add(3, 2, 10));  // same length as 1, later
  q->push_back(p.Add(5, 0, 10));  // same length and arrival as 1, larger id
  // A preempted request keeps its outputs: 40 - 35 = 5 tokens left, so it goes first.
  Request* resumed = p.Add(4, 0, 40);
  resumed->output_tokens.assign(35, 7);
  resumed->status = RequestStatus::kPreempted;
  q->push_front(resumed);
  EXPECT_EQ(Ids(*q), (std::vector<RequestId>{4, 1, 5, 3, 2, 0}));
  // erase() finds a request even after its outputs (hence its key) changed.
  resumed->output_tokens.push_back(7);
  EXPECT_TRUE(q->erase(resumed));
  EXPECT_EQ(Drain(*q), (std::vector<RequestId>{1, 5, 3, 2, 0}));
}

// The oracle's length is the simulated model's: a request ending at its simulated EOS under a
// larger cap (sampling.max_tokens) is ordered by where it ends, min_tokens and ignore_eos
// included; sim_output_length follows check_stop.
TEST(PolicyQueueOrderTest, SjfUsesTheSimulatedLengthUnderACap) {
  Pool p;
  const auto stopping = [&](RequestId id, std::int32_t eos_at, std::int32_t min_tokens = 0,
                            bool ignore_eos = false) {
    Request* r = p.Add(id, 0, 400);
    auto stop = std::make_shared<StopConditions>();
    stop->eos_token_id = kSimEosToken;
    stop->sim_eos_at = eos_at;
    stop->min_tokens = min_tokens;
    stop->ignore_eos = ignore_eos;
    r->spec.stop = stop;
    return r;
  };
  Request* a = stopping(0, 90);
  Request* b = stopping(1, 20);
  Request* c = stopping(2, 20, /*min_tokens=*/60);
  Request* d = stopping(3, 5, 0, /*ignore_eos=*/true);
  Request* e = p.Add(4, 0, 70);  // no stop conditions: its cap
  EXPECT_EQ(sim_output_length(a->spec), 90);
  EXPECT_EQ(sim_output_length(b->spec), 20);
  EXPECT_EQ(sim_output_length(c->spec), 61);  // EOS is masked for outputs 1..60
  EXPECT_EQ(sim_output_length(d->spec), 400);
  EXPECT_EQ(sim_output_length(e->spec), 70);
  for (const char* spec : {"sjf", "{name: predicted-sjf, error: 0}"}) {
    SCOPED_TRACE(spec);
    auto q = Queue(spec);
    for (Request* r : {a, b, c, d, e}) q->push_back(r);
    EXPECT_EQ(Ids(*q), (std::vector<RequestId>{1, 2, 4, 0, 3}));
  }
}

// Starvation prevention (max_wait_s): at each step start, a request that has waited longer than
// max_wait_s goes ahead of the others, in arrival order; without it (the default) nothing
// reorders.
TEST(PolicyQueueOrderTest, SjfWithMaxWaitPromotesTheLongWaiting) {
  constexpr TimeNs kS = kNsPerS;
  Pool p;
  EXPECT_FALSE(Queue("sjf")->reorders());
  for (const char* spec :
       {"{name: sjf, max_wait_s: 10}", "{name: predicted-sjf, error: 0, max_wait_s: 10}"}) {
    SCOPED_TRACE(spec);
    auto q = Queue(spec);
    ASSERT_TRUE(q->reorders());
    // (id: arrival s, output tokens) = 0: (0, 50), 1: (5, 10), 2: (1, 30), 3: (20, 5).
    std::vector<Request*> r = {p.Add(100, 0, 50), p.Add(101, 5 * kS, 10), p.Add(102, kS, 30),
                               p.Add(103, 20 * kS, 5)};
    for (Request* x : r) q->push_back(x);
    EXPECT_EQ(Ids(*q), (std::vector<RequestId>{103, 101, 102, 100}));
    q->reorder(nullptr, 10 * kS);  // 100 has waited exactly 10 s: not longer
    EXPECT_EQ(Ids(*q), (std::vector<RequestId>{103, 101, 102, 100}));
    q->reorder(nullptr, 15 * kS);  // 100 and 102 (arrived at 0 and 1 s) promoted
    EXPECT_EQ(Ids(*q), (std::vector<RequestId>{100, 102, 103, 101}));
    q->reorder(nullptr, 16 * kS);  // 101 (5 s) too
    EXPECT_EQ(Ids(*q), (std::vector<RequestId>{100, 102, 101, 103}));
    // A promoted request popped and pushed again (preempted) is promoted again at the next step.
    q->pop_front();
    q->push_front(r[0]);
    EXPECT_EQ(Ids(*q), (std::vector<RequestId>{102, 101, 103, 100}));
    q->reorder(nullptr, 16 * kS);
    EXPECT_EQ(Ids(*q), (std::vector<RequestId>{100, 102, 101, 103}));
    EXPECT_TRUE(q->erase(r[2]));
    EXPECT_FALSE(q->erase(r[2]));
    EXPECT_EQ(q->size(), 3u);
    EXPECT_EQ(Drain(*q), (std::vector<RequestId>{100, 101, 103}));
  }
}

TEST(PolicyQueueOrderTest, PredictedSjfWithoutErrorIsSjf) {
  Pool p;
  auto sjf = Queue("sjf");
  auto predicted = Queue("{name: predicted-sjf, error: 0}");
  Rng rng(5);
  for (RequestId id = 0; id < 200; ++id) {
    Request* r =
        p.Add(id, rng.uniform_int(0, 20), static_cast<std::int32_t>(rng.uniform_int(1, 50)));
    sjf->push_back(r);
    predicted->push_back(r);
  }
  EXPECT_EQ(Ids(*predicted), Ids(*sjf));
  EXPECT_EQ(Drain(*predicted), Drain(*sjf));
  EXPECT_EQ(predicted_output_tokens(kSeed, 0.0, 17, 123), 123.0);
}

TEST(PolicyQueueOrderTest, PredictedSjfIsDeterministicPerSeedAndNoisy) {
  // One lognormal factor exp(error * z) per (seed, id): it scales any true length alike,
  // `error` scales its logarithm, and another id or seed draws another z.
  const double p100 = predicted_output_tokens(kSeed, 0.5, 17, 100);
  EXPECT_DOUBLE_EQ(predicted_output_tokens(kSeed, 0.5, 17, 200), 2 * p100);
  EXPECT_NEAR(std::log(predicted_output_tokens(kSeed, 1.0, 17, 100) / 100),
              2 * std::log(p100 / 100), 1e-9);
  EXPECT_NE(predicted_output_tokens(kSeed, 0.5, 18, 100), p100);
  EXPECT_NE(p100, 100.0);
  EXPECT_NE(predicted_output_tokens(kSeed, 0.5, 17, 100),
            predicted_output_tokens(kSeed + 1, 0.5, 17, 100));
  Pool p;
  std::vector<Request*> reqs;
  for (RequestId id = 0; id < 100; ++id) {
    reqs.push_back(p.Add(id, 0, static_cast<std::int32_t>(1 + id % 10)));
  }
  auto a = Queue("{name: predicted-sjf, error: 1}");
  auto b = Queue("{name: predicted-sjf, error: 1}");
  auto c = Queue("{name: predicted-sjf, error: 1}", kSeed + 1);
  auto sjf = Queue("sjf");
  for (Request* r : reqs) a->push_back(r), c->push_back(r), sjf->push_back(r);
  for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) b->push_back(*it);
  EXPECT_EQ(Ids(*a), Ids(*b));
  EXPECT_NE(Ids(*a), Ids(*c));
  EXPECT_NE(Ids(*a), Ids(*sjf));
  // The order is by predicted remaining length.
  const std::vector<Request*> order = a->snapshot();
  for (std::size_t k = 1; k < order.size(); ++k) {
    EXPECT_LE(
        predicted_output_tokens(kSeed, 1, order[k - 1]->id(), order[k - 1]->spec.max_output_tokens),
        predicted_output_tokens(kSeed, 1, order[k]->id(), order[k]->spec.max_output_tokens));
  }
}

// VTC, by hand (input weight 1, output weight 2, prompts of 100 tokens; ties go to the smaller
// tenant id). Tenant A (0) floods with ids 0-5, tenant B (1) sends ids 6 and 7, all at once.
//   counters A 0, B 0: A admits 0 (A 100); B 6 (B 100); tie: A 1 (A 200); B 7 (B 200, B idle);
//   then A alone: 2, 3, 4, 5.
TEST(PolicyQueueOrderTest, FairAlternatesTenantsByVirtualTokenCounter) {
  Pool p;
  auto q = Queue("fair");
  for (RequestId id = 0; id < 6; ++id) q->push_back(p.Add(id, 0, 10, 0, /*tenant=*/0));
  for (RequestId id = 6; id < 8; ++id) q->push_back(p.Add(id, 0, 10, 0, /*tenant=*/1));
  EXPECT_EQ(q->size(), 8u);
  EXPECT_EQ(Drain(*q), (std::vector<RequestId>{0, 6, 1, 7, 2, 3, 4, 5}));
}

// A tenant that becomes backlogged is lifted to the smallest backlogged counter, so idling
// banks no credit: A (ids 0-3) admits 0 and 1 (A 200); then B arrives with 10, 11 and is lifted
// to 200. Tie: A 2 (A 300); B 10 (B 300); tie: A 3 (A 400, A idle); B 11.
// Decode tokens count double: after A's running requests decode 60 tokens (A += 120) while B
// waits, B goes first.
TEST(PolicyQueueOrderTest, FairLiftsANewlyBackloggedTenantAndCountsDecodeTokens) {
  Pool p;
  auto q = Queue("fair");
  for (RequestId id = 0; id < 4; ++id) q->push_back(p.Add(id, 0, 10, 0, 0));
  std::vector<RequestId> order;
  for (int k = 0; k < 2; ++k) {
    Request* r = q->front();
    q->pop_front();
    q->on_tokens_scheduled(*r, 100, 0);
    order.push_back(r->id());
  }
  q->push_back(p.Add(10, 5, 10, 0, 1));
  q->push_back(p.Add(11, 5, 10, 0, 1));
  for (RequestId id : Drain(*q)) order.push_back(id);
  EXPECT_EQ(order, (std::vector<RequestId>{0, 1, 2, 10, 3, 11}));

  // Decode accounting: both backlogged at equal counters, A's running request decodes.
  auto f = Queue("fair");
  Request* a_running = p.Add(20, 0, 10, 0, 0);
  f->push_back(a_running);
  f->pop_front();
  f->on_tokens_scheduled(*a_running, 100, 0);  // A 100 (and idle)
  f->push_back(p.Add(21, 1, 10, 0, 1));        // B lifted to the last admitted counter: 100
  f->push_back(p.Add(22, 1, 10, 0, 0));        // A 100, backlogged
  EXPECT_EQ(Ids(*f), (std::vector<RequestId>{22, 21}));  // tie: A first
  f->on_tokens_scheduled(*a_running, 0, 1);              // A 102
  EXPECT_EQ(Ids(*f), (std::vector<RequestId>{21, 22}));
  f->on_tokens_scheduled(*a_running, 0, -1);  // a refund (priority preemption) undoes it
  EXPECT_EQ(Ids(*f), (std::vector<RequestId>{22, 21}));
}

// ---------------------------------------------------------------- through the scheduler

struct Entry {
  RequestId id;
  std::int32_t first, n;
  friend bool operator==(const Entry&, const Entry&) = default;
};
std::ostream& operator<<(std::ostream& os, const Entry& e) {
  return os << "{id " << e.id << ", first " << e.first << ", n " << e.n << "}";
}

class Harness {
 public:
  Harness(const SchedulerConfig& c, std::int32_t num_blocks, const std::string& queue)
      : pool(num_blocks),
        kv(pool, c.block_size, c.max_model_len, c.enable_prefix_caching),
        sched(c, kv, nullptr, Queue(queue)) {}
  std::vector<Entry> Step(TimeNs now, std::int32_t token = 100) {
    const StepPlan& plan = sched.schedule(now);
    std::vector<Entry> out;
    StepResult res;
    res.duration_ns = 1;
    for (const ScheduledRequest& e : plan.requests) {
      out.push_back({e.id, e.first_token, e.num_tokens});
      res.sampled_tokens.push_back(e.samples ? token : -1);
    }
    preempted.assign(plan.preempted.begin(), plan.preempted.end());
    sched.complete(res, now);
    pool.check_invariants();
    return out;
  }
  std::vector<RequestId> RunningIds() const {
    std::vector<RequestId> ids;
    for (const Request* r : sched.running()) ids.push_back(r->id());
    return ids;
  }
  std::vector<RequestId> WaitingIds() const {
    std::vector<RequestId> ids;
    for (const Request* r : sched.waiting()) ids.push_back(r->id());
    return ids;
  }

  BlockPool pool;
  KvCacheManager kv;
  Scheduler sched;
  std::vector<RequestId> preempted;
};

SchedulerConfig Scenario25Config(std::string victim) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 200;
  c.max_num_seqs = 2;
  c.block_size = 16;
  c.enable_prefix_caching = false;
  use_policy(c, PolicyKind::kVictim, victim);
  return c;
}

RequestSpec Scenario25Request(RequestId id, TimeNs arrival, std::int32_t len, std::int32_t max_out,
                              std::int32_t priority) {
  RequestSpec s = make_request(
      id, arrival, {{unique_content_id(kSeed, id), 0, static_cast<std::uint32_t>(len)}}, max_out);
  s.priority = priority;
  return s;
}

// Scenario 25 (test_priority_scheduling_preemption_and_resumption_when_out_of_kv): 5 blocks (4
// usable, 64 tokens), bs 16, max_num_seqs 2, budget 200. req_low (id 0, priority 1, 30 tokens)
// runs and decodes; req_high (id 1, priority 0, 32 tokens) is admitted and takes the last two
// blocks. In step 3 req_low is scheduled first (32 slots, fine), then req_high needs a 3rd
// block: the victim is req_low, already scheduled, whose tokens are refunded. After req_high
// finishes, req_low resumes with all 32 tokens (30 prompt + 2 decoded).
TEST(PolicyPriorityPreemptionTest, Scenario25LowPriorityVictimIsRefundedThenResumes) {
  Harness h(Scenario25Config("lowest-priority"), 5, "priority");
  h.sched.add_request(Scenario25Request(0, 0, 30, 10, 1), 0);
  EXPECT_EQ(h.Step(0), (std::vector<Entry>{{0, 0, 30}}));
  h.sched.add_request(Scenario25Request(1, 1, 32, 2, 0), 1);
  EXPECT_EQ(h.Step(1), (std::vector<Entry>{{0, 30, 1}, {1, 0, 32}}));
  EXPECT_EQ(h.pool.num_free_blocks(), 0);

  EXPECT_EQ(h.Step(2), (std::vector<Entry>{{1, 32, 1}}));  // only req_high
  EXPECT_EQ(h.preempted, (std::vector<RequestId>{0}));
  EXPECT_EQ(h.sched.num_waiting(), 1u);
  // req_high finished with its 2nd token in that step; req_low waits, its refund undone.
  EXPECT_EQ(h.sched.num_running(), 0u);
  const Request* low = h.sched.waiting().front();
  EXPECT_EQ(low->status, RequestStatus::kPreempted);
  EXPECT_EQ(low->num_computed_tokens, 0);
  EXPECT_EQ(low->num_computed_total(), 31);  // 30 + 1: the refunded token is not counted
  EXPECT_EQ(low->max_computed_tokens(), 31);
  EXPECT_EQ(h.sched.counters().num_preemptions, 1);
  EXPECT_EQ(h.sched.counters().num_finished, 1);

  // Step 4 resumes req_low with all 32 tokens; the last one is the decoded token 100.
  EXPECT_EQ(h.Step(3), (std::vector<Entry>{{0, 0, 32}}));
  ASSERT_EQ(h.sched.running().size(), 1u);
  const Request* resumed = h.sched.running().front();
  EXPECT_EQ(resumed->num_tokens(), 33);  // + the token sampled at the end of step 4
  EXPECT_EQ(resumed->output_tokens, (std::vector<std::int32_t>{100, 100, 100}));
  EXPECT_EQ(resumed->num_recomputed_tokens, 31);
  EXPECT_EQ(h.sched.counters().num_recomputed_tokens, 31);
}

// The same setup under FCFS: running.pop() is req_high, which preempts itself.
TEST(PolicyPriorityPreemptionTest, Scenario25UnderFcfsTheNewcomerPreemptsItself) {
  Harness h(Scenario25Config("last-running"), 5, "fcfs");
  h.sched.add_request(Scenario25Request(0, 0, 30, 10, 1), 0);
  h.Step(0);
  h.sched.add_request(Scenario25Request(1, 1, 32, 2, 0), 1);
  h.Step(1);
  EXPECT_EQ(h.Step(2), (std::vector<Entry>{{0, 31, 1}}));
  EXPECT_EQ(h.preempted, (std::vector<RequestId>{1}));
  EXPECT_EQ(h.RunningIds(), (std::vector<RequestId>{0}));
  EXPECT_EQ(h.WaitingIds(), (std::vector<RequestId>{1}));
}

// When the lowest-priority victim is the request being scheduled and nothing was scheduled
// before it, the pass is empty; the scheduler schedules again at once (vLLM's engine loop would
// run an empty step), so a plan is empty only when nothing can run.
TEST(PolicyPriorityPreemptionTest, SelfPreemptionAtTheHeadReschedulesTheOthers) {
  Harness h(Scenario25Config("lowest-priority"), 5, "priority");
  // Low priority first in the running list, high priority second.
  h.sched.add_request(Scenario25Request(0, 0, 31, 10, 1), 0);
  h.Step(0);  // 0: 31 prompt, 1 output -> 32 tokens, 2 blocks full
  h.sched.add_request(Scenario25Request(1, 1, 20, 10, 0), 1);
  EXPECT_EQ(h.Step(1), (std::vector<Entry>{{0, 31, 1}, {1, 0, 20}}));
  // 0 needs a 3rd block for token 33; 1 holds 2 blocks; none free. 0 is its own victim, the
  // plan is empty, and a second pass schedules 1 (admitting nobody: 0 stays waiting).
  EXPECT_EQ(h.Step(2), (std::vector<Entry>{{1, 20, 1}}));
  EXPECT_EQ(h.preempted, (std::vector<RequestId>{0}));
  EXPECT_EQ(h.RunningIds(), (std::vector<RequestId>{1}));
  EXPECT_EQ(h.WaitingIds(), (std::vector<RequestId>{0}));
}

// Admission order through the scheduler: one seat, so requests run one at a time in the
// queue's order.
std::vector<RequestId> FinishOrder(const std::string& queue) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 512;
  c.max_num_seqs = 1;
  c.enable_prefix_caching = false;
  Harness h(c, 200, queue);
  const std::int32_t out_len[] = {8, 2, 5, 1, 3};
  const std::int32_t prio[] = {1, 2, 0, 1, 0};
  const std::uint32_t tenant[] = {0, 0, 0, 1, 1};
  for (RequestId id = 0; id < 5; ++id) {
    RequestSpec s = Scenario25Request(id, 0, 10, out_len[id], prio[id]);
    s.tenant = tenant[id];
    h.sched.add_request(std::move(s), 0);
  }
  std::vector<RequestId> order;
  for (TimeNs t = 0; h.sched.has_unfinished() && t < 1000; ++t) {
    for (const Entry& e : h.Step(t)) {
      if (e.first == 0) order.push_back(e.id);  // first scheduling = admission
    }
  }
  return order;
}

TEST(PolicyQueueOrderSchedulerTest, AdmissionOrderFollowsTheQueue) {
  EXPECT_EQ(FinishOrder("fcfs"), (std::vector<RequestId>{0, 1, 2, 3, 4}));
  EXPECT_EQ(FinishOrder("priority"), (std::vector<RequestId>{2, 4, 0, 3, 1}));
  EXPECT_EQ(FinishOrder("sjf"), (std::vector<RequestId>{3, 1, 4, 2, 0}));
  EXPECT_EQ(FinishOrder("{name: predicted-sjf, error: 0}"), FinishOrder("sjf"));
  // VTC: A (0, 1, 2) and B (3, 4), both counters 0; the tie goes to A: 0 runs alone, 10
  // prefill + 7 decodes * 2 = A 24. Then B (0 < 24): 3 (B 10, its one output comes with the
  // prefill), 4 (B 20 + 2 decodes * 2 = 24, B idle). Then A: 1, 2.
  EXPECT_EQ(FinishOrder("fair"), (std::vector<RequestId>{0, 3, 4, 1, 2}));
}

// ---------------------------------------------------------------- through an experiment

const std::string kBurst = servelab_home().string() + "/experiments/burst.yaml";

TEST(PolicyExperimentTest, PoliciesSectionReachesTheSchedulerAndTheResolvedConfig) {
  const ExperimentConfig c =
      load_experiment(kBurst, {"policies.queue={name: predicted-sjf, error: 0.25}",
                               "policies.preemption={name: recompute, victim: lowest-priority}",
                               "policies.prefix_cache=none"});
  EXPECT_EQ(c.policies.queue.name, "predicted-sjf");
  EXPECT_EQ(c.policies.queue.get_double("error"), 0.25);
  ASSERT_NE(c.scheduler.victim, nullptr);
  EXPECT_EQ(c.scheduler.victim->name(), "lowest-priority");
  EXPECT_FALSE(c.scheduler.enable_prefix_caching);
  const std::string yaml = resolved_config_yaml(c, {});
  EXPECT_NE(yaml.find("  batch: vllm\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  queue: {name: predicted-sjf, error: 0.25, max_wait_s: 0}\n"),
            std::string::npos)
      << yaml;
  EXPECT_NE(
      yaml.find("  preemption: {name: recompute, max_preemptions: 0, victim: lowest-priority}\n"),
      std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("  prefix_cache: none\n"), std::string::npos) << yaml;
  EXPECT_THROW(load_experiment(kBurst, {"policies.queue=lifo"}), ConfigError);
  EXPECT_THROW(load_experiment(kBurst, {"policies.queue={name: fair, weight: 1}"}), ConfigError);
}

// vLLM's chunking keys beside a formation that would ignore them are errors naming the key and
// what chunks there; the resolved config of such a run leaves them out, so it runs again.
TEST(PolicyExperimentTest, ChunkingKeysOfAnotherFormationAreRefused) {
  const auto error = [](const std::vector<std::string>& overrides) {
    try {
      load_experiment(kBurst, overrides);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error({"policies.batch=sglang", "serving.enable_chunked_prefill=false"})
                .find("key 'serving.enable_chunked_prefill': applies to policies.batch vllm and "
                      "preemptive (vLLM's chunking), not 'sglang'; sglang chunks by its "
                      "chunked_prefill_size parameter"),
            std::string::npos);
  EXPECT_NE(error({"policies.batch={name: sarathi, chunk_size: 256}",
                   "serving.long_prefill_token_threshold=32"})
                .find("sarathi chunks by its chunk_size parameter"),
            std::string::npos);
  EXPECT_NE(error({"policies.batch=orca", "serving.enable_chunked_prefill=true"})
                .find("'orca' never chunks a prompt"),
            std::string::npos);
  // A value saying what the formation does anyway is a record (vLLM v0's setting beside
  // prefill-first).
  EXPECT_EQ(error({"policies.batch=prefill-first", "serving.enable_chunked_prefill=false",
                   "serving.long_prefill_token_threshold=0"}),
            "accepted");
  EXPECT_EQ(error({"policies.batch=sglang", "serving.enable_chunked_prefill=true"}), "accepted");
  EXPECT_EQ(error({"policies.batch=preemptive", "policies.queue=sjf",
                   "serving.long_prefill_token_threshold=32"}),
            "accepted");
  const ExperimentConfig sglang = load_experiment(kBurst, {"policies.batch=sglang"});
  const std::string yaml = resolved_config_yaml(sglang, {});
  EXPECT_EQ(yaml.find("enable_chunked_prefill"), std::string::npos) << yaml;
  EXPECT_NE(resolved_config_yaml(load_experiment(kBurst, {}), {}).find("enable_chunked_prefill"),
            std::string::npos);
}

// Every queue order runs the bursty experiment to the end, deterministically. Shortest-first
// shows its trade-off against arrival order: a lower median TTFT, a worse maximum (long
// requests wait behind every shorter one).
TEST(PolicyExperimentTest, EveryQueueOrderRunsDeterministically) {
  RunOptions o;
  o.write_files = false;
  DistributionSummary fcfs_ttft, sjf_ttft;
  for (const char* queue : {"fcfs", "priority", "sjf", "predicted-sjf", "fair", "lpm", "dfs-weight",
                            "lof", "random", "mlfq"}) {
    SCOPED_TRACE(queue);
    const ExperimentConfig c = load_experiment(
        kBurst, {std::string("policies.queue=") + queue, "workload.num_requests=600"});
    const RunOutput a = run_simulation(c, o);
    const RunOutput b = run_simulation(c, o);
    EXPECT_EQ(a.summary.completed, 600);
    EXPECT_EQ(a.summary.completed, b.summary.completed);
    EXPECT_EQ(a.summary.num_steps, b.summary.num_steps);
    EXPECT_EQ(a.summary.ttft_ms.mean, b.summary.ttft_ms.mean);
    EXPECT_EQ(a.summary.preemptions, b.summary.preemptions);
    if (std::string(queue) == "fcfs") fcfs_ttft = a.summary.ttft_ms;
    if (std::string(queue) == "sjf") sjf_ttft = a.summary.ttft_ms;
  }
  EXPECT_LT(sjf_ttft.p50, fcfs_ttft.p50);
  EXPECT_GT(sjf_ttft.max, fcfs_ttft.max);
}

}  // namespace
}  // namespace servelab
