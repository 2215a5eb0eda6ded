#include "sim/power_fit.h"

#include <Eigen/Dense>
#include <algorithm>
#include <map>
#include <sstream>

#include "core/config_error.h"
#include "core/strings.h"
#include "sim/nnls.h"
#include "sim/power_model.h"
#include "sim/roofline_cost_model.h"

namespace servelab {

namespace {

double predict(const PowerSpec& p, const PowerFitRow& r) {
  return PowerModel::watts_at(p, r.u_flops, r.u_bytes);
}

ErrorStats errors_of(const PowerSpec& p, const std::vector<PowerFitRow>& rows, bool held_out) {
  std::vector<double> e;
  for (const PowerFitRow& r : rows) {
    if (r.held_out == held_out && (held_out || !r.at_limit)) {
      e.push_back((predict(p, r) - r.measured_w) / r.measured_w);
    }
  }
  return error_stats(e);
}

}  // namespace

PowerFit fit_power(const EngineProfile& profile, const ModelConfig& model,
                   const HardwareConfig& hardware, int holdout) {
  PowerFit fit;
  fit.profile = profile.file;
  fit.assumed = hardware.power;
  double largest = 0;
  for (const ProfileRow& r : profile.rows) largest = std::max(largest, r.power_w);
  if (largest <= 0) {
    throw ConfigError(profile.file +
                      ": no power readings (no power_w column, or every field empty): a CUDA "
                      "`engine profile` on a machine with NVML writes them");
  }
  const double max_w = hardware.power.known() ? hardware.power.max_w : largest;
  const RooflineCostModel roofline(model, hardware, profile.block_size);
  // One GPU (profiles are single-device): the rates of each shape's work over its median time.
  const PowerModel one(PowerSpec{}, hardware.peak_flops_for(model.dtype), hardware.hbm_bandwidth,
                       1);
  std::map<std::string, int> seen;  // rows per family so far
  for (const ProfileRow& r : profile.rows) {
    if (!(r.power_w > 0)) continue;
    const bool held_out = ++seen[r.family] % holdout == 0;  // counted either way: the same split
    if (hardware.power.known() && r.power_w > 1.05 * max_w) {
      ++fit.over_limit;
      continue;
    }
    const StepCostBreakdown b = roofline.breakdown(r.features.step);
    const double t = static_cast<double>(r.median_ns) * 1e-9;
    PowerFitRow row;
    row.family = r.family;
    row.line = r.line;
    const PowerModel::Rates u = one.rates(b.flops, b.bytes, t);
    row.u_flops = u.flops;
    row.u_bytes = u.bytes;
    row.measured_w = r.power_w;
    row.held_out = held_out;
    row.at_limit = r.power_w >= 0.97 * max_w;
    fit.rows.push_back(row);
  }
  std::vector<const PowerFitRow*> train;
  std::int64_t held = 0;
  for (const PowerFitRow& r : fit.rows) {
    if (r.held_out) {
      ++held;
    } else if (!r.at_limit) {
      train.push_back(&r);
    }
  }
  if (train.size() < 4 || held < 1) {
    throw ConfigError(profile.file + ": " + std::to_string(train.size()) +
                      " shapes with power readings below the limit to fit and " +
                      std::to_string(held) +
                      " to hold out: a power fit needs at least 4 and 1 (a fuller grid)");
  }
  // Relative least squares: each row divided by its measured watts, so that every shape weighs
  // the same whatever its power.
  Eigen::MatrixXd a(static_cast<Eigen::Index>(train.size()), 3);
  Eigen::VectorXd y(static_cast<Eigen::Index>(train.size()));
  for (std::size_t i = 0; i < train.size(); ++i) {
    const auto k = static_cast<Eigen::Index>(i);
    const double w = train[i]->measured_w;
    a(k, 0) = 1.0 / w;
    a(k, 1) = train[i]->u_flops / w;
    a(k, 2) = train[i]->u_bytes / w;
    y(k) = 1.0;
  }
  const NnlsResult x = nnls(a, y);
  fit.fitted.max_w = max_w;
  fit.fitted.idle_w = std::min(x.x(0), 0.999 * max_w);
  fit.fitted.compute_w = x.x(1);
  fit.fitted.memory_w = x.x(2);
  fit.fit_error = errors_of(fit.fitted, fit.rows, false);
  fit.held_out_error = errors_of(fit.fitted, fit.rows, true);
  if (fit.assumed.known()) fit.assumed_held_out_error = errors_of(fit.assumed, fit.rows, true);
  return fit;
}

std::string power_hardware_yaml(const PowerFit& fit, const std::string& entry_text) {
  // The entry without its `power:` block (the key and its indented lines).
  std::istringstream in(entry_text);
  std::string line, kept;
  bool in_power = false;
  while (std::getline(in, line)) {
    if (line.rfind("power:", 0) == 0) {
      in_power = true;
      continue;
    }
    if (in_power && (line.empty() || line[0] == ' ' || line[0] == '#')) continue;
    in_power = false;
    kept += line + "\n";
  }
  const PowerSpec& p = fit.fitted;
  kept += format_text(
      "power:                       # board watts, fitted by `sim calibrate --power` to %s: %zu "
      "shapes, held-out MAE %.1f %% (docs/validation.md, \"Power\")\n",
      fit.profile.c_str(), fit.rows.size(), 100 * fit.held_out_error.mean);
  kept += format_text("  max_w: %g\n  idle_w: %.1f\n  compute_w: %.1f\n  memory_w: %.1f\n", p.max_w,
                      p.idle_w, p.compute_w, p.memory_w);
  return kept;
}

void print_power_fit(std::FILE* out, const PowerFit& fit) {
  std::int64_t held = 0, limit = 0;
  for (const PowerFitRow& r : fit.rows) {
    held += r.held_out;
    limit += r.at_limit && !r.held_out;
  }
  const PowerSpec& p = fit.fitted;
  std::fprintf(out,
               "power fit to %s: %zu shapes with readings, %lld held out, %lld at the board's "
               "limit left out\n  idle_w %.1f, compute_w %.1f, memory_w %.1f (max_w %g)\n",
               fit.profile.c_str(), fit.rows.size(), static_cast<long long>(held),
               static_cast<long long>(limit), p.idle_w, p.compute_w, p.memory_w, p.max_w);
  if (fit.over_limit > 0) {
    std::fprintf(out,
                 "  warning: %lld readings above 1.05 x max_w (%g W) left out: a board cannot "
                 "draw them (NVML's energy counter stepping over the short window)\n",
                 static_cast<long long>(fit.over_limit), p.max_w);
  }
  auto line = [&](const char* what, const ErrorStats& e) {
    std::fprintf(out, "  %-34s MAE %5.1f %%  p90 %5.1f %%  max %5.1f %%  bias %+5.1f %% (%lld)\n",
                 what, 100 * e.mean, 100 * e.p90, 100 * e.max, 100 * e.mean_signed,
                 static_cast<long long>(e.count));
  };
  line("fitted, on the fitted shapes", fit.fit_error);
  line("fitted, on the held-out shapes", fit.held_out_error);
  if (fit.assumed.known()) {
    line("the entry's (assumed), held out", fit.assumed_held_out_error);
  }
}

}  // namespace servelab
