// Idle-session KV offload (issue 22, item 5: "blocks of idle sessions ... move down a tier and
// come back on a later hit"; kv_offload.idle_offload_s): the pool's uncache of a free block, the
// manager's offload_idle_blocks, IdleSessionOffload's timing, and whole multi-turn simulations.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/idle_session_offload.h"
#include "core/kv_cache_manager.h"
#include "core/kv_offload_tiers.h"
#include "serving/experiment.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

constexpr std::int32_t kBs = 16;

TEST(BlockPoolIdle, UncacheFreeBlockDropsTheHashAndIsReusedFirst) {
  BlockPool pool(5);  // 4 usable
  std::vector<BlockId> got;
  pool.get_new_blocks(2, got);
  const BlockHash h{1, 2};
  pool.cache_block(got[0], h);
  pool.free_blocks(got);  // queue: 3, 4, got[0], got[1]
  ASSERT_EQ(pool.lookup(h), got[0]);
  EXPECT_THROW(pool.uncache_free_block(got[1]), std::logic_error);  // carries no hash
  const std::int64_t evictions = pool.num_evictions();
  pool.uncache_free_block(got[0]);
  EXPECT_FALSE(pool.lookup(h).has_value());
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_EQ(pool.num_cached_blocks(), 0);
  EXPECT_EQ(pool.num_evictions(), evictions);  // an offload, not an eviction
  EXPECT_EQ(pool.free_queue().front(), got[0]);
  pool.check_invariants();
  std::vector<BlockId> next;
  pool.get_new_blocks(1, next);
  EXPECT_EQ(next[0], got[0]);
  pool.check_invariants();
}

// A session's turn: its prompt is stream `stream`'s first `len` tokens.
Request turn(RequestId id, std::uint64_t session, std::uint32_t len) {
  RequestSpec spec = make_request(id, 0, {{77, 0, len}}, 4);
  spec.session = session;
  return Request(std::move(spec));
}

// Admits req as the scheduler would: lookup, allocate the rest, advance computed tokens.
PrefixHit admit(KvCacheManager& kv, Request& req) {
  PrefixHit hit = kv.get_computed_blocks(req);
  const std::int32_t n = req.num_tokens() - hit.num_tokens;
  EXPECT_TRUE(kv.allocate_slots(req, n, &hit));
  req.num_computed_tokens = hit.num_tokens + n;
  kv.check_invariants();
  return hit;
}

struct Fixture {
  BlockPool pool{17};  // 16 usable: nothing is ever evicted here
  KvOffloadTiers tiers{{64}};
  KvCacheManager kv{pool, kBs, 1024, true, [this] {
                      KvCacheOptions o;
                      o.offload = &tiers;
                      return o;
                    }()};
  SchedulerObserver sink;
  IdleSessionOffload idle{sink, 1000};  // 1 us of idle time
};

// Runs one turn of session 5 to its finish at t = 0.
void finish_first_turn(Fixture& f) {
  Request first = turn(1, 5, 3 * kBs + 2);
  admit(f.kv, first);
  f.kv.free(first);
  first.status = RequestStatus::kFinished;
  f.idle.on_finish(first, 0);
}

TEST(IdleSessionOffload, AnIdleSessionMovesToHostAndItsNextTurnHitsThere) {
  Fixture f;
  finish_first_turn(f);
  EXPECT_EQ(f.idle.offload_due(999, f.kv), 0);  // not idle long enough yet
  const KvChurn before = f.kv.churn();
  EXPECT_EQ(f.idle.offload_due(1000, f.kv), 3);  // its three full blocks
  EXPECT_EQ(f.idle.sessions_offloaded(), 1);
  EXPECT_EQ(f.kv.stats().idle_offloaded_blocks, 3);
  EXPECT_EQ(f.kv.churn().offloaded - before.offloaded, 3);  // page churn
  EXPECT_EQ(f.kv.churn().evicted, before.evicted);
  EXPECT_EQ(f.tiers.size(kHostTier), 3);
  EXPECT_EQ(f.pool.num_cached_blocks(), 0);      // dropped from the GPU cache
  EXPECT_EQ(f.idle.offload_due(5000, f.kv), 0);  // once
  // The next turn (the conversation so far plus a new message) finds it in the host tier.
  std::vector<TierLoad> loads;
  f.kv.set_load_sink(&loads);
  Request second = turn(2, 5, 4 * kBs + 9);
  const PrefixHit hit = admit(f.kv, second);
  EXPECT_EQ(hit.num_tokens, 3 * kBs);
  EXPECT_EQ(f.kv.stats().tier_hit_tokens[kHostTier], 3 * kBs);
  EXPECT_EQ(loads.size(), 3u);
  f.tiers.check_invariants();
}

// A host tier of two blocks for a session of three: stored last block first, the tier keeps the
// chain's first two (its least recently used entry is the last block), so the next turn still
// hits them; stored first block first, the tier dropped block 0 and nothing of it could hit.
TEST(IdleSessionOffload, ATierTooSmallKeepsTheChainsHead) {
  BlockPool pool{17};
  KvOffloadTiers tiers{{2}};
  KvCacheOptions o;
  o.offload = &tiers;
  KvCacheManager kv{pool, kBs, 1024, true, o};
  SchedulerObserver sink;
  IdleSessionOffload idle{sink, 1000};
  Request first = turn(1, 5, 3 * kBs + 2);
  admit(kv, first);
  kv.free(first);
  first.status = RequestStatus::kFinished;
  idle.on_finish(first, 0);
  EXPECT_EQ(idle.offload_due(1000, kv), 3);
  EXPECT_EQ(tiers.size(kHostTier), 2);
  Request second = turn(2, 5, 4 * kBs + 9);
  const PrefixHit hit = admit(kv, second);
  EXPECT_EQ(hit.num_tokens, 2 * kBs);
  EXPECT_EQ(kv.stats().tier_hit_tokens[kHostTier], 2 * kBs);
  tiers.check_invariants();
}

