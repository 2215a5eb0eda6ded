// Adding a policy in one file (docs/policies.md, "Adding a policy"): this file defines a batch
// formation the project does not ship, registers it with a PolicyRegistrar exactly as the
// plugins in policies/ do, and uses it by name from an experiment file.
//
// `trickle` is vLLM v1's running phase followed by at most `per_step` admissions per step (a
// crude admission-rate limiter). Behaviour the tests pin: a burst of waiting requests enters
// the running set `per_step` at a time, which delays first tokens compared with `vllm`.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/batch_formation.h"
#include "core/block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/scheduler.h"
#include "policies/registry.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

class TrickleBatchFormation final : public BatchFormation {
 public:
  explicit TrickleBatchFormation(std::int32_t per_step) : per_step_(per_step) {}
  std::string_view name() const override { return "trickle"; }

  void fill(Scheduler& s, TimeNs now, bool admit) const override {
    std::int32_t budget = s.config().max_num_batched_tokens;
    const std::size_t preempted_before = s.plan().preempted.size();
    // Running requests in list order, chunked to the budget, preempting when out of blocks.
    budget = s.schedule_running(budget, now, Scheduler::OnSelfPreemption::kStop,
                                [](const Request& r, std::int32_t left) {
                                  return std::min(r.num_tokens() - r.num_computed_tokens, left);
                                });
    if (!admit || s.plan().preempted.size() != preempted_before) return;
    Scheduler::AdmissionRule rule;
    rule.max_admissions = per_step_;
    s.admit_waiting(budget, rule, now);
  }

 private:
  std::int32_t per_step_;
};

const PolicyRegistrar kTrickle(
    {PolicyKind::kBatch,
     "trickle",
     "vLLM v1's running phase, then at most per_step admissions per step",
     "tests/policy_plugin_test.cc (an example plugin)",
     {{"per_step", ParamType::kInt, std::int64_t{1}, 1, 1024, {}, "admissions per step"}},
     [](const PolicySpec& spec, PolicyTarget& t) {
       t.scheduler->batch = std::make_shared<const TrickleBatchFormation>(
           static_cast<std::int32_t>(spec.get_int("per_step")));
     },
     /*rank=*/50});

RequestSpec Spec(RequestId id, std::int32_t prompt, std::int32_t output) {
  std::vector<PromptSegment> segs;
  segs.push_back({unique_content_id(7, id), 0, static_cast<std::uint32_t>(prompt)});
  return make_request(id, 0, std::move(segs), output);
}

TEST(PolicyPluginTest, RegisteredPluginIsListedBesideTheBuiltIns) {
  ASSERT_NE(PolicyRegistry::instance().find(PolicyKind::kBatch, "trickle"), nullptr);
  EXPECT_EQ(PolicyRegistry::instance().names(PolicyKind::kBatch),
            "vllm, static, orca, sarathi, prefill-first, sglang, preemptive, trickle");
  EXPECT_NE(format_catalogue().find("trickle"), std::string::npos);
}

TEST(PolicyPluginTest, SchedulerRunsThePluginsFormation) {
  SchedulerConfig c;
  use_policy(c, PolicyKind::kBatch, "trickle", {{"per_step", std::int64_t{2}}});
  c.enable_prefix_caching = false;
  BlockPool pool(64);
  KvCacheManager kv(pool, c.block_size, c.max_model_len, false);
  Scheduler s(c, kv, nullptr);
  for (RequestId id = 0; id < 5; ++id) s.add_request(Spec(id, 20, 4), 0);
  // Two admissions per step: 2, then 2 more beside the first two's decodes, then the last.
  const std::size_t expected_running[] = {2, 4, 5};
  TimeNs t = 0;
  for (std::size_t step = 0; step < 3; ++step) {
    const StepPlan& plan = s.schedule(t);
    EXPECT_EQ(s.num_running(), expected_running[step]) << "step " << step;
    StepResult result;
    result.sampled_tokens.assign(plan.requests.size(), 7);
    s.complete(result, t += 1000);
  }
}

