#include "sim/vidur_fit.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "core/config_error.h"
#include "sim/nelder_mead.h"
#include "traces/csv_reader.h"

namespace servelab {

namespace {

constexpr const char* kOpNames[kVidurNumOps] = {
    "attn_pre_proj", "attn_post_proj",  "mlp_up_proj",
    "mlp_down_proj", "input_layernorm", "post_attention_layernorm",
    "attn_rope",     "mlp_act",         "add"};

constexpr double kDtypeBytes = 2;  // Vidur profiles 16-bit models

double parse_double(const CsvReader& in, std::string_view field, const std::string& column) {
  const std::string s(trim(field));
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
    in.fail("a number in column " + column, field);
  }
  return v;
}

// Logistic and exponential transforms: Nelder-Mead works on unconstrained parameters.
double logistic(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double logit(double p) { return std::log(p / (1.0 - p)); }

constexpr std::size_t kMinVidurTokenCounts = 4;

// The held-out token counts: those at odd positions in the sorted distinct counts.
void split_tokens(const VidurProfile& p, std::vector<std::int64_t>& train,
                  std::vector<std::int64_t>& test) {
  std::set<std::int64_t> all;
  for (const VidurRow& r : p.rows) all.insert(r.num_tokens);
  std::size_t i = 0;
  for (const std::int64_t t : all) (i++ % 2 == 0 ? train : test).push_back(t);
}

bool contains(const std::vector<std::int64_t>& sorted, std::int64_t t) {
  return std::binary_search(sorted.begin(), sorted.end(), t);
}

struct Point {
  const VidurProfile* profile;
  VidurOp op;
  std::int64_t tokens;
  double seconds;
};

double objective(const HardwareConfig& hw, const std::vector<Point>& pts) {
  const OperatorTime time(hw, "bf16");
  double sum = 0;
  for (const Point& p : pts) {
    const double r = std::log(vidur_predict(time, *p.profile, p.op, p.tokens) / p.seconds);
    sum += r * r;
  }
  return sum / static_cast<double>(pts.size());
}

// Best of a few starts (deterministic).
std::vector<double> minimise(const std::function<double(const std::vector<double>&)>& f,
                             const std::vector<std::vector<double>>& starts) {
  NelderMeadResult best;
  best.value = INFINITY;
  for (const auto& s : starts) {
    NelderMeadResult r = nelder_mead(f, s, 0.5, 3000);
    r = nelder_mead(f, r.x, 0.1, 2000);  // restart: a collapsed simplex gets a fresh shape
    if (r.value < best.value) best = r;
  }
  return best.x;
}

void set_gemm(HardwareConfig& hw, const std::vector<double>& x) {
  hw.gemm_flops_efficiency = logistic(x[0]);
  hw.gemm_bandwidth_efficiency = logistic(x[1]);
  hw.gemm_overlap = 1.0 + std::exp(x[2]);
  hw.gemm_min_s = std::exp(x[3]) * 1e-6;
}

void set_elementwise(HardwareConfig& hw, const std::vector<double>& x) {
  hw.elementwise_min_s = std::exp(x[0]) * 1e-6;
  hw.elementwise_overlap = 1.0 + std::exp(x[1]);
  hw.norm_bandwidth_efficiency = logistic(x[2]);
  hw.rope_bandwidth_efficiency = logistic(x[3]);
  hw.activation_bandwidth_efficiency = logistic(x[4]);
  hw.residual_bandwidth_efficiency = logistic(x[5]);
}

std::string range_name(int i) {
  static const char* names[] = {"< 128", "128-512", "513-1024", "> 1024"};
  return names[i];
}

}  // namespace

const char* vidur_op_name(VidurOp op) { return kOpNames[op]; }

VidurProfile read_vidur_profile(const std::string& path) {
  CsvReader in(path);
  VidurProfile p;
  p.file = path;
  if (!in.next_row()) throw ConfigError(path + ": empty file (expected a Vidur mlp.csv header)");
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < in.fields().size(); ++i) col[std::string(trim(in.fields()[i]))] = i;
  auto column = [&](const std::string& name) -> std::size_t {
    const auto it = col.find(name);
    if (it == col.end()) in.fail_message("missing column '" + name + "' (a Vidur mlp.csv has it)");
    return it->second;
  };
  std::array<std::size_t, kVidurNumOps> op_col{};
  for (int i = 0; i < kVidurNumOps; ++i) {
    op_col[i] = column(std::string("time_stats.") + kOpNames[i] + ".median");
  }
  const std::size_t c_tokens = column("num_tokens"), c_heads = column("n_head"),
                    c_kv = column("n_kv_head"), c_hidden = column("n_embd"),
                    c_inter = column("n_expanded_embd"), c_gated = column("use_gated_mlp");
  const std::size_t c_tp = col.count("num_tensor_parallel_workers")
                               ? column("num_tensor_parallel_workers")
                               : column("num_tensor_parallel_work");
  const std::size_t width = in.fields().size();
  while (in.next_row()) {
    const auto f = in.fields();
    if (f.size() != width) {
      in.fail(std::to_string(width) + " fields", std::to_string(f.size()) + " fields");
    }
    const auto tp = parse_int(f[c_tp]);
    if (!tp || *tp < 1) in.fail("a positive tensor-parallel degree", f[c_tp]);
    if (*tp != 1) continue;
    // Model dimensions and token counts up to 2^30: far past any profile, and products of a
    // few of them stay exact in a double.
    auto positive = [&](std::size_t c, const std::string& name) {
      const auto v = parse_int(f[c]);
      if (!v || *v < 1 || *v > (std::int64_t{1} << 30)) {
        in.fail("an integer in [1, 2^30] in column " + name, f[c]);
      }
      return *v;
    };
    const std::int64_t heads = positive(c_heads, "n_head"), kv = positive(c_kv, "n_kv_head"),
                       hidden = positive(c_hidden, "n_embd"),
                       inter = positive(c_inter, "n_expanded_embd");
    if (trim(f[c_gated]) != "True") {
      in.fail("use_gated_mlp True (a SwiGLU MLP; the roofline models no other)", f[c_gated]);
    }
    if (p.rows.empty()) {
      p.heads = heads, p.kv_heads = kv, p.hidden = hidden, p.intermediate = inter;
      if (hidden % heads != 0) in.fail_message("n_embd is not a multiple of n_head");
    } else if (heads != p.heads || kv != p.kv_heads || hidden != p.hidden ||
               inter != p.intermediate) {
      in.fail_message("the model shape differs from the first row's (one model per file)");
    }
    VidurRow r;
    r.line = in.line_number();
    r.num_tokens = positive(c_tokens, "num_tokens");
    for (int i = 0; i < kVidurNumOps; ++i) {
      const std::string name = std::string(kOpNames[i]) + ".median";
      const double ms = parse_double(in, f[op_col[i]], name);
      if (ms <= 0) in.fail("a positive time in column " + name, f[op_col[i]]);
      r.seconds[i] = ms * 1e-3;
    }
    p.rows.push_back(r);
  }
  if (p.rows.empty()) throw ConfigError(path + ": no rows at tensor parallelism 1");
  // Half the token counts are fitted, the other half held out (split_tokens): with fewer than
  // four there would be nothing to report an error on, or too little to fit.
  std::set<std::int64_t> counts;
  for (const VidurRow& r : p.rows) counts.insert(r.num_tokens);
  if (counts.size() < kMinVidurTokenCounts) {
    throw ConfigError(path + ": " + std::to_string(counts.size()) +
                      " distinct num_tokens at tensor parallelism 1; the fit needs at least " +
                      std::to_string(kMinVidurTokenCounts) +
                      " (half fitted, half held out to report its error)");
  }
  return p;
}

