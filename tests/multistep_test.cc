// Multi-step scheduling (serving.num_scheduler_steps, vLLM v0.6's --num-scheduler-steps):
// hand-worked rounds at the scheduler, the round time of the cost models, and the experiment
// plumbing (defaults byte-identical, policies that run with it, the engine's refusal).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/batch_formation.h"
#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "serving/experiment.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/model_config.h"
#include "sim/calibrated_cost_model.h"
#include "sim/roofline_cost_model.h"
#include "sim/run.h"
#include "sim/sim_backend.h"
#include "tests/scheduler_harness.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

namespace fs = std::filesystem;
using namespace servelab::test_util;

RequestSpec Spec(RequestId id, std::int32_t len, std::int32_t max_out) {
  return make_request(id, 0, {{unique_content_id(11, id), 0, static_cast<std::uint32_t>(len)}},
                      max_out);
}

struct TokenEvent {
  RequestId id;
  TimeNs prev, now;
  friend bool operator==(const TokenEvent&, const TokenEvent&) = default;
};

std::ostream& operator<<(std::ostream& os, const TokenEvent& t) {
  return os << "{" << t.id << ", " << t.prev << ", " << t.now << "}";
}

struct Finished {
  RequestId id;
  TimeNs finish;
  std::int32_t outputs;
};

class Recording : public SchedulerObserver {
 public:
  void on_token(const Request& req, TimeNs prev, TimeNs now) override {
    tokens.push_back({req.id(), prev, now});
  }
  void on_finish(const Request& req, TimeNs now) override {
    finished.push_back({req.id(), now, req.num_output_tokens()});
  }
  std::vector<TokenEvent> tokens;
  std::vector<Finished> finished;
};

SchedulerConfig Config(std::int32_t steps, bool caching = false) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 512;
  c.max_num_seqs = 8;
  c.max_model_len = 1024;
  c.enable_prefix_caching = caching;
  c.block_size = 16;
  c.num_scheduler_steps = steps;
  return c;
}

// Pool + manager + scheduler stepped by hand; Complete() gives every sampled token the value 5
// (N per entry in a round).
struct Harness : test_util::SchedulerHarness<Recording> {
  using SchedulerHarness::SchedulerHarness;
  void Complete(TimeNs now) {
    StepResult res;
    res.duration_ns = 1;
    res.sampled_tokens.assign(plan->requests.size() * static_cast<std::size_t>(plan->num_steps), 5);
    Finish(res, now);
  }
};

// Two requests (prompts 16 and 20, 10 outputs each) with N = 4: the prefill is a single step,
// then every decode-only plan is a round of 4 passes: 4 tokens per sequence per scheduling
// round, its slots reserved up front (lookahead), progress advanced by 4 at the round's end.
TEST(MultiStep, DecodeBatchRunsNTokensPerSchedulingRound) {
  Harness h(Config(4), 64);
  h.sched.add_request(Spec(0, 16, 10), 0);
  h.sched.add_request(Spec(1, 20, 10), 0);
  const StepPlan& p0 = h.Schedule(0);
  EXPECT_EQ(p0.num_steps, 1);  // prefill: a single step
  EXPECT_EQ(p0.num_prefill_tokens, 36);
  h.Complete(100);

  const StepPlan& p1 = h.Schedule(100);
  ASSERT_EQ(p1.requests.size(), 2u);
  EXPECT_EQ(p1.num_steps, 4);
  EXPECT_EQ(p1.num_decode_tokens, 2);  // one pass's tokens; the round runs 4 of them
  EXPECT_EQ(p1.requests[0].first_token, 16);
  EXPECT_EQ(p1.requests[1].first_token, 20);
  // Lookahead: slots for positions 16..19 and 20..23 are held before the round runs.
  EXPECT_EQ(h.Running(0)->block_table.size(), 2u);
  EXPECT_EQ(h.Running(1)->block_table.size(), 2u);
  EXPECT_EQ(h.Running(0)->kv_accounted_tokens(), 20);
  EXPECT_EQ(h.Running(1)->kv_accounted_tokens(), 24);
  h.Complete(200);
  EXPECT_EQ(h.Running(0)->num_output_tokens(), 5);  // 1 + 4
  EXPECT_EQ(h.Running(1)->num_output_tokens(), 5);
  EXPECT_EQ(h.Running(0)->num_computed_tokens, 20);
  EXPECT_EQ(h.Running(1)->num_computed_tokens, 24);

  const StepPlan& p2 = h.Schedule(200);
  EXPECT_EQ(p2.num_steps, 4);
  EXPECT_EQ(p2.requests[0].first_token, 20);
  EXPECT_EQ(p2.requests[1].first_token, 24);
  h.Complete(300);
  EXPECT_EQ(h.Running(0)->num_output_tokens(), 9);
  // The last round: one token left each; the lookahead stops at the request's length (26 - 1
  // and 30 - 1 KV positions), so no slot past it is reserved.
  const StepPlan& p3 = h.Schedule(300);
  EXPECT_EQ(p3.num_steps, 4);
  EXPECT_EQ(h.Running(0)->kv_accounted_tokens(), 25);
  EXPECT_EQ(h.Running(1)->kv_accounted_tokens(), 29);
  h.Complete(400);
  ASSERT_EQ(h.obs.finished.size(), 2u);
  EXPECT_EQ(h.obs.finished[0].outputs, 10);
  EXPECT_EQ(h.obs.finished[0].finish, 400);
  EXPECT_FALSE(h.sched.has_unfinished());
  EXPECT_EQ(h.pool.num_free_blocks(), h.pool.num_usable_blocks());
}

