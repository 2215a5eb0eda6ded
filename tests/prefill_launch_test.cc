// The prefill attention launch's critical paths (core/prefill_launch.h) and the calibrated cost
// model's terms over them (issue 20): the features on hand-built launches, a plan's features, the
// cost.yaml keys (older files price as before; bad values name the file and key), the profile's
// `# prefill_launch:` line and its defaults, the fit recovering planted coefficients, the shipped
// H200 calibration, and `sim calibrate --host-overhead-from`.
#include "core/prefill_launch.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/step_plan.h"
#include "serving/calibration_profile.h"
#include "serving/config_node.h"
#include "serving/home.h"
#include "sim/calibrated_cost_model.h"
#include "sim/calibration.h"
#include "sim/validate.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using test_util::read_file;
using test_util::run_sim;
using test_util::temp_dir;
using test_util::write_file;

// The H200 profile's launch: Llama-3-8B's 32 query heads, wgmma's 128-row tiles, 2 CTAs on each
// of 132 SMs, splits of at least 512 keys, and the merge of that time (a CTA per (tile, head)).
constexpr PrefillLaunch kH200{32, 128, 264, 512, 128};

PrefillCriticalPath path_of(const PrefillLaunch& launch,
                            const std::vector<std::pair<std::int64_t, std::int64_t>>& entries) {
  PrefillLaunchCost cost(launch);
  for (const auto& [first, n] : entries) cost.add(first, n);
  return cost.critical_path();
}

// A 16-token chunk after 6,144 cached tokens runs one tile x 32 heads = 32 CTAs on 264 slots: its
// key range is split 8 ways (the engine's plan), so its critical path is one split of 832 keys
// and a merge of 8 splits x 16 rows, while its pairs are few. A 4,096-token prefill runs 1,024
// CTAs, unsplit: its keys are those of an average slot, in proportion to its pairs.
TEST(PrefillLaunch, ShortChunkAfterALongPrefixIsOnItsCriticalPath) {
  const PrefillSplitPlan plan = plan_prefill_splits(1, 32, 6160, 264);
  EXPECT_EQ(plan.kv_splits, 8);
  EXPECT_EQ(plan.split_tokens, 832);
  const PrefillCriticalPath chunk = path_of(kH200, {{6144, 16}});
  EXPECT_EQ(chunk.keys, 832);
  EXPECT_EQ(chunk.merge_steps, 8 * 16);
  const PrefillCriticalPath prefill = path_of(kH200, {{0, 4096}});
  EXPECT_EQ(prefill.keys, 32 * (128 * 32 * 33 / 2) / 264);  // 8,192: every tile's keys / slots
  EXPECT_EQ(prefill.merge_steps, 0);
  const double chunk_per_pair = 832.0 / static_cast<double>(causal_pairs(6144, 16));
  const double prefill_per_pair = 8192.0 / static_cast<double>(causal_pairs(0, 4096));
  EXPECT_GT(chunk_per_pair / prefill_per_pair, 8.0);
  // The same chunk after a short prefix: one unsplit CTA of 144 keys.
  const PrefillCriticalPath short_prefix = path_of(kH200, {{128, 16}});
  EXPECT_EQ(short_prefix.keys, 144);
  EXPECT_EQ(short_prefix.merge_steps, 0);
  // Today's merge kernel walks 8 rows a CTA; a kernel that never splits walks the whole range.
  PrefillLaunch eight = kH200;
  eight.merge_rows = 8;
  EXPECT_EQ(path_of(eight, {{6144, 16}}).merge_steps, 8 * 8);
  PrefillLaunch unsplit = kH200;
  unsplit.min_split_tokens = 0;
  EXPECT_EQ(path_of(unsplit, {{6144, 16}}).keys, 6160);
  EXPECT_EQ(path_of(unsplit, {{6144, 16}}).merge_steps, 0);
  // One-token entries run in decode attention; copies add like entries.
  EXPECT_EQ(path_of(kH200, {{100, 1}}).keys, 0);
  EXPECT_EQ(path_of(kH200, {}).keys, 0);
  PrefillLaunchCost four(kH200);
  four.add(0, 256, 4);
  const PrefillCriticalPath alike = path_of(kH200, {{0, 256}, {0, 256}, {0, 256}, {0, 256}});
  EXPECT_EQ(four.critical_path().keys, alike.keys);
  EXPECT_EQ(four.critical_path().merge_steps, alike.merge_steps);
  EXPECT_EQ(prefill_launch_error(kH200), "");
  PrefillLaunch bad = kH200;
  bad.max_ctas = 0;
  EXPECT_NE(prefill_launch_error(bad).find("max_ctas"), std::string::npos);
}

