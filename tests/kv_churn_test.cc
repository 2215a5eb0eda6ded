// Page churn and allocator occupancy (docs/metrics.md): BlockPool's allocation and free counts,
// KvCacheManager::churn(), steps.csv's per-step columns and summary.json's totals and rates.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "serving/experiment.h"
#include "serving/home.h"
#include "sim/run.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

const std::string kBurstTiny = servelab_home().string() + "/experiments/burst-tiny.yaml";

TEST(KvChurn, PoolCountsAllocationsAndBlocksReturnedToTheFreeQueue) {
  BlockPool pool(9);  // 8 usable blocks
  std::vector<BlockId> a;
  pool.get_new_blocks(3, a);
  EXPECT_EQ(pool.num_allocated(), 3);
  EXPECT_EQ(pool.num_freed(), 0);
  pool.touch(std::span<const BlockId>(a.data(), 1));  // a second holder of a[0]
  pool.free_blocks(a);                                // a[0] keeps one reference
  EXPECT_EQ(pool.num_freed(), 2);
  pool.free_blocks(std::span<const BlockId>(a.data(), 1));
  EXPECT_EQ(pool.num_freed(), 3);
  // A touch of a free block (a prefix hit on a cached block nobody held) is no allocation; its
  // later free counts again. Reusing a cached block is an allocation and an eviction.
  std::vector<BlockId> c;
  pool.get_new_blocks(1, c);
  pool.cache_block(c[0], BlockHash{7, ~std::uint64_t{7}});
  pool.free_blocks(c);
  pool.touch(c);
  EXPECT_EQ(pool.num_allocated(), 4);
  pool.free_blocks(c);
  EXPECT_EQ(pool.num_freed(), 5);
  std::vector<BlockId> b;
  pool.get_new_blocks(8, b);
  EXPECT_EQ(pool.num_allocated(), 12);
  EXPECT_EQ(pool.num_evictions(), 1);
  pool.check_invariants();
}

struct ChurnRun {
  RunOutput out;
  std::vector<std::map<std::string, std::string>> steps;
  nlohmann::json summary;
};

ChurnRun churn_run(const std::string& name, const std::vector<std::string>& overrides) {
  const fs::path dir = temp_dir("kv_churn_" + name);
  const ExperimentConfig c = load_experiment(kBurstTiny, overrides);
  RunOptions o;
  o.out_dir = (dir / "run").string();
  ChurnRun r;
  r.out = run_simulation(c, o);
  r.steps = read_csv(dir / "run" / "steps.csv");
  r.summary = nlohmann::json::parse(read_file(dir / "run" / "summary.json"));
  fs::remove_all(dir);
  return r;
}

std::int64_t column_sum(const ChurnRun& r, const char* column) {
  std::int64_t sum = 0;
  for (const auto& row : r.steps) sum += std::stoll(row.at(column));
  return sum;
}

// Without a prefix cache nothing is revived from the free queue, so the blocks in use at every
// step are exactly the allocations so far minus the frees so far: the columns account for every
// block the pool handed out.
TEST(KvChurn, StepsCsvAccountsForEveryBlockWithoutAPrefixCache) {
  const ChurnRun r = churn_run("none", {"policies.prefix_cache=none"});
  ASSERT_GT(r.steps.size(), 10u);
  std::int64_t allocated = 0, freed = 0;
  for (const auto& row : r.steps) {
    allocated += std::stoll(row.at("kv_blocks_allocated"));
    freed += std::stoll(row.at("kv_blocks_freed"));
    EXPECT_EQ(std::stoll(row.at("kv_blocks_used")), allocated - freed) << "step " << row.at("step");
    EXPECT_EQ(row.at("kv_blocks_evicted"), "0");
    EXPECT_EQ(row.at("kv_blocks_offloaded"), "0");
    EXPECT_EQ(row.at("kv_blocks_cached"), "0");
  }
  EXPECT_GT(allocated, 64);  // the 64-block pool turned over more than once
  EXPECT_GT(r.out.summary.preemptions, 0);
  // summary.json: the sums, and per second of the run's duration.
  const nlohmann::json& kv = r.summary["kv_cache"];
  EXPECT_EQ(kv["allocated_blocks"].get<std::int64_t>(), allocated);
  EXPECT_EQ(kv["freed_blocks"].get<std::int64_t>(), freed);
  EXPECT_EQ(kv["evicted_blocks"].get<std::int64_t>(), 0);
  EXPECT_EQ(kv["offloaded_blocks"].get<std::int64_t>(), 0);
  const double duration = r.summary["duration_s"].get<double>();
  ASSERT_GT(duration, 0);
  EXPECT_DOUBLE_EQ(kv["allocations_per_s"].get<double>(),
                   static_cast<double>(allocated) / duration);
  EXPECT_DOUBLE_EQ(kv["frees_per_s"].get<double>(), static_cast<double>(freed) / duration);
  EXPECT_EQ(kv["evictions_per_s"].get<double>(), 0.0);
  EXPECT_EQ(kv["offloads_per_s"].get<double>(), 0.0);
}

// With a prefix cache, blocks freed by finished requests stay cached until reused: evictions
// happen when the small pool fills, and occupancy's three columns cover the pool.
TEST(KvChurn, PrefixCachesCountEvictions) {
  for (const char* cache : {"hash", "radix"}) {
    const ChurnRun r = churn_run(cache, {std::string("policies.prefix_cache=") + cache});
    const std::int64_t evicted = column_sum(r, "kv_blocks_evicted");
    EXPECT_GT(evicted, 0) << cache;
    EXPECT_EQ(r.summary["kv_cache"]["evicted_blocks"].get<std::int64_t>(), evicted) << cache;
    EXPECT_GT(r.summary["kv_cache"]["evictions_per_s"].get<double>(), 0.0) << cache;
    EXPECT_EQ(column_sum(r, "kv_blocks_offloaded"), 0) << cache;
    for (const auto& row : r.steps) {
      const std::int64_t used = std::stoll(row.at("kv_blocks_used"));
      const std::int64_t free = std::stoll(row.at("kv_blocks_free"));
      const std::int64_t cached = std::stoll(row.at("kv_blocks_cached"));
      EXPECT_EQ(used + free, 64 - 1) << cache;  // usable blocks: all but the null block
      EXPECT_LE(cached, free) << cache;
    }
  }
}

// New columns, new keys: the existing ones keep their place and values.
TEST(KvChurn, ColumnsAndExistingSummaryNumbers) {
  const fs::path dir = temp_dir("kv_churn_columns");
  const ExperimentConfig c = load_experiment(kBurstTiny, {});
  RunOptions o;
  o.out_dir = (dir / "run").string();
  run_simulation(c, o);
  const std::string steps = read_file(dir / "run" / "steps.csv");
  EXPECT_EQ(steps.substr(0, steps.find('\n')),
            "step,start_s,duration_ms,num_seqs,prefill_tokens,decode_tokens,kv_blocks_used,"
            "kv_blocks_free,kv_blocks_cached,kv_usage,waiting,running,preempted,swap_out_blocks,"
            "swap_in_blocks,kv_blocks_allocated,kv_blocks_freed,kv_blocks_evicted,"
            "kv_blocks_offloaded");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace servelab
