// Overload control (policies.admission, policies.length_cap): the scheduler sheds and caps
// arrivals as the plugins say, shed requests are counted and listed, capped ones finish at the
// cap, nothing changes below the thresholds, and `sim run` / `engine run` report the same.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/admission_policy.h"
#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/length_cap.h"
#include "core/scheduler.h"
#include "engine/engine_driver.h"
#include "policies/registry.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using namespace servelab::test_util;

RequestSpec Spec(RequestId id, std::int32_t len, std::int32_t max_out) {
  return make_request(id, 0, {{unique_content_id(5, id), 0, static_cast<std::uint32_t>(len)}},
                      max_out);
}

StepResult Tokens(std::size_t entries) {
  StepResult res;
  res.sampled_tokens.assign(entries, 1);
  return res;
}

struct Outcome {
  RequestId id;
  RequestStatus status;
  std::string reason;
  std::int32_t outputs;
  TimeNs finish_ns;
  friend bool operator==(const Outcome&, const Outcome&) = default;
};

class Collect : public SchedulerObserver {
 public:
  void on_reject(const Request& r, TimeNs now) override {
    EXPECT_EQ(r.finish_ns, now);
    out.push_back({r.id(), r.status, r.finish_reason, r.num_output_tokens(), now});
  }
  void on_finish(const Request& r, TimeNs now) override {
    out.push_back({r.id(), r.status, r.finish_reason, r.num_output_tokens(), now});
  }
  std::vector<Outcome> out;
};

// A scheduler over a 64-block pool of 16-token blocks with the given overload plugins.
struct Rig {
  explicit Rig(SchedulerConfig sc) : pool(64), kv(pool, 16, 8192, true), s(sc, kv, &obs) {}
  // Runs every step to the end: each step lasts 10 ms and samples token 1.
  void drain(TimeNs& now) {
    while (s.has_unfinished()) {
      const StepPlan& plan = s.schedule(now);
      StepResult res;
      res.sampled_tokens.assign(plan.requests.size(), 1);
      now += 10'000'000;
      s.complete(res, now);
    }
  }
  Collect obs;
  BlockPool pool;
  KvCacheManager kv;
  Scheduler s;
};

SchedulerConfig With(PolicyKind kind, const std::string& name,
                     const std::map<std::string, ParamValue>& params) {
  SchedulerConfig sc;
  use_policy(sc, kind, name, params);
  return sc;
}

TEST(Overload, QueueLengthShedsArrivalsBeyondTheBound) {
  Rig rig(With(PolicyKind::kAdmission, "queue-length", {{"max_waiting", std::int64_t{2}}}));
  for (RequestId id = 0; id < 5; ++id) rig.s.add_request(Spec(id, 32, 4), 0);
  EXPECT_EQ(rig.s.num_waiting(), 2u);
  EXPECT_EQ(rig.s.counters().num_shed, 3);
  EXPECT_EQ(rig.s.counters().num_rejected, 0);
  ASSERT_EQ(rig.obs.out.size(), 3u);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(rig.obs.out[k].id, k + 2);
    EXPECT_EQ(rig.obs.out[k].status, RequestStatus::kShed);
    EXPECT_NE(rig.obs.out[k].reason.find("max_waiting 2"), std::string::npos)
        << rig.obs.out[k].reason;
  }
  // Once the queue drains, arrivals are admitted again.
  TimeNs now = 0;
  rig.s.schedule(now);
  rig.s.complete(Tokens(2), now + 1);
  EXPECT_EQ(rig.s.num_waiting(), 0u);
  rig.s.add_request(Spec(9, 32, 4), now + 1);
  EXPECT_EQ(rig.s.num_waiting(), 1u);
  EXPECT_EQ(rig.s.counters().num_shed, 3);
  // Too long is still a rejection, whatever the load.
  rig.s.add_request(Spec(10, 32, 9000), now + 1);
  EXPECT_EQ(rig.s.counters().num_rejected, 1);
  EXPECT_EQ(rig.obs.out.back().status, RequestStatus::kRejected);
}

