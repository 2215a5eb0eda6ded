#include "traces/synthetic_workload.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/checked_time.h"
#include "serving/config_node.h"

namespace servelab {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("SyntheticConfig: ") + what);
}

void validate(const LengthDist& d, const char* name) {
  const std::string n = name;
  require(d.min >= 1 && d.min <= d.max && d.max <= kMaxSyntheticLength,
          (n + ": need 1 <= min <= max <= 10,000,000").c_str());
  switch (d.kind) {
    case LengthDistKind::kFixed:
      require(d.value >= 1 && d.value <= kMaxSyntheticLength, (n + ": value out of range").c_str());
      break;
    case LengthDistKind::kUniform:
      break;
    case LengthDistKind::kNormal:
    case LengthDistKind::kLognormal:
      require(std::isfinite(d.mean) && std::isfinite(d.stddev) && d.stddev >= 0,
              (n + ": need a finite mean and stddev >= 0").c_str());
      require(d.kind == LengthDistKind::kNormal || d.mean > 0,
              (n + ": lognormal needs mean > 0").c_str());
      break;
    case LengthDistKind::kTable:
      require(d.table != nullptr && d.table->size() > 0, (n + ": table missing").c_str());
      break;
  }
}

std::int32_t clamp_round(double x, std::int32_t lo, std::int32_t hi) {
  if (!(x >= lo)) return lo;  // also catches NaN
  if (x >= hi) return hi;
  const auto v = static_cast<std::int32_t>(std::llround(x));
  return v < lo ? lo : (v > hi ? hi : v);
}

std::int32_t clamp(std::int32_t v, std::int32_t lo, std::int32_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// The value of `row` in the column a table distribution reads.
std::int32_t table_value(const LengthDist& d, std::size_t row) {
  return d.column == TableColumn::kPrefill ? d.table->prefill(row) : d.table->decode(row);
}

}  // namespace

std::string LengthDist::describe() const {
  const std::string range = " in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  switch (kind) {
    case LengthDistKind::kFixed:
      return "fixed " + std::to_string(value);
    case LengthDistKind::kUniform:
      return "uniform [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    case LengthDistKind::kNormal:
      return "normal(mean " + num(mean) + ", stddev " + num(stddev) + ")" + range;
    case LengthDistKind::kLognormal:
      return "lognormal(mean " + num(mean) + ", stddev " + num(stddev) + ")" + range;
    case LengthDistKind::kTable:
      return std::string(column == TableColumn::kPrefill ? "prefill" : "decode") +
             " column of table " + (table ? table->source() : "?") + range;
  }
  return "?";
}

SyntheticWorkload::SyntheticWorkload(SyntheticConfig config, std::uint64_t seed)
    : config_(std::move(config)),
      seed_(seed),
      arrival_rng_(Rng::stream(seed, "arrivals")),
      prompt_rng_(Rng::stream(seed, "prompt_len")),
      output_rng_(Rng::stream(seed, "output_len")),
      prefix_rng_(Rng::stream(seed, "prefix")) {
  const ArrivalConfig& a = config_.arrival;
  require(config_.num_requests || config_.duration_ns, "one of num_requests, duration is required");
  require(!config_.num_requests || *config_.num_requests >= 1, "num_requests must be >= 1");
  require(!config_.duration_ns || *config_.duration_ns > 0, "duration must be > 0");
  require(config_.start_ns >= 0, "start must be >= 0");
  require(std::isfinite(a.rate) && a.rate > 0, "arrival rate must be > 0");
  require(a.process != ArrivalProcess::kGamma || (std::isfinite(a.cv) && a.cv > 0),
          "gamma cv must be > 0");
  require(a.process != ArrivalProcess::kOnOff || (a.on_s > 0 && a.off_s >= 0),
          "onoff needs on_s > 0 and off_s >= 0");
  validate(config_.prompt_len, "prompt_len");
  validate(config_.output_len, "output_len");
  require(!config_.paired_rows || (config_.prompt_len.kind == LengthDistKind::kTable &&
                                   config_.output_len.kind == LengthDistKind::kTable &&
                                   config_.prompt_len.table == config_.output_len.table),
          "paired_rows needs both lengths from the same table");
  if (config_.shared_prefix) {
    const SharedPrefixConfig& p = *config_.shared_prefix;
    require(p.num_prefixes >= 1 && p.length >= 1 && p.length < kMaxSyntheticLength,
            "shared_prefix needs num_prefixes >= 1 and length in [1, 10,000,000)");
    require(p.fraction >= 0 && p.fraction <= 1, "shared_prefix fraction must be in [0, 1]");
  }

  // Gaps with mean 1/rate and CV cv: shape 1/cv^2, scale 1/(rate * shape).
  gamma_shape_ = 1.0 / (a.cv * a.cv);
  gamma_scale_s_ = 1.0 / (a.rate * gamma_shape_);
  // The lognormal whose own mean and stddev are the configured ones.
  const LengthDist* dists[2] = {&config_.prompt_len, &config_.output_len};
  for (int i = 0; i < 2; ++i) {
    if (dists[i]->kind != LengthDistKind::kLognormal) continue;
    const double ratio = dists[i]->stddev / dists[i]->mean;
    const double sigma2 = std::log1p(ratio * ratio);
    lognormal_sigma_[i] = std::sqrt(sigma2);
    lognormal_mu_[i] = std::log(dists[i]->mean) - sigma2 / 2;
  }
  require(a.process != ArrivalProcess::kOnOff ||
              (checked_seconds_to_ns(a.on_s) && checked_seconds_to_ns(a.off_s)),
          "onoff on_s and off_s must be below 4.6e9 s");
  on_ns_ = std::max<TimeNs>(1, checked_seconds_to_ns(a.on_s).value_or(1));
  off_ns_ = checked_seconds_to_ns(a.off_s).value_or(0);
}