double vidur_predict(const OperatorTime& t, const VidurProfile& p, VidurOp op,
                     std::int64_t tokens) {
  const double m = static_cast<double>(tokens);
  const double h = static_cast<double>(p.hidden);
  const double head = h / static_cast<double>(p.heads);
  const double q = h, kv = head * static_cast<double>(p.kv_heads);
  const double inter = static_cast<double>(p.intermediate);
  const double b = kDtypeBytes;
  switch (op) {
    case kVidurQkv:
      return t.gemm(m, q + 2 * kv, h, b);
    case kVidurO:
      return t.gemm(m, h, q, b);
    case kVidurUp:
      return t.gemm(m, 2 * inter, h, b);
    case kVidurDown:
      return t.gemm(m, h, inter, b);
    case kVidurInputNorm:
    case kVidurPostNorm:
      return t.elementwise(m * 2 * h * b, ElementwiseKind::kNorm);
    case kVidurRope:
      return t.elementwise(m * 2 * (q + kv) * b, ElementwiseKind::kRope);
    case kVidurAct:
      return t.elementwise(m * 3 * inter * b, ElementwiseKind::kActivation);
    case kVidurAdd:
      return t.elementwise(m * 3 * h * b, ElementwiseKind::kResidual);
    case kVidurNumOps:
      break;
  }
  return 0;
}