TEST(PolicyPluginTest, AnExperimentUsesThePluginByName) {
  const std::filesystem::path home = servelab_home();
  std::ifstream in(home / "experiments/burst-tiny.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "  batch: vllm\n";
  ASSERT_NE(text.find(from), std::string::npos);
  const std::filesystem::path dir = servelab::test_util::temp_dir("policy_plugin");
  const auto write = [&](const std::string& name, const std::string& batch) {
    std::string t = text;
    t.replace(t.find(from), from.size(), "  batch: " + batch + "\n");
    std::ofstream(dir / name) << t;
    return (dir / name).string();
  };
  const ExperimentConfig trickle =
      load_experiment(write("trickle.yaml", "{name: trickle, per_step: 1}"), {});
  const ExperimentConfig vllm = load_experiment(write("vllm.yaml", "vllm"), {});
  ASSERT_NE(trickle.scheduler.batch, nullptr);
  EXPECT_EQ(trickle.scheduler.batch->name(), "trickle");
  EXPECT_EQ(trickle.policies.batch.get_int("per_step"), 1);
  // The resolved config names the plugin with its parameters.
  EXPECT_NE(resolved_config_yaml(trickle, {}).find("batch: {name: trickle, per_step: 1}"),
            std::string::npos);

  RunOptions o;
  o.write_files = false;
  const RunSummary a = run_simulation(trickle, o).summary;
  const RunSummary b = run_simulation(vllm, o).summary;
  EXPECT_EQ(a.completed, b.completed);
  EXPECT_GT(a.completed, 0);
  // Bursts are admitted one request per step: requests queue longer before their first step.
  EXPECT_GT(a.queueing_ms.mean, b.queueing_ms.mean);
  EXPECT_GT(a.ttft_ms.mean, b.ttft_ms.mean);

  // A misspelt name is an error that names the file and lists the known plugins.
  try {
    load_experiment(write("typo.yaml", "trickel"), {});
    FAIL() << "unknown plugin accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("typo.yaml"), std::string::npos) << what;
    EXPECT_NE(what.find("policies.batch"), std::string::npos) << what;
    EXPECT_NE(what.find("trickle"), std::string::npos) << what;
  }
  std::filesystem::remove_all(dir);
}

// A formation that reserves no lookahead slots (supports_multi_step() false, as trickle) cannot
// run multi-step rounds: asking for them is a ConfigError naming where num_scheduler_steps was
// set and the formation.
TEST(PolicyPluginTest, MultiStepNeedsAFormationThatReservesLookahead) {
  const std::filesystem::path dir = servelab::test_util::temp_dir("policy_plugin_ms");
  const std::string workload =
      "workload: {type: synthetic, num_requests: 2, arrival: {process: fixed, rate: 1}, "
      "prompt_len: {dist: fixed, value: 8}, output_len: {dist: fixed, value: 4}}\n";
  std::ofstream(dir / "t.yaml") << "model: tiny\nhardware: H100-SXM\nserving:\n"
                                << "  num_scheduler_steps: 4\npolicies:\n  batch: trickle\n"
                                << workload;
  std::ofstream(dir / "u.yaml") << "model: tiny\nhardware: H100-SXM\npolicies:\n"
                                << "  batch: trickle\n"
                                << workload;
  const auto error = [](const std::string& file, const std::vector<std::string>& set) {
    try {
      load_experiment(file, set);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string in_file = error((dir / "t.yaml").string(), {});
  EXPECT_NE(in_file.find("t.yaml:4:"), std::string::npos) << in_file;
  EXPECT_NE(in_file.find("serving.num_scheduler_steps"), std::string::npos) << in_file;
  EXPECT_NE(in_file.find("trickle"), std::string::npos) << in_file;
  const std::string by_set = error((dir / "u.yaml").string(), {"serving.num_scheduler_steps=2"});
  EXPECT_NE(by_set.find("--set serving.num_scheduler_steps"), std::string::npos) << by_set;
  EXPECT_EQ(error((dir / "u.yaml").string(), {"serving.num_scheduler_steps=1"}), "accepted");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace servelab