// Head packing (the CUDA executor's fa2_gqa launches): a launch whose entries all have at most
// packed_rows queries runs packed_heads heads a CTA, packed_rows rows a tile, on its own slots; a
// longer entry anywhere in the launch keeps the configured kernel's shape for all of it.
constexpr PrefillLaunch kPacked{32, 128, 264, 512, 8, 4, 16, 264};

TEST(PrefillLaunch, ShortLaunchesPackHeads) {
  EXPECT_EQ(prefill_launch_error(kPacked), "");
  const PrefillLaunchShape packed = prefill_launch_shape(kPacked, 16);
  EXPECT_TRUE(packed.packed);
  EXPECT_EQ(packed.tile_rows, 16);
  EXPECT_EQ(packed.head_ctas, 8);
  EXPECT_EQ(packed.max_ctas, 264);
  const PrefillLaunchShape wide = prefill_launch_shape(kPacked, 17);
  EXPECT_FALSE(wide.packed);
  EXPECT_EQ(wide.tile_rows, 128);
  EXPECT_EQ(wide.head_ctas, 32);
  EXPECT_FALSE(prefill_launch_shape(kH200, 2).packed);  // a launch that never packs
  // 16 tokens after 6,144: one tile x 8 CTAs of 4 heads, split 13 ways (where one head a CTA
  // gave 32 CTAs, 8 splits): its critical path is a split of 512 keys, its merge 13 x 8 rows.
  EXPECT_EQ(plan_prefill_splits(1, 8, 6160, 264).kv_splits, 13);
  const PrefillCriticalPath chunk = path_of(kPacked, {{6144, 16}});
  EXPECT_EQ(chunk.keys, 512);
  EXPECT_EQ(chunk.merge_steps, 13 * 8);
  PrefillLaunch unpacked = kPacked;
  unpacked.packed_heads = unpacked.packed_rows = unpacked.packed_max_ctas = 0;
  EXPECT_EQ(path_of(unpacked, {{6144, 16}}).keys, 832);
  // A 17-token entry in the launch: the configured shape, as without packing.
  EXPECT_EQ(path_of(kPacked, {{6144, 16}, {100, 17}}).keys,
            path_of(unpacked, {{6144, 16}, {100, 17}}).keys);
  // Many short entries: 40 tiles x 8 CTAs fill the slots unsplit; the keys are an average slot's.
  std::vector<std::pair<std::int64_t, std::int64_t>> many(40, {2000, 8});
  const PrefillCriticalPath batch = path_of(kPacked, many);
  EXPECT_EQ(batch.merge_steps, 0);
  EXPECT_EQ(batch.keys, std::max<std::int64_t>(2008, (40 * 2008 * 8 + 263) / 264));
  // The packing figures come all three or none, >= 1, packed_heads dividing query_heads.
  PrefillLaunch bad = kPacked;
  bad.packed_rows = 0;
  EXPECT_NE(prefill_launch_error(bad).find("packed_rows"), std::string::npos);
  bad = kPacked;
  bad.packed_heads = 5;
  EXPECT_NE(prefill_launch_error(bad).find("does not divide query_heads"), std::string::npos);
}

ScheduledRequest entry(std::int32_t first, std::int32_t n, bool prefill) {
  ScheduledRequest r;
  r.first_token = first;
  r.num_tokens = n;
  r.is_prefill = prefill;
  r.samples = !prefill || first == 0;
  return r;
}

// A plan's launch is its entries of two or more tokens, as the engine's (a one-token prefill
// entry and the decode entries run in decode attention).
TEST(PrefillLaunch, FeaturesOfAPlanFollowTheEnginesLaunch) {
  StepPlan plan;
  plan.requests = {entry(6144, 16, true), entry(40, 1, true), entry(99, 1, false),
                   entry(2047, 1, false)};
  const CalibrationFeatures with = CalibrationFeatures::from_plan(plan, &kH200);
  EXPECT_EQ(with.prefill_critical_keys, 832);
  EXPECT_EQ(with.prefill_merge_steps, 128);
  const CalibrationFeatures without = CalibrationFeatures::from_plan(plan);
  EXPECT_EQ(without.prefill_critical_keys, 0);
  EXPECT_EQ(without.prefill_merge_steps, 0);
  EXPECT_EQ(with.step.prefill_pairs, without.step.prefill_pairs);
  StepPlan decode;
  decode.requests = {entry(99, 1, false), entry(2047, 1, false)};
  EXPECT_EQ(CalibrationFeatures::from_plan(decode, &kH200).prefill_critical_keys, 0);
}