// Tokens of a round all come at the round's end, reported pass by pass: the first of a round
// has the previous round's end as its previous token time, the others the round's end itself
// (ITL: one gap per round, then zeros).
TEST(MultiStep, TokenTimestampsComeInChunksOfN) {
  Harness h(Config(3), 64);
  h.sched.add_request(Spec(0, 8, 7), 0);
  h.Schedule(0);
  h.Complete(50);  // first token at 50
  h.Schedule(50);
  EXPECT_EQ(h.plan->num_steps, 3);
  h.Complete(80);
  h.Schedule(80);
  EXPECT_EQ(h.plan->num_steps, 3);
  h.Complete(110);
  const std::vector<TokenEvent> want = {{0, -1, 50},  {0, 50, 80},   {0, 80, 80},  {0, 80, 80},
                                        {0, 80, 110}, {0, 110, 110}, {0, 110, 110}};
  EXPECT_EQ(h.obs.tokens, want);
  ASSERT_EQ(h.obs.finished.size(), 1u);
  EXPECT_EQ(h.obs.finished[0].finish, 110);
}

// A request that reaches max_tokens inside a round stops sampling there but keeps its seat and
// blocks until the round ends; the others get all N tokens.
TEST(MultiStep, RequestHittingMaxTokensMidRoundHoldsItsSlotUntilTheRoundEnds) {
  Harness h(Config(4), 64);
  h.sched.add_request(Spec(0, 16, 3), 0);   // 1 token from the prefill, 2 more
  h.sched.add_request(Spec(1, 16, 12), 0);  // goes on
  h.Schedule(0);
  h.Complete(10);
  const StepPlan& round = h.Schedule(10);
  ASSERT_EQ(round.num_steps, 4);
  ASSERT_EQ(round.requests.size(), 2u);
  // Request 0 needs KV for positions 16 and 17 only (its 19th token's is never computed).
  EXPECT_EQ(h.Running(0)->kv_accounted_tokens(), 18);
  EXPECT_EQ(h.Running(1)->kv_accounted_tokens(), 20);
  const std::int32_t held = h.pool.num_usable_blocks() - h.pool.num_free_blocks();
  EXPECT_EQ(held, 4);  // both still hold their blocks while the round runs
  EXPECT_EQ(h.sched.num_running(), 2u);
  h.Complete(90);
  ASSERT_EQ(h.obs.finished.size(), 1u);
  EXPECT_EQ(h.obs.finished[0].id, 0u);
  EXPECT_EQ(h.obs.finished[0].outputs, 3);
  EXPECT_EQ(h.obs.finished[0].finish, 90);  // the round's end, not the pass of its last token
  EXPECT_EQ(h.Running(1)->num_output_tokens(), 5);
  EXPECT_EQ(h.sched.num_running(), 1u);
  // Request 0's tokens: its first (10), then two at the round's end.
  std::vector<TokenEvent> mine;
  for (const TokenEvent& t : h.obs.tokens) {
    if (t.id == 0) mine.push_back(t);
  }
  EXPECT_EQ(mine, (std::vector<TokenEvent>{{0, -1, 10}, {0, 10, 90}, {0, 90, 90}}));
}