TEST(Overload, LengthCapLowersMaxTokensOnlyOverTheThreshold) {
  Rig rig(With(PolicyKind::kLengthCap, "queue-length",
               {{"max_tokens", std::int64_t{3}}, {"when_waiting_over", std::int64_t{1}}}));
  for (RequestId id = 0; id < 4; ++id) rig.s.add_request(Spec(id, 32, 10), 0);
  EXPECT_EQ(rig.s.counters().num_capped, 2);  // arrived with 2 and 3 waiting
  TimeNs now = 0;
  rig.drain(now);
  ASSERT_EQ(rig.obs.out.size(), 4u);
  std::map<RequestId, Outcome> by_id;
  for (const Outcome& o : rig.obs.out) by_id[o.id] = o;
  for (RequestId id : {0, 1}) {
    EXPECT_EQ(by_id[id].outputs, 10);
    EXPECT_EQ(by_id[id].reason, "length");
  }
  for (RequestId id : {2, 3}) {
    EXPECT_EQ(by_id[id].status, RequestStatus::kFinished);
    EXPECT_EQ(by_id[id].outputs, 3) << "a capped request finishes at the cap";
    EXPECT_EQ(by_id[id].reason, "length (capped from 10)");
  }
}

TEST(Overload, BelowTheThresholdsNothingChanges) {
  SchedulerConfig loose;
  use_policy(loose, PolicyKind::kAdmission, "queue-length", {{"max_waiting", std::int64_t{100}}});
  use_policy(loose, PolicyKind::kLengthCap, "queue-length",
             {{"max_tokens", std::int64_t{1}}, {"when_waiting_over", std::int64_t{100}}});
  Rig plain{SchedulerConfig{}}, guarded{loose};
  TimeNs t_plain = 0, t_guarded = 0;
  for (Rig* rig : {&plain, &guarded}) {
    TimeNs& now = rig == &plain ? t_plain : t_guarded;
    for (RequestId id = 0; id < 30; ++id) {
      rig->s.add_request(Spec(id, 20 + 7 * static_cast<std::int32_t>(id % 9), 3 + id % 11), now);
      if (id % 3 == 2) {  // a step between some arrivals
        const StepPlan& plan = rig->s.schedule(now);
        StepResult res;
        res.sampled_tokens.assign(plan.requests.size(), 1);
        now += 10'000'000;
        rig->s.complete(res, now);
      }
    }
    rig->drain(now);
  }
  EXPECT_EQ(guarded.s.counters().num_shed, 0);
  EXPECT_EQ(guarded.s.counters().num_capped, 0);
  EXPECT_EQ(plain.obs.out.size(), 30u);
  EXPECT_EQ(plain.obs.out, guarded.obs.out);
  EXPECT_EQ(t_plain, t_guarded);
}

TEST(Overload, PredictedWaitUsesQueuedTokensOverPrefillThroughput) {
  // A prior of 100 tokens/s until a prefill step is measured; shed past 1.5 s.
  Rig rig(With(PolicyKind::kAdmission, "predicted-wait",
               {{"max_wait_s", 1.5}, {"prior_tokens_per_s", 100.0}}));
  rig.s.add_request(Spec(0, 100, 2), 0);  // 0 tokens ahead: wait 0
  rig.s.add_request(Spec(1, 100, 2), 0);  // 100 ahead: 1 s
  EXPECT_EQ(rig.s.admission_load(0).waiting_tokens, 200);
  rig.s.add_request(Spec(2, 100, 2), 0);  // 200 ahead: 2 s > 1.5 s
  EXPECT_EQ(rig.s.counters().num_shed, 1);
  ASSERT_EQ(rig.obs.out.size(), 1u);
  EXPECT_NE(rig.obs.out[0].reason.find("predicted wait 2.000 s > max_wait_s 1.5"),
            std::string::npos)
      << rig.obs.out[0].reason;
  // One step prefills both prompts (200 tokens) in 0.1 s: 2000 tokens/s measured, queue empty.
  const StepPlan& plan = rig.s.schedule(0);
  EXPECT_EQ(plan.num_prefill_tokens, 200);
  rig.s.complete(Tokens(plan.requests.size()), 100'000'000);
  const AdmissionLoad load = rig.s.admission_load(100'000'000);
  EXPECT_EQ(load.waiting_tokens, 0);
  EXPECT_DOUBLE_EQ(load.prefill_tokens_per_s, 2000.0);
  // Now 2000 tokens/s: the 30th arrival sees 2900 queued tokens, 1.45 s, and is admitted; the
  // 31st sees 3000, 1.5 s, not over the bound; the 32nd sees 3100, 1.55 s, and is shed.
  for (RequestId id = 10; id < 41; ++id) rig.s.add_request(Spec(id, 100, 2), 100'000'000);
  EXPECT_EQ(rig.s.num_waiting(), 31u);
  EXPECT_EQ(rig.s.counters().num_shed, 1);
  rig.s.add_request(Spec(41, 100, 2), 100'000'000);
  EXPECT_EQ(rig.s.counters().num_shed, 2);
  EXPECT_EQ(rig.s.num_waiting(), 31u);
}

