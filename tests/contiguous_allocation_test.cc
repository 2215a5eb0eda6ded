// Contiguous KV allocation (systems before PagedAttention): a request reserves blocks for its
// whole maximum length at admission. Also the slot accounting behind
// kv_cache.reserved_unused_blocks_mean and kv_cache.internal_fragmentation_mean, paged vs
// contiguous on the same hand-driven sequence, and those keys in the Recorder's summary.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/kv_cache_manager.h"
#include "serving/recorder.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

constexpr std::int32_t kBs = 16;
constexpr std::int32_t kMaxLen = 128;  // 8 blocks

Request make(RequestId id, std::uint64_t content, std::uint32_t prompt_len,
             std::int32_t max_output) {
  return Request(make_request(id, 0, {{content, 0, prompt_len}}, max_output));
}

bool kv_contiguous(const KvCacheOptions& o) { return o.allocation == KvAllocation::kContiguous; }

KvCacheOptions contiguous(KvReserve reserve) {
  return {.allocation = KvAllocation::kContiguous, .reserve = reserve};
}

// allocate_slots as the scheduler calls it, then the scheduler's advance.
bool step(KvCacheManager& kv, Request& req, std::int32_t n) {
  if (!kv.allocate_slots(req, n)) return false;
  req.num_computed_tokens += n;
  return true;
}

void decode(KvCacheManager& kv, Request& req) {
  req.output_tokens.push_back(1);
  ASSERT_TRUE(step(kv, req, 1));
}

struct Counters {
  std::int64_t held_slots, kv_slots, unused_slots, reserved_unused_blocks;
  friend bool operator==(const Counters&, const Counters&) = default;
};

Counters counters(const KvCacheManager& kv) {
  return {kv.num_held_slots(), kv.num_kv_slots(), kv.num_unused_slots(),
          kv.num_reserved_unused_blocks()};
}

std::ostream& operator<<(std::ostream& os, const Counters& c) {
  return os << "{held " << c.held_slots << ", kv " << c.kv_slots << ", unused " << c.unused_slots
            << ", reserved_unused_blocks " << c.reserved_unused_blocks << "}";
}

TEST(ContiguousAllocation, ReservesMaxModelLenAtAdmission) {
  BlockPool pool(41);  // 40 usable
  KvCacheManager kv(pool, kBs, kMaxLen, false, contiguous(KvReserve::kMaxModelLen));
  EXPECT_TRUE(kv.contiguous());
  Request r = make(1, 1, 20, 10);
  EXPECT_EQ(kv.reservation_blocks(r), 8);
  EXPECT_EQ(kv.num_blocks_to_allocate(r, 20), 8);
  ASSERT_TRUE(step(kv, r, 20));
  EXPECT_EQ(r.block_table.size(), 8u);
  EXPECT_EQ(pool.num_free_blocks(), 32);  // the reservation counts as used
  pool.check_invariants();
}

TEST(ContiguousAllocation, ReservesMaxTokensAtAdmission) {
  BlockPool pool(41);
  KvCacheManager kv(pool, kBs, kMaxLen, false, contiguous(KvReserve::kMaxTokens));
  Request a = make(1, 1, 20, 12);    // 32 tokens: exactly 2 blocks
  Request b = make(2, 2, 20, 13);    // 33 tokens: 3 blocks
  Request c = make(3, 3, 100, 100);  // capped at max_model_len: 8 blocks
  EXPECT_EQ(kv.reservation_blocks(a), 2);
  EXPECT_EQ(kv.reservation_blocks(b), 3);
  EXPECT_EQ(kv.reservation_blocks(c), 8);
  ASSERT_TRUE(step(kv, a, 20));
  ASSERT_TRUE(step(kv, b, 8));  // a chunk: the reservation is still whole
  ASSERT_TRUE(step(kv, c, 100));
  EXPECT_EQ(a.block_table.size(), 2u);
  EXPECT_EQ(b.block_table.size(), 3u);
  EXPECT_EQ(c.block_table.size(), 8u);
  EXPECT_EQ(pool.num_free_blocks(), 40 - 13);
  pool.check_invariants();
}