// ---- cost.yaml ----

std::string cost_yaml(const std::string& extra = "") {
  return "type: calibrated\nmodel: tiny\nblock_size: 16\nblock_bytes: 8192\ncoefficients:\n"
         "  step_s: 5.0e-5\n  per_sequence_s: 2.0e-6\n  per_token_s: 1.0e-6\n"
         "  per_token_above_knee_s: 0\n  knee_tokens: 0\n  prefill_pair_s: 1.0e-9\n"
         "  decode_context_token_s: 2.0e-9\n  sampled_sequence_s: 3.0e-6\n"
         "  swap_byte_s: 2.5e-10\n  copy_byte_s: 1.0e-10\n" +
         extra;
}

const char* kLaunchKeys =
    "  prefill_critical_key_s: 8.0e-7\n  prefill_merge_step_s: 1.0e-5\n"
    "  prefill_launch: {query_heads: 32, tile_rows: 128, max_ctas: 264, min_split_tokens: 512, "
    "merge_rows: 128}\n";

CalibratedProfile load_text(const std::string& text, const std::string& name) {
  const auto dir = temp_dir("prefill_launch_" + name);
  write_file(dir / "cost.yaml", text);
  return load_calibrated_profile((dir / "cost.yaml").string());
}

// A file without the critical-path keys (every file written before them) loads without a launch
// and prices a chunk after a long prefix by the formula it was fitted with, term for term in its
// order; with them, the chunk costs exactly the two terms more, and the breakdown counts them as
// prefill attention.
TEST(CalibratedCriticalPath, OlderFilesPriceAsBefore) {
  StepPlan plan;
  plan.requests = {entry(6144, 16, true), entry(99, 1, false)};
  const CalibratedProfile old = load_text(cost_yaml(), "old");
  EXPECT_FALSE(old.coefficients.prefill_launch);
  const CalibratedCostModel before(old, 16);
  const double old_formula = 5.0e-5 + 2 * 2.0e-6 + 17 * 1.0e-6 + 0.0 + 0.0 +
                             causal_pairs(6144, 16) * 1.0e-9 + 100 * 2.0e-9 + 1 * 3.0e-6 + 0.0 +
                             0.0;
  EXPECT_EQ(before.step_time(plan), seconds_to_ns(old_formula));
  const CalibratedProfile with = load_text(cost_yaml(kLaunchKeys), "with");
  ASSERT_TRUE(with.coefficients.prefill_launch);
  EXPECT_EQ(with.coefficients.prefill_launch->max_ctas, 264);
  EXPECT_EQ(with.coefficients.prefill_launch->merge_rows, 128);
  const CalibratedCostModel after(with, 16);
  const double extra = 8.0e-7 * 832 + 1.0e-5 * 128;
  EXPECT_EQ(after.step_time(plan), seconds_to_ns(old_formula + extra));
  EXPECT_NEAR(after.breakdown(plan).prefill_attention - before.breakdown(plan).prefill_attention,
              extra, 1e-12);
  // A decode-only step has no launch: the same price under both.
  StepPlan decode;
  decode.requests = {entry(99, 1, false)};
  EXPECT_EQ(after.step_time(decode), before.step_time(decode));
}