// A request that arrives while a round runs waits for its end: the next plan admits it (a
// prefill, so that plan is a single step) and only then does the next round start.
TEST(MultiStep, AdmissionWaitsForTheRound) {
  Harness h(Config(4), 64);
  h.sched.add_request(Spec(0, 16, 20), 0);
  h.Schedule(0);
  h.Complete(10);
  const StepPlan& round = h.Schedule(10);
  ASSERT_EQ(round.num_steps, 4);
  h.sched.add_request(Spec(1, 16, 20), 15);  // arrives during the round
  EXPECT_EQ(h.sched.num_waiting(), 1u);
  h.Complete(50);
  const StepPlan& mixed = h.Schedule(50);
  EXPECT_EQ(mixed.num_steps, 1);  // it admitted a request: one pass
  ASSERT_EQ(mixed.requests.size(), 2u);
  EXPECT_TRUE(mixed.requests[1].is_prefill);
  EXPECT_EQ(h.Running(1)->first_scheduled_ns, 50);
  h.Complete(60);
  EXPECT_EQ(h.Running(0)->num_output_tokens(), 6);  // 1 + 4 + 1
  const StepPlan& next = h.Schedule(60);
  EXPECT_EQ(next.num_steps, 4);  // both decode: a round again
  EXPECT_EQ(next.requests.size(), 2u);
}

// A plan that samples a request's first token (its last prompt chunk, even a 1-token one that
// is a decode entry by its shape) is a single step: a round needs decodes of requests that
// already have an output token.
TEST(MultiStep, FirstTokensAreNeverInARound) {
  SchedulerConfig c = Config(4);
  c.max_num_batched_tokens = 16;  // the 17-token prompt goes 16 + 1
  Harness h(c, 64);
  h.sched.add_request(Spec(0, 17, 8), 0);
  EXPECT_EQ(h.Schedule(0).num_steps, 1);
  h.Complete(1);
  const StepPlan& last_chunk = h.Schedule(1);
  ASSERT_EQ(last_chunk.requests.size(), 1u);
  EXPECT_FALSE(last_chunk.requests[0].is_prefill);
  EXPECT_EQ(last_chunk.num_steps, 1);  // it samples the first token
  h.Complete(2);
  EXPECT_EQ(h.Schedule(2).num_steps, 4);
  h.Complete(3);
}

// With prefix caching, the blocks a round fills (positions of tokens sampled inside it) are
// registered at its end, so a later prompt that repeats them hits.
TEST(MultiStep, BlocksFilledInsideARoundEnterThePrefixCache) {
  Harness h(Config(8, /*caching=*/true), 64);
  h.sched.add_request(Spec(0, 12, 20), 0);  // prompt 12 + outputs: block 0 fills in the round
  h.Schedule(0);
  h.Complete(1);
  h.Schedule(1);
  ASSERT_EQ(h.plan->num_steps, 8);
  h.Complete(2);
  const Request* r = h.Running(0);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->num_computed_tokens, 20);
  EXPECT_EQ(r->num_cached_blocks(), 1);  // positions 0..15 hold KV: registered
}

// Every built-in formation runs rounds; one that reserves no lookahead is refused.
TEST(MultiStep, FormationWithoutLookaheadIsRefused) {
  class NoLookahead final : public BatchFormation {
   public:
    std::string_view name() const override { return "no-lookahead"; }
    void fill(Scheduler&, TimeNs, bool) const override {}
  };
  SchedulerConfig c = Config(4);
  c.batch = std::make_shared<const NoLookahead>();
  BlockPool pool(16);
  KvCacheManager kv(pool, 16, 1024, false);
  EXPECT_THROW({ Scheduler s(c, kv, nullptr); }, std::invalid_argument);
  c.num_scheduler_steps = 0;
  c.batch = nullptr;
  EXPECT_THROW({ Scheduler s(c, kv, nullptr); }, std::invalid_argument);
}

