#include "sim/calibrated_cost_model.h"

#include <algorithm>
#include <utility>

#include "core/config_node.h"

namespace servelab {

CalibrationFeatures CalibrationFeatures::from_plan(const StepPlan& plan) {
  CalibrationFeatures f;
  f.step = StepFeatures::from_plan(plan);
  f.num_entries = static_cast<std::int64_t>(plan.requests.size());
  return f;
}

double calibrated_seconds(const CalibratedCoefficients& c, const CalibrationFeatures& f,
                          double block_bytes) {
  if (f.empty()) return 0.0;
  const StepFeatures& s = f.step;
  const double t = static_cast<double>(s.num_tokens);
  const double above =
      c.knee_tokens > 0 ? std::max(0.0, t - static_cast<double>(c.knee_tokens)) : 0.0;
  const double dc = static_cast<double>(s.decode_context_tokens);
  const double dc_above =
      c.decode_context_knee_tokens > 0
          ? std::max(0.0, dc - static_cast<double>(c.decode_context_knee_tokens))
          : 0.0;
  return c.step_s + c.per_sequence_s * static_cast<double>(f.num_entries) + c.per_token_s * t +
         c.decode_context_token_above_knee_s * dc_above + c.per_token_above_knee_s * above +
         c.prefill_pair_s * static_cast<double>(s.prefill_pairs) + c.decode_context_token_s * dc +
         c.sampled_sequence_s * static_cast<double>(s.num_sampled) +
         c.swap_byte_s * static_cast<double>(s.swap_out_blocks + s.swap_in_blocks) * block_bytes +
         c.copy_byte_s * static_cast<double>(s.copy_blocks) * block_bytes;
}

CalibratedProfile load_calibrated_profile(const std::string& path) {
  const ConfigNode doc = ConfigNode::load_file(path);
  doc.allow_keys({"type", "format_version", "model", "device", "date_utc", "engine_version",
                  "profile", "block_size", "block_bytes", "coefficients", "fit", "host_overhead"});
  const ConfigNode type = doc.at("type");
  if (type.as_string() != "calibrated") type.fail("'calibrated'");
  if (doc.has("format_version")) doc.get_int("format_version", 1, 1);
  CalibratedProfile p;
  p.file = path;
  p.model = doc.get_string("model");
  p.device = doc.get_string("device", "");
  p.date_utc = doc.get_string("date_utc", "");
  p.engine_version = doc.get_string("engine_version", "");
  if (doc.has("profile")) doc.get_string("profile");
  p.block_size = static_cast<std::int32_t>(doc.get_int("block_size", 1, 256));
  p.block_bytes = doc.get_int("block_bytes", 1, INT64_MAX);
  const ConfigNode c = doc.at("coefficients");
  c.allow_keys({"step_s", "per_sequence_s", "per_token_s", "per_token_above_knee_s", "knee_tokens",
                "prefill_pair_s", "decode_context_token_s", "decode_context_token_above_knee_s",
                "decode_context_knee_tokens", "sampled_sequence_s", "swap_byte_s", "copy_byte_s"});
  CalibratedCoefficients& k = p.coefficients;
  // Every coefficient is required (a file missing one is not what `sim calibrate` writes), but
  // for the decode-context knee, which is optional.
  k.step_s = c.get_double("step_s", 0.0, 1e6);
  k.per_sequence_s = c.get_double("per_sequence_s", 0.0, 1e6);
  k.per_token_s = c.get_double("per_token_s", 0.0, 1e6);
  k.per_token_above_knee_s = c.get_double("per_token_above_knee_s", 0.0, 1e6);
  k.knee_tokens = c.get_int("knee_tokens", 0, 1 << 30);
  k.prefill_pair_s = c.get_double("prefill_pair_s", 0.0, 1e6);
  k.decode_context_token_s = c.get_double("decode_context_token_s", 0.0, 1e6);
  // The decode-context knee came later: optional, 0 (no knee) when absent.
  k.decode_context_token_above_knee_s =
      c.get_double("decode_context_token_above_knee_s", 0.0, 0.0, 1e6);
  k.decode_context_knee_tokens = c.get_int("decode_context_knee_tokens", 0, 0, INT64_MAX);
  k.sampled_sequence_s = c.get_double("sampled_sequence_s", 0.0, 1e6);
  k.swap_byte_s = c.get_double("swap_byte_s", 0.0, 1e6);
  k.copy_byte_s = c.get_double("copy_byte_s", 0.0, 1e6);
  for (const char* info : {"fit", "host_overhead"}) {  // informational sections
    if (doc.has(info) && !doc.at(info).is_map()) doc.at(info).fail("a mapping");
  }
  return p;
}

CalibratedCostModel::CalibratedCostModel(CalibratedProfile profile, std::int32_t block_size)
    : profile_(std::move(profile)) {
  if (block_size < 1) {
    throw ConfigError("block_size must be at least 1, got " + std::to_string(block_size));
  }
  block_bytes_ = static_cast<double>(profile_.block_bytes) / profile_.block_size * block_size;
}

double CalibratedCostModel::seconds(const CalibrationFeatures& f) const {
  return calibrated_seconds(profile_.coefficients, f, block_bytes_);
}

TimeNs CalibratedCostModel::step_time(const StepPlan& plan) const {
  return seconds_to_ns(seconds(CalibrationFeatures::from_plan(plan)));
}

TimeNs CalibratedCostModel::swap_time(std::int64_t num_blocks) const {
  return seconds_to_ns(static_cast<double>(num_blocks) * block_bytes_ *
                       profile_.coefficients.swap_byte_s);
}

bool calibrated_swap_is_cheaper(const CalibratedCostModel& cost, const Request& victim) {
  auto prefill = [&](std::int64_t c) {
    CalibrationFeatures f;
    f.num_entries = 1;
    f.step.num_tokens = c;
    f.step.prefill_tokens = c;
    f.step.prefill_pairs = c * (c + 1) / 2;
    f.step.prefill_context_tokens = c;
    return cost.seconds(f);
  };
  const std::int64_t tokens = victim.num_computed_tokens;
  const double recompute = tokens <= 1 ? 0.0 : prefill(tokens) - prefill(1);
  const double swap =
      2.0 * ns_to_s(cost.swap_time(static_cast<std::int64_t>(victim.block_table.size())));
  return swap < recompute;
}

}  // namespace servelab
