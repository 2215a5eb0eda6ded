// The calibrated cost model: NNLS on hand cases, coefficient recovery from synthetic profiles
// made by a known model (with and without noise), the cost.yaml round trip, the cost_model
// experiment key, and the exit codes of `sim calibrate` on bad input.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "serving/config_node.h"
#include "serving/experiment.h"
#include "serving/model_config.h"
#include "sim/calibrated_cost_model.h"
#include "sim/calibration.h"
#include "sim/nnls.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using test_util::Cli;
using test_util::read_file;
using test_util::run_sim;
using test_util::temp_dir;
using test_util::write_file;

// ---- NNLS ----

TEST(Nnls, UnconstrainedSolutionWhenItIsPositive) {
  Eigen::MatrixXd A(3, 2);
  A << 1, 0, 0, 1, 1, 1;
  Eigen::VectorXd b(3);
  b << 1, 2, 3;
  const NnlsResult r = nnls(A, b);
  EXPECT_TRUE(r.converged);
  EXPECT_NEAR(r.x(0), 1.0, 1e-12);
  EXPECT_NEAR(r.x(1), 2.0, 1e-12);
  EXPECT_NEAR(r.residual_norm, 0.0, 1e-12);
}

TEST(Nnls, NegativeComponentClampedToZero) {
  // Identity: the unconstrained answer is b itself; the negative entry must become 0.
  const Eigen::MatrixXd A = Eigen::MatrixXd::Identity(2, 2);
  Eigen::VectorXd b(2);
  b << 1, -1;
  const NnlsResult r = nnls(A, b);
  EXPECT_DOUBLE_EQ(r.x(0), 1.0);
  EXPECT_DOUBLE_EQ(r.x(1), 0.0);
  EXPECT_NEAR(r.residual_norm, 1.0, 1e-12);
}

TEST(Nnls, HandCaseWhereTheActiveSetChanges) {
  // min ||A x - b|| with A = [[1, 2], [3, 4], [5, 6]], b = [1, 1, 1]: the unconstrained
  // solution is (-1, 1); with x >= 0 the optimum uses only column 2:
  // x2 = (A2 . b) / (A2 . A2) = 12 / 56.
  Eigen::MatrixXd A(3, 2);
  A << 1, 2, 3, 4, 5, 6;
  const Eigen::VectorXd b = Eigen::VectorXd::Ones(3);
  const NnlsResult r = nnls(A, b);
  EXPECT_TRUE(r.converged);
  EXPECT_DOUBLE_EQ(r.x(0), 0.0);
  EXPECT_NEAR(r.x(1), 12.0 / 56.0, 1e-12);
}

TEST(Nnls, AllNegativeCorrelationGivesZero) {
  Eigen::MatrixXd A(2, 2);
  A << 1, 1, 1, 2;
  Eigen::VectorXd b(2);
  b << -1, -2;
  const NnlsResult r = nnls(A, b);
  EXPECT_EQ(r.x, Eigen::VectorXd::Zero(2));
  EXPECT_NEAR(r.residual_norm, std::sqrt(5.0), 1e-12);
}

TEST(Nnls, ZeroAndDuplicateColumns) {
  Eigen::MatrixXd A(3, 3);
  A << 0, 1, 1, 0, 2, 2, 0, 3, 3;  // column 0 zero, columns 1 and 2 equal
  Eigen::VectorXd b(3);
  b << 2, 4, 6;
  const NnlsResult r = nnls(A, b);
  EXPECT_DOUBLE_EQ(r.x(0), 0.0);
  EXPECT_NEAR(r.x(1) + r.x(2), 2.0, 1e-10);
  EXPECT_NEAR(r.residual_norm, 0.0, 1e-10);
}

TEST(Nnls, KktConditionsOnRandomProblems) {
  Rng rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int m = 12, n = 5;
    Eigen::MatrixXd A(m, n);
    Eigen::VectorXd b(m);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) A(i, j) = rng.uniform() * 2 - 1;
      b(i) = rng.uniform() * 2 - 1;
    }
    const NnlsResult r = nnls(A, b);
    ASSERT_TRUE(r.converged);
    const Eigen::VectorXd w = A.transpose() * (b - A * r.x);
    for (int j = 0; j < n; ++j) {
      EXPECT_GE(r.x(j), 0.0);
      if (r.x(j) > 0) {
        EXPECT_NEAR(w(j), 0.0, 1e-9) << "trial " << trial;  // stationary on the free set
      } else {
        EXPECT_LE(w(j), 1e-9) << "trial " << trial;  // no descent direction into x_j > 0
      }
    }
  }
}

// ---- synthetic profiles ----

CalibratedCoefficients known() {
  CalibratedCoefficients c;
  c.step_s = 40e-6;
  c.per_sequence_s = 3e-6;
  c.per_token_s = 0.8e-6;
  c.prefill_pair_s = 2e-9;
  c.decode_context_token_s = 5e-9;
  c.sampled_sequence_s = 6e-6;
  c.swap_byte_s = 1.0 / 4e9;
  c.copy_byte_s = 1.0 / 10e9;
  return c;
}

struct Shape {
  std::string family;
  std::vector<std::pair<std::int64_t, std::int64_t>> prefill;  // (first_token, tokens), samples
  std::int64_t decodes = 0, context = 0;
  std::int64_t swap = 0, copy = 0;
};

CalibrationFeatures features(const Shape& s) {
  CalibrationFeatures f;
  for (const auto& [p, n] : s.prefill) {
    f.step.prefill_tokens += n;
    f.step.prefill_pairs += n * p + n * (n + 1) / 2;
    f.step.prefill_context_tokens += p + n;
    f.step.num_sampled += p == 0 ? 1 : 0;  // chunks after cached context do not sample
    ++f.num_entries;
  }
  f.step.decode_tokens = s.decodes;
  f.step.decode_pairs = s.decodes * s.context;
  f.step.decode_context_tokens = s.decodes * s.context;
  f.step.num_sampled += s.decodes;
  f.num_entries += s.decodes;
  f.step.num_tokens = f.step.prefill_tokens + f.step.decode_tokens;
  f.step.swap_out_blocks = f.step.swap_in_blocks = s.swap;
  f.step.copy_blocks = s.copy;
  return f;
}

std::vector<Shape> synthetic_grid() {
  std::vector<Shape> g;
  for (std::int64_t n : {1, 8, 32, 128, 512, 1024, 2048}) g.push_back({"prefill", {{0, n}}});
  for (std::int64_t k : {2, 4, 8}) {
    g.push_back({"prefill_batch", std::vector<std::pair<std::int64_t, std::int64_t>>(k, {0, 64})});
  }
  for (std::int64_t p : {256, 1024}) g.push_back({"chunk", {{p, 64}}});
  for (std::int64_t b : {1, 4, 16, 64}) {
    for (std::int64_t c : {16, 256, 1024}) g.push_back({"decode", {}, b, c});
  }
  g.push_back({"mixed", {{0, 128}}, 16, 512});
  g.push_back({"mixed", {{0, 32}}, 64, 128});
  for (std::int64_t k : {4, 64}) {
    g.push_back({"swap", {}, 4, 64, k, 0});
    g.push_back({"copy", {}, 4, 64, 0, k});
  }
  return g;
}