TEST(IdleSessionOffload, ASessionBackBeforeTheThresholdHitsOnTheGpu) {
  Fixture f;
  finish_first_turn(f);
  f.idle.on_arrival(5);  // the next turn arrives after 999 ns
  EXPECT_EQ(f.idle.offload_due(999, f.kv), 0);
  EXPECT_EQ(f.idle.offload_due(1000, f.kv), 0);  // cancelled by the arrival
  EXPECT_EQ(f.tiers.size(kHostTier), 0);
  Request second = turn(2, 5, 4 * kBs + 9);
  const PrefixHit hit = admit(f.kv, second);
  EXPECT_EQ(hit.num_tokens, 3 * kBs);
  EXPECT_TRUE(hit.tiers.empty());  // every block on the device
  EXPECT_EQ(f.kv.stats().tier_hit_tokens[kHostTier], 0);
}

TEST(IdleSessionOffload, HeldBlocksAndOtherSessionsStay) {
  Fixture f;
  finish_first_turn(f);
  // Another session's request holds the same first block (a shared system prompt).
  Request other = turn(3, 6, kBs + 1);
  admit(f.kv, other);
  Request no_session(make_request(4, 0, {{99, 0, 2 * kBs}}, 4));
  admit(f.kv, no_session);
  f.kv.free(no_session);
  no_session.status = RequestStatus::kFinished;
  f.idle.on_finish(no_session, 0);               // no session: never tracked
  EXPECT_EQ(f.idle.offload_due(2000, f.kv), 2);  // block 0 is held by `other`
  EXPECT_EQ(f.tiers.size(kHostTier), 2);
  EXPECT_TRUE(f.pool.lookup(other.block_hashes()[0]).has_value());
  f.kv.free(other);
  f.kv.check_invariants();
  EXPECT_THROW(IdleSessionOffload(f.sink, 0), std::invalid_argument);
}

// Multi-turn sessions with a large GPU pool (nothing evicted) and think times of about 2 s.
const std::string kExperiment =
    "name: idle\nseed: 3\nmodel: tiny\nhardware: H100-SXM\n"
    "serving: {block_size: 16, num_gpu_blocks: 4000, max_model_len: 2048}\n"
    "workload:\n"
    "  type: multiturn\n  num_sessions: 10\n"
    "  session_arrival: {process: poisson, rate: 5}\n"
    "  turns: {dist: uniform, min: 3, max: 3}\n"
    "  think_time_s: {dist: uniform, min: 1.5, max: 2.5}\n"
    "  first_prompt_len: {dist: uniform, min: 100, max: 200}\n"
    "  new_tokens: {dist: uniform, min: 20, max: 40}\n"
    "  output_len: {dist: uniform, min: 10, max: 20}\n";

RunOutput simulate(const std::string& extra) {
  const ExperimentConfig c =
      load_experiment_text(kExperiment + extra, "idle.yaml", ".", "idle", {});
  RunOptions o;
  o.write_files = false;
  return run_simulation(c, o);
}

TEST(IdleSessionOffloadSim, IdleSessionsComeBackFromTheHostTier) {
  const RunOutput host = simulate("kv_offload: {host: {blocks: 4000}}\n");
  const RunOutput late = simulate("kv_offload: {host: {blocks: 4000}, idle_offload_s: 10}\n");
  const RunOutput idle = simulate("kv_offload: {host: {blocks: 4000}, idle_offload_s: 0.5}\n");
  ASSERT_EQ(idle.summary.offload_tiers.size(), 1u);
  // Nothing is evicted, so without idle offload every later turn hits on the GPU.
  EXPECT_EQ(host.summary.offload_tiers[0].hit_tokens, 0);
  EXPECT_EQ(host.summary.idle_offload_s, 0);
  // Think times (1.5-2.5 s) under the 10 s threshold: nothing offloaded while sessions think;
  // each session's last turn still goes down after 10 s, which no later turn reads.
  EXPECT_EQ(late.summary.offload_tiers[0].hit_tokens, 0);
  EXPECT_EQ(late.summary.prefix_hit_tokens, host.summary.prefix_hit_tokens);
  EXPECT_EQ(late.summary.ttft_ms.mean, host.summary.ttft_ms.mean);
  // Over the 0.5 s threshold: every session goes to the host between its turns (twice for the
  // 3 turns; after its last turn too, if the run goes on 0.5 s longer), and its later turns hit
  // there: as many hit tokens as the GPU found before, now mostly from the host.
  EXPECT_GE(idle.summary.idle_offloaded_sessions, 20);
  EXPECT_LE(idle.summary.idle_offloaded_sessions, 30);
  EXPECT_GT(idle.summary.idle_offloaded_blocks, 0);
  EXPECT_GT(idle.summary.idle_store_s, 0);
  EXPECT_GT(idle.summary.offload_tiers[0].hit_tokens, host.summary.prefix_hit_tokens / 2);
  EXPECT_EQ(idle.summary.prefix_hit_tokens, host.summary.prefix_hit_tokens);
  EXPECT_EQ(idle.summary.churn.evicted, 0);
  EXPECT_EQ(idle.summary.churn.offloaded, idle.summary.idle_offloaded_blocks);
  EXPECT_GT(idle.summary.offload_load_s, 0);
}

TEST(IdleSessionOffloadSim, BadThresholdNamesTheKey) {
  try {
    simulate("kv_offload: {host: {blocks: 40}, idle_offload_s: -1}\n");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("idle_offload_s"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("idle.yaml:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace servelab
