// Property test: random request streams through Scheduler + KvCacheManager + BlockPool, with the
// section 7 invariants checked after every schedule() and every complete().
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/block_pool.h"
#include "core/host_block_pool.h"
#include "core/kv_cache_manager.h"
#include "core/radix_prefix_cache.h"
#include "core/rng.h"
#include "core/scheduler.h"
#include "policies/queue_order.h"
#include "policies/registry.h"

namespace servelab {
namespace {

// A prefix cache plugin's maker (comparable, unlike PrefixCacheFactory).
using CacheMaker = decltype(&make_hash_prefix_cache);

// Samples token 0 for every entry that samples (in every pass of a multi-step round); every
// step takes 1 ms.
class TrivialBackend : public Backend {
 public:
  std::string_view name() const override { return "trivial"; }
  StepResult execute(const StepPlan& plan) override {
    StepResult r;
    r.duration_ns = kNsPerMs;
    for (std::int32_t pass = 0; pass < plan.num_steps; ++pass) {
      for (const ScheduledRequest& e : plan.requests) {
        r.sampled_tokens.push_back(e.samples ? 0 : -1);
        if (pass == 0 && e.num_samples > 1) {
          r.fork_tokens.insert(r.fork_tokens.end(), e.num_samples - 1, 0);
        }
      }
    }
    return r;
  }
};

// Multi-step rounds the streams ran (RunSeed with steps > 1).
std::int64_t g_rounds = 0;

class CountingObserver : public SchedulerObserver {
 public:
  void on_reject(const Request& req, TimeNs) override {
    EXPECT_TRUE(ids.insert(req.id()).second);
    ++rejected;
  }
  void on_preempt(const Request&, TimeNs) override { ++preempted; }
  void on_token(const Request& req, TimeNs, TimeNs) override {
    EXPECT_LE(req.num_output_tokens(), req.spec.max_output_tokens);
  }
  void on_finish(const Request& req, TimeNs) override {
    EXPECT_TRUE(ids.insert(req.id()).second) << "request " << req.id() << " ended twice";
    EXPECT_TRUE(req.block_table.empty());
    if (req.status == RequestStatus::kAborted) {
      EXPECT_FALSE(req.finish_reason.empty());
      ++aborted;
      return;
    }
    EXPECT_EQ(req.status, RequestStatus::kFinished);
    EXPECT_EQ(req.num_output_tokens(), req.spec.max_output_tokens);
    ++finished;
  }
  std::set<RequestId> ids;  // requests that ended (finished, aborted or rejected)
  std::int64_t rejected = 0, finished = 0, aborted = 0, preempted = 0;
};

struct Params {
  SchedulerConfig config;
  std::int32_t num_blocks = 0;
  std::int32_t num_requests = 0;
};

Params RandomParams(Rng& rng) {
  Params p;
  SchedulerConfig& c = p.config;
  c.block_size =
      static_cast<std::int32_t>(rng.uniform_int(0, 2) == 0 ? 4 : 8 << rng.uniform_int(0, 1));
  c.max_num_batched_tokens = static_cast<std::int32_t>(rng.uniform_int(8, 300));
  c.max_num_seqs = static_cast<std::int32_t>(rng.uniform_int(1, 12));
  c.max_model_len = static_cast<std::int32_t>(rng.uniform_int(96, 512));
  c.long_prefill_token_threshold =
      rng.uniform_int(0, 2) == 0 ? static_cast<std::int32_t>(rng.uniform_int(1, 64)) : 0;
  c.enable_chunked_prefill = rng.uniform_int(0, 3) != 0;
  c.enable_prefix_caching = rng.uniform_int(0, 2) != 0;
  // Small pools so that preemption is common.
  p.num_blocks = static_cast<std::int32_t>(rng.uniform_int(4, 64));
  p.num_requests = static_cast<std::int32_t>(rng.uniform_int(20, 80));
  return p;
}

RequestSpec RandomRequest(Rng& rng, RequestId id, TimeNs now, std::uint64_t seed,
                          std::int32_t max_n = 1) {
  // A few shared prefixes (system prompts) of various lengths, so caching finds hits, including
  // whole identical prompts.
  std::vector<PromptSegment> segs;
  const std::int64_t kind = rng.uniform_int(0, 3);
  if (kind > 0) {
    const std::uint32_t len = static_cast<std::uint32_t>(rng.uniform_int(1, 64));
    segs.push_back({unique_content_id(seed, 1'000'000 + kind), 0, len});
  }
  if (kind == 0 || rng.uniform_int(0, 4) != 0) {
    segs.push_back(
        {unique_content_id(seed, id), 0, static_cast<std::uint32_t>(rng.uniform_int(1, 100))});
  }
  const auto max_out = static_cast<std::int32_t>(rng.uniform_int(1, 40));
  RequestSpec spec = make_request(id, now, std::move(segs), max_out);
  // Priority and tenant for the queue orders that use them, derived without drawing from `rng`
  // so the streams stay what they were before those orders existed.
  const std::uint64_t h = mix64(seed ^ (id * 0x9e3779b97f4a7c15ULL));
  spec.priority = static_cast<std::int32_t>(h % 3);
  spec.tenant = static_cast<std::uint32_t>((h >> 8) % 3);
  spec.request_class = static_cast<std::uint32_t>((h >> 24) % 3);  // edf's TTFT objectives
  // Parallel sampling, also without drawing from `rng`.
  if (max_n > 1)
    spec.n = 1 + static_cast<std::int32_t>((h >> 16) % static_cast<std::uint64_t>(max_n));
  return spec;
}

// The section 7 invariants, after schedule() (with its plan and the ids running before it) or
// after complete() (plan null). With a host pool, also its invariants: each host block's
// reference count is the number of swapped tables holding it.
void CheckInvariants(const Scheduler& s, const BlockPool& pool, const StepPlan* plan,
                     const std::set<RequestId>& running_before = {},
                     const HostBlockPool* host = nullptr, const KvCacheManager* kv = nullptr,
                     std::int32_t chunk_size = 0) {
  const SchedulerConfig& c = s.config();
  ASSERT_LE(s.num_running(), static_cast<std::size_t>(c.max_num_seqs));
  pool.check_invariants();
  // The radix tree holds one reference on each of its nodes.
  const RadixTree* tree = kv != nullptr ? radix_tree_of(kv->prefix_cache()) : nullptr;
  if (kv != nullptr) kv->check_invariants();
  std::set<RequestId> swapped;
  if (host != nullptr) {
    host->check_invariants();
    std::vector<std::int32_t> host_holders(static_cast<std::size_t>(host->num_blocks()), 0);
    for (const Request* r : s.swapped()) {
      swapped.insert(r->id());
      ASSERT_EQ(r->status, RequestStatus::kSwapped);
      ASSERT_TRUE(r->block_table.empty());
      ASSERT_FALSE(r->host_block_table().empty());
      // The KV is kept: the host table covers every computed token.
      ASSERT_GE(static_cast<std::int64_t>(r->host_block_table().size()) * c.block_size,
                r->num_computed_tokens);
      for (BlockId b : r->host_block_table()) ++host_holders[static_cast<std::size_t>(b)];
    }
    std::int32_t host_free = 0;
    for (BlockId b = 0; b < host->num_blocks(); ++b) {
      ASSERT_EQ(host->ref_count(b), host_holders[static_cast<std::size_t>(b)]) << "host " << b;
      if (host_holders[static_cast<std::size_t>(b)] == 0) ++host_free;
    }
    ASSERT_EQ(host->num_free_blocks(), host_free);
  } else {
    ASSERT_EQ(s.num_swapped(), 0u);
  }

  // Reference counts equal the number of running tables holding each block.
  std::vector<std::int32_t> holders(static_cast<std::size_t>(pool.num_blocks()), 0);
  for (const Request* r : s.running()) {
    ASSERT_EQ(r->status, RequestStatus::kRunning);
    ASSERT_TRUE(r->host_block_table().empty());
    ASSERT_LE(r->num_computed_tokens, r->num_tokens());
    ASSERT_GE(static_cast<std::int64_t>(r->block_table.size()) * c.block_size,
              r->num_computed_tokens);
    for (BlockId b : r->block_table) {
      ASSERT_GT(b, kNullBlock);
      ASSERT_LT(b, pool.num_blocks());
      ++holders[static_cast<std::size_t>(b)];
    }
  }
  for (const Request* r : s.waiting()) {
    ASSERT_TRUE(r->status == RequestStatus::kWaiting || r->status == RequestStatus::kPreempted);
    ASSERT_TRUE(r->block_table.empty());
    ASSERT_EQ(r->num_computed_tokens, 0);
  }
  std::int32_t free = 0;
  for (BlockId b = 1; b < pool.num_blocks(); ++b) {
    if (tree != nullptr && tree->contains(b)) ++holders[static_cast<std::size_t>(b)];
    ASSERT_EQ(pool.ref_count(b), holders[static_cast<std::size_t>(b)]) << "block " << b;
    if (holders[static_cast<std::size_t>(b)] == 0) ++free;
  }
  ASSERT_EQ(pool.num_free_blocks(), free);

  if (plan == nullptr) return;
  ASSERT_LE(plan->num_tokens(), c.max_num_batched_tokens);
  const std::string bf(c.batch != nullptr ? c.batch->name() : "vllm");
  if (bf == "sarathi" && chunk_size > 0) {
    ASSERT_LE(plan->num_tokens(), chunk_size);  // tau
  }
  // Whole prompts only: without chunking in vllm, and always in orca and prefill-first.
  const bool whole_prompts = bf == "vllm"
                                 ? !c.enable_chunked_prefill && c.long_prefill_token_threshold == 0
                                 : bf == "orca" || bf == "prefill-first";
  std::int32_t prefill = 0, decode = 0;
  std::int64_t decode_context = 0, prefill_pairs = 0, prefill_context = 0, sampled = 0;
  std::set<RequestId> seen;
  for (const ScheduledRequest& e : plan->requests) {
    ASSERT_TRUE(seen.insert(e.id).second) << "request " << e.id << " scheduled twice";
    ASSERT_GE(e.num_tokens, 1);
    if (bf == "vllm" && c.long_prefill_token_threshold > 0) {
      ASSERT_LE(e.num_tokens, c.long_prefill_token_threshold);
    }
    ASSERT_GE(static_cast<std::int64_t>(e.block_table.size()) * c.block_size, e.context_len());
    ASSERT_EQ(e.num_cached_prefix % c.block_size, 0);
    ASSERT_LE(e.num_cached_prefix, e.first_token);
    const std::int32_t known =
        e.spec->prompt_len + static_cast<std::int32_t>(e.output_tokens.size());
    ASSERT_LE(e.context_len(), known);
    ASSERT_EQ(e.samples, e.context_len() == known);
    (e.is_prefill ? prefill : decode) += e.num_tokens;
    if (!e.is_prefill) {
      ASSERT_EQ(e.num_tokens, 1);
      ASSERT_TRUE(e.samples);  // what StepPlan::Totals users rely on
      decode_context += e.context_len();
    } else {
      const std::int64_t n = e.num_tokens;
      prefill_pairs += n * e.first_token + n * (n + 1) / 2;
      prefill_context += e.context_len();
    }
    sampled += e.samples ? 1 : 0;
    // Without chunking (and no threshold) an admission takes its whole remaining sequence.
    if (whole_prompts && !running_before.count(e.id)) {
      ASSERT_TRUE(e.samples) << "admitted " << e.id << " with a partial prompt";
    }
  }
  ASSERT_EQ(plan->num_prefill_tokens, prefill);
  ASSERT_EQ(plan->num_decode_tokens, decode);
  // Kept through refunds (unschedule) too.
  ASSERT_TRUE(plan->totals.valid);
  ASSERT_EQ(plan->totals.decode_context_tokens, decode_context);
  ASSERT_EQ(plan->totals.prefill_pairs, prefill_pairs);
  ASSERT_EQ(plan->totals.prefill_context_tokens, prefill_context);
  ASSERT_EQ(plan->totals.num_sampled, sampled);
  // Never swap in and out in the same step (vLLM v0's SchedulerOutputs assert; the preemptive
  // formation may swap out, then in, and no request both); a swap-out is a preemption; nobody
  // swapped is scheduled.
  if (bf != "preemptive") {
    ASSERT_TRUE(plan->swap_in.empty() || plan->swap_out.empty());
  }
  if (!plan->swap_out.empty()) {
    ASSERT_FALSE(plan->preempted.empty());
  }
  for (RequestId id : seen) ASSERT_FALSE(swapped.count(id));
  // Admission waits while anyone is swapped out (preemptive: while anyone better ranked is).
  if (!swapped.empty() && bf != "preemptive") {
    for (RequestId id : seen) {
      ASSERT_TRUE(running_before.count(id) || plan->swap_in.size() > 0) << "admitted " << id;
    }
  }
  if (!swapped.empty() && bf == "preemptive" &&
      (c.victim == nullptr || c.victim->name() == "last-running")) {
    for (const Request* r : s.running()) {
      if (running_before.count(r->id())) continue;
      for (const Request* w : s.swapped()) {
        ASSERT_TRUE(s.waiting_queue().ranks_before(*r, *w))
            << "started " << r->id() << " before the better-ranked swapped " << w->id();
      }
    }
  }
  // Every scheduled request is running; every preempted one is waiting and not scheduled.
  std::set<RequestId> running;
  for (const Request* r : s.running()) running.insert(r->id());
  for (RequestId id : seen) ASSERT_TRUE(running.count(id)) << "scheduled " << id << " not running";
  for (RequestId id : plan->preempted) {
    ASSERT_FALSE(seen.count(id));
    ASSERT_FALSE(running.count(id));
  }
  // A step that preempted admits nobody, except in the preemptive formation, whose
  // displacements make room for better-ranked waiting requests: with the last-running victim,
  // every victim still waiting ranks after every request admitted in the step.
  if (!plan->preempted.empty()) {
    const bool last_running = c.victim == nullptr || c.victim->name() == "last-running";
    for (RequestId id : seen) {
      if (running_before.count(id)) continue;
      ASSERT_EQ(bf, "preemptive") << "admitted " << id;
      if (!last_running) continue;
      const Request* admitted = nullptr;
      for (const Request* r : s.running()) admitted = r->id() == id ? r : admitted;
      for (const Request* r : s.waiting()) {
        if (std::find(plan->preempted.begin(), plan->preempted.end(), r->id()) ==
            plan->preempted.end()) {
          continue;
        }
        ASSERT_TRUE(s.waiting_queue().ranks_before(*admitted, *r))
            << "admitted " << id << " ranks after victim " << r->id();
      }
    }
  }
  // Maximum-length reservation: static and orca never preempt.
  if (bf == "static" || bf == "orca") {
    ASSERT_TRUE(plan->preempted.empty());
  }
  // Static: nobody joins a running batch.
  if (bf == "static" && !running_before.empty()) {
    for (RequestId id : seen) ASSERT_TRUE(running_before.count(id)) << "joined " << id;
  }
  // Prefill-first: a step admits (prefill-only) or runs the running requests, never both.
  if (bf == "prefill-first") {
    std::size_t admitted = 0;
    for (RequestId id : seen) admitted += running_before.count(id) == 0 ? 1 : 0;
    ASSERT_TRUE(admitted == 0 || admitted == seen.size()) << "a mixed prefill-first step";
  }
  // SGLang: a step that admits is a prefill batch: a running request in it is one whose prefill
  // (a chunked prompt, or a resumed request's prompt + outputs) goes on, never a decode.
  if (bf == "sglang") {
    bool admitted = false;
    for (RequestId id : seen) admitted = admitted || running_before.count(id) == 0;
    if (admitted) {
      for (const ScheduledRequest& e : plan->requests) {
        if (running_before.count(e.id) == 0) continue;
        for (const Request* r : s.running()) {
          if (r->id() == e.id) {  // it had prompt (or, resumed, prompt + outputs) left
            ASSERT_TRUE(e.first_token < r->spec.prompt_len || r->num_tokens() - e.first_token > 1)
                << "request " << e.id << " decodes in an sglang prefill batch";
          }
        }
      }
    }
  }
  // Some request can always run: the first running one, or the head of an idle queue.
  if (s.has_unfinished()) {
    ASSERT_FALSE(plan->requests.empty());
  }
}

// One of every registered queue order (YAML values), some with their knobs set.
const char* const kQueues[] = {
    "fcfs",
    "priority",
    "sjf",
    "{name: sjf, max_wait_s: 0.002}",
    "{name: predicted-sjf, error: 1, max_wait_s: 0.001}",
    "{name: fair, input_weight: 1, output_weight: 3}",
    "{name: lpm, max_queue: 6}",
    "dfs-weight",
    "lof",
    "random",
    "edf",
    "{name: edf, late: demote, slack_ms: 0.5}",
    "mlfq",
    "{name: mlfq, levels: 3, quantum_ms: 1, growth: 3, starve_s: 0.005}"};
// Registered queue orders: kQueues lists sjf, edf and mlfq twice (without and with max_wait_s,
// late: keep and late: demote, without and with starvation prevention).
constexpr std::size_t kQueueOrders = std::size(kQueues) - 3;

// A reduced run (SERVELAB_SANITIZER_RUN set: this program's ctest entries in the sanitizer build,
// tests/CMakeLists.txt), where these streams run several times slower: the batch formations
// under every other queue order, the queue orders over 8 seeds instead of 24. The release run
// takes every case; the sanitizers need the code paths, which the reduced lists still reach.
bool ReducedRun() { return std::getenv("SERVELAB_SANITIZER_RUN") != nullptr; }

// Whether the queue order `queue` (YAML value) ranks requests (what batch preemptive needs).
bool Ranks(const std::string& queue) {
  const ConfigNode node = ConfigNode::load_string("queue: " + queue + "\n", "test");
  return make_waiting_queue(parse_policy_spec(PolicyKind::kQueue, node.at("queue")), 1)->ranks();
}

// edf's TTFT objectives of the three request classes RandomRequest draws (the third has none).
const std::vector<TimeNs> kTtftTargets = {kNsPerMs, 50 * kNsPerMs, kNoTtftTarget};

const std::string& VictimName(const std::string& v) { return v; }

// One random stream under queue order `queue` (YAML value; "" for the scheduler's default FCFS),
// preemption `victim`, batch formation `bf` and preemption cap `max_preemptions`, adding its
// preemptions and aborts to `totals` if given. The
// formation's own knobs (sarathi's tau) derive from the seed without drawing from the stream.
// `mode` swap / auto get a small host pool (derived from the seed, sometimes too small for a
// victim, so the recompute fallback runs too); auto prefers swapping victims with more than
// two blocks' worth of computed tokens.
void RunSeed(std::uint64_t seed, const std::string& queue = "", std::string victim = "last-running",
             std::string bf = "vllm", std::int32_t max_preemptions = 0,
             SchedulerCounters* totals = nullptr, std::string mode = "recompute",
             std::int64_t* swapped_blocks = nullptr, CacheMaker cache = make_hash_prefix_cache,
             std::int32_t max_n = 1, PrefixCacheStats* sharing = nullptr,
             std::int32_t sched_steps = 1) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " queue '" + queue + "' victim " +
               VictimName(victim) + " batch " + bf + " max_preemptions " +
               std::to_string(max_preemptions) + " cache " +
               (cache == make_radix_prefix_cache ? "radix" : "hash") + " max_n " +
               std::to_string(max_n) + " steps " + std::to_string(sched_steps));
  Rng rng = Rng::stream(seed, "scheduler_property");
  Params p = RandomParams(rng);
  p.config.num_scheduler_steps = sched_steps;
  use_policy(p.config, PolicyKind::kPreemption, mode);  // before the victim: it sets one
  use_policy(p.config, PolicyKind::kVictim, victim);
  use_policy(p.config, PolicyKind::kBatch, bf);
  p.config.max_preemptions = max_preemptions;
  if (mode == "auto") {
    const std::int32_t bs = p.config.block_size;
    p.config.prefer_swap = [bs](const Request& r) { return r.num_computed_tokens > 2 * bs; };
  }
  std::int32_t chunk_size = 0;  // sarathi's tau (0: the budget)
  if (bf == "sarathi" && seed % 2 == 0) {
    chunk_size = static_cast<std::int32_t>(4 + mix64(seed) % 64);
    use_policy(p.config, PolicyKind::kBatch, bf, {{"chunk_size", std::int64_t{chunk_size}}});
  }
  const SchedulerConfig& c = p.config;
  SCOPED_TRACE("bs " + std::to_string(c.block_size) + " blocks " + std::to_string(p.num_blocks) +
               " budget " + std::to_string(c.max_num_batched_tokens) + " seqs " +
               std::to_string(c.max_num_seqs) + " max_len " + std::to_string(c.max_model_len) +
               " threshold " + std::to_string(c.long_prefill_token_threshold) +
               (c.enable_chunked_prefill ? " chunked" : " unchunked") +
               (c.enable_prefix_caching ? " cached" : " uncached"));