// Bad values and half-given keys are ConfigErrors naming the file and the key.
TEST(CalibratedCriticalPath, BadValuesNameFileAndKey) {
  const auto expect_error = [](const std::string& text, const std::string& name,
                               const std::string& key) {
    try {
      load_text(text, name);
      ADD_FAILURE() << name << ": no error";
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("cost.yaml:"), std::string::npos) << m;
      EXPECT_NE(m.find(key), std::string::npos) << m;
    }
  };
  const std::string good = kLaunchKeys;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return cost_yaml(t);
  };
  expect_error(with("prefill_critical_key_s: 8.0e-7", "prefill_critical_key_s: -8.0e-7"),
               "negative", "coefficients.prefill_critical_key_s");
  expect_error(with("prefill_merge_step_s: 1.0e-5", "prefill_merge_step_s: slow"), "type",
               "coefficients.prefill_merge_step_s");
  expect_error(with("tile_rows: 128", "tile_rows: many"), "tile_rows",
               "coefficients.prefill_launch.tile_rows");
  expect_error(with("max_ctas: 264", "max_ctas: 0"), "max_ctas",
               "coefficients.prefill_launch.max_ctas");
  expect_error(with("min_split_tokens: 512", "min_split_tokens: -1"), "min_split",
               "coefficients.prefill_launch.min_split_tokens");
  expect_error(with("merge_rows: 128}", "merge_rows: 128, warps: 4}"), "unknown", "warps");
  expect_error(with("query_heads: 32, ", ""), "heads", "query_heads");
  expect_error(with("merge_rows: 128}", "merge_rows: 128, packed_heads: 4}"), "half_packing",
               "packed_rows");
  expect_error(with("merge_rows: 128}",
                    "merge_rows: 128, packed_heads: 3, packed_rows: 16, packed_max_ctas: 264}"),
               "packing_divides", "does not divide query_heads");
  expect_error(cost_yaml("  prefill_critical_key_s: 8.0e-7\n  prefill_merge_step_s: 1.0e-5\n"),
               "no_launch", "prefill_launch");
  expect_error(with("  prefill_merge_step_s: 1.0e-5\n", ""), "no_merge", "prefill_merge_step_s");
  expect_error(cost_yaml("  prefill_critical_key_s: 8.0e-7\n  prefill_merge_step_s: 1.0e-5\n"
                         "  prefill_launch: [32, 128]\n"),
               "not_a_map", "coefficients.prefill_launch");
}

// ---- the profile and the fit ----

const char* kLaunchLine =
    "# prefill_launch: query_heads=32 tile_rows=128 max_ctas=264 min_split_tokens=512 "
    "merge_rows=128\n";

struct Shape {
  const char* family;
  std::int64_t k = 0, first = 0, n = 0;  // k alike prefill entries of n tokens after first
  std::int64_t decodes = 0, context = 0;
};

// A profile of chunks after short and long prefixes, prompts, batches, decodes and mixed steps
// (every third of a family held out by the holdout tests), timed by `c` exactly.
std::string planted_profile(const CalibratedCoefficients& c, const std::string& header) {
  std::vector<Shape> g;
  for (std::int64_t n : {1, 16, 128, 512, 1024, 2048, 4096}) g.push_back({"prefill", 1, 0, n});
  for (std::int64_t k : {2, 8}) {
    for (std::int64_t n : {64, 1024}) g.push_back({"prefill_batch", k, 0, n});
  }
  for (std::int64_t n : {16, 64, 256, 1024}) {
    for (std::int64_t p : {128, 1024, 3072, 6144}) g.push_back({"chunk", 1, p, n});
  }
  for (std::int64_t b : {1, 16, 64}) {
    for (std::int64_t ctx : {64, 1024, 4096}) g.push_back({"decode", 0, 0, 0, b, ctx});
  }
  for (std::int64_t n : {32, 256, 2048}) g.push_back({"mixed", 1, 0, n, 16, 1024});
  std::string s = "# model: tiny\n# device: test\n# block_size: 16\n# block_bytes: 8192\n" + header;
  const std::vector<std::string>& cols = profile_columns();
  for (std::size_t i = 0; i < cols.size(); ++i) s += (i ? "," : "") + cols[i];
  s += "\n";
  for (const Shape& sh : g) {
    CalibrationFeatures f;
    StepFeatures& x = f.step;
    x.prefill_tokens = sh.k * sh.n;
    x.prefill_pairs = sh.k * causal_pairs(sh.first, sh.n);
    x.prefill_context_tokens = sh.k * (sh.first + sh.n);
    x.decode_tokens = x.decode_pairs = sh.decodes;
    x.decode_context_tokens = sh.decodes * sh.context;
    x.decode_pairs = x.decode_context_tokens;
    x.num_sampled = (sh.first == 0 ? sh.k : 0) + sh.decodes;
    x.num_tokens = x.prefill_tokens + x.decode_tokens;
    f.num_entries = sh.k + sh.decodes;
    PrefillLaunchCost cost(kH200);
    cost.add(sh.first, sh.n, sh.k);
    f.prefill_critical_keys = cost.critical_path().keys;
    f.prefill_merge_steps = cost.critical_path().merge_steps;
    const auto ns = std::llround(calibrated_seconds(c, f, 8192) * 1e9);
    char buf[512];
    std::snprintf(
        buf, sizeof buf, "%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,0,0,0,5,%lld,%lld,%lld\n",
        sh.family, (long long)x.num_tokens, (long long)x.prefill_tokens, (long long)x.prefill_pairs,
        (long long)x.prefill_context_tokens, (long long)x.decode_tokens, (long long)x.decode_pairs,
        (long long)x.decode_context_tokens, (long long)x.num_sampled, (long long)f.num_entries,
        (long long)ns, (long long)ns, (long long)ns);
    s += buf;
  }
  return s;
}

