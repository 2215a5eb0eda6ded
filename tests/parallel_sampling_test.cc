// Parallel sampling (RequestSpec::n > 1): the fork after the prefill, copy-on-write of the
// shared partial block with exact copies and block counts, preemption of a forked request by
// recompute and by swap without leaks, one report per request, and input validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/block_hash.h"
#include "core/host_block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/radix_prefix_cache.h"
#include "core/scheduler.h"
#include "policies/registry.h"
#include "serving/config_node.h"
#include "traces/workload.h"

namespace servelab {
namespace {

using Ids = std::vector<BlockId>;

class Reports : public SchedulerObserver {
 public:
  void on_reject(const Request& r, TimeNs) override { rejected.push_back(r.finish_reason); }
  void on_token(const Request&, TimeNs, TimeNs) override { ++tokens; }
  void on_preempt(const Request&, TimeNs) override { ++preemptions; }
  void on_finish(const Request& r, TimeNs) override {
    finished.push_back(r.id());
    total_outputs.push_back(r.num_total_output_tokens());
    statuses.push_back(r.status);
    if (r.group == nullptr) return;
    for (const Request* s : r.group->samples) outputs.push_back(s->output_tokens);
  }
  std::vector<std::string> rejected;
  std::vector<RequestId> finished;
  std::vector<std::int32_t> total_outputs;
  std::vector<RequestStatus> statuses;
  std::vector<std::vector<std::int32_t>> outputs;  // per sample, at the group's finish
  std::int64_t tokens = 0, preemptions = 0;
};

// Token values: 100 * (sample + 1) + output index, so each sample's stream is recognisable.
StepResult Result(const StepPlan& plan) {
  StepResult r;
  r.duration_ns = kNsPerMs;
  for (const ScheduledRequest& e : plan.requests) {
    const auto sample = static_cast<std::int32_t>(e.id >> kSampleIdShift);
    const auto index = static_cast<std::int32_t>(e.output_tokens.size());
    r.sampled_tokens.push_back(e.samples ? 100 * (sample + 1) + index : -1);
    for (std::int32_t k = 1; k < e.num_samples; ++k) r.fork_tokens.push_back(100 * (k + 1));
  }
  return r;
}

// n = 4, a 40-token prompt, block size 16: the prompt takes 3 blocks, the third holding 8
// tokens. The fork shares all 3 with 3 new samples (9 block allocations avoided); in the first
// decode step samples 0, 1 and 2 find the third block still shared and copy it (3 copies),
// sample 3 is its last holder and writes in place. Net: 6 blocks saved; 6 blocks in use
// instead of 12.
TEST(ParallelSamplingTest, ForkSharesThePromptAndCopiesTheTailOnWrite) {
  BlockPool pool(17);
  KvCacheManager kv(pool, 16, 1024, true);
  SchedulerConfig c;
  Reports obs;
  Scheduler s(c, kv, &obs);
  RequestSpec spec = make_request(7, 0, {{42, 0, 40}}, 3);
  spec.n = 4;
  s.add_request(spec, 0);

  const StepPlan& p0 = s.schedule(0);
  ASSERT_EQ(p0.requests.size(), 1u);
  EXPECT_EQ(p0.requests[0].num_tokens, 40);
  EXPECT_TRUE(p0.requests[0].samples);
  EXPECT_EQ(p0.requests[0].num_samples, 4);
  EXPECT_EQ(
      std::vector<BlockId>(p0.requests[0].block_table.begin(), p0.requests[0].block_table.end()),
      (Ids{1, 2, 3}));
  s.complete(Result(p0), kNsPerMs);

  ASSERT_EQ(s.num_running(), 4u);
  const std::vector<RequestId> ids = {7, sample_request_id(7, 1), sample_request_id(7, 2),
                                      sample_request_id(7, 3)};
  for (std::size_t k = 0; k < 4; ++k) {
    const Request& r = *s.running()[k];
    EXPECT_EQ(r.id(), ids[k]);
    EXPECT_EQ(r.spec.sample, static_cast<std::int32_t>(k));
    EXPECT_EQ(r.block_table, (Ids{1, 2, 3}));
    EXPECT_EQ(r.output_tokens, (std::vector<std::int32_t>{100 * static_cast<int>(k + 1)}));
    EXPECT_TRUE(r.cow_tail());
  }
  for (BlockId b : {1, 2, 3}) EXPECT_EQ(pool.ref_count(b), 4);
  EXPECT_EQ(kv.stats().blocks_saved_by_sharing, 9);
  EXPECT_EQ(kv.stats().cow_copies, 0);
  EXPECT_EQ(pool.num_free_blocks(), 13);
  kv.check_invariants();

  const StepPlan& p1 = s.schedule(kNsPerMs);
  ASSERT_EQ(p1.requests.size(), 4u);
  EXPECT_EQ(p1.num_decode_tokens, 4);
  EXPECT_EQ(p1.copies, (std::vector<BlockMove>{{3, 4}, {3, 5}, {3, 6}}));
  EXPECT_EQ(s.running()[0]->block_table, (Ids{1, 2, 4}));
  EXPECT_EQ(s.running()[1]->block_table, (Ids{1, 2, 5}));
  EXPECT_EQ(s.running()[2]->block_table, (Ids{1, 2, 6}));
  EXPECT_EQ(s.running()[3]->block_table, (Ids{1, 2, 3}));
  for (BlockId b : {1, 2}) EXPECT_EQ(pool.ref_count(b), 4);
  for (BlockId b : {3, 4, 5, 6}) EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(pool.num_usable_blocks() - pool.num_free_blocks(), 6);
  EXPECT_EQ(kv.stats().cow_copies, 3);
  EXPECT_EQ(kv.stats().blocks_saved_by_sharing, 6);
  kv.check_invariants();
  s.complete(Result(p1), 2 * kNsPerMs);

  const StepPlan& p2 = s.schedule(2 * kNsPerMs);
  EXPECT_TRUE(p2.copies.empty());
  s.complete(Result(p2), 3 * kNsPerMs);

  // One report for the request, with every sample's tokens.
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(obs.finished, (std::vector<RequestId>{7}));
  EXPECT_EQ(obs.total_outputs, (std::vector<std::int32_t>{12}));
  EXPECT_EQ(obs.statuses, (std::vector<RequestStatus>{RequestStatus::kFinished}));
  ASSERT_EQ(obs.outputs.size(), 4u);
  EXPECT_EQ(obs.outputs[2], (std::vector<std::int32_t>{300, 301, 302}));
  EXPECT_EQ(obs.tokens, 12);
  EXPECT_EQ(s.counters().num_finished, 1);
  EXPECT_EQ(pool.num_free_blocks(), pool.num_usable_blocks());
  kv.check_invariants();
}

// Blocks that fill with a sample's own outputs are cached under that sample's hashes (output
// tokens are identified per sample): the fork shares the prompt's hashes only, never a hash the
// parent computed ahead for the block its outputs are filling.
TEST(ParallelSamplingTest, EachSampleHashesItsOwnOutputBlocks) {
  BlockPool pool(17);
  KvCacheManager kv(pool, 16, 1024, true);
  SchedulerConfig c;
  Reports obs;
  Scheduler s(c, kv, &obs);
  RequestSpec spec = make_request(7, 0, {{42, 0, 40}}, 24);
  spec.n = 2;
  s.add_request(spec, 0);
  TimeNs now = 0;
  // The prefill (and fork), then 8 decode steps: positions 40..47 fill block 2.
  for (int step = 0; step < 9; ++step) {
    const StepPlan& p = s.schedule(now);
    now += kNsPerMs;
    s.complete(Result(p), now);
  }
  ASSERT_EQ(s.num_running(), 2u);
  const Request& a = *s.running()[0];
  const Request& b = *s.running()[1];
  EXPECT_EQ(a.num_computed_tokens, 48);
  EXPECT_EQ(b.num_computed_tokens, 48);
  EXPECT_EQ(a.block_hashes()[1], b.block_hashes()[1]);  // the shared prompt
  for (const Request* r : {&a, &b}) {
    EXPECT_EQ(r->num_cached_blocks(), 3);
    EXPECT_EQ(pool.block_hash(r->block_table[2]),
              std::optional<BlockHash>(hash_block(r->block_hashes()[1], r->spec, 2, 16)));
  }
  EXPECT_NE(a.block_hashes()[2], b.block_hashes()[2]);
  kv.check_invariants();
}

// A prompt that fills its blocks exactly shares them all and never copies.
TEST(ParallelSamplingTest, BlockAlignedPromptNeedsNoCopy) {
  BlockPool pool(17);
  KvCacheManager kv(pool, 16, 1024, true);
  SchedulerConfig c;
  Scheduler s(c, kv, nullptr);
  RequestSpec spec = make_request(1, 0, {{42, 0, 32}}, 4);
  spec.n = 3;
  s.add_request(spec, 0);
  TimeNs now = 0;
  while (s.has_unfinished()) {
    const StepPlan& p = s.schedule(now);
    EXPECT_TRUE(p.copies.empty());
    now += kNsPerMs;
    s.complete(Result(p), now);
  }
  EXPECT_EQ(kv.stats().cow_copies, 0);
  EXPECT_EQ(kv.stats().blocks_saved_by_sharing, 2 * 2);
  EXPECT_EQ(pool.num_free_blocks(), pool.num_usable_blocks());
}

// 6 blocks of 4 tokens for R (1 prompt token, 12 outputs: 4 blocks) and G (6 prompt tokens,
// n = 2, 8 outputs each: 7 blocks with the shared first one). After step 3, R holds 1 block and
// G's samples 5 (2 shared, the copied tail, one more each); R's step 4 needs a block, and its
// victim (the last running, G's sample 1) takes G's sample 0 with it. Both resume sample by
// sample (a sample never preempts itself while its sibling runs: the sibling goes), and every
// request finishes with all its tokens and no leak.
void RunTightCache(std::string mode, bool radix) {
  SCOPED_TRACE(std::string(mode == "swap" ? "swap" : "recompute") + (radix ? " radix" : " hash"));
  BlockPool pool(7);
  HostBlockPool host(mode == "swap" ? 16 : 0);
  KvCacheOptions o;
  if (mode == "swap") o.host_pool = &host;
  if (radix) o.prefix_cache = make_radix_prefix_cache;
  KvCacheManager kv(pool, 4, 64, true, o);
  SchedulerConfig c;
  c.block_size = 4;
  c.max_model_len = 64;
  use_policy(c, PolicyKind::kPreemption, mode);
  Reports obs;
  Scheduler s(c, kv, &obs);
  s.add_request(make_request(1, 0, {{41, 0, 1}}, 12), 0);
  RequestSpec spec = make_request(3, 0, {{42, 0, 6}}, 8);
  spec.n = 2;
  s.add_request(spec, 0);
  TimeNs now = 0;
  bool whole_group = false;
  std::int64_t swapped_out = 0;
  for (int steps = 0; s.has_unfinished(); ++steps) {
    ASSERT_LT(steps, 200);
    const StepPlan& p = s.schedule(now);
    ASSERT_FALSE(p.empty());
    if (steps == 4) {
      EXPECT_EQ(p.preempted, (std::vector<RequestId>{sample_request_id(3, 1), 3}));
      whole_group = p.preempted.size() == 2;
    }
    swapped_out += static_cast<std::int64_t>(p.swap_out.size());
    kv.check_invariants();
    now += kNsPerMs;
    s.complete(Result(p), now);
    kv.check_invariants();
  }
  EXPECT_TRUE(whole_group);
  if (mode == "swap") {
    EXPECT_GT(swapped_out, 0);
  }
  ASSERT_EQ(obs.finished.size(), 2u);
  const std::size_t g = obs.finished[0] == 3 ? 0 : 1;
  EXPECT_EQ(obs.finished[g], 3u);
  EXPECT_EQ(obs.total_outputs[g], 16);
  EXPECT_EQ(obs.total_outputs[1 - g], 12);
  ASSERT_EQ(obs.outputs.size(), 2u);
  EXPECT_EQ(obs.outputs[0], (std::vector<std::int32_t>{100, 101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(obs.outputs[1], (std::vector<std::int32_t>{200, 201, 202, 203, 204, 205, 206, 207}));
  EXPECT_GE(obs.preemptions, 2);
  EXPECT_EQ(kv.num_free_blocks(), pool.num_usable_blocks());
  EXPECT_EQ(host.num_free_blocks(), host.num_blocks());
}

TEST(ParallelSamplingTest, PreemptionByRecomputeTakesEverySample) {
  RunTightCache("recompute", false);
  RunTightCache("recompute", true);
}

TEST(ParallelSamplingTest, PreemptionBySwapTakesEverySample) {
  RunTightCache("swap", false);
  RunTightCache("swap", true);
}

// stop_sample (a stop string found in one sample's text, engine serve): that sample finishes with
// "stop" and frees what it alone held, its siblings run on to their length, and the request is
// reported once, finished. A request without samples, or one no longer there, is not stopped.
TEST(ParallelSamplingTest, StopSampleEndsOneSampleAndTheOthersRunOn) {
  BlockPool pool(32);
  KvCacheManager kv(pool, 16, 1024, true);
  SchedulerConfig c;
  Reports obs;
  Scheduler s(c, kv, &obs);
  RequestSpec spec = make_request(7, 0, {{42, 0, 40}}, 4);
  spec.n = 3;
  s.add_request(spec, 0);
  RequestSpec single = make_request(8, 0, {{43, 0, 8}}, 4);
  s.add_request(single, 0);
  TimeNs now = 0;
  s.complete(Result(s.schedule(now)), now + kNsPerMs);  // prefill, fork
  now += kNsPerMs;
  s.complete(Result(s.schedule(now)), now + kNsPerMs);  // second tokens; the tails copied
  now += kNsPerMs;
  ASSERT_EQ(s.num_running(), 4u);
  const std::int32_t used = pool.num_usable_blocks() - pool.num_free_blocks();
  EXPECT_FALSE(s.stop_sample(8, now));  // no samples: abort() it
  EXPECT_FALSE(s.stop_sample(sample_request_id(7, 5), now));
  EXPECT_TRUE(s.stop_sample(sample_request_id(7, 1), now));
  EXPECT_FALSE(s.stop_sample(sample_request_id(7, 1), now));  // already finished
  EXPECT_EQ(s.num_running(), 3u);
  // Its own copy of the third block is freed; the two shared prompt blocks stay.
  EXPECT_EQ(pool.num_usable_blocks() - pool.num_free_blocks(), used - 1);
  kv.check_invariants();
  EXPECT_TRUE(obs.finished.empty());  // the group is reported once, when its last sample ends
  while (s.has_unfinished()) {
    s.complete(Result(s.schedule(now)), now + kNsPerMs);
    now += kNsPerMs;
  }
  ASSERT_EQ(obs.finished, (std::vector<RequestId>{7, 8}));
  EXPECT_EQ(obs.statuses[0], RequestStatus::kFinished);
  ASSERT_EQ(obs.outputs.size(), 3u);
  EXPECT_EQ(obs.outputs[0], (std::vector<std::int32_t>{100, 101, 102, 103}));
  EXPECT_EQ(obs.outputs[1], (std::vector<std::int32_t>{200, 201}));
  EXPECT_EQ(obs.outputs[2], (std::vector<std::int32_t>{300, 301, 302, 303}));
  EXPECT_EQ(pool.num_free_blocks(), pool.num_usable_blocks());
  kv.check_invariants();
}

TEST(ParallelSamplingTest, RejectedWhereItCannotRun) {
  BlockPool pool(64);
  KvCacheManager kv(pool, 16, 1024, true);
  SchedulerConfig c;
  c.max_num_seqs = 4;
  Reports obs;
  {
    Scheduler s(c, kv, &obs);
    RequestSpec spec = make_request(1, 0, {{42, 0, 8}}, 2);
    spec.n = 5;  // more samples than seats
    s.add_request(spec, 0);
    spec.id = 2;
    spec.n = 0;
    s.add_request(spec, 0);
  }
  use_policy(c, PolicyKind::kBatch, "static");
  {
    Scheduler s(c, kv, &obs);
    RequestSpec spec = make_request(3, 0, {{42, 0, 8}}, 2);
    spec.n = 2;
    s.add_request(spec, 0);
  }
  ASSERT_EQ(obs.rejected.size(), 3u);
  EXPECT_NE(obs.rejected[0].find("max_num_seqs"), std::string::npos) << obs.rejected[0];
  EXPECT_NE(obs.rejected[1].find("n must be in [1, 1024]"), std::string::npos);
  EXPECT_NE(obs.rejected[2].find("paged allocation"), std::string::npos);
}

TEST(ParallelSamplingTest, WorkloadKeyN) {
  auto load = [](const std::string& n) {
    const ConfigNode root = ConfigNode::load_string(
        "workload:\n  type: synthetic\n  num_requests: 3\n  arrival: {process: poisson, rate: 1}\n"
        "  prompt_len: {dist: fixed, value: 8}\n  output_len: {dist: fixed, value: 2}\n" +
            n,
        "exp.yaml");
    return make_workload(root.at("workload"), 1, ".");
  };
  auto w = load("  n: 3\n");
  const std::optional<RequestSpec> r = w->next();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->n, 3);
  EXPECT_EQ(load("")->next()->n, 1);
  try {
    load("  n: 0\n");
    FAIL() << "n: 0 accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("exp.yaml:7"), std::string::npos) << what;
    EXPECT_NE(what.find("workload.n"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace servelab
