#include "traces/azure_trace.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "core/checked_time.h"
#include "serving/config_node.h"

namespace servelab {

namespace {

constexpr std::string_view kHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";
constexpr const char* kTimestampForm = "a timestamp like 2023-11-16 18:15:46.6805900";

// Days from 1970-01-01 to year-month-day in the proleptic Gregorian calendar (H. Hinnant's
// days_from_civil).
constexpr std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

constexpr unsigned days_in_month(std::int64_t y, unsigned m) {
  constexpr unsigned kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// Reads exactly `n` digits at s[pos...] into `out`, advancing pos.
bool digits(std::string_view s, std::size_t& pos, int n, std::int64_t& out) {
  if (pos + static_cast<std::size_t>(n) > s.size()) return false;
  out = 0;
  for (int i = 0; i < n; ++i) {
    const char c = s[pos++];
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  return true;
}

bool expect(std::string_view s, std::size_t& pos, char c) {
  if (pos >= s.size() || s[pos] != c) return false;
  ++pos;
  return true;
}

}  // namespace

std::optional<TimeNs> parse_timestamp_ns(std::string_view text) {
  const std::string_view s = trim(text);
  std::size_t pos = 0;
  std::int64_t year, month, day, hour, minute, second;
  if (!digits(s, pos, 4, year) || !expect(s, pos, '-') || !digits(s, pos, 2, month) ||
      !expect(s, pos, '-') || !digits(s, pos, 2, day)) {
    return std::nullopt;
  }
  if (pos >= s.size() || (s[pos] != ' ' && s[pos] != 'T')) return std::nullopt;
  ++pos;
  if (!digits(s, pos, 2, hour) || !expect(s, pos, ':') || !digits(s, pos, 2, minute) ||
      !expect(s, pos, ':') || !digits(s, pos, 2, second)) {
    return std::nullopt;
  }
  if (month < 1 || month > 12 || day < 1 ||
      day > days_in_month(year, static_cast<unsigned>(month)) || hour > 23 || minute > 59 ||
      second > 59) {
    return std::nullopt;
  }
  std::int64_t frac_ns = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    int n = 0;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      if (++n > 9) return std::nullopt;
      frac_ns = frac_ns * 10 + (s[pos++] - '0');
    }
    if (n == 0) return std::nullopt;
    for (; n < 9; ++n) frac_ns *= 10;
  }
  std::int64_t offset_s = 0;
  if (pos < s.size()) {
    if (s[pos] == 'Z' && pos + 1 == s.size()) {
      ++pos;
    } else if (s[pos] == '+' || s[pos] == '-') {
      const std::int64_t sign = s[pos++] == '+' ? 1 : -1;
      std::int64_t oh = 0, om = 0;
      if (!digits(s, pos, 2, oh)) return std::nullopt;
      if (pos < s.size()) {
        expect(s, pos, ':');  // optional colon: "+05:30" or "+0530"
        if (!digits(s, pos, 2, om)) return std::nullopt;
      }
      if (oh > 23 || om > 59) return std::nullopt;
      offset_s = sign * (oh * 3600 + om * 60);
    }
    if (pos != s.size()) return std::nullopt;
  }
  const std::int64_t days =
      days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  const std::int64_t secs = days * 86400 + hour * 3600 + minute * 60 + second - offset_s;
  // Nanoseconds since 1970 fit years 1678 to 2261; outside, nullopt (checked, never a wrap).
  const std::optional<TimeNs> ns = checked_mul(secs, kNsPerS);
  return ns ? checked_add(*ns, frac_ns) : std::nullopt;
}

AzureTraceWorkload::AzureTraceWorkload(const std::string& path, AzureTraceOptions options)
    : csv_(path), options_(options) {
  if (options_.max_requests && *options_.max_requests < 1) {
    throw std::invalid_argument("AzureTraceOptions: max_requests must be >= 1");
  }
  if (!(options_.time_scale > 0) || !std::isfinite(options_.time_scale)) {
    throw std::invalid_argument("AzureTraceOptions: time_scale must be > 0");
  }
  if (options_.start_ns < 0) throw std::invalid_argument("AzureTraceOptions: start must be >= 0");
  if (!csv_.next_row()) {
    throw ConfigError(path + ": empty file, expected the header " + std::string(kHeader));
  }
  const auto f = csv_.fields();
  if (f.size() != 3 || trim(f[0]) != "TIMESTAMP" || trim(f[1]) != "ContextTokens" ||
      trim(f[2]) != "GeneratedTokens") {
    csv_.fail("the header " + std::string(kHeader), csv_.line());
  }
  if (!read_row()) throw ConfigError(path + ": empty trace (no data rows after the header)");
  first_ns_ = pending_.timestamp_ns;
}

bool AzureTraceWorkload::read_row() {
  if (!csv_.next_row()) return false;
  const auto f = csv_.fields();
  if (f.size() != 3) {
    csv_.fail("3 comma-separated fields " + std::string(kHeader), csv_.line());
  }
  const std::optional<TimeNs> t = parse_timestamp_ns(f[0]);
  if (!t) csv_.fail(std::string(kTimestampForm) + " (years 1678 to 2261)", f[0]);
  auto count = [&](std::string_view text, const char* name) {
    const std::optional<std::int64_t> v = parse_int(text);
    if (!v || *v < 1 || *v > std::numeric_limits<std::int32_t>::max()) {
      csv_.fail(std::string("a positive integer ") + name, text);
    }
    return static_cast<std::int32_t>(*v);
  };
  const std::int32_t context = count(f[1], "ContextTokens");
  const std::int32_t generated = count(f[2], "GeneratedTokens");
  if (has_pending_ && *t < pending_.timestamp_ns) {
    csv_.fail("a timestamp no earlier than line " + std::to_string(previous_line_) +
                  "'s (rows must be in time order)",
              f[0]);
  }
  pending_ = {*t, context, generated};
  has_pending_ = true;
  previous_line_ = csv_.line_number();
  return true;
}

std::optional<RequestSpec> AzureTraceWorkload::next() {
  if (!has_pending_) return std::nullopt;
  // Checked: a huge span times time_scale is an error naming the row, never a wrap.
  const std::optional<TimeNs> delta = checked_sub(pending_.timestamp_ns, first_ns_);
  const std::optional<TimeNs> scaled =
      !delta ? std::nullopt
      : options_.time_scale == 1.0
          ? delta
          : checked_round_ns(static_cast<double>(*delta) * options_.time_scale);
  const std::optional<TimeNs> arrival =
      scaled ? checked_add(options_.start_ns, *scaled) : std::nullopt;
  if (!arrival) {
    throw ConfigError(csv_.path() + ":" + std::to_string(previous_line_) +
                      ": the arrival time (after time_scale and start_s) is beyond ~292 years");
  }
  RequestSpec spec;
  spec.id = next_id_;
  spec.arrival_ns = *arrival;
  spec.prompt.push_back({unique_content_id(options_.content_seed, next_id_), 0,
                         static_cast<std::uint32_t>(pending_.context_tokens)});
  spec.prompt_len = pending_.context_tokens;
  spec.max_output_tokens = pending_.generated_tokens;
  ++next_id_;
  // Read ahead so the end of the trace is known before the caller asks again (the pending row is
  // also the reference for the time-order check); never past max_requests, so rows beyond it
  // are not even checked.
  const bool more =
      (!options_.max_requests || static_cast<std::int64_t>(next_id_) < *options_.max_requests) &&
      read_row();
  if (!more) has_pending_ = false;
  return spec;
}

std::string AzureTraceWorkload::describe() const {
  std::string s = "azure trace " + csv_.path();
  if (options_.max_requests) s += ", first " + std::to_string(*options_.max_requests) + " rows";
  if (options_.time_scale != 1.0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", options_.time_scale);
    s += std::string(", time scale ") + buf;
  }
  if (options_.start_ns != 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", ns_to_s(options_.start_ns));
    s += std::string(", from ") + buf + " s";
  }
  return s;
}

}  // namespace servelab