TEST(Overload, WaitingTokensFollowPreemptionsAndAborts) {
  // 8 usable blocks of 16 tokens: two 60-token prompts growing to 70 tokens must preempt.
  SchedulerConfig sc;
  BlockPool pool(9);
  KvCacheManager kv(pool, 16, 8192, true);
  Scheduler s(sc, kv, nullptr);
  s.add_request(Spec(0, 60, 40), 0);
  s.add_request(Spec(1, 60, 40), 0);
  s.add_request(Spec(2, 30, 5), 0);
  EXPECT_EQ(s.admission_load(0).waiting_tokens, 150);
  TimeNs now = 0;
  bool preempted = false;
  while (s.has_unfinished()) {
    const StepPlan& plan = s.schedule(now);
    preempted = preempted || !plan.preempted.empty();
    // The count is the waiting requests' tokens (prompt plus outputs so far) at every step.
    std::int64_t expect = 0;
    for (const Request* r : s.waiting()) expect += r->num_tokens();
    EXPECT_EQ(s.admission_load(now).waiting_tokens, expect);
    StepResult res;
    res.sampled_tokens.assign(plan.requests.size(), 1);
    now += 1'000'000;
    s.complete(res, now);
    if (now == 5'000'000 && s.num_waiting() > 0) {
      s.abort(s.waiting().front()->id(), now, "test");
    }
  }
  EXPECT_TRUE(preempted);
  EXPECT_EQ(s.admission_load(now).waiting_tokens, 0);
}

// A rule that throws (a Python one that raised) stops add_request; the scheduler keeps what it
// had and owns nothing of the arrival (the sanitizer build would report the leaked request).
class ThrowingAdmission final : public AdmissionPolicy {
 public:
  std::string_view name() const override { return "throws"; }
  std::string shed_reason(const RequestSpec& spec, const AdmissionLoad&) const override {
    if (spec.id >= 2) throw std::runtime_error("rule failed");
    return "";
  }
};
class RateCap final : public LengthCap {
 public:
  std::string_view name() const override { return "rate"; }
  std::int32_t cap(const RequestSpec& spec, const AdmissionLoad& load) const override {
    if (spec.id >= 90) throw std::runtime_error("cap failed");
    rates.push_back(load.prefill_tokens_per_s);
    return spec.max_output_tokens;
  }
  mutable std::vector<double> rates;
};

TEST(Overload, ARuleThatThrowsLeavesTheSchedulerAsItWas) {
  SchedulerConfig sc;
  sc.admission = std::make_shared<const ThrowingAdmission>();
  Rig rig(sc);
  rig.s.add_request(Spec(0, 32, 4), 0);
  rig.s.add_request(Spec(1, 32, 4), 0);
  EXPECT_THROW(rig.s.add_request(Spec(2, 32, 4), 0), std::runtime_error);
  EXPECT_EQ(rig.s.num_waiting(), 2u);
  EXPECT_EQ(rig.s.admission_load(0).waiting_tokens, 64);
  EXPECT_TRUE(rig.obs.out.empty());
  TimeNs now = 0;
  rig.drain(now);
  EXPECT_EQ(rig.obs.out.size(), 2u);
}

TEST(Overload, ALengthCapAloneSeesTheMeasuredPrefillRate) {
  SchedulerConfig sc;
  auto cap = std::make_shared<const RateCap>();
  sc.length_cap = cap;
  Rig rig(sc);
  rig.s.add_request(Spec(0, 100, 2), 0);
  const StepPlan& plan = rig.s.schedule(0);
  rig.s.complete(Tokens(plan.requests.size()), 100'000'000);  // 100 tokens in 0.1 s
  rig.s.add_request(Spec(1, 100, 2), 100'000'000);
  EXPECT_EQ(cap->rates, (std::vector<double>{0.0, 1000.0}));
  EXPECT_THROW(rig.s.add_request(Spec(90, 32, 4), 100'000'000), std::runtime_error);
  EXPECT_EQ(rig.s.num_waiting(), 1u);
  EXPECT_EQ(rig.s.counters().num_capped, 0);
}

