// Fitting the power model to measured board power (sim/power_fit.h, `sim calibrate --power`) and
// reading it (engine/nvml_energy.h): the H200 profile in the catalogue with power readings made
// from known coefficients plus a deterministic wobble, which the fit must recover and whose
// held-out shapes it must predict; the entry it writes loads with everything else kept; the
// errors name what is wrong; NVML absent is a reason, not a crash.
#include "sim/power_fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>

#include "engine/nvml_energy.h"
#include "serving/hardware_config.h"
#include "serving/home.h"
#include "serving/model_config.h"
#include "sim/calibration.h"
#include "sim/roofline_cost_model.h"
#include "tests/test_util.h"

namespace servelab {
namespace {

using namespace test_util;

const std::string kProfile =
    servelab_home().string() + "/experiments/catalog/calibrated/llama-3-8b-h200-profile.csv";

// The shipped H200 profile without its NVML readings: the `# power:` header line and the
// power_w,power_ms columns taken out.
std::string without_power() {
  const std::string text = read_file(kProfile);
  const bool has = text.find(",power_w,power_ms\n") != std::string::npos;
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.rfind("# power:", 0) == 0) continue;
    if (has && !line.empty() && line[0] != '#') {
      line.erase(line.rfind(','));  // power_ms
      line.erase(line.rfind(','));  // power_w
    }
    out += line + "\n";
  }
  return out;
}

// The shipped H200 profile with a power_w,power_ms column pair: watts from `truth` at each
// shape's rates (the roofline's FLOPs and bytes over its median time), times 1 + `wobble` x a
// fixed pattern in [-1, 1], capped at max_w.
std::string with_power(const PowerSpec& truth, double wobble) {
  const EngineProfile p = read_profile(kProfile);
  const ModelConfig model = load_model("Llama-3-8B", default_catalog_dir());
  const HardwareConfig h200 = load_hardware("H200", default_catalog_dir());
  const RooflineCostModel roofline(model, h200, p.block_size);
  std::istringstream in(without_power());
  std::string line, out;
  std::size_t row = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') {
      out += line + "\n";
    } else if (line.rfind("family,", 0) == 0) {
      out += "# power: made up for the test\n" + line + ",power_w,power_ms\n";
    } else {
      const ProfileRow& r = p.rows.at(row);
      const StepCostBreakdown b = roofline.breakdown(r.features.step);
      const double t = static_cast<double>(r.median_ns) * 1e-9;
      const double uf = std::min(1.0, b.flops / (h200.peak_flops * t));
      const double ub = std::min(1.0, b.bytes / (h200.hbm_bandwidth * t));
      const double pattern = std::sin(static_cast<double>(row) * 2.4);
      const double w =
          std::min(truth.max_w, (truth.idle_w + truth.compute_w * uf + truth.memory_w * ub) *
                                    (1 + wobble * pattern));
      out += line + "," + std::to_string(w) + ",100.0\n";
      ++row;
    }
  }
  return out;
}

PowerSpec truth() {
  PowerSpec t;
  t.idle_w = 120;
  t.max_w = 700;
  t.compute_w = 520;
  t.memory_w = 180;
  return t;
}

TEST(PowerFit, RecoversKnownCoefficientsAndPredictsHeldOutShapes) {
  const fs::path dir = temp_dir("power_fit");
  write_file(dir / "exact.csv", with_power(truth(), 0));
  const ModelConfig model = load_model("Llama-3-8B", default_catalog_dir());
  const HardwareConfig h200 = load_hardware("H200", default_catalog_dir());
  const PowerFit exact = fit_power(read_profile((dir / "exact.csv").string()), model, h200, 2);
  EXPECT_NEAR(exact.fitted.idle_w, 120, 0.5);
  EXPECT_NEAR(exact.fitted.compute_w, 520, 2);
  EXPECT_NEAR(exact.fitted.memory_w, 180, 1);
  EXPECT_EQ(exact.fitted.max_w, 700);  // the entry's
  EXPECT_LT(exact.held_out_error.mean, 1e-3);
  EXPECT_GT(exact.held_out_error.count, 50);
  // The entry's assumed coefficients are further off on the same shapes.
  EXPECT_GT(exact.assumed_held_out_error.mean, 0.05);

  // With a +-5 % wobble the fit is off by less than the wobble on shapes it never saw.
  write_file(dir / "noisy.csv", with_power(truth(), 0.05));
  const PowerFit noisy = fit_power(read_profile((dir / "noisy.csv").string()), model, h200, 2);
  EXPECT_NEAR(noisy.fitted.idle_w, 120, 12);
  EXPECT_LT(noisy.held_out_error.mean, 0.05);
  EXPECT_LT(noisy.held_out_error.mean, noisy.assumed_held_out_error.mean);
  fs::remove_all(dir);
}