TEST(ContiguousAllocation, NeverAllocatesAfterAdmission) {
  BlockPool pool(41);
  KvCacheManager kv(pool, kBs, kMaxLen, false, contiguous(KvReserve::kMaxTokens));
  Request r = make(1, 1, 20, 30);  // 50 tokens: 4 blocks
  ASSERT_TRUE(step(kv, r, 10));
  const std::vector<BlockId> table = r.block_table;
  ASSERT_EQ(table.size(), 4u);
  ASSERT_TRUE(step(kv, r, 10));  // rest of the prompt
  for (int i = 0; i < 29; ++i) {
    EXPECT_EQ(kv.num_blocks_to_allocate(r, 1), 0);
    decode(kv, r);
  }
  EXPECT_EQ(r.num_computed_tokens, 49);
  EXPECT_EQ(r.block_table, table);
  EXPECT_EQ(pool.num_free_blocks(), 36);
  kv.free(r);
  EXPECT_EQ(pool.num_free_blocks(), 40);
  pool.check_invariants();
}

TEST(ContiguousAllocation, AdmissionIsAllOrNothing) {
  BlockPool pool(11);  // 10 usable
  KvCacheManager kv(pool, kBs, kMaxLen, false, contiguous(KvReserve::kMaxModelLen));
  Request a = make(1, 1, 5, 5);
  Request b = make(2, 2, 5, 5);
  ASSERT_TRUE(step(kv, a, 5));  // 8 blocks for 5 tokens
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_FALSE(step(kv, b, 5));  // a paged manager would fit it in one block
  EXPECT_TRUE(b.block_table.empty());
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_EQ(b.kv_accounted_tokens(), 0);
  pool.check_invariants();
  kv.free(a);
  EXPECT_TRUE(step(kv, b, 5));
}

TEST(ContiguousAllocation, PrefixCachingIsOff) {
  BlockPool pool(41);
  // Asked for caching, but contiguous systems shared no blocks.
  KvCacheManager kv(pool, kBs, kMaxLen, true, contiguous(KvReserve::kMaxTokens));
  EXPECT_FALSE(kv.prefix_caching());
  Request a = make(1, 7, 64, 4);
  PrefixHit none = kv.get_computed_blocks(a);
  EXPECT_TRUE(none.blocks.empty());
  ASSERT_TRUE(kv.allocate_slots(a, 64, &none));
  a.num_computed_tokens = 64;
  EXPECT_EQ(pool.num_cached_blocks(), 0);  // nothing registered
  Request twin = make(2, 7, 64, 4);
  EXPECT_TRUE(kv.get_computed_blocks(twin).blocks.empty());
  pool.check_invariants();
}

// A hand-driven sequence: two admissions, decodes, a finish. Returns the counters after each.
std::vector<Counters> drive(KvCacheManager& kv) {
  std::vector<Counters> out;
  Request a = make(1, 1, 20, 20);  // at most 40 tokens
  Request b = make(2, 2, 40, 8);   // at most 48 tokens
  EXPECT_TRUE(step(kv, a, 20));
  out.push_back(counters(kv));
  EXPECT_TRUE(step(kv, b, 40));
  out.push_back(counters(kv));
  decode(kv, a);  // 21 KV tokens
  out.push_back(counters(kv));
  for (int i = 0; i < 12; ++i) decode(kv, a);  // 33: a third block (paged)
  out.push_back(counters(kv));
  kv.free(a);
  out.push_back(counters(kv));
  kv.free(b);
  out.push_back(counters(kv));
  return out;
}

TEST(SlotAccounting, PagedWastesOnlyTheTailOfEachLastBlock) {
  BlockPool pool(41);
  KvCacheManager kv(pool, kBs, kMaxLen, false);
  const std::vector<Counters> got = drive(kv);
  const std::vector<Counters> want = {
      {32, 20, 12, 0},  // a: 2 blocks for 20 tokens
      {80, 60, 20, 0},  // b: 3 blocks for 40 tokens
      {80, 61, 19, 0},  // a decodes into its tail
      {96, 73, 23, 0},  // a at 33 tokens: 3 blocks
      {48, 40, 8, 0},   // a finished
      {0, 0, 0, 0},
  };
  EXPECT_EQ(got, want);
}

TEST(SlotAccounting, ContiguousMaxModelLenWastesMostOfTheReservation) {
  BlockPool pool(41);
  KvCacheManager kv(pool, kBs, kMaxLen, false, contiguous(KvReserve::kMaxModelLen));
  const std::vector<Counters> got = drive(kv);
  const std::vector<Counters> want = {
      {128, 20, 108, 6},                       // 8 blocks, KV in 2
      {256, 60, 196, 11},                      // b: KV in 3 of its 8
      {256, 61, 195, 11}, {256, 73, 183, 10},  // a's KV reaches its third block
      {128, 40, 88, 5},   {0, 0, 0, 0},
  };
  EXPECT_EQ(got, want);
}