TEST(Overload, BadParametersNameTheKey) {
  const fs::path dir = temp_dir("overload_bad");
  write_file(dir / "e.yaml",
             "name: bad\nmodel: tiny\nhardware: H100-SXM\nserving: {num_gpu_blocks: 64}\n"
             "policies:\n  admission: {name: queue-length, max_waiting: -1}\n"
             "workload: {type: synthetic, num_requests: 5}\n");
  const Cli cli = run_sim("run " + (dir / "e.yaml").string(), dir);
  EXPECT_EQ(cli.code, 2);
  EXPECT_NE(cli.err.find("e.yaml:6:"), std::string::npos) << cli.err;
  EXPECT_NE(cli.err.find("policies.admission.max_waiting"), std::string::npos) << cli.err;
  write_file(dir / "f.yaml",
             "name: bad\nmodel: tiny\nhardware: H100-SXM\nserving: {num_gpu_blocks: 64}\n"
             "policies:\n  length_cap: {name: sometimes}\n"
             "workload: {type: synthetic, num_requests: 5}\n");
  const Cli cli2 = run_sim("run " + (dir / "f.yaml").string(), dir);
  EXPECT_EQ(cli2.code, 2);
  EXPECT_NE(cli2.err.find("one of off, queue-length"), std::string::npos) << cli2.err;
  fs::remove_all(dir);
}

// A burst: 120 requests within 0.1 s onto a 64-block pool of the tiny model.
const std::string kBurst =
    "name: burst-small\nseed: 3\nmodel: tiny\nhardware: H100-SXM\n"
    "serving:\n  block_size: 16\n  num_gpu_blocks: 64\n  max_num_batched_tokens: 512\n"
    "  max_num_seqs: 16\n  max_model_len: 512\n"
    "workload:\n  type: synthetic\n  num_requests: 120\n"
    "  arrival: {process: poisson, rate: 1200}\n"
    "  prompt_len: {dist: uniform, min: 40, max: 200}\n"
    "  output_len: {dist: uniform, min: 20, max: 80}\n";

TEST(Overload, SimRunCountsShedAndCappedRequests) {
  const fs::path dir = temp_dir("overload_sim");
  write_file(dir / "e.yaml", kBurst);
  const auto run = [&](const std::string& name, const std::vector<std::string>& sets) {
    ExperimentConfig c = load_experiment((dir / "e.yaml").string(), sets);
    RunOptions o;
    o.out_dir = (dir / name).string();
    return run_simulation(c, o);
  };
  const RunOutput plain = run("plain", {});
  const RunOutput shed = run("shed", {"policies.admission={name: queue-length, max_waiting: 8}"});
  const RunOutput capped = run(
      "capped", {"policies.length_cap={name: queue-length, max_tokens: 10, when_waiting_over: 8}"});
  // Defaults: no overload keys in summary.json or config.yaml.
  EXPECT_EQ(read_file(dir / "plain" / "summary.json").find("\"shed\""), std::string::npos);
  EXPECT_EQ(read_file(dir / "plain" / "config.yaml").find("admission"), std::string::npos);
  EXPECT_EQ(plain.summary.completed, 120);
  // Shedding: counted, listed with status and reason, and the tail TTFT drops.
  EXPECT_GT(shed.summary.shed, 0);
  EXPECT_EQ(shed.summary.completed + shed.summary.shed, 120);
  std::int64_t shed_rows = 0;
  for (const auto& r : read_csv(dir / "shed" / "requests.csv")) {
    if (r.at("status") != "shed") continue;
    ++shed_rows;
    EXPECT_NE(r.at("reason").find("max_waiting 8"), std::string::npos);
    EXPECT_EQ(r.at("first_token_s"), "");
  }
  EXPECT_EQ(shed_rows, shed.summary.shed);
  const auto j = nlohmann::json::parse(read_file(dir / "shed" / "summary.json"));
  EXPECT_EQ(j["requests"]["shed"].get<std::int64_t>(), shed.summary.shed);
  EXPECT_EQ(j["requests"]["capped"].get<std::int64_t>(), 0);
  EXPECT_EQ(j["ttft_ms"]["count"].get<std::int64_t>(), shed.summary.completed);
  EXPECT_NE(read_file(dir / "shed" / "config.yaml").find("admission: {name: queue-length"),
            std::string::npos);
  EXPECT_LT(shed.summary.ttft_ms.p99, plain.summary.ttft_ms.p99);
  // Capping: every capped request finished at most at the cap, and the run is shorter.
  EXPECT_GT(capped.summary.capped, 0);
  EXPECT_EQ(capped.summary.completed, 120);
  std::int64_t capped_rows = 0;
  for (const auto& r : read_csv(dir / "capped" / "requests.csv")) {
    if (r.at("reason").find("capped from") == std::string::npos) continue;
    ++capped_rows;
    EXPECT_EQ(std::stoi(r.at("output_tokens")), 10);  // every output length here is >= 20
  }
  EXPECT_EQ(capped_rows, capped.summary.capped);
  EXPECT_LT(capped.summary.duration_s, plain.summary.duration_s);
  fs::remove_all(dir);
}