TEST(PowerFit, TheCommandWritesTheEntryWithItsPowerReplaced) {
  const fs::path dir = temp_dir("power_fit_cli");
  write_file(dir / "p.csv", with_power(truth(), 0));
  const Cli r = run_sim("calibrate " + (dir / "p.csv").string() + " --power --hardware H200 -o " +
                            (dir / "H200-fitted.yaml").string(),
                        dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("held-out"), std::string::npos) << r.out;
  const HardwareConfig fitted = load_hardware((dir / "H200-fitted.yaml").string(), "");
  const HardwareConfig h200 = load_hardware("H200", default_catalog_dir());
  EXPECT_NEAR(fitted.power.idle_w, 120, 0.5);
  EXPECT_NEAR(fitted.power.memory_w, 180, 1);
  // Everything else is the entry's.
  EXPECT_EQ(fitted.peak_flops, h200.peak_flops);
  EXPECT_EQ(fitted.hbm_bandwidth, h200.hbm_bandwidth);
  EXPECT_EQ(fitted.interconnect.gpus_per_node, h200.interconnect.gpus_per_node);
  EXPECT_EQ(fitted.gemm_overlap, h200.gemm_overlap);
  // Not over an existing file without --force; not without --hardware.
  const Cli again =
      run_sim("calibrate " + (dir / "p.csv").string() + " --power --hardware H200 -o " +
                  (dir / "H200-fitted.yaml").string(),
              dir);
  EXPECT_EQ(again.code, 2);
  const Cli no_hw = run_sim("calibrate " + (dir / "p.csv").string() + " --power", dir);
  EXPECT_EQ(no_hw.code, 2);
  EXPECT_NE(no_hw.err.find("--hardware"), std::string::npos) << no_hw.err;
  fs::remove_all(dir);
}

// A profile of a model the catalogue lacks (its `# model:` a name of the user's own file) fits
// with --model FILE, which must be the model the profile names; without it the error names the
// profile and --model.
TEST(PowerFit, AModelOutsideTheCatalogueComesFromModel) {
  const fs::path dir = temp_dir("power_fit_model");
  std::string profile = with_power(truth(), 0);
  const std::string line = "# model: Llama-3-8B\n";
  ASSERT_NE(profile.find(line), std::string::npos);
  profile.replace(profile.find(line), line.size(), "# model: my-8b\n");
  write_file(dir / "p.csv", profile);
  std::string entry = read_file(servelab_home() / "experiments/catalog/models/Llama-3-8B.yaml");
  ASSERT_NE(entry.find("name: Llama-3-8B"), std::string::npos);
  entry.replace(entry.find("name: Llama-3-8B"), 16, "name: my-8b");
  write_file(dir / "my-8b.yaml", entry);
  const std::string fit = "calibrate " + (dir / "p.csv").string() + " --power --hardware H200";

  const Cli unknown = run_sim(fit, dir);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("p.csv: its model 'my-8b' is not in the catalogue; pass --model"),
            std::string::npos)
      << unknown.err;
  const Cli given = run_sim(
      fit + " --model " + (dir / "my-8b.yaml").string() + " -o " + (dir / "fitted.yaml").string(),
      dir);
  ASSERT_EQ(given.code, 0) << given.err;
  EXPECT_NEAR(load_hardware((dir / "fitted.yaml").string(), "").power.idle_w, 120, 0.5);
  const Cli other = run_sim(fit + " --model Llama-3-70B", dir);
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.err.find("--model Llama-3-70B is 'Llama-3-70B', but"), std::string::npos)
      << other.err;
  EXPECT_NE(other.err.find("profiled 'my-8b'"), std::string::npos) << other.err;
  const Cli no_power = run_sim("calibrate " + (dir / "p.csv").string() + " --model Llama-3-8B -o " +
                                   (dir / "cost.yaml").string(),
                               dir);
  EXPECT_EQ(no_power.code, 2);
  EXPECT_NE(no_power.err.find("--model goes with --power"), std::string::npos) << no_power.err;
  EXPECT_FALSE(fs::exists(dir / "cost.yaml"));
}