  BlockPool pool(p.num_blocks);
  const bool swapping = mode != "recompute";
  HostBlockPool host(swapping ? static_cast<std::int32_t>(mix64(seed + 7) % 48) : 0);
  KvCacheOptions kv_options;
  if (swapping) kv_options.host_pool = &host;
  kv_options.prefix_cache = cache;
  KvCacheManager kv(pool, c.block_size, c.max_model_len, c.enable_prefix_caching, kv_options);
  const HostBlockPool* host_check = swapping ? &host : nullptr;
  CountingObserver obs;
  std::unique_ptr<WaitingQueue> waiting;
  if (!queue.empty()) {
    const ConfigNode node = ConfigNode::load_string("queue: " + queue + "\n", "test");
    waiting = make_waiting_queue(parse_policy_spec(PolicyKind::kQueue, node.at("queue")), seed,
                                 kTtftTargets);
  }
  Scheduler s(c, kv, &obs, std::move(waiting));
  TrivialBackend backend;

  TimeNs now = 0;
  RequestId next_id = 0;
  std::int64_t steps = 0;
  constexpr std::int64_t kMaxSteps = 20'000;  // far beyond any run's need: a stall fails the test
  while (next_id < static_cast<RequestId>(p.num_requests) || s.has_unfinished()) {
    // Bursty arrivals: usually nothing, sometimes several at once.
    if (next_id < static_cast<RequestId>(p.num_requests)) {
      const std::int64_t burst = rng.uniform_int(0, 5) == 0 ? rng.uniform_int(1, 4) : 0;
      for (std::int64_t k = 0; k < burst && next_id < static_cast<RequestId>(p.num_requests); ++k) {
        s.add_request(RandomRequest(rng, next_id, now, seed, max_n), now);
        ++next_id;
      }
    }
    if (!s.has_unfinished()) {
      now += kNsPerMs;
      continue;
    }
    std::set<RequestId> running_before;
    for (const Request* r : s.running()) running_before.insert(r->id());
    std::set<RequestId> swapped_before;  // may resume into a round (not admitted: swapped in)
    for (const Request* r : s.swapped()) swapped_before.insert(r->id());
    const StepPlan& plan = s.schedule(now);
    CheckInvariants(s, pool, &plan, running_before, host_check, &kv, chunk_size);
    if (testing::Test::HasFatalFailure()) return;
    // A round: decodes of requests with outputs only, lookahead slots held, nobody admitted.
    ASSERT_TRUE(plan.num_steps == 1 || plan.num_steps == sched_steps);
    if (plan.num_steps > 1) {
      ++g_rounds;
      ASSERT_EQ(plan.num_prefill_tokens, 0);
      ASSERT_EQ(plan.num_fork_tokens, 0);
      for (const ScheduledRequest& e : plan.requests) {
        ASSERT_TRUE(running_before.count(e.id) || swapped_before.count(e.id))
            << "admitted " << e.id << " into a round";
        ASSERT_FALSE(e.output_tokens.empty());
        const std::int64_t need =
            std::min<std::int64_t>(e.first_token + sched_steps, e.spec->total_tokens() - 1);
        ASSERT_GE(static_cast<std::int64_t>(e.block_table.size()) * c.block_size, need);
      }
    }
    if (swapped_blocks != nullptr)
      *swapped_blocks += static_cast<std::int64_t>(plan.swap_out.size());
    const StepResult result = backend.execute(plan);
    now += result.duration_ns;
    s.complete(result, now);
    CheckInvariants(s, pool, nullptr, {}, host_check, &kv);
    if (testing::Test::HasFatalFailure()) return;
    ASSERT_LT(++steps, kMaxSteps) << "no progress";
  }