// The round's time: N x (the GPU part of one pass) + the host part once, where the host part is
// the breakdown's overhead and the GPU part the rest.
TEST(MultiStep, RoundTimeIsNTimesTheGpuPartPlusTheHostPartOnce) {
  const std::string catalog = home_path("experiments") + "/catalog";
  const RooflineCostModel roofline(load_model("Llama-3-8B", catalog),
                                   load_hardware("H100-SXM", catalog), 16);
  SchedulerConfig c = Config(4);
  c.max_num_batched_tokens = 8192;  // all prompts in the first step
  Harness h(c, 256);
  for (RequestId id = 0; id < 8; ++id) h.sched.add_request(Spec(id, 100, 50), 0);
  h.Schedule(0);
  h.Complete(1);
  const StepPlan& round = h.Schedule(1);
  ASSERT_EQ(round.num_steps, 4);
  const StepCostBreakdown b = roofline.breakdown(round);
  ASSERT_GT(b.overhead, 0.0);
  EXPECT_EQ(b.swap, 0.0);
  EXPECT_EQ(b.copy, 0.0);
  const double gpu = b.total() - b.overhead;
  SimBackend backend(roofline);
  const StepResult res = backend.execute(round);
  EXPECT_EQ(res.duration_ns, seconds_to_ns(4 * gpu + b.overhead));
  EXPECT_EQ(res.sampled_tokens.size(), 8u * 4u);
  // Against single steps: 4 of them would pay the host part 4 times.
  const TimeNs single = roofline.step_time(round);
  EXPECT_NEAR(static_cast<double>(res.duration_ns),
              4.0 * static_cast<double>(single) - 3.0 * b.overhead * 1e9, 3.0);
  // An ordinary step keeps step_time.
  StepPlan one = round;
  one.num_steps = 1;
  EXPECT_EQ(roofline.round_time(one), single);
  h.Complete(2);
}

// The calibrated model's breakdown adds up to its step time; its host part is the per-step and
// per-sequence terms.
TEST(MultiStep, CalibratedBreakdownSplitsHostAndDevice) {
  CalibratedProfile p;
  p.model = "tiny";
  p.block_bytes = 1024;
  p.coefficients.step_s = 1e-3;
  p.coefficients.per_sequence_s = 1e-5;
  p.coefficients.per_token_s = 2e-6;
  p.coefficients.decode_context_token_s = 1e-8;
  p.coefficients.sampled_sequence_s = 3e-6;
  const CalibratedCostModel cm(p, 16);
  Harness h(Config(2), 64);
  for (RequestId id = 0; id < 3; ++id) h.sched.add_request(Spec(id, 40, 10), 0);
  h.Schedule(0);
  h.Complete(1);
  const StepPlan& round = h.Schedule(1);
  ASSERT_EQ(round.num_steps, 2);
  const StepCostBreakdown b = cm.breakdown(round);
  EXPECT_DOUBLE_EQ(b.overhead, 1e-3 + 3 * 1e-5);
  EXPECT_NEAR(static_cast<double>(seconds_to_ns(b.total())),
              static_cast<double>(cm.step_time(round)), 1.0);
  EXPECT_EQ(cm.round_time(round), seconds_to_ns(2 * (b.total() - b.overhead) + b.overhead));
  h.Complete(2);
}

// ---- Experiments ----

const std::string kBurst = servelab_home().string() + "/experiments/burst.yaml";

// `serving.num_scheduler_steps: 1` is the default: the same files as without it.
TEST(MultiStepRun, OneStepIsByteIdenticalToTheDefault) {
  const fs::path dir = temp_dir("multistep_default");
  ExperimentConfig a = load_experiment(kBurst, {});
  ExperimentConfig b = load_experiment(kBurst, {"serving.num_scheduler_steps=1"});
  a.outputs.record_schedule = b.outputs.record_schedule = true;
  RunOptions o;
  o.out_dir = (dir / "a").string();
  run_simulation(a, o);
  o.out_dir = (dir / "b").string();
  run_simulation(b, o);
  for (const char* f :
       {"summary.json", "requests.csv", "steps.csv", "schedule.csv", "config.yaml"}) {
    EXPECT_EQ(read_file(dir / "a" / f), read_file(dir / "b" / f)) << f;
  }
  fs::remove_all(dir);
}