// A profile CSV of the grid timed by `c` with multiplicative noise of +-noise (uniform).
std::string synthetic_profile(const CalibratedCoefficients& c, double noise, std::uint64_t seed) {
  Rng rng(seed);
  std::string s =
      "# synthetic\n# model: tiny\n# device: test\n# date_utc: 2026-01-01T00:00:00Z\n"
      "# engine_version: test\n# block_size: 16\n# block_bytes: 8192\n";
  const std::vector<std::string>& cols = profile_columns();
  for (std::size_t i = 0; i < cols.size(); ++i) s += (i ? "," : "") + cols[i];
  s += "\n";
  for (const Shape& sh : synthetic_grid()) {
    const CalibrationFeatures f = features(sh);
    const double t = calibrated_seconds(c, f, 8192) * (1 + noise * (2 * rng.uniform() - 1));
    const auto ns = static_cast<long long>(std::llround(t * 1e9));
    const StepFeatures& x = f.step;
    char buf[512];
    std::snprintf(
        buf, sizeof buf,
        "%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,5,%lld,%lld,%lld\n",
        sh.family.c_str(), (long long)x.num_tokens, (long long)x.prefill_tokens,
        (long long)x.prefill_pairs, (long long)x.prefill_context_tokens, (long long)x.decode_tokens,
        (long long)x.decode_pairs, (long long)x.decode_context_tokens, (long long)x.num_sampled,
        (long long)f.num_entries, (long long)x.swap_out_blocks, (long long)x.swap_in_blocks,
        (long long)x.copy_blocks, ns, ns, ns);
    s += buf;
  }
  return s;
}

EngineProfile profile_from(const std::string& text, const std::string& name) {
  return read_profile(test_util::written_file("calibrate_" + name, "profile.csv", text).string());
}

// Eight shapes for the eight terms they exercise: the fit without knees is determined, a knee's
// extra term is not, so the knees are left out (the whole calibration was refused before).
TEST(Calibration, KneesTheShapesCannotDetermineAreLeftOut) {
  const EngineProfile p = profile_from(
      "# format_version: 1\n"
      "# model: tiny\n"
      "# block_size: 16\n"
      "# block_bytes: 8192\n"
      "family,num_tokens,prefill_tokens,prefill_pairs,prefill_context_tokens,decode_tokens,decode_"
      "pairs,decode_context_tokens,num_sampled,num_entries,swap_out_blocks,swap_in_blocks,copy_"
      "blocks,reps,median_ns,min_ns,max_ns\n"
      "prefill,1,1,1,1,0,0,0,1,1,0,0,0,15,9176,9004,14388\n"
      "prefill_batch,32,32,272,32,0,0,0,2,2,0,0,0,15,264932,251355,308210\n"
      "chunk,16,16,2184,144,0,0,0,0,1,0,0,0,15,279380,242778,315737\n"
      "decode,1,0,0,0,1,16,16,1,1,0,0,0,15,10409,10062,15222\n"
      "mixed,36,32,528,32,4,512,512,5,5,0,0,0,15,356137,335637,406500\n"
      "swap,4,0,0,0,4,256,256,4,4,1,1,0,15,78149,72716,105418\n"
      "copy,4,0,0,0,4,256,256,4,4,0,0,1,15,74717,72574,100761\n"
      "prefill,64,64,2080,64,0,0,0,1,1,0,0,0,15,605610,572633,1019045\n",
      "eight");
  ASSERT_EQ(p.rows.size(), 8u);
  const CalibrationResult r = fit_profile(p);
  EXPECT_EQ(r.profile.coefficients.knee_tokens, 0);
  EXPECT_EQ(r.profile.coefficients.decode_context_knee_tokens, 0);
  EXPECT_LT(r.overall.mape, 0.05);
}

// The profile is read with the one CSV reader: CRLF line ends, blank lines and padded fields are
// accepted; a short row is reported as PATH:LINE.
TEST(Calibration, ProfileReaderAcceptsCrlfAndNamesTheLine) {
  std::string text = synthetic_profile(known(), 0.0, 1);
  const std::string plain = text;
  std::string crlf;
  for (char c : text) crlf += c == '\n' ? std::string("\r\n\r\n") : std::string(1, c);
  const EngineProfile a = profile_from(plain, "plain");
  const EngineProfile b = profile_from(crlf, "crlf");
  ASSERT_EQ(a.rows.size(), b.rows.size());
  EXPECT_EQ(a.header, b.header);
  EXPECT_EQ(b.rows.back().line, 2 * a.rows.back().line - 1);
  EXPECT_EQ(a.rows.front().family, b.rows.front().family);
  text += "decode, 1 ,0\n";
  const auto lines = std::count(text.begin(), text.end(), '\n');
  try {
    profile_from(text, "short");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("profile.csv:" + std::to_string(lines) + ": expected " +
                                   std::to_string(profile_columns().size()) + " fields, got 3"),
        std::string::npos)
        << e.what();
  }
}

TEST(Calibration, RecoversKnownCoefficientsExactlyWithoutNoise) {
  const CalibratedCoefficients c = known();
  const CalibrationResult r = fit_profile(profile_from(synthetic_profile(c, 0.0, 1), "exact"));
  const CalibratedCoefficients& f = r.profile.coefficients;
  // Durations are rounded to whole ns, so "exact" means to a part in 1e4 or so.
  EXPECT_NEAR(f.step_s, c.step_s, 1e-3 * c.step_s);
  EXPECT_NEAR(f.per_sequence_s, c.per_sequence_s, 1e-3 * c.per_sequence_s);
  EXPECT_NEAR(f.per_token_s, c.per_token_s, 1e-3 * c.per_token_s);
  EXPECT_NEAR(f.prefill_pair_s, c.prefill_pair_s, 1e-3 * c.prefill_pair_s);
  EXPECT_NEAR(f.decode_context_token_s, c.decode_context_token_s, 1e-3 * c.decode_context_token_s);
  EXPECT_NEAR(f.sampled_sequence_s, c.sampled_sequence_s, 1e-3 * c.sampled_sequence_s);
  EXPECT_NEAR(f.swap_byte_s, c.swap_byte_s, 1e-3 * c.swap_byte_s);
  EXPECT_NEAR(f.copy_byte_s, c.copy_byte_s, 1e-3 * c.copy_byte_s);
  EXPECT_LT(r.overall.max_error, 1e-4);
  EXPECT_EQ(r.profile.model, "tiny");
  EXPECT_EQ(r.profile.block_bytes, 8192);
}

TEST(Calibration, RecoversCoefficientsUnderNoise) {
  const CalibratedCoefficients c = known();
  for (std::uint64_t seed : {1, 2, 3}) {
    const CalibrationResult r =
        fit_profile(profile_from(synthetic_profile(c, 0.03, seed), "noisy"));
    const CalibratedCoefficients& f = r.profile.coefficients;
    // The terms that dominate some family are recovered within 15 % (the per-token slope, which
    // shares the prefill rows with the pair term, within 25 %); the fit within the noise.
    EXPECT_NEAR(f.per_token_s, c.per_token_s, 0.25 * c.per_token_s) << seed;
    EXPECT_NEAR(f.prefill_pair_s, c.prefill_pair_s, 0.15 * c.prefill_pair_s) << seed;
    EXPECT_NEAR(f.decode_context_token_s, c.decode_context_token_s, 0.15 * c.decode_context_token_s)
        << seed;
    EXPECT_NEAR(f.swap_byte_s, c.swap_byte_s, 0.15 * c.swap_byte_s) << seed;
    EXPECT_NEAR(f.step_s, c.step_s, 0.25 * c.step_s) << seed;
    EXPECT_LT(r.overall.mape, 0.03) << seed;
    EXPECT_LT(r.overall.max_error, 0.06) << seed;
  }
}