  const SchedulerCounters& n = s.counters();
  EXPECT_EQ(n.num_arrived, p.num_requests);
  EXPECT_EQ(n.num_finished + n.num_rejected + n.num_aborted, n.num_arrived);
  // Without a preemption cap nothing is aborted, but by prefill-first's prompt limit (vLLM v0
  // ignores a resumed request whose prompt and outputs passed the budget).
  if (max_preemptions == 0 && bf != "prefill-first") {
    EXPECT_EQ(n.num_aborted, 0);
  }
  if (totals != nullptr) {
    totals->num_preemptions += n.num_preemptions;
    totals->num_aborted += n.num_aborted;
  }
  EXPECT_EQ(obs.finished, n.num_finished);
  EXPECT_EQ(obs.aborted, n.num_aborted);
  EXPECT_EQ(obs.rejected, n.num_rejected);
  EXPECT_EQ(obs.preempted, n.num_preemptions);
  EXPECT_EQ(obs.ids.size(), static_cast<std::size_t>(p.num_requests));
  // Nothing leaks: every usable block is free again (radix: or an unlocked tree node).
  EXPECT_EQ(kv.num_free_blocks(), pool.num_usable_blocks());
  if (radix_tree_of(kv.prefix_cache()) != nullptr) {
    EXPECT_EQ(radix_tree_of(kv.prefix_cache())->num_unlocked(),
              radix_tree_of(kv.prefix_cache())->num_nodes());
  }
  kv.check_invariants();
  if (sharing != nullptr) {
    sharing->cow_copies += kv.stats().cow_copies;
    sharing->blocks_saved_by_sharing += kv.stats().blocks_saved_by_sharing;
    sharing->hit_tokens += kv.stats().hit_tokens + kv.stats().preempted_hit_tokens;
  }
  EXPECT_EQ(host.num_free_blocks(), host.num_blocks());
  host.check_invariants();
}