std::optional<TimeNs> SyntheticWorkload::draw_gap() {
  const ArrivalConfig& a = config_.arrival;
  switch (a.process) {
    case ArrivalProcess::kPoisson:
    case ArrivalProcess::kOnOff:
      return checked_seconds_to_ns(arrival_rng_.exponential(a.rate));
    case ArrivalProcess::kGamma:
      return checked_seconds_to_ns(arrival_rng_.gamma(gamma_shape_, gamma_scale_s_));
    case ArrivalProcess::kFixed:
      break;  // not drawn: computed from the id so rounding never accumulates
  }
  return 0;
}

std::optional<TimeNs> SyntheticWorkload::wall_time(TimeNs active_ns) const {
  if (config_.arrival.process != ArrivalProcess::kOnOff) return active_ns;
  const TimeNs cycles = active_ns / on_ns_;
  const std::optional<TimeNs> period = checked_add(on_ns_, off_ns_);
  const std::optional<TimeNs> full = period ? checked_mul(cycles, *period) : std::nullopt;
  return full ? checked_add(*full, active_ns % on_ns_) : std::nullopt;
}

std::optional<RequestSpec> SyntheticWorkload::next() {
  if (done_) return std::nullopt;
  if (config_.num_requests && static_cast<std::int64_t>(next_id_) >= *config_.num_requests) {
    done_ = true;
    return std::nullopt;
  }
  const bool fixed = config_.arrival.process == ArrivalProcess::kFixed;
  const std::optional<TimeNs> active =
      overflow_ ? std::nullopt
      : fixed   ? checked_seconds_to_ns(static_cast<double>(next_id_) / config_.arrival.rate)
                : std::optional<TimeNs>(active_ns_);
  const std::optional<TimeNs> since_start = active ? wall_time(*active) : std::nullopt;
  const std::optional<TimeNs> arrival =
      since_start ? checked_add(config_.start_ns, *since_start) : std::nullopt;
  if (!arrival) {
    // Beyond any representable time: past duration_s when there is one, else an error.
    if (config_.duration_ns) {
      done_ = true;
      return std::nullopt;
    }
    throw ConfigError(config_.arrival_location + ": request " + std::to_string(next_id_) +
                      " would arrive more than 292 years after the start (the arrival rate is "
                      "too small for num_requests; raise the rate or set duration_s)");
  }
  if (config_.duration_ns && *since_start >= *config_.duration_ns) {
    done_ = true;
    return std::nullopt;
  }
  if (!fixed) {
    const std::optional<TimeNs> gap = draw_gap();
    const std::optional<TimeNs> sum = gap ? checked_add(active_ns_, *gap) : std::nullopt;
    if (sum) {
      active_ns_ = *sum;
    } else {
      overflow_ = true;
    }
  }

  // Lengths: each distribution draws from its own stream.
  std::size_t row = 0;
  auto sample = [&](const LengthDist& d, Rng& rng, int which) -> std::int32_t {
    switch (d.kind) {
      case LengthDistKind::kFixed:
        return d.value;
      case LengthDistKind::kUniform:
        return static_cast<std::int32_t>(rng.uniform_int(d.min, d.max));
      case LengthDistKind::kNormal:
        return clamp_round(rng.normal(d.mean, d.stddev), d.min, d.max);
      case LengthDistKind::kLognormal:
        return clamp_round(rng.lognormal(lognormal_mu_[which], lognormal_sigma_[which]), d.min,
                           d.max);
      case LengthDistKind::kTable:
        if (which == 0 || !config_.paired_rows) {
          row = static_cast<std::size_t>(
              rng.uniform_int(0, static_cast<std::int64_t>(d.table->size()) - 1));
        }
        return clamp(table_value(d, row), d.min, d.max);
    }
    return 1;
  };
  const std::int32_t prompt_len = sample(config_.prompt_len, prompt_rng_, 0);
  const std::int32_t output_len = sample(config_.output_len, output_rng_, 1);

  RequestSpec spec;
  spec.id = next_id_;
  spec.arrival_ns = *arrival;
  spec.max_output_tokens = output_len;
  spec.n = config_.n;
  // Built canonical directly (distinct streams, no empty segment): no make_request() copy.
  std::int32_t own = prompt_len;
  if (config_.shared_prefix) {
    const SharedPrefixConfig& p = *config_.shared_prefix;
    if (prefix_rng_.uniform() < p.fraction) {
      const auto prefix =
          static_cast<std::uint64_t>(prefix_rng_.uniform_int(0, p.num_prefixes - 1));
      own = std::max(prompt_len - p.length, 1);
      spec.prompt.reserve(2);
      spec.prompt.push_back(
          {shared_prefix_content_id(seed_, prefix), 0, static_cast<std::uint32_t>(p.length)});
    }
  }
  spec.prompt.push_back({unique_content_id(seed_, next_id_), 0, static_cast<std::uint32_t>(own)});
  spec.prompt_len =
      static_cast<std::int32_t>(spec.prompt.size() == 2 ? own + spec.prompt[0].length : own);
  ++next_id_;
  return spec;
}