TEST(Calibration, NegativeTruthIsClampedAndKneeIsFound) {
  // A GEMM that is flat below 512 tokens and linear above (the roofline's shape).
  CalibratedCoefficients c = known();
  c.per_token_s = 0.05e-6;
  c.per_token_above_knee_s = 2e-6;
  c.knee_tokens = 512;
  const CalibrationResult r = fit_profile(profile_from(synthetic_profile(c, 0.0, 1), "knee"));
  const CalibratedCoefficients& f = r.profile.coefficients;
  EXPECT_GT(f.knee_tokens, 0);
  EXPECT_LT(r.overall.max_error, 0.02);
  for (double v :
       {f.step_s, f.per_sequence_s, f.per_token_s, f.per_token_above_knee_s, f.prefill_pair_s,
        f.decode_context_token_s, f.sampled_sequence_s, f.swap_byte_s, f.copy_byte_s}) {
    EXPECT_GE(v, 0.0);
  }
}

// A profile with LoRA rows (engine profile --lora-rank 8): the synthetic grid with two LoRA
// columns (0 on its rows), a `# lora_rank: 8` line, and decode batches and prompts under 1 to 8
// adapters timed by known LoRA coefficients too.
std::string lora_profile(const CalibratedCoefficients& c) {
  std::istringstream in(synthetic_profile(c, 0.0, 1));
  std::string out, line;
  bool header_seen = false;
  while (std::getline(in, line)) {
    if (line[0] == '#') {
      out += line + "\n";
      continue;
    }
    if (!header_seen) {
      out += "# lora_rank: 8\n" + line + ",lora_tokens,num_loras\n";
      header_seen = true;
    } else {
      out += line + ",0,0\n";
    }
  }
  const auto row = [&](const Shape& sh, std::int64_t lora_tokens, std::int64_t loras) {
    CalibrationFeatures f = features(sh);
    f.step.lora_tokens = lora_tokens;
    f.step.num_loras = loras;
    const auto ns = static_cast<long long>(std::llround(calibrated_seconds(c, f, 8192, 8) * 1e9));
    const StepFeatures& x = f.step;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "lora,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,0,0,0,5,%lld,%lld,%lld,%lld,"
                  "%lld\n",
                  (long long)x.num_tokens, (long long)x.prefill_tokens, (long long)x.prefill_pairs,
                  (long long)x.prefill_context_tokens, (long long)x.decode_tokens,
                  (long long)x.decode_pairs, (long long)x.decode_context_tokens,
                  (long long)x.num_sampled, (long long)f.num_entries, ns, ns, ns,
                  (long long)lora_tokens, (long long)loras);
    out += buf;
  };
  for (std::int64_t b : {1, 8, 32}) {
    for (std::int64_t l : {1, 4, 8}) {
      if (l <= b) row({"lora", {}, b, 256}, b, l);
    }
  }
  for (std::int64_t n : {64, 512}) row({"lora", {{0, n}}}, n, 1);
  return out;
}

// sim calibrate fits the LoRA terms from such a profile: the known coefficients come back, the
// LoRA rows' error is ~0, cost.yaml has them, and a profile without the rank line is refused.
TEST(Calibration, FitsTheLoraTermsFromLoraRows) {
  CalibratedCoefficients c = known();
  c.lora_token_rank_s = 0.02e-6;   // per token and unit of rank
  c.lora_adapter_rank_s = 1.5e-6;  // per adapter and unit of rank
  c.lora_set = true;
  const EngineProfile p = profile_from(lora_profile(c), "lora");
  EXPECT_EQ(p.lora_rank, 8);
  const CalibrationResult r = fit_profile(p);
  const CalibratedCoefficients& f = r.profile.coefficients;
  EXPECT_TRUE(f.lora_set);
  EXPECT_NEAR(f.lora_token_rank_s, c.lora_token_rank_s, 1e-3 * c.lora_token_rank_s);
  EXPECT_NEAR(f.lora_adapter_rank_s, c.lora_adapter_rank_s, 1e-3 * c.lora_adapter_rank_s);
  EXPECT_NEAR(f.per_token_s, c.per_token_s, 1e-3 * c.per_token_s);
  EXPECT_LT(r.families.at("lora").max_error, 1e-4);
  EXPECT_EQ(r.lora_rank, 8);
  const std::string yaml = calibration_yaml(r, "profile.csv");
  EXPECT_NE(yaml.find("lora_token_rank_s:"), std::string::npos);
  EXPECT_NE(yaml.find("lora_adapter_rank_s:"), std::string::npos);
  // Without LoRA rows: no LoRA coefficients (a calibrated LoRA run stays refused).
  EXPECT_FALSE(fit_profile(profile_from(synthetic_profile(c, 0.0, 1), "plain"))
                   .profile.coefficients.lora_set);
  // LoRA rows need the rank line; the columns come in pairs; adapters within their tokens.
  std::string text = lora_profile(c);
  const auto without = [&](const std::string& from, const std::string& what) {
    std::string t = text;
    t.replace(t.find(what), what.size(), "");
    return profile_from(t, from);
  };
  try {
    without("norank", "# lora_rank: 8\n");
    ADD_FAILURE() << "LoRA rows without a rank accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no header line '# lora_rank: R'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(without("onecol", ",num_loras"), ConfigError);
  std::string bad = text;
  bad.replace(bad.rfind(",512,1\n"), 7, ",512,600\n");
  EXPECT_THROW(profile_from(bad, "toomany"), ConfigError);
  bad = text;
  bad.replace(bad.find("# lora_rank: 8"), 14, "# lora_rank: 9999");
  EXPECT_THROW(profile_from(bad, "bigrank"), ConfigError);
}

TEST(Calibration, FamilyErrorsAreReported) {
  const CalibrationResult r = fit_profile(profile_from(synthetic_profile(known(), 0.02, 9), "fam"));
  for (const char* fam : {"prefill", "prefill_batch", "chunk", "decode", "mixed", "swap", "copy"}) {
    ASSERT_TRUE(r.families.count(fam)) << fam;
    EXPECT_GT(r.families.at(fam).shapes, 0);
    EXPECT_LE(r.families.at(fam).mape, r.families.at(fam).max_error + 1e-15);
  }
  EXPECT_EQ(r.overall.shapes, static_cast<std::int64_t>(synthetic_grid().size()));
}

// `sim calibrate --holdout N`: every N-th shape of each family is held out of the fit.
TEST(Calibration, HoldoutSplitsEveryNthShapeOfEachFamily) {
  const EngineProfile p = profile_from(synthetic_profile(known(), 0.0, 1), "split");
  const ProfileSplit s = split_profile(p, 3);
  EXPECT_EQ(s.fit.rows.size() + s.held_out.rows.size(), p.rows.size());
  std::map<std::string, std::vector<std::int64_t>> lines;  // held-out lines by family
  for (const ProfileRow& r : s.held_out.rows) lines[r.family].push_back(r.line);
  // prefill: 7 shapes (lines 9-15) -> the 3rd and 6th held out; decode: 12 -> 4; prefill_batch
  // and mixed: 3 and 2 -> 1 and 0; swap and copy interleave (2 each) -> none.
  EXPECT_EQ(lines["prefill"], (std::vector<std::int64_t>{11, 14}));
  EXPECT_EQ(lines["decode"].size(), 4u);
  EXPECT_EQ(lines["prefill_batch"].size(), 1u);
  EXPECT_FALSE(lines.count("mixed"));
  EXPECT_FALSE(lines.count("swap"));
  // Every family keeps shapes to fit; the header travels with both parts.
  std::set<std::string> fitted;
  for (const ProfileRow& r : s.fit.rows) fitted.insert(r.family);
  EXPECT_EQ(fitted.size(), 7u);
  EXPECT_EQ(s.held_out.block_bytes, 8192);
  EXPECT_EQ(s.fit.header.at("model"), "tiny");
  EXPECT_THROW(split_profile(p, 1), ConfigError);
  try {
    split_profile(p, 13);  // no family has 13 shapes
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing would be held out"), std::string::npos);
  }
}

TEST(Calibration, HoldoutErrorsAreOnShapesTheFitNeverSaw) {
  // Exact data: the model fitted on two thirds predicts the rest exactly.
  const CalibrationResult exact =
      fit_profile_holdout(profile_from(synthetic_profile(known(), 0.0, 1), "ho_exact"), 3);
  ASSERT_TRUE(exact.holdout);
  EXPECT_EQ(exact.holdout->every, 3);
  EXPECT_EQ(exact.overall.shapes + exact.holdout->overall.shapes,
            static_cast<std::int64_t>(synthetic_grid().size()));
  EXPECT_LT(exact.holdout->overall.max_error, 1e-3);
  // One held-out shape (the 3rd prefill) measured twice as slow: the fit cannot see it (its
  // error stays tiny), the held-out error shows it as 50 %.
  std::string text = synthetic_profile(known(), 0.0, 1);
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  std::string& row = lines[10];  // file line 11: prefill of 32 tokens
  ASSERT_EQ(row.rfind("prefill,32,", 0), 0u) << row;
  std::vector<std::string> f;
  std::stringstream rs(row);
  for (std::string x; std::getline(rs, x, ',');) f.push_back(x);
  for (std::size_t i = f.size() - 3; i < f.size(); ++i) {
    f[i] = std::to_string(2 * std::stoll(f[i]));
  }
  row.clear();
  for (std::size_t i = 0; i < f.size(); ++i) row += (i ? "," : "") + f[i];
  std::string slow;
  for (const std::string& l : lines) slow += l + "\n";
  const CalibrationResult r = fit_profile_holdout(profile_from(slow, "ho_slow"), 3);
  EXPECT_LT(r.overall.max_error, 1e-3);
  EXPECT_NEAR(r.holdout->families.at("prefill").max_error, 0.5, 1e-3);
  EXPECT_NEAR(r.holdout->overall.max_error, 0.5, 1e-3);
  // Without a hold-out it is one of the shapes fitted, and their error shows it.
  EXPECT_GT(fit_profile(profile_from(slow, "ho_all")).overall.max_error, 1e-3);
  // The YAML records it under fit.holdout and still loads.
  const auto dir = temp_dir("calibrate_holdout_yaml");
  write_file(dir / "cost.yaml", calibration_yaml(r, "p.csv"));
  const YAML::Node y = YAML::LoadFile((dir / "cost.yaml").string());
  EXPECT_EQ(y["fit"]["holdout"]["every"].as<int>(), 3);
  EXPECT_EQ(y["fit"]["holdout"]["shapes"].as<std::int64_t>(), r.holdout->overall.shapes);
  EXPECT_NEAR(y["fit"]["holdout"]["families"]["prefill"]["max_error"].as<double>(), 0.5, 1e-3);
  EXPECT_EQ(y["fit"]["shapes"].as<std::int64_t>(), r.overall.shapes);
  EXPECT_NO_THROW(load_calibrated_profile((dir / "cost.yaml").string()));
}

TEST(SimCli, CalibrateHoldout) {
  const auto dir = temp_dir("calibrate_holdout_cli");
  write_file(dir / "p.csv", synthetic_profile(known(), 0.01, 2));
  const std::string p = (dir / "p.csv").string(), c = (dir / "c.yaml").string();
  Cli r = run_sim("calibrate " + p + " -o " + c + " --holdout 3", dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("held-out error (one shape in 3 of each family"), std::string::npos)
      << r.out;
  EXPECT_NE(read_file(dir / "c.yaml").find("holdout:"), std::string::npos);
  for (const char* bad : {"1", "0", "0x", "-2"}) {
    r = run_sim("calibrate " + p + " -o " + (dir / "d.yaml").string() + " --holdout " + bad, dir);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("--holdout"), std::string::npos) << bad << ": " << r.err;
  }
  r = run_sim("calibrate " + p + " -o " + (dir / "d.yaml").string() + " --holdout 40", dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("nothing would be held out"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "d.yaml"));
}