// Swap and auto preemption (vllm and preemptive formations) under every victim rule and queue
// order (preemptive: those that rank), with and
// without a preemption cap and with host pools from empty to roomy: the invariants (device and
// host) after each step, nothing leaks, and the streams do swap.
TEST(SchedulerPropertyTest, SwapAndAutoPreemptionKeepEveryInvariant) {
  // The swap paths depend on the queue order only through where a victim returns; the orders
  // that re-sort every step (lpm, dfs-weight, lof, random) run under recompute in the tests
  // below, and leaving them out here keeps this test's time under the sanitizer.
  const char* const queues[] = {"fcfs",
                                "priority",
                                "sjf",
                                "{name: predicted-sjf, error: 1}",
                                "{name: fair, input_weight: 1, output_weight: 3}",
                                "{name: mlfq, levels: 3, quantum_ms: 1, starve_s: 0.005}"};
  for (std::string bf : {"vllm", "preemptive"}) {
    for (std::string mode : {"swap", "auto"}) {
      std::int64_t swapped_blocks = 0;
      SchedulerCounters totals;
      for (std::string victim :
           {"last-running", "lowest-priority", "fewest-computed", "most-blocks"}) {
        for (const char* queue : queues) {
          if (bf == "preemptive" && !Ranks(queue)) continue;
          for (std::uint64_t seed = 1; seed <= 8; ++seed) {
            RunSeed(seed, queue, victim, bf, static_cast<std::int32_t>(seed % 3), &totals, mode,
                    &swapped_blocks);
            if (HasFatalFailure()) return;
          }
        }
      }
      EXPECT_GT(swapped_blocks, 0) << bf << " " << mode;
      EXPECT_GT(totals.num_preemptions, 0) << bf << " " << mode;
      EXPECT_GT(totals.num_aborted, 0) << bf << " " << mode;
    }
  }
}