TEST(PowerFit, ProfilesWithoutReadingsOrWithBadOnesAreRefused) {
  const fs::path dir = temp_dir("power_fit_bad");
  // A profile without power columns (a window without NVML).
  write_file(dir / "unmetered.csv", without_power());
  const Cli none =
      run_sim("calibrate " + (dir / "unmetered.csv").string() + " --power --hardware H200", dir);
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("no power readings"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("unmetered.csv"), std::string::npos) << none.err;
  // A malformed reading names the column and the line.
  std::string text = with_power(truth(), 0);
  const std::size_t at = text.find(",100.0\n");
  const std::size_t comma = text.rfind(',', at - 1);
  text.replace(comma + 1, at - comma - 1, "hot");
  write_file(dir / "bad.csv", text);
  const Cli bad =
      run_sim("calibrate " + (dir / "bad.csv").string() + " --power --hardware H200", dir);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("power_w"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("bad.csv:"), std::string::npos) << bad.err;
  // The ordinary fit reads a profile with power columns as before.
  write_file(dir / "ok.csv", with_power(truth(), 0));
  const Cli cost = run_sim(
      "calibrate " + (dir / "ok.csv").string() + " --quiet -o " + (dir / "cost.yaml").string(),
      dir);
  EXPECT_EQ(cost.code, 0) << cost.err;
  fs::remove_all(dir);
}

// The catalogue's H200 power coefficients are the fit to the shipped profile's own readings
// (2026-12-04, the H200's NVML counter), as `gpu-check validate` wrote them: the two files
// cannot drift apart, and the fit beats the assumed coefficients it replaced on shapes it never
// saw.
TEST(PowerFit, TheShippedH200EntryIsTheFitToTheShippedProfile) {
  const ModelConfig model = load_model("Llama-3-8B", default_catalog_dir());
  const HardwareConfig h200 = load_hardware("H200", default_catalog_dir());
  const PowerFit fit = fit_power(read_profile(kProfile), model, h200, 3);
  EXPECT_NEAR(fit.fitted.idle_w, h200.power.idle_w, 0.05);
  EXPECT_NEAR(fit.fitted.compute_w, h200.power.compute_w, 0.05);
  EXPECT_NEAR(fit.fitted.memory_w, h200.power.memory_w, 0.05);
  EXPECT_GT(fit.held_out_error.count, 40);
  EXPECT_LT(fit.held_out_error.mean, 0.12);
  // Its eight readings above the board's 700 W (up to 1,199.8 W: NVML's counter stepping over a
  // short window) are left out of the fit and the errors, the same shapes held out either way.
  EXPECT_EQ(fit.over_limit, 8);
  for (const PowerFitRow& r : fit.rows) EXPECT_LE(r.measured_w, 1.05 * 700);
  EXPECT_LT(fit.held_out_error.max, 0.3);
}

// Here there is no driver: the meter says why and reads nothing.
TEST(NvmlEnergy, WithoutTheDriverItIsUnavailableWithAReason) {
  const NvmlEnergy meter("0000:00:00.0");
  if (meter.available()) GTEST_SKIP() << "NVML and a board are present here";
  EXPECT_FALSE(meter.why().empty());
  EXPECT_FALSE(meter.millijoules().has_value());
}

}  // namespace
}  // namespace servelab