TEST(Overload, EngineRunShedsTheSameRequestsAsTheSimulator) {
  // Every arrival at t = 0 (fixed arrivals at 1e12 req/s): the same requests are shed by both.
  const fs::path dir = temp_dir("overload_engine");
  write_file(dir / "e.yaml",
             "name: shed-engine\nseed: 5\nmodel: tiny\nhardware: H100-SXM\n"
             "serving:\n  block_size: 16\n  num_gpu_blocks: 32\n  max_num_batched_tokens: 256\n"
             "  max_num_seqs: 8\n  max_model_len: 256\n"
             "policies:\n  admission: {name: queue-length, max_waiting: 6}\n"
             "  length_cap: {name: queue-length, max_tokens: 4, when_waiting_over: 3}\n"
             "workload:\n  type: synthetic\n  num_requests: 12\n  start_s: 0\n"
             "  arrival: {process: fixed, rate: 1.0e12}\n"
             "  prompt_len: {dist: uniform, min: 10, max: 40}\n"
             "  output_len: {dist: uniform, min: 6, max: 12}\n");
  const ExperimentConfig c = load_experiment((dir / "e.yaml").string(), {});
  RunOptions so;
  so.out_dir = (dir / "sim").string();
  const RunOutput sim = run_simulation(c, so);
  EngineOptions eo;
  eo.out_dir = (dir / "engine").string();
  const RunOutput engine = run_engine(c, eo);
  EXPECT_EQ(sim.summary.shed, 6);
  EXPECT_EQ(sim.summary.capped, 2);
  EXPECT_EQ(engine.summary.shed, sim.summary.shed);
  EXPECT_EQ(engine.summary.capped, sim.summary.capped);
  const auto sim_rows = read_csv(dir / "sim" / "requests.csv");
  const auto eng_rows = read_csv(dir / "engine" / "requests.csv");
  ASSERT_EQ(sim_rows.size(), eng_rows.size());
  for (std::size_t k = 0; k < sim_rows.size(); ++k) {
    EXPECT_EQ(sim_rows[k].at("status"), eng_rows[k].at("status")) << k;
    EXPECT_EQ(sim_rows[k].at("output_tokens"), eng_rows[k].at("output_tokens")) << k;
    EXPECT_EQ(sim_rows[k].at("reason"), eng_rows[k].at("reason")) << k;
  }
  fs::remove_all(dir);
}

// experiments/overload.yaml: shedding trades shed requests for the served ones' tail TTFT; the
// cap serves everyone with shorter answers; the table and compare.csv show both counts.
TEST(Overload, ShippedComparisonShowsWhatItDocuments) {
  const fs::path dir = temp_dir("overload_shipped");
  const std::string exp = servelab_home().string() + "/experiments/overload.yaml";
  const Cli cli = run_sim("compare " + exp + " --out " + (dir / "c").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  EXPECT_NE(cli.out.find("shed  capped"), std::string::npos) << cli.out;
  const auto summary = [&](const std::string& variant) {
    return nlohmann::json::parse(read_file(dir / "c" / variant / "summary.json"));
  };
  const nlohmann::json all = summary("admit-all"), q16 = summary("queue-16"),
                       wait = summary("wait-0.5s"), cap = summary("cap-128");
  const auto p99 = [](const nlohmann::json& j) { return j["ttft_ms"]["p99"].get<double>(); };
  const auto req = [](const nlohmann::json& j, const char* k) {
    return j["requests"].value(k, std::int64_t{-1});
  };
  EXPECT_EQ(req(all, "shed"), -1) << "no overload keys without an overload plugin";
  EXPECT_EQ(req(all, "completed"), 1200);
  for (const nlohmann::json* shed : {&q16, &wait}) {
    EXPECT_GT(req(*shed, "shed"), 0);
    EXPECT_EQ(req(*shed, "completed") + req(*shed, "shed"), 1200);
    EXPECT_LT(p99(*shed), p99(all) / 4);
    EXPECT_GT((*shed)["goodput"]["requests_per_s"].get<double>(),
              all["goodput"]["requests_per_s"].get<double>());
  }
  EXPECT_GT(req(cap, "capped"), 0);
  EXPECT_EQ(req(cap, "completed"), 1200);
  EXPECT_LT(p99(cap), p99(all));
  const auto rows = read_csv(dir / "c" / "compare.csv");
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[2].at("variant"), "queue-16");
  EXPECT_EQ(std::stoll(rows[2].at("shed")), req(q16, "shed"));
  EXPECT_EQ(std::stoll(rows[5].at("capped")), req(cap, "capped"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