std::string SyntheticWorkload::describe() const {
  const ArrivalConfig& a = config_.arrival;
  std::string s = "synthetic: ";
  if (config_.num_requests) s += std::to_string(*config_.num_requests) + " requests";
  if (config_.num_requests && config_.duration_ns) s += " or ";
  if (config_.duration_ns) s += num(ns_to_s(*config_.duration_ns)) + " s";
  if (config_.start_ns != 0) s += " from " + num(ns_to_s(config_.start_ns)) + " s";
  switch (a.process) {
    case ArrivalProcess::kPoisson:
      s += ", poisson arrivals at " + num(a.rate) + " req/s";
      break;
    case ArrivalProcess::kGamma:
      s += ", gamma arrivals at " + num(a.rate) + " req/s (cv " + num(a.cv) + ")";
      break;
    case ArrivalProcess::kFixed:
      s += ", fixed arrivals at " + num(a.rate) + " req/s";
      break;
    case ArrivalProcess::kOnOff:
      s += ", on/off arrivals at " + num(a.rate) + " req/s (on " + num(a.on_s) + " s, off " +
           num(a.off_s) + " s)";
      break;
  }
  if (config_.paired_rows) {
    s += ", prompt and output from one row of " + config_.prompt_len.table->source() +
         " (prompt in [" + std::to_string(config_.prompt_len.min) + ", " +
         std::to_string(config_.prompt_len.max) + "], output in [" +
         std::to_string(config_.output_len.min) + ", " + std::to_string(config_.output_len.max) +
         "])";
  } else {
    s += ", prompt " + config_.prompt_len.describe() + ", output " + config_.output_len.describe();
  }
  if (config_.shared_prefix) {
    const SharedPrefixConfig& p = *config_.shared_prefix;
    s += ", " + num(p.fraction * 100) + "% of requests start with one of " +
         std::to_string(p.num_prefixes) + " shared prefixes of " + std::to_string(p.length) +
         " tokens";
  }
  s += ", seed " + std::to_string(seed_);
  return s;
}

}  // namespace servelab