TEST(Calibration, YamlRoundTripGivesTheSameModel) {
  const CalibrationResult r = fit_profile(profile_from(synthetic_profile(known(), 0.02, 4), "rt"));
  const auto dir = temp_dir("calibrate_roundtrip");
  write_file(dir / "cost.yaml", calibration_yaml(r, "profile.csv"));
  const CalibratedProfile p = load_calibrated_profile((dir / "cost.yaml").string());
  EXPECT_EQ(p.model, "tiny");
  EXPECT_EQ(p.block_size, 16);
  EXPECT_EQ(p.block_bytes, 8192);
  const CalibratedCostModel a(r.profile, 16), b(p, 16);
  for (const Shape& s : synthetic_grid()) {
    const CalibrationFeatures f = features(s);
    EXPECT_NEAR(a.seconds(f), b.seconds(f), 1e-8 * a.seconds(f));
  }
}

// Strings from the user (paths, model names) are escaped, not pasted: quotes, backslashes and
// newlines load back as written; the host overhead section loads too.
TEST(Calibration, YamlEscapesTextAndWritesHostOverhead) {
  CalibrationResult r = fit_profile(profile_from(synthetic_profile(known(), 0.02, 4), "esc"));
  r.profile.device = "GPU \"x\"\\ #1\nsecond line: {a}";
  HostOverhead h;
  h.engine_run = "out/run \"q\": #x\\";
  h.steps = 12;
  h.step_s = 1.25e-4;
  h.per_sequence_s = 3e-6;
  const auto dir = temp_dir("calibrate_escape");
  write_file(dir / "cost.yaml", calibration_yaml(r, "pro: \"file\".csv", &h));
  const CalibratedProfile p = load_calibrated_profile((dir / "cost.yaml").string());
  EXPECT_EQ(p.device, r.profile.device);
  EXPECT_EQ(p.model, "tiny");
  const YAML::Node doc = YAML::LoadFile((dir / "cost.yaml").string());
  EXPECT_EQ(doc["profile"].as<std::string>(), "pro: \"file\".csv");
  EXPECT_EQ(doc["host_overhead"]["engine_run"].as<std::string>(), h.engine_run);
  EXPECT_EQ(doc["host_overhead"]["steps"].as<std::int64_t>(), 12);
  EXPECT_EQ(doc["host_overhead"]["step_s"].as<double>(), 1.25e-4);
  EXPECT_EQ(doc["coefficients"]["step_s"].as<std::string>(), [&] {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", r.profile.coefficients.step_s);
    return std::string(buf);
  }());
  EXPECT_EQ(doc["fit"]["families"]["decode"]["shapes"].as<std::int64_t>(),
            r.families.at("decode").shapes);
}

// ---- the machine a profile was measured on (issue 16) ----

// `text` with `lines` inserted after its `# device:` header line.
std::string with_header_lines(std::string text, const std::string& lines) {
  const auto at = text.find('\n', text.find("# device:")) + 1;
  text.insert(at, lines);
  return text;
}