VidurErrors vidur_errors(const HardwareConfig& hw, const VidurProfile& p,
                         const std::vector<std::int64_t>& tokens) {
  const OperatorTime time(hw, "bf16");
  VidurErrors e;
  e.file = p.file;
  std::vector<double> linear, ew, layer;
  std::array<std::vector<double>, 4> by_op, by_range;
  for (const VidurRow& r : p.rows) {
    if (!contains(tokens, r.num_tokens)) continue;
    double pred_ew = 0, meas_ew = 0, pred_all = 0, meas_all = 0;
    const int range = r.num_tokens < 128     ? 0
                      : r.num_tokens <= 512  ? 1
                      : r.num_tokens <= 1024 ? 2
                                             : 3;
    for (int i = 0; i < kVidurNumOps; ++i) {
      const auto op = static_cast<VidurOp>(i);
      const double pred = vidur_predict(time, p, op, r.num_tokens);
      // The profile times one add; a layer has two (after attention and after the MLP).
      const double weight = op == kVidurAdd ? 2.0 : 1.0;
      if (i < 4) {
        const double err = pred / r.seconds[i] - 1;
        linear.push_back(err);
        by_op[i].push_back(err);
        by_range[range].push_back(err);
      } else {
        pred_ew += weight * pred;
        meas_ew += weight * r.seconds[i];
      }
      pred_all += weight * pred;
      meas_all += weight * r.seconds[i];
    }
    ew.push_back(pred_ew / meas_ew - 1);
    layer.push_back(pred_all / meas_all - 1);
  }
  e.linear = error_stats(linear);
  for (int i = 0; i < 4; ++i) {
    e.linear_by_op[i] = error_stats(by_op[i]);
    e.linear_by_range[i] = error_stats(by_range[i]);
  }
  e.elementwise = error_stats(ew);
  e.layer = error_stats(layer);
  return e;
}