CalibratedCoefficients planted() {
  CalibratedCoefficients c;
  c.step_s = 5e-3;
  c.per_sequence_s = 2e-6;
  c.per_token_s = 12e-6;
  c.prefill_pair_s = 1e-9;
  c.decode_context_token_s = 3e-8;
  c.sampled_sequence_s = 1e-6;
  c.prefill_critical_key_s = 8e-7;
  c.prefill_merge_step_s = 1e-5;
  c.prefill_launch = kH200;
  return c;
}

EngineProfile profile_text(const std::string& text, const std::string& name) {
  return read_profile(
      test_util::written_file("prefill_launch_profile_" + name, "profile.csv", text).string());
}

// Steps timed by known coefficients, the critical-path ones among them, give those coefficients
// back; the cost.yaml written from the fit prices every shape as the fit does.
TEST(CalibratedCriticalPath, FitRecoversPlantedCoefficients) {
  const CalibratedCoefficients c = planted();
  const EngineProfile p = profile_text(planted_profile(c, kLaunchLine), "planted");
  ASSERT_TRUE(p.prefill_launch);
  EXPECT_EQ(p.prefill_launch_source, "from the profile's header");
  const CalibrationResult r = fit_profile(p);
  const CalibratedCoefficients& f = r.profile.coefficients;
  ASSERT_TRUE(f.prefill_launch);
  EXPECT_EQ(f.prefill_launch->query_heads, 32);
  EXPECT_NEAR(f.prefill_critical_key_s, c.prefill_critical_key_s, 1e-3 * c.prefill_critical_key_s);
  EXPECT_NEAR(f.prefill_merge_step_s, c.prefill_merge_step_s, 1e-3 * c.prefill_merge_step_s);
  EXPECT_NEAR(f.prefill_pair_s, c.prefill_pair_s, 1e-3 * c.prefill_pair_s);
  EXPECT_NEAR(f.step_s, c.step_s, 1e-3 * c.step_s);
  EXPECT_LT(r.families.at("chunk").max_error, 1e-4);
  const auto dir = temp_dir("prefill_launch_roundtrip");
  write_file(dir / "cost.yaml", calibration_yaml(r, "profile.csv"));
  const CalibratedProfile loaded = load_calibrated_profile((dir / "cost.yaml").string());
  ASSERT_TRUE(loaded.coefficients.prefill_launch);
  EXPECT_EQ(loaded.coefficients.prefill_launch->merge_rows, 128);
  EXPECT_FALSE(loaded.coefficients.prefill_launch->packs());
  for (const ProfileRow& row : p.rows) {
    EXPECT_NEAR(calibrated_seconds(loaded.coefficients, row.features, 8192),
                calibrated_seconds(f, row.features, 8192), 1e-8);
  }
  // Without the launch the same profile cannot price its chunks: the old model's fit is worse.
  const CalibrationResult none = fit_profile(profile_text(planted_profile(c, ""), "nolaunch"));
  EXPECT_FALSE(none.profile.coefficients.prefill_launch);
  EXPECT_GT(none.families.at("chunk").mape, 0.02);
}