// burst.yaml with N = 8: rounds show in the files (decode rows of 8 tokens per sequence, ITL
// zeros inside a round), everything completes, and it is deterministic; fewer scheduler steps
// and less host time than N = 1 for the same work.
TEST(MultiStepRun, BurstWithEightStepsRunsRoundsDeterministically) {
  const fs::path dir = temp_dir("multistep_burst");
  ExperimentConfig one = load_experiment(kBurst, {});
  ExperimentConfig eight = load_experiment(kBurst, {"serving.num_scheduler_steps=8"});
  eight.outputs.record_schedule = true;
  RunOptions o;
  o.out_dir = (dir / "a").string();
  const RunOutput ra = run_simulation(eight, o);
  o.out_dir = (dir / "b").string();
  run_simulation(eight, o);
  for (const char* f : {"summary.json", "requests.csv", "steps.csv", "schedule.csv"}) {
    EXPECT_EQ(read_file(dir / "a" / f), read_file(dir / "b" / f)) << f;
  }
  EXPECT_NE(read_file(dir / "a" / "config.yaml").find("num_scheduler_steps: 8"), std::string::npos);
  o.out_dir = (dir / "one").string();
  const RunOutput r1 = run_simulation(one, o);
  EXPECT_EQ(ra.summary.completed + ra.summary.rejected, ra.summary.num_requests);
  EXPECT_EQ(ra.summary.output_tokens, r1.summary.output_tokens);
  EXPECT_LT(ra.summary.num_steps, r1.summary.num_steps);
  EXPECT_EQ(ra.summary.itl_ms.p50, 0.0);  // 7 of every 8 gaps are inside a round
  // Decode rows of rounds count every pass: a multiple of 8 tokens, 8 per sequence.
  bool saw_round = false;
  for (const auto& row : read_csv(dir / "a" / "steps.csv")) {
    if (row.at("prefill_tokens") != "0") continue;
    const long seqs = std::stol(row.at("num_seqs")), dec = std::stol(row.at("decode_tokens"));
    if (dec == 8 * seqs) saw_round = true;
  }
  EXPECT_TRUE(saw_round);
  fs::remove_all(dir);
}