TEST(SlotAccounting, ContiguousMaxTokens) {
  BlockPool pool(41);
  KvCacheManager kv(pool, kBs, kMaxLen, false, contiguous(KvReserve::kMaxTokens));
  const std::vector<Counters> got = drive(kv);
  const std::vector<Counters> want = {
      {48, 20, 28, 1},                   // a: cdiv(40, 16) = 3 blocks, KV in 2
      {96, 60, 36, 1},                   // b: cdiv(48, 16) = 3 blocks, KV in all 3
      {96, 61, 35, 1}, {96, 73, 23, 0},  // a's KV reaches its third block
      {48, 40, 8, 0},  {0, 0, 0, 0},
  };
  EXPECT_EQ(got, want);
}

TEST(SlotAccounting, ExactWhenTheSchedulerRollsBackBeforeFree) {
  // The scheduler may undo an allocation it planned (num_computed_tokens rolled back) and then
  // free the request; the counters must come back to zero regardless.
  BlockPool pool(41);
  KvCacheManager kv(pool, kBs, kMaxLen, false);
  Request r = make(1, 1, 40, 8);
  ASSERT_TRUE(step(kv, r, 30));
  ASSERT_TRUE(step(kv, r, 10));
  r.num_computed_tokens -= 10;  // unscheduled
  kv.free(r);
  EXPECT_EQ(counters(kv), (Counters{0, 0, 0, 0}));
  EXPECT_EQ(r.kv_accounted_tokens(), 0);
}

TEST(SlotAccounting, SwapKeepsTheCountersExact) {
  BlockPool pool(41);
  HostBlockPool host(16);
  KvCacheManager kv(pool, kBs, kMaxLen, false,
                    {.allocation = KvAllocation::kContiguous,
                     .reserve = KvReserve::kMaxModelLen,
                     .host_pool = &host});
  Request r = make(1, 1, 20, 12);
  ASSERT_TRUE(step(kv, r, 20));
  const Counters before = counters(kv);
  std::vector<BlockMove> moves;
  ASSERT_TRUE(kv.can_swap_out(r));
  kv.swap_out(r, moves);
  EXPECT_EQ(moves.size(), 8u);  // the whole reservation moves
  EXPECT_EQ(counters(kv), (Counters{0, 0, 0, 0}));
  ASSERT_TRUE(kv.swap_in(r, moves));
  EXPECT_EQ(counters(kv), before);
  decode(kv, r);
  EXPECT_EQ(r.block_table.size(), 8u);
  kv.free(r);
  EXPECT_EQ(counters(kv), (Counters{0, 0, 0, 0}));
  pool.check_invariants();
  host.check_invariants();
}