VidurFit fit_vidur(const HardwareConfig& base, const std::vector<VidurProfile>& train,
                   const std::vector<VidurProfile>& held_out) {
  if (train.empty()) throw ConfigError("sim calibrate --vidur: no training profile given");
  std::vector<Point> gemm_pts, ew_pts;
  std::vector<std::vector<std::int64_t>> test_tokens;
  for (const VidurProfile& p : train) {
    std::vector<std::int64_t> fit_tokens, test;
    split_tokens(p, fit_tokens, test);
    test_tokens.push_back(test);
    for (const VidurRow& r : p.rows) {
      if (!contains(fit_tokens, r.num_tokens)) continue;
      for (int i = 0; i < kVidurNumOps; ++i) {
        (i < 4 ? gemm_pts : ew_pts)
            .push_back({&p, static_cast<VidurOp>(i), r.num_tokens, r.seconds[i]});
      }
    }
  }
  VidurFit fit;
  fit.hardware = base;
  HardwareConfig work = base;
  const std::vector<double> g = minimise(
      [&](const std::vector<double>& x) {
        set_gemm(work, x);
        return objective(work, gemm_pts);
      },
      {{logit(0.7), logit(0.8), std::log(0.5), std::log(3.0)},
       {logit(0.8), logit(0.9), std::log(2.0), std::log(1.0)}});
  set_gemm(fit.hardware, g);
  set_gemm(work, g);
  const std::vector<double> e = minimise(
      [&](const std::vector<double>& x) {
        set_elementwise(work, x);
        return objective(work, ew_pts);
      },
      {{std::log(3.0), std::log(1.0), 0.0, 0.0, 0.0, 0.0},
       {std::log(5.0), std::log(0.3), logit(0.4), logit(0.5), logit(0.6), logit(0.8)}});
  set_elementwise(fit.hardware, e);
  // Rounded to what the catalogue file holds, so the reported errors are the file's.
  auto round3 = [](double v) {
    if (v == 0) return 0.0;
    const double scale = std::pow(10.0, 2 - std::floor(std::log10(std::abs(v))));
    return std::round(v * scale) / scale;
  };
  HardwareConfig& hw = fit.hardware;
  for (double* v : {&hw.gemm_flops_efficiency, &hw.gemm_bandwidth_efficiency,
                    &hw.norm_bandwidth_efficiency, &hw.rope_bandwidth_efficiency,
                    &hw.activation_bandwidth_efficiency, &hw.residual_bandwidth_efficiency}) {
    *v = std::min(round3(*v), 1.0);
  }
  hw.gemm_overlap = std::max(round3(hw.gemm_overlap), 1.0);
  hw.elementwise_overlap = std::max(round3(hw.elementwise_overlap), 1.0);
  hw.gemm_min_s = round3(hw.gemm_min_s * 1e6) * 1e-6;
  hw.elementwise_min_s = round3(hw.elementwise_min_s * 1e6) * 1e-6;
  hw.validate();
  const HardwareConfig classic = base.classic_roofline();
  for (std::size_t i = 0; i < train.size(); ++i) {
    for (const HardwareConfig* h : {&std::as_const(fit.hardware), &classic}) {
      VidurErrors err = vidur_errors(*h, train[i], test_tokens[i]);
      err.subset = "held-out tokens";
      (h == &classic ? fit.baseline : fit.errors).push_back(err);
    }
  }
  for (const VidurProfile& p : held_out) {
    std::vector<std::int64_t> all;
    for (const VidurRow& r : p.rows) all.push_back(r.num_tokens);
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    for (const HardwareConfig* h : {&std::as_const(fit.hardware), &classic}) {
      VidurErrors err = vidur_errors(*h, p, all);
      err.subset = "held-out model";
      (h == &classic ? fit.baseline : fit.errors).push_back(err);
    }
  }
  return fit;
}

std::string vidur_hardware_yaml(const VidurFit& fit, const std::vector<std::string>& train_files,
                                const std::vector<std::string>& held_out_files) {
  const HardwareConfig& hw = fit.hardware;
  YAML::Emitter y;
  y.SetDoublePrecision(6);
  y << YAML::BeginMap;
  y << YAML::Key << "name" << YAML::Value << hw.name;
  y << YAML::Key << "peak_tflops" << YAML::Value << hw.peak_flops / 1e12;
  y << YAML::Key << "peak_tflops_fp32" << YAML::Value << hw.peak_flops_fp32 / 1e12;
  if (hw.has_fp8_tensor_cores()) {
    y << YAML::Key << "peak_tflops_fp8" << YAML::Value << hw.peak_flops_fp8 / 1e12;
  }
  y << YAML::Key << "hbm_bandwidth_gbps" << YAML::Value << hw.hbm_bandwidth / 1e9;
  y << YAML::Key << "memory_gib" << YAML::Value
    << static_cast<double>(hw.memory_bytes) / 1073741824.0;
  y << YAML::Key << "host_link_gbps" << YAML::Value << hw.host_link_bandwidth / 1e9;
  y << YAML::Key << "tensor_parallel" << YAML::Value << hw.tensor_parallel;
  y << YAML::Key << "efficiency" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "gemm_flops" << YAML::Value << hw.gemm_flops_efficiency;
  y << YAML::Key << "gemm_bandwidth" << YAML::Value << hw.gemm_bandwidth_efficiency;
  y << YAML::Key << "gemm_overlap" << YAML::Value << hw.gemm_overlap;
  y << YAML::Key << "attention_flops" << YAML::Value << hw.attention_flops_efficiency;
  y << YAML::Key << "memory_bandwidth" << YAML::Value << hw.memory_bandwidth_efficiency;
  y << YAML::Key << "host_link" << YAML::Value << hw.host_link_efficiency;
  y << YAML::Key << "norm_bandwidth" << YAML::Value << hw.norm_bandwidth_efficiency;
  y << YAML::Key << "rope_bandwidth" << YAML::Value << hw.rope_bandwidth_efficiency;
  y << YAML::Key << "activation_bandwidth" << YAML::Value << hw.activation_bandwidth_efficiency;
  y << YAML::Key << "residual_bandwidth" << YAML::Value << hw.residual_bandwidth_efficiency;
  y << YAML::Key << "elementwise_overlap" << YAML::Value << hw.elementwise_overlap;
  y << YAML::EndMap;
  y << YAML::Key << "kernel_min_us" << YAML::Value << YAML::Flow << YAML::BeginMap;
  y << YAML::Key << "gemm" << YAML::Value << hw.gemm_min_s * 1e6;
  y << YAML::Key << "elementwise" << YAML::Value << hw.elementwise_min_s * 1e6;
  y << YAML::EndMap;
  y << YAML::Key << "step_overhead_us" << YAML::Value << hw.step_overhead_s * 1e6;
  y << YAML::Key << "sequence_overhead_us" << YAML::Value << hw.sequence_overhead_s * 1e6;
  if (hw.power.known()) {
    y << YAML::Key << "power" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "max_w" << YAML::Value << hw.power.max_w;
    y << YAML::Key << "idle_w" << YAML::Value << hw.power.idle_w;
    y << YAML::Key << "compute_w" << YAML::Value << hw.power.compute_w;
    y << YAML::Key << "memory_w" << YAML::Value << hw.power.memory_w;
    y << YAML::EndMap;
  }
  auto joined = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  y << YAML::Key << "fitted" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "from" << YAML::Value << joined(train_files);
  y << YAML::Key << "method" << YAML::Value
    << "sim calibrate --vidur: Nelder-Mead on log time, even-position token counts";
  y << YAML::Key << "held_out" << YAML::Value
    << ("odd-position token counts" +
        (held_out_files.empty() ? std::string() : "; " + joined(held_out_files)));
  y << YAML::EndMap;
  y << YAML::EndMap;
  return std::string(y.c_str()) + "\n";
}