TEST(SchedulerPropertyTest, RandomStreamsKeepEveryInvariant) {
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    RunSeed(seed);
    if (HasFatalFailure()) return;
  }
}

// The same invariants under every registered queue order, with both preemption victims.
TEST(SchedulerPropertyTest, EveryQueueOrderKeepsEveryInvariant) {
  const auto& queues = kQueues;
  const std::size_t registered = PolicyRegistry::instance().list(PolicyKind::kQueue).size();
  ASSERT_EQ(registered, kQueueOrders) << "a new queue order needs adding here";
  for (const char* queue : queues) {
    for (std::string victim : {"last-running", "lowest-priority"}) {
      for (std::uint64_t seed = 1; seed <= (ReducedRun() ? 8u : 24u); ++seed) {
        RunSeed(seed, queue, victim);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Every batch formation under every victim rule and queue order, with and without a
// preemption cap: the invariants after each step, and every request ends (finished, rejected,
// or aborted with a reason).
TEST(SchedulerPropertyTest, EveryBatchFormationKeepsEveryInvariant) {
  const auto& queues = kQueues;
  const std::size_t registered = PolicyRegistry::instance().list(PolicyKind::kBatch).size();
  ASSERT_EQ(registered, 7u) << "a new batch formation needs adding here";
  for (std::string bf :
       {"vllm", "static", "orca", "sarathi", "prefill-first", "sglang", "preemptive"}) {
    for (std::string victim :
         {"last-running", "lowest-priority", "fewest-computed", "most-blocks"}) {
      SchedulerCounters totals;
      for (std::size_t qi = 0; qi < std::size(queues); ++qi) {
        const char* queue = queues[qi];
        if (ReducedRun() && qi % 2 == 1) continue;
        if (bf == "preemptive" && !Ranks(queue)) continue;  // refused (PreemptiveExperimentTest)
        for (std::uint64_t seed = 1; seed <= 4; ++seed) {
          RunSeed(seed, queue, victim, bf, static_cast<std::int32_t>(seed % 3), &totals);
          if (HasFatalFailure()) return;
        }
      }
      // The streams reach the paths under test: preemption (and the cap) wherever a formation
      // can preempt at all.
      if (bf == "static" || bf == "orca") {
        EXPECT_EQ(totals.num_preemptions, 0);
      } else {
        EXPECT_GT(totals.num_preemptions, 0) << bf << " " << VictimName(victim);
        // sglang's reservation keeps a request's preemptions below these streams' cap.
        if (bf != "sglang") {
          EXPECT_GT(totals.num_aborted, 0) << bf << " " << VictimName(victim);
        }
      }
    }
  }
}

// Across seeds the generator must actually reach the interesting paths.
TEST(SchedulerPropertyTest, StreamsExercisePreemptionRejectionAndHits) {
  std::int64_t preemptions = 0, rejections = 0, hits = 0, recomputed = 0;
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    Rng rng = Rng::stream(seed, "scheduler_property");
    const Params p = RandomParams(rng);
    BlockPool pool(p.num_blocks);
    KvCacheManager kv(pool, p.config.block_size, p.config.max_model_len,
                      p.config.enable_prefix_caching);
    Scheduler s(p.config, kv, nullptr);
    TrivialBackend backend;
    TimeNs now = 0;
    for (RequestId id = 0; id < static_cast<RequestId>(p.num_requests); ++id) {
      s.add_request(RandomRequest(rng, id, now, seed), now);
    }
    for (int step = 0; s.has_unfinished() && step < 20'000; ++step) {
      const StepPlan& plan = s.schedule(now);
      const StepResult result = backend.execute(plan);
      now += result.duration_ns;
      s.complete(result, now);
    }
    preemptions += s.counters().num_preemptions;
    rejections += s.counters().num_rejected;
    recomputed += s.counters().num_recomputed_tokens;
    hits += kv.stats().hit_tokens + kv.stats().preempted_hit_tokens;
    EXPECT_FALSE(s.has_unfinished());
  }
  EXPECT_GT(preemptions, 50);
  EXPECT_GT(rejections, 0);
  EXPECT_GT(hits, 0);
  EXPECT_GT(recomputed, 0);
}

}  // namespace
}  // namespace servelab

namespace servelab {
namespace {

// The radix prefix cache and parallel sampling (n up to 4, copy-on-write) under every batch
// formation that allocates on demand, every victim rule and both preemption modes: the
// invariants (pool, radix tree, host) after each step, no leaks, and the paths are reached.
TEST(SchedulerPropertyTest, RadixCacheAndParallelSamplingKeepEveryInvariant) {
  PrefixCacheStats radix, forks;
  SchedulerCounters totals;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    RunSeed(seed, "", "last-running", "vllm", 0, &totals, "recompute", nullptr,
            make_radix_prefix_cache, 1, &radix);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(radix.hit_tokens, 0);
  const std::string victims[] = {"last-running", "lowest-priority", "fewest-computed",
                                 "most-blocks"};
  for (const CacheMaker cache : {make_hash_prefix_cache, make_radix_prefix_cache}) {
    for (std::uint64_t seed = 100; seed <= 115; ++seed) {
      const std::string v = victims[seed % 4];
      RunSeed(seed, "", v, "vllm", seed % 3 == 0 ? 3 : 0, &totals, "recompute", nullptr, cache, 4,
              &forks);
      if (HasFatalFailure()) return;
      RunSeed(seed, "", v, "vllm", 0, &totals, "swap", nullptr, cache, 4, &forks);
      if (HasFatalFailure()) return;
      RunSeed(seed, "", v, seed % 2 == 0 ? "sarathi" : "prefill-first", 0, &totals, "recompute",
              nullptr, cache, 4, &forks);
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GT(forks.cow_copies, 0);
  EXPECT_GT(forks.blocks_saved_by_sharing, 0);
  EXPECT_GT(totals.num_preemptions, 0);
  RecordProperty("cow_copies", static_cast<int>(forks.cow_copies));
  RecordProperty("preemptions", static_cast<int>(totals.num_preemptions));
}

// Multi-step rounds (num_scheduler_steps 2 to 8) under every batch formation, preemption by
// recompute, swap and auto, the fair queue, the radix cache and parallel sampling: the invariants
// after each step and round (lookahead held, no admission, decodes only), no leaks, every request
// ends, and rounds do happen.
TEST(SchedulerPropertyTest, MultiStepRoundsKeepEveryInvariant) {
  g_rounds = 0;
  SchedulerCounters totals;
  for (std::string bf : {"vllm", "static", "orca", "sarathi", "prefill-first"}) {
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
      RunSeed(seed, "", "last-running", bf, static_cast<std::int32_t>(seed % 3), &totals,
              "recompute", nullptr, make_hash_prefix_cache, 1, nullptr,
              static_cast<std::int32_t>(2 + seed % 7));
      if (HasFatalFailure()) return;
    }
  }
  const std::string victims[] = {"last-running", "lowest-priority", "fewest-computed",
                                 "most-blocks"};
  std::int64_t swapped_blocks = 0;
  PrefixCacheStats forks;
  for (std::uint64_t seed = 100; seed <= 123; ++seed) {
    RunSeed(seed, seed % 2 == 0 ? "{name: fair, input_weight: 1, output_weight: 3}" : "",
            victims[seed % 4], seed % 3 == 0 ? "prefill-first" : "vllm", 0, &totals,
            seed % 3 == 0 ? "recompute" : (seed % 2 == 0 ? "swap" : "auto"), &swapped_blocks,
            seed % 4 < 2 ? make_radix_prefix_cache : make_hash_prefix_cache, seed % 5 == 0 ? 1 : 4,
            &forks, static_cast<std::int32_t>(2 + seed % 7));
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(g_rounds, 1000);
  EXPECT_GT(totals.num_preemptions, 0);
  EXPECT_GT(swapped_blocks, 0);
  EXPECT_GT(forks.cow_copies, 0);
  RecordProperty("rounds", static_cast<int>(g_rounds));
}

}  // namespace
}  // namespace servelab