// The `# prefill_launch:` line is checked (the line named); a CUDA profile without it gets the
// defaults of its time from its device's SMs and the catalogue's model; a CPU profile none; with a
// launch, a row whose prefill entries are not alike is an error naming its line.
TEST(CalibratedCriticalPath, ProfileLaunchLineAndDefaults) {
  const std::string base = planted_profile(planted(), kLaunchLine);
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = base;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"max_ctas=264", "max_ctas=0"},
           {"tile_rows=128", "tile_rows=wide"},
           {" merge_rows=128", ""},
           {"query_heads=32", "query_heads=32 query_heads=32"},
           {"query_heads=32", "heads=32"},
           {"merge_rows=128", "merge_rows=128 packed_heads=4 packed_rows=16"},
           {"merge_rows=128", "merge_rows=128 packed_heads=3 packed_rows=16 packed_max_ctas=9"}}) {
    try {
      profile_text(replaced(from, to), "bad_line");
      ADD_FAILURE() << to << ": no error";
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("profile.csv:5: header 'prefill_launch'"), std::string::npos) << m;
    }
  }
  std::string h200 = planted_profile(planted(), "");
  h200.replace(h200.find("# model: tiny"), 13, "# model: Llama-3-8B");
  h200.replace(h200.find("# device: test"), 14, "# device: NVIDIA H200 (sm_90, 132 SMs)");
  const EngineProfile d = profile_text(h200, "defaults");
  ASSERT_TRUE(d.prefill_launch);
  EXPECT_EQ(d.prefill_launch->query_heads, 32);
  EXPECT_EQ(d.prefill_launch->tile_rows, 128);
  EXPECT_EQ(d.prefill_launch->max_ctas, 264);
  EXPECT_EQ(d.prefill_launch->min_split_tokens, 512);
  EXPECT_EQ(d.prefill_launch->merge_rows, 128);
  EXPECT_FALSE(profile_text(planted_profile(planted(), ""), "cpu").prefill_launch);
  // A profile of a packing executor: its line's packing figures reach the fit and its cost.yaml.
  const EngineProfile packing = profile_text(
      replaced("merge_rows=128", "merge_rows=8 packed_heads=4 packed_rows=16 packed_max_ctas=264"),
      "packing");
  ASSERT_TRUE(packing.prefill_launch);
  EXPECT_EQ(packing.prefill_launch->packed_heads, 4);
  EXPECT_EQ(packing.prefill_launch->packed_rows, 16);
  EXPECT_EQ(packing.prefill_launch->packed_max_ctas, 264);
  const CalibrationResult packed_fit = fit_profile(packing);
  const auto packed_dir = temp_dir("prefill_launch_packed_yaml");
  write_file(packed_dir / "cost.yaml", calibration_yaml(packed_fit, "profile.csv"));
  const CalibratedProfile packed_yaml =
      load_calibrated_profile((packed_dir / "cost.yaml").string());
  ASSERT_TRUE(packed_yaml.coefficients.prefill_launch);
  EXPECT_EQ(packed_yaml.coefficients.prefill_launch->packed_heads, 4);
  EXPECT_EQ(packed_yaml.coefficients.prefill_launch->packed_max_ctas, 264);
  // A row of one 100-token entry whose pairs say otherwise.
  std::string unlike = base + "chunk,100,100,7000,150,0,0,0,0,1,0,0,0,5,1000,1000,1000\n";
  const auto lines = std::count(unlike.begin(), unlike.end(), '\n');
  try {
    profile_text(unlike, "unlike");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("profile.csv:" + std::to_string(lines) + ": "), std::string::npos) << m;
    EXPECT_NE(m.find("alike"), std::string::npos) << m;
  }
}

