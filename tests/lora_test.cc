// LoRA adapters in the shared core and the simulator, checked against vLLM's semantics
// (vllm/v1/core/sched/scheduler.py: max_loras and the skip of waiting requests whose adapter would
// exceed it; vllm/v1/core/kv_cache_utils.py: the adapter as an extra key of every block hash):
// admission under max_loras, block hashes and prefix hits per adapter, rejection at arrival, the
// plan's adapter counts, the cost models' adapter term, the workload's `lora:` key and the
// experiment's validation of `serving.lora`.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/block_hash.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "core/scheduler_invariants.h"
#include "core/step_features.h"
#include "serving/config_node.h"
#include "serving/experiment.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/model_config.h"
#include "sim/calibrated_cost_model.h"
#include "sim/roofline_cost_model.h"
#include "sim/sim_backend.h"
#include "tests/test_util.h"
#include "traces/lora_workload.h"
#include "traces/workload.h"

namespace servelab {
namespace {

RequestSpec Req(RequestId id, std::uint32_t lora, std::int32_t prompt = 40,
                std::int32_t outputs = 4, std::uint64_t content = 0) {
  RequestSpec r = make_request(
      id, 0, {{content != 0 ? content : id + 100, 0, static_cast<std::uint32_t>(prompt)}}, outputs);
  r.lora_id = lora;
  r.lora_rank = lora != 0 ? 8 : 0;
  return r;
}

SchedulerConfig LoraConfig(std::int32_t max_loras) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 4096;
  c.max_num_seqs = 64;
  c.max_model_len = 1024;
  c.block_size = 16;
  c.lora.max_loras = max_loras;
  c.lora.max_lora_rank = 16;
  return c;
}

struct Finished : SchedulerObserver {
  void on_finish(const Request& r, TimeNs) override { cached[r.id()] = r.num_cached_tokens; }
  void on_reject(const Request& r, TimeNs) override { rejected.push_back(r.id()); }
  std::map<RequestId, std::int32_t> cached;
  std::vector<RequestId> rejected;
};

// The ids of the plan's entries, in order.
std::vector<RequestId> Ids(const StepPlan& p) {
  std::vector<RequestId> ids;
  for (const ScheduledRequest& e : p.requests) ids.push_back(e.id);
  return ids;
}

void Complete(Scheduler& s, const StepPlan& p, TimeNs t) {
  StepResult r;
  r.sampled_tokens.assign(p.requests.size(), 5);
  s.complete(r, t);
}

TEST(LoraScheduler, SkipsARequestWhoseAdapterWouldExceedMaxLorasAndAdmitsLaterOnes) {
  BlockPool pool(400);
  KvCacheManager kv(pool, 16, 1024, true);
  Finished obs;
  Scheduler s(LoraConfig(1), kv, &obs);
  // Adapter 1, adapter 2, adapter 1 again, the base model, adapter 3.
  s.add_request(Req(0, 1), 0);
  s.add_request(Req(1, 2), 0);
  s.add_request(Req(2, 1), 0);
  s.add_request(Req(3, 0), 0);
  s.add_request(Req(4, 3), 0);
  const StepPlan& p = s.schedule(0);
  check_scheduler_invariants(s, p);
  // vLLM v1: request 1 (a second adapter with max_loras 1) is skipped and stays waiting; the
  // requests after it that add no adapter are admitted; request 4 is skipped too.
  EXPECT_EQ(Ids(p), (std::vector<RequestId>{0, 2, 3}));
  EXPECT_EQ(p.num_loras, 1);
  EXPECT_EQ(p.num_lora_tokens, 80);
  // The skipped requests keep their order at the head of the queue.
  const std::vector<Request*> waiting = s.waiting();
  ASSERT_EQ(waiting.size(), 2u);
  EXPECT_EQ(waiting[0]->id(), 1u);
  EXPECT_EQ(waiting[1]->id(), 4u);
  TimeNs t = 1;
  Complete(s, p, t);
  // While adapter 1 runs, adapter 2 waits; once requests 0 and 2 finish it is admitted (and 3
  // still waits behind it for the one slot).
  std::vector<std::vector<RequestId>> admitted_by_step;
  while (s.has_unfinished()) {
    const StepPlan& q = s.schedule(t);
    check_scheduler_invariants(s, q);
    std::set<std::uint32_t> adapters;
    for (const ScheduledRequest& e : q.requests) {
      if (e.spec->lora_id != 0) adapters.insert(e.spec->lora_id);
    }
    EXPECT_LE(adapters.size(), 1u);
    EXPECT_EQ(q.num_loras, static_cast<std::int32_t>(adapters.size()));
    if (!q.requests.empty()) admitted_by_step.push_back(Ids(q));
    Complete(s, q, ++t);
  }
  ASSERT_GE(admitted_by_step.size(), 5u);
  // Steps 2-4 decode 0, 2 and 3 (outputs 4: the last token samples in step 4); request 1 comes
  // in the step after 0 and 2 finish, request 4 after 1 finishes.
  EXPECT_EQ(admitted_by_step[2], (std::vector<RequestId>{0, 2, 3}));
  EXPECT_EQ(admitted_by_step[3], (std::vector<RequestId>{1}));
  EXPECT_EQ(obs.cached.size(), 5u);
}

TEST(LoraScheduler, MaxLorasTwoAdmitsTwoAdaptersAndTheirRequests) {
  BlockPool pool(400);
  KvCacheManager kv(pool, 16, 1024, true);
  Finished obs;
  Scheduler s(LoraConfig(2), kv, &obs);
  for (RequestId i = 0; i < 6; ++i) s.add_request(Req(i, static_cast<std::uint32_t>(i % 3 + 1)), 0);
  const StepPlan& p = s.schedule(0);
  check_scheduler_invariants(s, p);
  // Adapters 1, 2, 3, 1, 2, 3: the two first adapters' requests go, adapter 3's wait.
  EXPECT_EQ(Ids(p), (std::vector<RequestId>{0, 1, 3, 4}));
  EXPECT_EQ(p.num_loras, 2);
}

TEST(LoraScheduler, RunningAdaptersCountAcrossSteps) {
  BlockPool pool(400);
  KvCacheManager kv(pool, 16, 1024, true);
  Finished obs;
  Scheduler s(LoraConfig(1), kv, &obs);
  s.add_request(Req(0, 1, 40, 10), 0);
  const StepPlan& p = s.schedule(0);
  EXPECT_EQ(Ids(p), (std::vector<RequestId>{0}));
  Complete(s, p, 1);
  // An adapter-2 arrival while adapter 1 runs waits; an adapter-1 arrival joins.
  s.add_request(Req(1, 2), 1);
  s.add_request(Req(2, 1), 1);
  const StepPlan& q = s.schedule(1);
  check_scheduler_invariants(s, q);
  EXPECT_EQ(Ids(q), (std::vector<RequestId>{0, 2}));
  ASSERT_EQ(s.waiting().size(), 1u);
  EXPECT_EQ(s.waiting()[0]->id(), 1u);
}

TEST(LoraScheduler, RejectsAdaptersWhenLoraIsOffOrTheRankIsTooLarge) {
  BlockPool pool(400);
  KvCacheManager kv(pool, 16, 1024, true);
  Finished obs;
  Scheduler off(LoraConfig(0), kv, &obs);
  EXPECT_NE(off.rejection_reason_for(Req(0, 1)).find("LoRA is not enabled"), std::string::npos);
  EXPECT_EQ(off.rejection_reason_for(Req(0, 0)), "");
  off.add_request(Req(0, 1), 0);
  EXPECT_EQ(obs.rejected, (std::vector<RequestId>{0}));
  Scheduler on(LoraConfig(2), kv, &obs);
  RequestSpec big = Req(1, 1);
  big.lora_rank = 32;  // max_lora_rank 16
  EXPECT_NE(on.rejection_reason_for(big).find("max_lora_rank 16"), std::string::npos);
  EXPECT_EQ(on.rejection_reason_for(Req(2, 1)), "");
  SchedulerConfig bad = LoraConfig(-1);
  EXPECT_THROW((Scheduler(bad, kv, &obs)), std::invalid_argument);
}

TEST(LoraBlockHash, TheAdapterIsAnExtraKeyOfEveryBlock) {
  const RequestSpec base = Req(0, 0, 64, 1, 7);
  RequestSpec a1 = Req(1, 1, 64, 1, 7), a1b = Req(2, 1, 64, 1, 7), a2 = Req(3, 2, 64, 1, 7);
  const BlockHash p = hash_block(kNoneHash, base, 0, 16);
  // The same parent: every block of an adapter's request differs from the base model's and
  // from another adapter's, and equals the same adapter's.
  for (std::int32_t b = 0; b < 4; ++b) {
    EXPECT_FALSE(hash_block(p, a1, b, 16) == hash_block(p, base, b, 16)) << b;
    EXPECT_FALSE(hash_block(p, a1, b, 16) == hash_block(p, a2, b, 16)) << b;
    EXPECT_EQ(hash_block(p, a1, b, 16), hash_block(p, a1b, b, 16)) << b;
  }
  // The adapter key and a salt never stand for each other.
  RequestSpec salted = base;
  salted.cache_salt = 1;
  EXPECT_FALSE(hash_block(kNoneHash, salted, 0, 16) == hash_block(kNoneHash, a1, 0, 16));
  RequestSpec both = a1;
  both.cache_salt = 1;
  EXPECT_FALSE(hash_block(kNoneHash, both, 0, 16) == hash_block(kNoneHash, a1, 0, 16));
  EXPECT_FALSE(hash_block(kNoneHash, both, 0, 16) == hash_block(kNoneHash, salted, 0, 16));
}

// The prefix hit of a second request with the same prompt as a finished first one.
std::int32_t SecondHit(std::uint32_t lora_a, std::uint32_t lora_b) {
  BlockPool pool(400);
  KvCacheManager kv(pool, 16, 1024, true);
  Finished obs;
  Scheduler s(LoraConfig(2), kv, &obs);
  s.add_request(Req(0, lora_a, 64, 2, 7), 0);
  TimeNs t = 0;
  while (s.has_unfinished()) {
    const StepPlan& p = s.schedule(t);
    Complete(s, p, ++t);
  }
  s.add_request(Req(1, lora_b, 64, 2, 7), t);
  const StepPlan& p = s.schedule(t);
  EXPECT_EQ(p.requests.size(), 1u);
  const std::int32_t hit = p.requests.empty() ? -1 : p.requests[0].num_cached_prefix;
  Complete(s, p, ++t);
  return hit;
}

TEST(LoraBlockHash, PrefixesHitOnlyUnderTheSameAdapter) {
  EXPECT_EQ(SecondHit(0, 0), 48);  // 4 blocks, the last kept to compute one token
  EXPECT_EQ(SecondHit(1, 1), 48);  // the same adapter shares its KV
  EXPECT_EQ(SecondHit(1, 2), 0);   // another adapter's KV never serves
  EXPECT_EQ(SecondHit(0, 1), 0);   // nor the base model's an adapter
  EXPECT_EQ(SecondHit(1, 0), 0);   // nor an adapter's the base model
}

TEST(LoraStepFeatures, CountedFromThePlanOrFromItsEntries) {
  const RequestSpec a = Req(0, 1), b = Req(1, 2), c = Req(2, 1), d = Req(3, 0);
  StepPlan plan;
  for (const RequestSpec* r : {&a, &b, &c, &d}) {
    ScheduledRequest& e = plan.requests.emplace_back();
    e.id = r->id;
    e.spec = r;
    e.num_tokens = 10;
    e.is_prefill = true;
  }
  plan.num_prefill_tokens = 40;
  const StepFeatures f = StepFeatures::from_plan(plan);  // no totals: from the entries
  EXPECT_EQ(f.lora_tokens, 30);
  EXPECT_EQ(f.num_loras, 2);
}

RooflineCostModel Roofline(std::int32_t rank) {
  const std::string catalog = default_catalog_dir();
  return RooflineCostModel(load_model("Llama-3-8B", catalog), load_hardware("H100-SXM", catalog),
                           16, {}, rank);
}

TEST(LoraCost, RooflineChargesShrinkAndExpandForAdapterTokensAndWeightsPerAdapter) {
  const RooflineCostModel off = Roofline(0), on = Roofline(16), wide = Roofline(64);
  StepFeatures f;
  f.num_tokens = f.decode_tokens = 64;
  f.decode_pairs = f.decode_context_tokens = 64 * 500;
  f.num_sampled = 64;
  const double base = off.breakdown(f).total();
  // No adapter tokens: no LoRA term, the same time with LoRA on.
  EXPECT_EQ(on.breakdown(f).total(), base);
  EXPECT_EQ(on.breakdown(f).lora, 0.0);
  f.lora_tokens = 64;
  f.num_loras = 1;
  const double one = on.breakdown(f).lora;
  EXPECT_GT(one, 0.0);
  EXPECT_EQ(off.breakdown(f).lora, 0.0);  // LoRA off: adapters cost nothing (never scheduled)
  EXPECT_DOUBLE_EQ(on.breakdown(f).total(), base + one);
  // Decode is memory-bound: every extra adapter's weights are read, so more adapters cost more;
  // a larger rank costs more.
  f.num_loras = 8;
  const double eight = on.breakdown(f).lora;
  EXPECT_GT(eight, one);
  EXPECT_GT(wide.breakdown(f).lora, eight);
  // The adapter weights of one layer: r * (sum of inputs + outputs) per module, 2 bytes each.
  const ModelConfig& m = on.model();
  const double h = m.hidden_size, q = m.q_size(), kv = m.kv_size(), inter = m.intermediate_size;
  const double per_adapter = 16 * ((3 * h + q + 2 * h + inter) + (q + 2 * kv + h + 2 * inter + h)) *
                             m.dtype_bytes * m.num_layers;
  double flops = 0, bytes1 = 0, bytes8 = 0;
  on.lora_seconds(64, 1, &flops, &bytes1);
  on.lora_seconds(64, 8, nullptr, &bytes8);
  EXPECT_NEAR(bytes8 - bytes1, 7 * per_adapter, 1e-6 * per_adapter);
  EXPECT_NEAR(flops,
              2.0 * 64 * 16 * ((3 * h + q + 2 * h + inter) + (q + 2 * kv + h + 2 * inter + h)) *
                  m.num_layers,
              1.0);
}

TEST(LoraCost, CalibratedModelUsesItsLoraCoefficientsOrRefuses) {
  CalibratedProfile p;
  p.file = "cost.yaml";
  p.block_bytes = 1 << 20;
  p.coefficients.step_s = 1e-3;
  p.coefficients.per_token_s = 1e-5;
  EXPECT_THROW(CalibratedCostModel(p, 16, 16), ConfigError);
  p.coefficients.lora_token_rank_s = 1e-8;
  p.coefficients.lora_adapter_rank_s = 1e-6;
  p.coefficients.lora_set = true;
  const CalibratedCostModel c(p, 16, 16);
  const CalibratedCostModel no_lora(p, 16, 0);
  CalibrationFeatures f;
  f.num_entries = 4;
  f.step.num_tokens = f.step.decode_tokens = 4;
  const double base = c.seconds(f);
  EXPECT_EQ(no_lora.seconds(f), base);
  f.step.lora_tokens = 3;
  f.step.num_loras = 2;
  EXPECT_NEAR(c.seconds(f) - base, (1e-8 * 3 + 1e-6 * 2) * 16, 1e-15);
  EXPECT_EQ(no_lora.seconds(f), base);
}

std::unique_ptr<Workload> LoraWorkloadFrom(const std::string& lora) {
  YAML::Node doc = YAML::Load(
      "type: synthetic\nnum_requests: 2000\narrival: {process: poisson, rate: 10}\n"
      "prompt_len: {dist: fixed, value: 10}\noutput_len: {dist: fixed, value: 2}\nlora: " +
      lora + "\n");
  return make_workload(ConfigNode(doc, std::make_shared<const std::string>("w.yaml"), ""), 3, ".");
}

TEST(LoraWorkload, AssignsAdaptersByShareAndDistributionDeterministically) {
  std::map<std::uint32_t, int> uniform, zipf, half;
  std::vector<std::uint32_t> first, again;
  for (auto w = LoraWorkloadFrom("{adapters: 4, rank: 8}"); auto r = w->next();) {
    ++uniform[r->lora_id];
    first.push_back(r->lora_id);
    EXPECT_EQ(r->lora_rank, 8);
  }
  for (auto w = LoraWorkloadFrom("{adapters: 4, rank: 8}"); auto r = w->next();) {
    again.push_back(r->lora_id);
  }
  EXPECT_EQ(first, again);
  ASSERT_EQ(uniform.size(), 4u);  // ids 1 .. 4, no base-model request
  for (const auto& [id, n] : uniform) {
    EXPECT_GE(id, 1u);
    EXPECT_NEAR(n, 500, 80);
  }
  for (auto w = LoraWorkloadFrom("{adapters: 4, distribution: zipf, zipf_s: 1.5}");
       auto r = w->next();) {
    ++zipf[r->lora_id];
  }
  // Probabilities 1, 2^-1.5, 3^-1.5, 4^-1.5 normalised: 0.59, 0.21, 0.11, 0.07.
  EXPECT_NEAR(zipf[1], 2000 * 0.59, 80);
  EXPECT_GT(zipf[2], zipf[3]);
  EXPECT_GT(zipf[3], zipf[4]);
  for (auto w = LoraWorkloadFrom("{adapters: 2, share: 0.25}"); auto r = w->next();) {
    ++half[r->lora_id];
    EXPECT_EQ(r->lora_rank, r->lora_id != 0 ? 16 : 0);
  }
  EXPECT_NEAR(half[0], 1500, 80);
}

std::string LoadError(const std::string& serving, const std::string& lora) {
  const std::string text =
      "name: t\nmodel: tiny\nhardware: H100-SXM\nserving:\n  max_num_seqs: 8\n" + serving +
      "workload:\n  type: synthetic\n  num_requests: 4\n  arrival: {process: poisson, rate: 1}\n"
      "  prompt_len: {dist: fixed, value: 10}\n  output_len: {dist: fixed, value: 2}\n" +
      lora;
  try {
    load_experiment_text(text, "x.yaml", ".", "t", {});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LoraConfigKeys, ValidatedWithFileAndLine) {
  EXPECT_EQ(
      LoadError("  lora: {max_loras: 2, max_lora_rank: 8}\n", "  lora: {adapters: 3, rank: 8}\n"),
      "");
  EXPECT_EQ(LoadError("  lora: {}\n", ""), "");  // vLLM's defaults: 1 adapter of rank <= 16
  // Adapters without serving.lora.
  const std::string off = LoadError("", "  lora: {adapters: 3, rank: 8}\n");
  EXPECT_NE(off.find("x.yaml:12"), std::string::npos) << off;
  EXPECT_NE(off.find("serving.lora"), std::string::npos) << off;
  // A rank above max_lora_rank names the rank.
  const std::string rank =
      LoadError("  lora: {max_loras: 2, max_lora_rank: 8}\n", "  lora: {adapters: 3, rank: 16}\n");
  EXPECT_NE(rank.find("x.yaml:13"), std::string::npos) << rank;
  EXPECT_NE(rank.find("workload.lora.rank"), std::string::npos) << rank;
  // vLLM's allowed ranks; max_loras >= 1; unknown keys.
  EXPECT_NE(LoadError("  lora: {max_lora_rank: 12}\n", "").find("serving.lora.max_lora_rank"),
            std::string::npos);
  EXPECT_NE(LoadError("  lora: {max_loras: 0}\n", "").find("serving.lora.max_loras"),
            std::string::npos);
  EXPECT_NE(LoadError("  lora: {max_cpu_loras: 4}\n", "").find("max_cpu_loras"), std::string::npos);
  EXPECT_NE(LoadError("  lora: {}\n", "  lora: {adapters: 0}\n").find("workload.lora.adapters"),
            std::string::npos);
  EXPECT_NE(LoadError("  lora: {}\n", "  lora: {adapters: 2, zipf_s: 2}\n").find("zipf_s"),
            std::string::npos);
  // A mix's parts number their adapters 1, 2, ... alike: one adapter, one rank (the engine
  // stopped mid-run, exit 1, on adapter 1 asked at ranks 8 and 1).
  const auto mix = [](const std::string& rank_b) {
    const std::string part =
        "      workload: {type: synthetic, num_requests: 2, arrival: {process: poisson, rate: 1}, "
        "prompt_len: {dist: fixed, value: 10}, output_len: {dist: fixed, value: 2}, ";
    const std::string text =
        "name: t\nmodel: tiny\nhardware: H100-SXM\nserving:\n  lora: {max_loras: 2, "
        "max_lora_rank: 16}\nworkload:\n  type: mix\n  parts:\n    - class: a\n" +
        part + "lora: {adapters: 1, rank: 8}}\n    - class: b\n" + part + "lora: {adapters: 1" +
        rank_b + "}}\n";
    try {
      load_experiment_text(text, "x.yaml", ".", "t", {});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(mix(", rank: 8"), "");
  const std::string two = mix(", rank: 1");
  EXPECT_NE(two.find("x.yaml:12:"), std::string::npos) << two;
  EXPECT_NE(two.find("rank 1 differs from another part's rank 8 (x.yaml:10:"), std::string::npos)
      << two;
  EXPECT_NE(mix("").find("rank 16 differs"), std::string::npos);  // the default rank counts
}

std::string Experiment(const std::string& serving, const std::string& lora) {
  return "name: lora-e2e\nseed: 5\nmodel: Llama-3-8B\nhardware: H100-SXM\nserving:\n"
         "  max_num_seqs: 64\n" +
         serving +
         "workload:\n  type: synthetic\n  num_requests: 300\n"
         "  arrival: {process: poisson, rate: 40}\n"
         "  prompt_len: {dist: fixed, value: 300}\n  output_len: {dist: fixed, value: 60}\n"
         "  shared_prefix: {num_prefixes: 1, length: 128, fraction: 1.0}\n" +
         lora;
}

nlohmann::json SimRun(const std::string& name, const std::string& yaml) {
  namespace fs = std::filesystem;
  const fs::path dir = test_util::temp_dir("lora_" + name);
  test_util::write_file(dir / "e.yaml", yaml);
  const test_util::Cli r = test_util::run_sim(
      "run " + (dir / "e.yaml").string() + " -q --out " + (dir / "o").string(), dir);
  EXPECT_EQ(r.code, 0) << r.err;
  if (r.code != 0) return {};
  return nlohmann::json::parse(test_util::read_file(dir / "o/summary.json"));
}

TEST(LoraSim, SummaryReportsAdaptersAndTheirCostAndCacheIsolation) {
  const nlohmann::json base = SimRun("base", Experiment("", ""));
  const nlohmann::json off = SimRun("off", Experiment("  lora: {max_loras: 4}\n", ""));
  const nlohmann::json one =
      SimRun("one", Experiment("  lora: {max_loras: 4}\n", "  lora: {adapters: 1, rank: 16}\n"));
  const nlohmann::json many =
      SimRun("many", Experiment("  lora: {max_loras: 4}\n", "  lora: {adapters: 16, rank: 16}\n"));
  ASSERT_FALSE(base.is_null() || off.is_null() || one.is_null() || many.is_null());
  EXPECT_FALSE(base.contains("lora"));  // LoRA off: summary.json as before
  // LoRA on, no request under an adapter: the same run, plus the lora object.
  EXPECT_EQ(off["duration_s"], base["duration_s"]);
  EXPECT_EQ(off["lora"]["adapters_per_step_mean"], 0.0);
  EXPECT_EQ(off["lora"]["requests_by_adapter"]["base"], 300);
  EXPECT_EQ(one["lora"]["requests_by_adapter"]["1"], 300);
  EXPECT_GT(one["lora"]["lora_tokens"].get<std::int64_t>(), 300 * 60);
  EXPECT_DOUBLE_EQ(one["lora"]["adapters_per_step_mean"].get<double>(), 1.0);
  // The adapter GEMMs make every step longer.
  EXPECT_GT(one["e2e_ms"]["mean"].get<double>(), base["e2e_ms"]["mean"].get<double>());
  // One adapter shares the system prompt like the base model; 16 adapters split it 16 ways.
  EXPECT_EQ(one["prefix_cache"]["hit_tokens"], base["prefix_cache"]["hit_tokens"]);
  EXPECT_LT(many["prefix_cache"]["hit_tokens"].get<std::int64_t>(),
            base["prefix_cache"]["hit_tokens"].get<std::int64_t>());
  // max_loras 4 binds with 16 adapters: at most 4 per step.
  EXPECT_LE(many["lora"]["adapters_per_step_mean"].get<double>(), 4.0);
  EXPECT_GT(many["lora"]["adapters_per_step_mean"].get<double>(), 2.0);
  EXPECT_EQ(many["requests"]["completed"], 300);
  // Determinism: the same experiment and seed give the same run (adapter draws, skips, costs).
  EXPECT_EQ(
      SimRun("many2", Experiment("  lora: {max_loras: 4}\n", "  lora: {adapters: 16, rank: 16}\n"))
          .dump(),
      many.dump());
}

// vLLM's adapter slots in the simulator (core/lora_slots.h in SimBackend): an adapter a step needs
// that is in none of max_loras slots is loaded before the forward pass, charged as its own rank's
// bytes over the host link (RooflineCostModel::lora_load_seconds); a resident one costs nothing.
TEST(LoraSim, AdapterLoadsFollowTheSlotsAndAreChargedOverTheHostLink) {
  const std::string catalog = servelab_home().string() + "/experiments/catalog";
  const RooflineCostModel roofline(load_model("Llama-3-8B", catalog),
                                   load_hardware("H100-SXM", catalog), 16, {}, 16);
  // Llama-3-8B at rank 16: 83,886,080 bytes over 64 GB/s x 0.8.
  EXPECT_NEAR(roofline.lora_load_seconds(16), 83'886'080 / (64e9 * 0.8), 1e-12);
  EXPECT_DOUBLE_EQ(roofline.lora_load_seconds(8), roofline.lora_load_seconds(16) / 2);
  SimBackend plain(roofline), slots(roofline);
  slots.set_lora_loads(2, roofline.lora_load_seconds(1));
  EXPECT_THROW(SimBackend(roofline).set_lora_loads(0, 1e-3), std::invalid_argument);
  RequestSpec a = Req(1, 1), b = Req(2, 2), c = Req(3, 3), d = Req(4, 0);
  b.lora_rank = 16;
  static const BlockId kTable[] = {1, 2, 3};
  auto plan = [](std::vector<const RequestSpec*> specs) {
    StepPlan p;
    std::set<std::uint32_t> loras;
    for (const RequestSpec* r : specs) {
      ScheduledRequest e;
      e.id = r->id;
      e.spec = r;
      e.first_token = 40;
      e.num_tokens = 1;
      e.samples = true;
      e.block_table = kTable;
      p.requests.push_back(e);
      if (r->lora_id != 0) {
        loras.insert(r->lora_id);
        ++p.num_lora_tokens;
      }
    }
    p.num_loras = static_cast<std::int32_t>(loras.size());
    return p;
  };
  const double per_rank = roofline.lora_load_seconds(1);
  // {1 (rank 8), 2 (rank 16)}: both loaded, into slots 0 and 1. {2, 3}: 3 evicts 1 (slot 0).
  // {2, 3, base}: nothing to load. {1}: 2 and 3 were last used by the same step; 1 takes the
  // lower slot, 3's.
  const std::vector<std::pair<StepPlan, std::int32_t>> steps = {
      {plan({&a, &b}), 24}, {plan({&b, &c}), 8}, {plan({&b, &c, &d}), 0}, {plan({&a}), 8}};
  for (const auto& [p, ranks] : steps) {
    EXPECT_EQ(slots.execute(p).duration_ns - plain.execute(p).duration_ns,
              seconds_to_ns(ranks * per_rank));
  }
  EXPECT_EQ(slots.lora_loads(), 4);
  EXPECT_EQ(slots.lora_load_ns(), seconds_to_ns(24 * per_rank) + 2 * seconds_to_ns(8 * per_rank));
  EXPECT_EQ(plain.lora_loads(), 0);

  // summary.json: every adapter loaded once when max_loras holds them all; more often when it
  // does not (the running set turns over); none without adapters.
  const nlohmann::json off = SimRun("loads_off", Experiment("  lora: {max_loras: 4}\n", ""));
  const nlohmann::json all = SimRun(
      "loads_all", Experiment("  lora: {max_loras: 16}\n", "  lora: {adapters: 16, rank: 16}\n"));
  const nlohmann::json few = SimRun(
      "loads_few", Experiment("  lora: {max_loras: 4}\n", "  lora: {adapters: 16, rank: 16}\n"));
  ASSERT_FALSE(off.is_null() || all.is_null() || few.is_null());
  EXPECT_EQ(off["lora"]["adapter_loads"], 0);
  EXPECT_EQ(all["lora"]["adapter_loads"], 16);
  EXPECT_GT(few["lora"]["adapter_loads"].get<std::int64_t>(), 32);
}

}  // namespace
}  // namespace servelab