void print_vidur_fit(std::FILE* out, const VidurFit& fit) {
  const HardwareConfig& hw = fit.hardware;
  std::fprintf(out,
               "fitted %s: gemm_flops %.3g, gemm_bandwidth %.3g, gemm_overlap %.3g, "
               "gemm min %.3g us; elementwise min %.3g us, overlap %.3g, bandwidth norm %.3g "
               "rope %.3g activation %.3g residual %.3g\n",
               hw.name.c_str(), hw.gemm_flops_efficiency, hw.gemm_bandwidth_efficiency,
               hw.gemm_overlap, hw.gemm_min_s * 1e6, hw.elementwise_min_s * 1e6,
               hw.elementwise_overlap, hw.norm_bandwidth_efficiency, hw.rope_bandwidth_efficiency,
               hw.activation_bandwidth_efficiency, hw.residual_bandwidth_efficiency);
  std::fprintf(out,
               "\n| profile | data | model | linear MAE (bias) | elementwise MAE (bias) | layer "
               "MAE (bias) | linear MAE by tokens %s / %s / %s / %s |\n|---|---|---|---|---|---|"
               "---|\n",
               range_name(0).c_str(), range_name(1).c_str(), range_name(2).c_str(),
               range_name(3).c_str());
  auto cell = [](const ErrorStats& s) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f %% (%+.1f %%)", 100 * s.mean, 100 * s.mean_signed);
    return std::string(buf);
  };
  for (std::size_t i = 0; i < fit.errors.size(); ++i) {
    for (const auto* set : {&fit.baseline, &fit.errors}) {
      const VidurErrors& e = (*set)[i];
      std::string ranges;
      for (const ErrorStats& r : e.linear_by_range) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.1f", ranges.empty() ? "" : " / ", 100 * r.mean);
        ranges += buf;
      }
      std::fprintf(out, "| %s | %s | %s | %s | %s | %s | %s |\n", e.file.c_str(), e.subset.c_str(),
                   set == &fit.baseline ? "before" : "fitted", cell(e.linear).c_str(),
                   cell(e.elementwise).c_str(), cell(e.layer).c_str(), ranges.c_str());
    }
  }
}

}  // namespace servelab