// Random admissions, chunks, decodes, swaps, finishes and rolled-back preemptions: the O(1)
// counters always equal a recount over the live requests, in every mode.
void random_sequence_matches_recount(const KvCacheOptions& base, std::uint32_t seed) {
  BlockPool pool(121);
  HostBlockPool host(60);
  KvCacheOptions options = base;
  options.host_pool = &host;
  KvCacheManager kv(pool, kBs, kMaxLen, !kv_contiguous(options), options);
  std::mt19937 rng(seed);
  std::vector<std::unique_ptr<Request>> reqs;
  for (int i = 0; i < 24; ++i) {
    reqs.push_back(std::make_unique<Request>(make_request(
        i, 0, {{static_cast<std::uint64_t>(i % 5), 0, 10 + (std::uint32_t)(i * 7) % 90}},
        1 + i % 30)));
  }
  for (int it = 0; it < 4000; ++it) {
    Request& r = *reqs[rng() % reqs.size()];
    const int op = static_cast<int>(rng() % 10);
    if (!r.host_block_table().empty()) {  // swapped out: come back, or give up
      std::vector<BlockMove> moves;
      if (op < 7) {
        (void)kv.swap_in(r, moves);
      } else {
        kv.free(r);
        r.num_computed_tokens = 0;
      }
    } else if (r.block_table.empty()) {  // waiting: admit a chunk of what it knows
      PrefixHit hit = kv.get_computed_blocks(r);
      const std::int32_t left = r.num_tokens() - hit.num_tokens;
      const std::int32_t n = 1 + static_cast<std::int32_t>(rng() % left);
      if (kv.allocate_slots(r, n, &hit)) r.num_computed_tokens = hit.num_tokens + n;
    } else if (op < 5) {  // a step: the rest of the prefill, or a decode
      std::int32_t n = r.num_tokens() - r.num_computed_tokens;
      if (n == 0 && r.num_tokens() < std::min(r.spec.total_tokens(), kMaxLen)) {
        r.output_tokens.push_back(3);
        n = 1;
      }
      if (n > 0 && kv.allocate_slots(r, n)) r.num_computed_tokens += n;
    } else if (op < 7) {
      std::vector<BlockMove> moves;
      if (kv.can_swap_out(r)) kv.swap_out(r, moves);
    } else if (op < 8) {  // a planned step undone, then a recompute preemption
      const std::int32_t n = r.num_tokens() - r.num_computed_tokens;
      if (n > 0 && kv.allocate_slots(r, n)) {
        kv.free(r);
        r.num_computed_tokens = 0;
      }
    } else {  // finished or preempted
      kv.free(r);
      r.num_computed_tokens = 0;
      r.output_tokens.clear();
    }
    std::int64_t held = 0, kv_tokens = 0, kv_blocks = 0;
    for (const auto& q : reqs) {
      if (q->block_table.empty()) continue;
      held += static_cast<std::int64_t>(q->block_table.size());
      kv_tokens += q->num_computed_tokens;
      kv_blocks += (q->num_computed_tokens + kBs - 1) / kBs;
    }
    ASSERT_EQ(kv.num_held_blocks(), held) << "iteration " << it;
    ASSERT_EQ(kv.num_kv_slots(), kv_tokens) << "iteration " << it;
    ASSERT_EQ(kv.num_reserved_unused_blocks(), held - kv_blocks) << "iteration " << it;
    if (it % 97 == 0) {
      pool.check_invariants();
      host.check_invariants();
    }
  }
  pool.check_invariants();
  host.check_invariants();
}

TEST(SlotAccounting, RandomSequenceMatchesRecountPaged) {
  for (std::uint32_t seed = 1; seed <= 3; ++seed) random_sequence_matches_recount({}, seed);
}

TEST(SlotAccounting, RandomSequenceMatchesRecountContiguous) {
  for (std::uint32_t seed = 1; seed <= 3; ++seed) {
    random_sequence_matches_recount(contiguous(KvReserve::kMaxModelLen), seed);
    random_sequence_matches_recount(contiguous(KvReserve::kMaxTokens), seed);
  }
}

// The Recorder turns the per-step counters into time-weighted means in summary.json.
TEST(SlotAccounting, RecorderReportsTimeWeightedMeans) {
  BlockPool pool(41);
  KvCacheManager kv(pool, kBs, kMaxLen, false, contiguous(KvReserve::kMaxModelLen));
  Recorder rec(SloConfig{}, "", "");
  StepPlan plan;
  Request a = make(1, 1, 32, 8);
  ASSERT_TRUE(step(kv, a, 32));  // 8 blocks, KV in 2: 96 of 128 slots unused, 6 blocks
  StepSnapshot s1;
  fill_kv_slot_stats(kv, s1);
  EXPECT_EQ(s1.kv_slots_held, 128);
  EXPECT_EQ(s1.kv_slots_filled, 32);
  EXPECT_EQ(s1.kv_blocks_reserved_unused, 6);
  rec.on_step(plan, 0, 1'000'000, s1);
  kv.free(a);
  StepSnapshot s2;  // nothing held: counts as 0 for three times as long
  fill_kv_slot_stats(kv, s2);
  rec.on_step(plan, 1'000'000, 3'000'000, s2);
  rec.finalize(0, 4'000'000, PrefixCacheStats{});
  const RunSummary sum = rec.summary();
  EXPECT_DOUBLE_EQ(sum.kv_reserved_unused_blocks_mean, 6.0 / 4.0);
  EXPECT_DOUBLE_EQ(sum.kv_internal_fragmentation_mean, 0.75 / 4.0);

  const std::string path = (servelab::test_util::temp_dir("contiguous") / "summary.json").string();
  write_summary_json(path, sum, {});
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_DOUBLE_EQ(j["kv_cache"]["reserved_unused_blocks_mean"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["kv_cache"]["internal_fragmentation_mean"].get<double>(), 0.1875);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace servelab