const char* kMachineLines =
    "# machine_kind: cpu\n# machine_name: Test CPU @ 1.0GHz: model 7\n# machine_threads: 6\n";

// The machine goes profile -> cost.yaml -> loaded profile unchanged; without machine lines (an
// older profile) there is no `machine:` and the file loads as before.
TEST(CalibrationMachine, RoundTripsFromProfileToCostYaml) {
  const EngineProfile with = profile_from(
      with_header_lines(synthetic_profile(known(), 0.0, 1), kMachineLines), "machine_rt");
  ASSERT_TRUE(with.machine);
  EXPECT_EQ(with.machine->kind, "cpu");
  EXPECT_EQ(with.machine->name, "Test CPU @ 1.0GHz: model 7");  // a colon in the name survives
  EXPECT_EQ(with.machine->threads, 6);
  const CalibrationResult r = fit_profile(with);
  ASSERT_TRUE(r.profile.machine);
  EXPECT_EQ(*r.profile.machine, *with.machine);
  const std::string yaml = calibration_yaml(r, "profile.csv");
  EXPECT_NE(yaml.find("machine:"), std::string::npos) << yaml;
  const auto dir = temp_dir("calibrate_machine_rt");
  write_file(dir / "cost.yaml", yaml);
  const CalibratedProfile p = load_calibrated_profile((dir / "cost.yaml").string());
  ASSERT_TRUE(p.machine);
  EXPECT_EQ(*p.machine, *with.machine);
  // Deterministic: the same profile gives the same bytes.
  EXPECT_EQ(calibration_yaml(fit_profile(with), "profile.csv"), yaml);

  const EngineProfile without = profile_from(synthetic_profile(known(), 0.0, 1), "machine_none");
  EXPECT_FALSE(without.machine);
  const std::string old_yaml = calibration_yaml(fit_profile(without), "profile.csv");
  EXPECT_EQ(old_yaml.find("machine"), std::string::npos) << old_yaml;
  write_file(dir / "old.yaml", old_yaml);
  EXPECT_FALSE(load_calibrated_profile((dir / "old.yaml").string()).machine);
}