// Every policy mix of policies.yaml (swap and auto preemption, parallel sampling, contiguous
// allocation, every batch formation, queue orders), plus the fair queue, runs with N = 4; but
// for SGLang's formation and the preemptive one, which have no multi-step scheduling and say so
// (exit 2, naming the variant).
TEST(MultiStepRun, EveryShippedPolicyMixRunsWithFourSteps) {
  const fs::path dir = temp_dir("multistep_policies");
  const std::string exp = servelab_home().string() + "/experiments/policies.yaml";
  const std::string four = " --quiet --set serving.num_scheduler_steps=4 --out ";
  std::string text = read_file(exp);
  // Each refusal names the first variant that cannot run; it is then taken out of the file.
  for (const char* variant : {"sglang", "srtf", "fastserve"}) {
    SCOPED_TRACE(variant);
    write_file(dir / "policies.yaml", text);
    const Cli refused =
        run_sim("compare " + (dir / "policies.yaml").string() + four + (dir / "r").string(), dir);
    EXPECT_EQ(refused.code, 2);
    EXPECT_NE(refused.err.find(std::string("variant '") + variant + "'"), std::string::npos)
        << refused.err;
    EXPECT_NE(refused.err.find("does not support multi-step"), std::string::npos) << refused.err;
    const std::size_t at = text.find(std::string("  - name: ") + variant + "\n");
    ASSERT_NE(at, std::string::npos);
    const std::size_t end = std::min(text.find("  - name:", at + 1), text.size());
    text.erase(at, end - at);
  }
  write_file(dir / "policies.yaml", text);
  const Cli cli =
      run_sim("compare " + (dir / "policies.yaml").string() + four + (dir / "c").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  const auto rows = read_csv(dir / "c" / "compare.csv");
  EXPECT_EQ(rows.size(), 21u);
  const Cli fair = run_sim("run " + kBurst + " -q --set serving.num_scheduler_steps=4 " +
                               "--set policies.queue=fair --out " + (dir / "fair").string(),
                           dir);
  EXPECT_EQ(fair.code, 0) << fair.err;
  fs::remove_all(dir);
}

// experiments/multistep.yaml: rounds cut the steps, raise TTFT (arrivals wait for the round's
// end) and make ITL one gap per round; the front end adds its time to TTFT.
TEST(MultiStepRun, ShippedComparisonShowsWhatItDocuments) {
  const fs::path dir = temp_dir("multistep_shipped");
  const std::string exp = servelab_home().string() + "/experiments/multistep.yaml";
  const Cli cli = run_sim("compare " + exp + " --quiet --out " + (dir / "c").string(), dir);
  ASSERT_EQ(cli.code, 0) << cli.err;
  const auto summary = [&](const std::string& variant) {
    return nlohmann::json::parse(read_file(dir / "c" / variant / "summary.json"));
  };
  const nlohmann::json single = summary("v0.6-single-step"), ms8 = summary("v0.6-ms8"),
                       ms16 = summary("v0.6-ms16"), fe = summary("v0.6-ms8-frontend");
  EXPECT_EQ(ms8["requests"]["completed"], single["requests"]["completed"]);
  EXPECT_LT(ms8["num_steps"].get<double>(), single["num_steps"].get<double>() / 3);
  EXPECT_LT(ms16["num_steps"].get<double>(), ms8["num_steps"].get<double>());
  EXPECT_GT(ms8["ttft_ms"]["mean"].get<double>(), single["ttft_ms"]["mean"].get<double>());
  EXPECT_EQ(ms8["itl_ms"]["p50"].get<double>(), 0.0);
  EXPECT_GT(ms8["itl_ms"]["p99"].get<double>(), single["itl_ms"]["p99"].get<double>());
  EXPECT_GT(fe["ttft_ms"]["mean"].get<double>(), ms8["ttft_ms"]["mean"].get<double>());
  fs::remove_all(dir);
}

TEST(MultiStepRun, BadStepCountsAreConfigErrors) {
  const fs::path dir = temp_dir("multistep_errors");
  write_file(dir / "e.yaml",
             "model: tiny\nhardware: H100-SXM\nserving:\n  num_scheduler_steps: 0\n"
             "workload: {type: synthetic, num_requests: 2, arrival: {process: fixed, rate: 1}, "
             "prompt_len: {dist: fixed, value: 8}, output_len: {dist: fixed, value: 4}}\n");
  const Cli cli = run_sim("run " + (dir / "e.yaml").string() + " -q", dir);
  EXPECT_EQ(cli.code, 2);
  EXPECT_NE(cli.err.find("e.yaml:4:"), std::string::npos) << cli.err;
  EXPECT_NE(cli.err.find("serving.num_scheduler_steps"), std::string::npos) << cli.err;
  fs::remove_all(dir);
}

// The engine runs one forward pass per plan: N > 1 is refused with exit code 2, naming where the
// key was set.
TEST(MultiStepRun, EngineRefusesMultiStep) {
  const fs::path dir = temp_dir("multistep_engine");
  write_file(dir / "e.yaml",
             "model: tiny\nhardware: H100-SXM\nserving:\n  num_gpu_blocks: 64\n"
             "  num_scheduler_steps: 4\n"
             "workload: {type: synthetic, num_requests: 2, arrival: {process: fixed, rate: 1}, "
             "prompt_len: {dist: fixed, value: 8}, output_len: {dist: fixed, value: 4}}\n");
  const auto run_engine = [&](const std::string& args) {
    const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
    const std::string cmd =
        servelab_program("engine") + " run " + args + " > " + out.string() + " 2> " + err.string();
    const int status = std::system(cmd.c_str());
    return Cli{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
  };
  const Cli file = run_engine((dir / "e.yaml").string() + " --out " + (dir / "r").string());
  EXPECT_EQ(file.code, 2);
  EXPECT_NE(file.err.find("e.yaml:5:"), std::string::npos) << file.err;
  EXPECT_NE(file.err.find("serving.num_scheduler_steps"), std::string::npos) << file.err;
  const Cli set = run_engine(servelab_home().string() + "/experiments/burst-tiny.yaml --set " +
                             "serving.num_scheduler_steps=2 --out " + (dir / "r").string());
  EXPECT_EQ(set.code, 2);
  EXPECT_NE(set.err.find("--set serving.num_scheduler_steps"), std::string::npos) << set.err;
  EXPECT_FALSE(fs::exists(dir / "r"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