// The shipped H200 calibration is `sim calibrate --holdout 3` of the shipped profile (plus the
// host overhead of its engine run): refitting gives its coefficients, and its held-out chunk error
// is the other families' size now.
TEST(CalibratedCriticalPath, ShippedH200CalibrationIsTheProfilesFit) {
  const std::string cal = servelab_home().string() + "/experiments/catalog/calibrated/";
  const CalibratedProfile shipped = load_calibrated_profile(cal + "llama-3-8b-h200.yaml");
  const CalibrationResult r =
      fit_profile_holdout(read_profile(cal + "llama-3-8b-h200-profile.csv"), 3);
  const CalibratedCoefficients& s = shipped.coefficients;
  const CalibratedCoefficients& f = r.profile.coefficients;
  ASSERT_TRUE(s.prefill_launch);
  ASSERT_TRUE(f.prefill_launch);
  EXPECT_EQ(s.prefill_launch->max_ctas, f.prefill_launch->max_ctas);
  const auto same = [](double a, double b) { EXPECT_NEAR(a, b, 1e-8 * std::max(a, b)); };
  same(s.prefill_critical_key_s, f.prefill_critical_key_s);
  same(s.prefill_merge_step_s, f.prefill_merge_step_s);
  same(s.prefill_pair_s, f.prefill_pair_s);
  same(s.decode_context_token_s, f.decode_context_token_s);
  const YAML::Node doc = YAML::LoadFile(cal + "llama-3-8b-h200.yaml");
  same(s.per_sequence_s, f.per_sequence_s + doc["host_overhead"]["per_sequence_s"].as<double>());
  ASSERT_TRUE(r.holdout);
  EXPECT_LT(r.holdout->families.at("chunk").mape, 0.05);
  EXPECT_NEAR(doc["fit"]["holdout"]["families"]["chunk"]["mape"].as<double>(),
              r.holdout->families.at("chunk").mape, 1e-8);
}

// `sim calibrate --host-overhead-from EARLIER.yaml`: the earlier file's host overhead is added as
// it was fitted and written back, marked; a bad earlier file names itself and the key.
TEST(CalibratedCriticalPath, HostOverheadFromAnEarlierCalibration) {
  const auto dir = temp_dir("prefill_launch_host");
  write_file(dir / "profile.csv", planted_profile(planted(), kLaunchLine));
  const std::string host =
      "host_overhead:\n  engine_run: \"run\"\n  steps: 10\n  step_s: 1.0e-4\n"
      "  per_sequence_s: 3.0e-6\n";
  write_file(dir / "earlier.yaml", cost_yaml() + host);
  const std::string profile = (dir / "profile.csv").string();
  const ProfileCalibration plain = calibrate_profile(profile, 0, "", "profile.csv");
  const ProfileCalibration carried =
      calibrate_profile(profile, 0, "", "profile.csv", (dir / "earlier.yaml").string());
  ASSERT_TRUE(carried.host);
  EXPECT_TRUE(carried.host->carried);
  EXPECT_EQ(carried.host->engine_run, "run");
  EXPECT_DOUBLE_EQ(carried.result.profile.coefficients.step_s,
                   plain.result.profile.coefficients.step_s + 1.0e-4);
  EXPECT_DOUBLE_EQ(carried.result.profile.coefficients.per_sequence_s,
                   plain.result.profile.coefficients.per_sequence_s + 3.0e-6);
  EXPECT_NE(carried.yaml.find("--host-overhead-from"), std::string::npos);
  const YAML::Node doc = YAML::Load(carried.yaml);
  EXPECT_EQ(doc["host_overhead"]["steps"].as<int>(), 10);
  const auto expect_error = [&](const std::string& text, const std::string& key) {
    write_file(dir / "bad.yaml", text);
    try {
      calibrate_profile(profile, 0, "", "profile.csv", (dir / "bad.yaml").string());
      ADD_FAILURE() << key << ": no error";
    } catch (const ConfigError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("bad.yaml"), std::string::npos) << m;
      EXPECT_NE(m.find(key), std::string::npos) << m;
    }
  };
  std::string negative = cost_yaml() + host;
  negative.replace(negative.find("per_sequence_s: 3.0e-6"), 22, "per_sequence_s: -3.0e-6");
  expect_error(negative, "host_overhead.per_sequence_s");
  expect_error(cost_yaml(), "host_overhead");
  std::string other = cost_yaml() + host;
  other.replace(other.find("model: tiny"), 11, "model: other");
  expect_error(other, "model");
  // The command refuses two sources of one overhead, and never writes over the earlier file.
  const test_util::Cli both =
      run_sim("calibrate " + profile + " -o " + (dir / "o.yaml").string() + " --engine-run " +
                  dir.string() + " --host-overhead-from " + (dir / "earlier.yaml").string(),
              dir);
  EXPECT_EQ(both.code, 2) << both.err;
  const test_util::Cli over =
      run_sim("calibrate " + profile + " -o " + (dir / "earlier.yaml").string() +
                  " --force --host-overhead-from " + (dir / "earlier.yaml").string(),
              dir);
  EXPECT_EQ(over.code, 2) << over.err;
  EXPECT_EQ(read_file(dir / "earlier.yaml"), cost_yaml() + host);
}

}  // namespace
}  // namespace servelab