// Machine header lines that are incomplete or malformed are errors naming PATH:LINE and the key.
TEST(CalibrationMachine, MalformedProfileLinesAreErrors) {
  const std::string base = synthetic_profile(known(), 0.0, 1);
  const auto error = [&](const std::string& lines, const std::string& name) {
    try {
      profile_from(with_header_lines(base, lines), name);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e = error("# machine_kind: tpu\n# machine_name: x\n# machine_threads: 2\n", "k");
  EXPECT_NE(e.find("profile.csv:4: header 'machine_kind': expected cpu or cuda, got 'tpu'"),
            std::string::npos)
      << e;
  e = error("# machine_kind: cpu\n# machine_name: x\n# machine_threads: 0\n", "t");
  EXPECT_NE(e.find("profile.csv:6: header 'machine_threads'"), std::string::npos) << e;
  e = error("# machine_kind: cpu\n# machine_name:\n# machine_threads: 2\n", "n");
  EXPECT_NE(e.find("profile.csv:5: header 'machine_name'"), std::string::npos) << e;
  e = error("# machine_kind: cpu\n# machine_threads: 2\n", "missing");
  EXPECT_NE(e.find("profile.csv: header line '# machine_name: ...' is missing"), std::string::npos)
      << e;
  // A header line twice (the last silently won), and a format this build does not read.
  e = error("# model: Llama-3-8B\n", "twice");
  EXPECT_NE(e.find("profile.csv:4: header 'model' given twice"), std::string::npos) << e;
  e = error("# format_version: 99\n", "future");
  EXPECT_NE(e.find("profile.csv:4: header 'format_version': this sim reads format 1, got '99'"),
            std::string::npos)
      << e;
  EXPECT_EQ(error("# format_version: 1\n", "one"), "no error");
}

// Integer header lines are range-checked, not wrapped (4294967312 was block_size 16), and a
// row's spread brackets its median.
TEST(CalibrationMachine, HeaderIntegersAndSpreadAreChecked) {
  const std::string base = synthetic_profile(known(), 0.0, 1);
  const auto error = [&](const std::string& from, const std::string& to, const std::string& name) {
    std::string text = base;
    const std::size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    try {
      profile_from(text, name);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (const char* v : {"4294967312", "2147483648", "99999999999999999999", "257", "0"}) {
    const std::string e = error("# block_size: 16", std::string("# block_size: ") + v, "bs");
    EXPECT_NE(e.find("header 'block_size': expected an integer in [1, 256], got '" +
                     std::string(v) + "'"),
              std::string::npos)
        << e;
  }
  const std::string e = error("# block_bytes: 8192", "# block_bytes: 99999999999999999999", "bb");
  EXPECT_NE(e.find("header 'block_bytes': expected an integer in [1, "), std::string::npos) << e;
  // The first row's min_ns above its median (the three are equal in the synthetic profile).
  std::string text = base;
  const std::size_t row = text.find('\n', text.find("family,")) + 1;
  const std::size_t end = text.find('\n', row);
  std::string line = text.substr(row, end - row);
  const std::size_t last = line.rfind(','), mid = line.rfind(',', last - 1);
  const long long median = std::stoll(line.substr(line.rfind(',', mid - 1) + 1));
  line = line.substr(0, mid + 1) + std::to_string(median + 1) + line.substr(last);
  text.replace(row, end - row, line);
  try {
    profile_from(text, "spread");
    FAIL() << "min_ns above median_ns accepted";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("expected min_ns <= median_ns <= max_ns"),
              std::string::npos)
        << err.what();
  }
  // A shape measured twice (a profile appended to itself): the hold-out could test the fit on
  // a row it was fitted on, so it is refused, naming both lines.
  std::string twice = base;
  const std::size_t first = twice.find('\n', twice.find("family,")) + 1;
  const std::size_t first_end = twice.find('\n', first);
  twice += twice.substr(first, first_end - first + 1);
  try {
    profile_from(twice, "twice");
    FAIL() << "a repeated shape accepted";
  } catch (const ConfigError& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("the same shape as line"), std::string::npos) << what;
  }
}

// Values past what any profile holds (they overflowed the fit's int64 sums), header lines after
// the column names (ignored before), a column twice (the last won), an empty model, a family
// with a control character, hexadecimal watts: each named with its line.
TEST(CalibrationMachine, ValuesAndLayoutOutsideWhatProfilesHoldAreErrors) {
  const std::string base = synthetic_profile(known(), 0.0, 1);
  const auto error = [&](const std::string& text, const std::string& name) {
    try {
      profile_from(text, name);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = base;
    const std::size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    return text;
  };
  // The first row's swap_out_blocks at 5e18.
  const std::size_t row = base.find('\n', base.find("family,")) + 1;
  std::vector<std::string> fields;
  std::stringstream in(base.substr(row, base.find('\n', row) - row));
  for (std::string f; std::getline(in, f, ',');) fields.push_back(f);
  const std::vector<std::string>& cols = profile_columns();
  const auto swap_col = std::find(cols.begin(), cols.end(), "swap_out_blocks") - cols.begin();
  fields[static_cast<std::size_t>(swap_col)] = "5000000000000000000";
  std::string huge_row;
  for (const std::string& f : fields) huge_row += (huge_row.empty() ? "" : ",") + f;
  std::string e = error(base + huge_row + "\n", "huge");
  EXPECT_NE(e.find("column 'swap_out_blocks': expected an integer in [0, 1e15], got "
                   "'5000000000000000000'"),
            std::string::npos)
      << e;
  e = error(base + "# block_size: 32\n", "late");
  EXPECT_NE(e.find("a header line ('# block_size: ...') after the column names"), std::string::npos)
      << e;
  e = error(replaced(",max_ns", ",median_ns"), "twice");
  EXPECT_NE(e.find("profile.csv:8: the column 'median_ns' appears twice in the header"),
            std::string::npos)
      << e;
  e = error(replaced("# model: tiny", "# model:"), "nomodel");
  EXPECT_NE(e.find("header 'model': expected the profiled model's name, got nothing"),
            std::string::npos)
      << e;
  e = error(base + std::string("deco\x1b[2Jde") + huge_row.substr(huge_row.find(',')) + "\n",
            "control");
  EXPECT_NE(e.find("column 'family': a control character"), std::string::npos) << e;
  // A power_w column: decimal watts only (strtod read 0x10 as 16 W).
  std::string powered;
  std::stringstream lines(base);
  bool header_seen = false, first = true;
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("#")) {
      line += !header_seen ? ",power_w" : first ? ",0x10" : ",250";
      if (header_seen) first = false;
      header_seen = true;
    }
    powered += line + "\n";
  }
  e = error(powered, "hexwatts");
  EXPECT_NE(e.find("profile.csv:9: column 'power_w': expected watts in (0, 1e5] or nothing, got "
                   "'0x10'"),
            std::string::npos)
      << e;
}

// A malformed `machine:` in cost.yaml names the file, line and key.
TEST(CalibrationMachine, MalformedCostYamlMachineIsAnError) {
  const auto dir = temp_dir("calibrate_machine_bad");
  const std::string coefficients =
      "coefficients: {step_s: 0, per_sequence_s: 0, per_token_s: 1.0e-6, "
      "per_token_above_knee_s: 0, knee_tokens: 0, prefill_pair_s: 0, decode_context_token_s: 0, "
      "sampled_sequence_s: 0, swap_byte_s: 0, copy_byte_s: 0}\n";
  const auto error = [&](const std::string& machine) {
    write_file(dir / "cost.yaml",
               "type: calibrated\nmodel: tiny\nblock_size: 16\n"
               "block_bytes: 8192\n" +
                   machine + coefficients);
    try {
      load_calibrated_profile((dir / "cost.yaml").string());
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("machine: {kind: cpu, name: \"A\", threads: 2}\n"), "no error");
  std::string e = error("machine: {kind: gpu, name: A, threads: 2}\n");
  EXPECT_NE(e.find("cost.yaml:5:"), std::string::npos) << e;
  EXPECT_NE(e.find("machine.kind"), std::string::npos) << e;
  e = error("machine: {kind: cpu, name: \"\", threads: 2}\n");
  EXPECT_NE(e.find("machine.name"), std::string::npos) << e;
  e = error("machine: {kind: cpu, name: A, threads: 0}\n");
  EXPECT_NE(e.find("machine.threads"), std::string::npos) << e;
  e = error("machine: {kind: cpu, name: A}\n");
  EXPECT_NE(e.find("threads"), std::string::npos) << e;
  e = error("machine: {kind: cpu, name: A, threads: 2, cores: 2}\n");
  EXPECT_NE(e.find("machine.cores"), std::string::npos) << e;
  e = error("machine: Intel\n");
  EXPECT_NE(e.find("'machine'"), std::string::npos) << e;
}

TEST(CalibratedCostModel, StepTimeOfAPlan) {
  CalibratedProfile p;
  p.model = "tiny";
  p.block_size = 16;
  p.block_bytes = 8192;
  p.coefficients = known();
  const CalibratedCostModel m(p, 16);
  StepPlan empty;
  EXPECT_EQ(m.step_time(empty), 0);
  // One prompt of 10 tokens (samples) + one decode at context 100.
  RequestSpec spec;
  StepPlan plan;
  ScheduledRequest a;
  a.first_token = 0;
  a.num_tokens = 10;
  a.is_prefill = true;
  a.samples = true;
  ScheduledRequest d;
  d.first_token = 99;
  d.num_tokens = 1;
  d.is_prefill = false;
  d.samples = true;
  plan.requests = {a, d};
  plan.swap_out.resize(2);
  const CalibratedCoefficients c = known();
  const double expect = c.step_s + 2 * c.per_sequence_s + 11 * c.per_token_s +
                        55 * c.prefill_pair_s + 100 * c.decode_context_token_s +
                        2 * c.sampled_sequence_s + 2 * 8192 * c.swap_byte_s;
  EXPECT_EQ(m.step_time(plan), seconds_to_ns(expect));
  // Half the block size: half the bytes per block.
  const CalibratedCostModel half(p, 8);
  EXPECT_EQ(half.swap_time(2), seconds_to_ns(8192 * c.swap_byte_s));
  // More work never takes less time.
  plan.requests[1].first_token = 199;
  EXPECT_GT(m.step_time(plan), seconds_to_ns(expect));
}

// ---- the experiment key and the command line ----

std::string cost_yaml() {
  return "type: calibrated\nmodel: tiny\nblock_size: 16\nblock_bytes: 8192\ncoefficients:\n"
         "  step_s: 5.0e-5\n  per_sequence_s: 2.0e-6\n  per_token_s: 1.0e-6\n"
         "  per_token_above_knee_s: 0\n  knee_tokens: 0\n  prefill_pair_s: 1.0e-9\n"
         "  decode_context_token_s: 2.0e-9\n  sampled_sequence_s: 3.0e-6\n"
         "  swap_byte_s: 2.5e-10\n  copy_byte_s: 1.0e-10\n";
}

std::string experiment(const std::string& cost_file) {
  return "name: cal\nmodel: tiny\nhardware: H100-SXM\nserving: {block_size: 16, num_gpu_blocks: "
         "64, max_model_len: 1024}\nworkload:\n  type: synthetic\n  num_requests: 20\n  arrival: "
         "{process: poisson, "
         "rate: 50}\n  prompt_len: {dist: fixed, value: 40}\n  output_len: {dist: fixed, value: "
         "5}\n" +
         (cost_file.empty() ? std::string()
                            : "cost_model: {type: calibrated, file: " + cost_file + "}\n");
}

// ---- how the profiled engine stored the model ----

// `# kv_cache_dtype:` and `# quantization:` go profile -> cost.yaml -> loaded profile; a profile
// without them (older) writes neither key, and its cost.yaml loads with both empty.
TEST(CalibrationStorage, RoundTripsFromProfileToCostYaml) {
  const EngineProfile with =
      profile_from(with_header_lines(synthetic_profile(known(), 0.0, 1),
                                     "# kv_cache_dtype: fp8_e4m3\n# quantization: fp8\n"),
                   "storage_rt");
  EXPECT_EQ(with.kv_cache_dtype, "fp8_e4m3");
  EXPECT_EQ(with.quantization, "fp8");
  const std::string yaml = calibration_yaml(fit_profile(with), "profile.csv");
  EXPECT_NE(yaml.find("\nkv_cache_dtype: fp8_e4m3\nquantization: fp8\n"), std::string::npos)
      << yaml;
  const auto dir = temp_dir("calibrate_storage_rt");
  write_file(dir / "cost.yaml", yaml);
  const CalibratedProfile p = load_calibrated_profile((dir / "cost.yaml").string());
  EXPECT_EQ(p.kv_cache_dtype, "fp8_e4m3");
  EXPECT_EQ(p.quantization, "fp8");

  const EngineProfile without = profile_from(synthetic_profile(known(), 0.0, 1), "storage_none");
  EXPECT_EQ(without.kv_cache_dtype, "");
  const std::string old_yaml = calibration_yaml(fit_profile(without), "profile.csv");
  EXPECT_EQ(old_yaml.find("kv_cache_dtype"), std::string::npos) << old_yaml;
  EXPECT_EQ(old_yaml.find("quantization"), std::string::npos) << old_yaml;
  write_file(dir / "old.yaml", old_yaml);
  const CalibratedProfile o = load_calibrated_profile((dir / "old.yaml").string());
  EXPECT_EQ(o.kv_cache_dtype, "");
  EXPECT_EQ(o.quantization, "");
}

// A storage word that names no format: the profile line (PATH and key) or the cost.yaml key
// (FILE:LINE and key), with the choices. A model file's "fp8" is not a recorded format: the
// engine records what it resolved to (fp8_e4m3).
TEST(CalibrationStorage, UnknownFormatsAreErrors) {
  const auto profile_error = [&](const std::string& lines) {
    try {
      profile_from(with_header_lines(synthetic_profile(known(), 0.0, 1), lines), "storage_bad");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e = profile_error("# kv_cache_dtype: fp8\n");
  EXPECT_NE(e.find("profile.csv: header 'kv_cache_dtype': expected one of fp32, bf16, fp16, "
                   "fp8_e4m3, fp8_e5m2, got 'fp8'"),
            std::string::npos)
      << e;
  e = profile_error("# quantization: gptq\n");
  EXPECT_NE(e.find("header 'quantization': expected one of none, awq, awq_marlin, fp8, got 'gptq'"),
            std::string::npos)
      << e;

  const auto dir = temp_dir("calibrate_storage_bad");
  const auto yaml_error = [&](const std::string& line) {
    std::string text = cost_yaml();
    text.insert(text.find("coefficients:"), line);
    write_file(dir / "cost.yaml", text);
    try {
      load_calibrated_profile((dir / "cost.yaml").string());
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(yaml_error("kv_cache_dtype: bf16\nquantization: awq\n"), "no error");
  e = yaml_error("kv_cache_dtype: int8\n");
  EXPECT_NE(e.find("cost.yaml:5:"), std::string::npos) << e;
  EXPECT_NE(e.find("key 'kv_cache_dtype': expected one of fp32, bf16"), std::string::npos) << e;
  e = yaml_error("quantization: [fp8]\n");
  EXPECT_NE(e.find("key 'quantization': expected one of none, awq, awq_marlin, fp8"),
            std::string::npos)
      << e;
}

// check_profile_storage: a profile that records its storage prices only models stored the same
// way, by name (the CPU engine's fp8 K/V live in fp32 storage, so bytes would not tell); an
// older profile compares the quantization with none and the KV bytes per token.
TEST(CalibrationStorage, CheckComparesTheRecordedStorage) {
  const auto message = [](const CalibratedProfile& p, const ModelConfig& m) {
    try {
      check_profile_storage(p, m, "exp.yaml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ModelConfig model = load_model("tiny", default_catalog_dir());
  ASSERT_EQ(model.kv_dtype(), "fp32");
  CalibratedProfile fp8;
  fp8.file = "cost.yaml";
  fp8.model = "tiny";
  fp8.block_size = 16;
  fp8.block_bytes = 16 * model.kv_bytes_per_token();  // the CPU engine's fp32 storage
  fp8.kv_cache_dtype = "fp8_e4m3";
  fp8.quantization = "fp8";
  std::string e = message(fp8, model);
  EXPECT_NE(e.find("exp.yaml: key 'model.quantization': none, but the calibrated cost model "
                   "cost.yaml was measured on fp8 weights"),
            std::string::npos)
      << e;
  model.quantization = "fp8";
  e = message(fp8, model);
  EXPECT_NE(e.find("exp.yaml: key 'model.kv_cache_dtype': the experiment's KV cache is fp32, but "
                   "the calibrated cost model cost.yaml was measured with a fp8_e4m3 cache"),
            std::string::npos)
      << e;
  model.kv_cache_dtype = "fp8";  // resolves to fp8_e4m3
  EXPECT_EQ(message(fp8, model), "no error");
  model.kv_cache_dtype = "fp8_e5m2";  // the same bytes, another format
  EXPECT_NE(message(fp8, model).find("KV cache is fp8_e5m2"), std::string::npos);

  CalibratedProfile old = fp8;  // no storage recorded: unquantized, KV by bytes per token
  old.kv_cache_dtype.clear();
  old.quantization.clear();
  EXPECT_NE(message(old, model).find("measured on unquantized weights"), std::string::npos);
  model.quantization = "none";
  EXPECT_NE(message(old, model).find("holds 128 bytes per token"), std::string::npos);
  model.kv_cache_dtype = "auto";
  EXPECT_EQ(message(old, model), "no error");
}

TEST(CostModelKey, LoadsAndValidates) {
  const auto dir = temp_dir("calibrate_key");
  write_file(dir / "cost.yaml", cost_yaml());
  write_file(dir / "exp.yaml", experiment((dir / "cost.yaml").string()));
  const ExperimentConfig c = load_experiment((dir / "exp.yaml").string(), {});
  EXPECT_EQ(c.cost_model.type, "calibrated");
  ASSERT_TRUE(c.cost_model.calibrated);
  EXPECT_DOUBLE_EQ(c.cost_model.calibrated->coefficients.step_s, 5e-5);

  // --set cost_model.file alone selects the calibrated model.
  write_file(dir / "plain.yaml", experiment(""));
  const ExperimentConfig s = load_experiment((dir / "plain.yaml").string(),
                                             {"cost_model.file=" + (dir / "cost.yaml").string()});
  EXPECT_EQ(s.cost_model.type, "calibrated");
  EXPECT_EQ(load_experiment((dir / "plain.yaml").string(), {}).cost_model.type, "roofline");
  // A file named relative to the experiment's folder is kept by its absolute path, as a model
  // file is: config.yaml must name it from any folder (sim validate replayed with whatever file
  // of that name was in its own working folder).
  const ExperimentConfig rel =
      load_experiment((dir / "plain.yaml").string(), {"cost_model.file=cost.yaml"});
  EXPECT_EQ(rel.cost_model.file, (dir / "cost.yaml").lexically_normal().string());
  EXPECT_NE(resolved_config_yaml(rel, {}).find("file: " + (dir / "cost.yaml").string()),
            std::string::npos);

  // Unknown key, wrong type, missing file: errors that name the key.
  try {
    load_experiment((dir / "plain.yaml").string(), {"cost_model.fiel=x"});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("fiel"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_experiment((dir / "plain.yaml").string(), {"cost_model.type=magic"}),
               ConfigError);
  try {
    load_experiment((dir / "plain.yaml").string(), {"cost_model.file=nowhere.yaml"});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cost_model.file"), std::string::npos) << e.what();
  }
}

TEST(CostModelKey, MalformedCostYamlNamesFileAndKey) {
  const auto dir = temp_dir("calibrate_bad_yaml");
  std::string bad = cost_yaml();
  bad.replace(bad.find("per_token_s: 1.0e-6"), 19, "per_token_s: fast");
  write_file(dir / "cost.yaml", bad);
  try {
    load_calibrated_profile((dir / "cost.yaml").string());
    FAIL();
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cost.yaml:"), std::string::npos) << m;
    EXPECT_NE(m.find("coefficients.per_token_s"), std::string::npos) << m;
  }
  std::string missing = cost_yaml();
  missing.erase(missing.find("  step_s"),
                missing.find("  per_sequence_s") - missing.find("  step_s"));
  write_file(dir / "missing.yaml", missing);
  EXPECT_THROW(load_calibrated_profile((dir / "missing.yaml").string()), ConfigError);
  std::string negative = cost_yaml();
  negative.replace(negative.find("step_s: 5.0e-5"), 14, "step_s: -1.0");
  write_file(dir / "negative.yaml", negative);
  EXPECT_THROW(load_calibrated_profile((dir / "negative.yaml").string()), ConfigError);
}

TEST(SimCli, RunWithCalibratedModelAndErrors) {
  const auto dir = temp_dir("calibrate_cli");
  write_file(dir / "cost.yaml", cost_yaml());
  write_file(dir / "exp.yaml", experiment((dir / "cost.yaml").string()));
  auto r = run_sim(
      "run " + (dir / "exp.yaml").string() + " --quiet --out " + (dir / "out").string(), dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(test_util::read_file(dir / "out/config.yaml").find("type: calibrated"),
            std::string::npos);

  // A cost.yaml for another model.
  std::string other = cost_yaml();
  other.replace(other.find("model: tiny"), 11, "model: Llama-3-8B");
  write_file(dir / "other.yaml", other);
  r = run_sim("run " + (dir / "exp.yaml").string() + " --quiet --out " + (dir / "o2").string() +
                  " --set cost_model.file=" + (dir / "other.yaml").string(),
              dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("Llama-3-8B"), std::string::npos) << r.err;

  // The profile measured unquantized weights and an fp32 KV cache of 8,192 bytes a block (the
  // tiny model's 512 a token): a run storing either otherwise would get its times silently.
  r = run_sim("run " + (dir / "exp.yaml").string() + " --quiet --out " + (dir / "o3").string() +
                  " --set model.quantization=fp8",
              dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("exp.yaml: key 'model.quantization': fp8"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cost.yaml"), std::string::npos) << r.err;
  r = run_sim("run " + (dir / "exp.yaml").string() + " --quiet --out " + (dir / "o4").string() +
                  " --set model.kv_cache_dtype=bf16",
              dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("exp.yaml: key 'model.kv_cache_dtype': the experiment's KV cache (bf16) "
                       "holds 256 bytes per token"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("measured on one of 512 (block_bytes 8192 for 16 tokens)"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(test_util::fs::exists(dir / "o3"));
  EXPECT_FALSE(test_util::fs::exists(dir / "o4"));

  // Unknown key in the experiment's cost_model section: file:line:key.
  write_file(dir / "typo.yaml", experiment("") + "cost_model: {type: calibrated, flie: x}\n");
  r = run_sim("run " + (dir / "typo.yaml").string() + " --quiet", dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("typo.yaml:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("flie"), std::string::npos) << r.err;
}

TEST(SimCli, CalibrateBadInputsExitTwo) {
  const auto dir = temp_dir("calibrate_bad");
  auto r = run_sim(
      "calibrate " + (dir / "missing.csv").string() + " -o " + (dir / "c.yaml").string(), dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing.csv"), std::string::npos) << r.err;

  write_file(dir / "empty.csv", "# model: tiny\n# block_size: 16\n# block_bytes: 8192\n");
  r = run_sim("calibrate " + (dir / "empty.csv").string() + " -o " + (dir / "c.yaml").string(),
              dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no measurements"), std::string::npos) << r.err;

  std::string text = synthetic_profile(known(), 0.0, 1);
  // Break the third data row: header comments are 7 lines, the column header line 8.
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  lines[10] = "decode,1,0,0,0,1,zero,16,1,1,0,0,0,5,100,100,100";
  std::string broken;
  for (const std::string& l : lines) broken += l + "\n";
  write_file(dir / "bad.csv", broken);
  r = run_sim("calibrate " + (dir / "bad.csv").string() + " -o " + (dir / "c.yaml").string(), dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bad.csv:11:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("decode_pairs"), std::string::npos) << r.err;

  lines[10] = "decode,1,0";
  broken.clear();
  for (const std::string& l : lines) broken += l + "\n";
  write_file(dir / "short.csv", broken);
  r = run_sim("calibrate " + (dir / "short.csv").string() + " -o " + (dir / "c.yaml").string(),
              dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("short.csv:11:"), std::string::npos) << r.err;

  // Good input: exit 0, a cost.yaml that loads, the family table on stdout.
  write_file(dir / "good.csv", text);
  r = run_sim("calibrate " + (dir / "good.csv").string() + " -o " + (dir / "c.yaml").string(), dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("decode"), std::string::npos);
  EXPECT_NO_THROW(load_calibrated_profile((dir / "c.yaml").string()));
  // No -o: usage error.
  r = run_sim("calibrate " + (dir / "good.csv").string(), dir);
  EXPECT_EQ(r.code, 2);
}

// Issue 15: `sim calibrate p.csv -o p.csv` replaced the measured profile; an existing output was
// overwritten silently. Now: output == input is always refused, an existing output needs
// --force, and the write is atomic.
TEST(SimCli, CalibrateNeverOverwritesItsInputOrAnExistingFile) {
  const auto dir = temp_dir("calibrate_overwrite");
  const std::string text = synthetic_profile(known(), 0.0, 1);
  write_file(dir / "p.csv", text);
  const std::string p = (dir / "p.csv").string(), c = (dir / "c.yaml").string();
  Cli r = run_sim("calibrate " + p + " -o " + p, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("input"), std::string::npos) << r.err;
  r = run_sim("calibrate " + p + " -o " + p + " --force", dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(read_file(dir / "p.csv"), text);  // the measured profile is intact

  write_file(dir / "c.yaml", "mine\n");
  r = run_sim("calibrate " + p + " -o " + c, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(dir / "c.yaml"), "mine\n");
  r = run_sim("calibrate " + p + " -o " + c + " --force --quiet", dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NO_THROW(load_calibrated_profile(c));
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }

  // Every input is one, --force or not: any file of --engine-run's folder, and the --hardware
  // entry --vidur and --power start from.
  std::filesystem::create_directories(dir / "run");
  write_file(dir / "run" / "requests.csv", "mine\n");
  r = run_sim("calibrate " + p + " -o " + (dir / "run" / "requests.csv").string() +
                  " --engine-run " + (dir / "run").string() + " --force",
              dir);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(read_file(dir / "run" / "requests.csv"), "mine\n");
  const std::string hw =
      read_file(std::filesystem::path(default_catalog_dir()) / "hardware" / "H100-SXM.yaml");
  write_file(dir / "h.yaml", hw);
  const std::string h = (dir / "h.yaml").string();
  for (const std::string& fit : {"--vidur " + p, p + " --power"}) {
    r = run_sim("calibrate " + fit + " --hardware " + h + " -o " + h + " --force", dir);
    EXPECT_EQ(r.code, 2) << fit << ": " << r.err;
    EXPECT_NE(r.err.find("input"), std::string::npos) << r.err;
    EXPECT_EQ(read_file(dir / "h.yaml"), hw) << fit;
  }
  // A --held-out profile that is a --vidur one (the same file, by any path) holds out nothing.
  r = run_sim("calibrate --vidur " + p + " --held-out " + (dir / "." / "p.csv").string() +
                  " --hardware H100-SXM -o " + (dir / "v.yaml").string(),
              dir);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("is also a --vidur profile"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "v.yaml"));
}

}  // namespace
}  // namespace servelab
