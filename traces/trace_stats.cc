#include "traces/trace_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <unordered_set>

#include "core/request.h"
#include "core/rng.h"

namespace servelab {

namespace {

// Exact counts of each length: dense below kDense (a vector of at most 8 MiB), sparse above (a
// map, so one legal row of two billion tokens costs one entry, not a vector that long).
class LengthHistogram {
 public:
  static constexpr std::int64_t kDense = 1 << 20;

  void add(std::int64_t v) {
    if (v < 0) v = 0;
    if (v < kDense) {
      if (static_cast<std::size_t>(v) >= dense_.size()) {
        dense_.resize(std::min<std::size_t>(
            kDense, std::max<std::size_t>(static_cast<std::size_t>(v) + 1, dense_.size() * 2)));
      }
      ++dense_[static_cast<std::size_t>(v)];
    } else {
      ++sparse_[v];
    }
    ++n_;
    sum_ += static_cast<double>(v);
    max_ = std::max(max_, v);
  }
  LengthStats stats() const {
    LengthStats s;
    if (n_ == 0) return s;
    s.mean = sum_ / static_cast<double>(n_);
    s.max = max_;
    // Nearest rank: the smallest value with at least ceil(q * n) values at or below it.
    const double qs[3] = {0.5, 0.9, 0.99};
    std::int64_t* out[3] = {&s.p50, &s.p90, &s.p99};
    for (int i = 0; i < 3; ++i) {
      const auto rank = std::max<std::int64_t>(
          1, static_cast<std::int64_t>(std::ceil(qs[i] * static_cast<double>(n_) - 1e-9)));
      *out[i] = value_of_rank(rank);
    }
    return s;
  }

 private:
  std::int64_t value_of_rank(std::int64_t rank) const {
    std::int64_t seen = 0;
    for (std::size_t v = 0; v < dense_.size(); ++v) {
      seen += dense_[v];
      if (seen >= rank) return static_cast<std::int64_t>(v);
    }
    for (const auto& [v, count] : sparse_) {
      seen += count;
      if (seen >= rank) return v;
    }
    return max_;
  }

  std::vector<std::int64_t> dense_;
  std::map<std::int64_t, std::int64_t> sparse_;
  std::int64_t n_ = 0;
  double sum_ = 0;
  std::int64_t max_ = 0;
};

}  // namespace

TraceStats compute_trace_stats(Workload& w, std::int32_t block_tokens) {
  TraceStats st;
  st.block_tokens = block_tokens > 0 ? block_tokens : 0;
  LengthHistogram input, output;
  TimeNs first = 0, last = 0;
  // Welford's running mean and variance of the gaps (numerically stable over millions of rows).
  double gap_mean = 0, gap_m2 = 0;
  std::int64_t gaps = 0;
  std::unordered_set<std::uint64_t> seen;
  std::int64_t repeated = 0;
  while (std::optional<RequestSpec> r = w.next()) {
    if (st.requests == 0) {
      first = r->arrival_ns;
    } else {
      const double g = ns_to_s(r->arrival_ns - last);
      ++gaps;
      const double d = g - gap_mean;
      gap_mean += d / static_cast<double>(gaps);
      gap_m2 += d * (g - gap_mean);
    }
    last = r->arrival_ns;
    ++st.requests;
    input.add(r->prompt_len);
    output.add(r->max_output_tokens);
    if (st.block_tokens > 0) {
      // A block's identity is the list of (stream, offset, length) pieces it is made of, so two
      // blocks are equal exactly when their tokens are.
      std::uint64_t h = 0;
      std::uint32_t fill = 0;
      auto close_block = [&] {
        ++st.blocks;
        if (!seen.insert(h).second) ++repeated;
        h = 0;
        fill = 0;
      };
      for (const PromptSegment& s : r->prompt) {
        std::uint32_t off = s.offset, left = s.length;
        while (left > 0) {
          const std::uint32_t take =
              std::min(left, static_cast<std::uint32_t>(st.block_tokens) - fill);
          h = mix64(h ^ mix64(s.content_id ^ mix64((std::uint64_t{off} << 32) | take)));
          fill += take;
          off += take;
          left -= take;
          if (fill == static_cast<std::uint32_t>(st.block_tokens)) close_block();
        }
      }
      if (fill > 0) close_block();
    }
  }
  st.skipped_rows = w.skipped_rows();
  st.filtered_rows = w.filtered_rows();
  st.input = input.stats();
  st.output = output.stats();
  st.span_s = ns_to_s(last - first);
  st.rate = st.span_s > 0 ? static_cast<double>(st.requests - 1) / st.span_s : 0;
  if (gaps > 1 && gap_mean > 0) {
    st.interarrival_cv = std::sqrt(gap_m2 / static_cast<double>(gaps - 1)) / gap_mean;
  }
  if (st.block_tokens > 0) {
    st.repeated_block_fraction =
        st.blocks > 0 ? static_cast<double>(repeated) / static_cast<double>(st.blocks) : 0.0;
  }
  return st;
}

std::string format_trace_stats(const TraceStats& s) {
  std::string out;
  char buf[160];
  auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    out += buf;
  };
  line("%-22s %lld\n", "requests", static_cast<long long>(s.requests));
  line("%-22s %.1f s (%.2f min)\n", "span", s.span_s, s.span_s / 60);
  line("%-22s %.3f req/s\n", "mean rate", s.rate);
  line("%-22s %.3f\n", "inter-arrival CV", s.interarrival_cv);
  line("%-22s %10s %8s %8s %8s %8s\n", "tokens", "mean", "p50", "p90", "p99", "max");
  for (const auto& [name, l] : {std::pair{"input", s.input}, std::pair{"output", s.output}}) {
    line("%-22s %10.1f %8lld %8lld %8lld %8lld\n", name, l.mean, static_cast<long long>(l.p50),
         static_cast<long long>(l.p90), static_cast<long long>(l.p99),
         static_cast<long long>(l.max));
  }
  if (s.repeated_block_fraction) {
    line("%-22s %.2f %% of %lld blocks of %d tokens\n", "repeated blocks",
         100 * *s.repeated_block_fraction, static_cast<long long>(s.blocks), s.block_tokens);
  }
  if (s.skipped_rows > 0) {
    line("%-22s %lld\n", "skipped rows", static_cast<long long>(s.skipped_rows));
  }
  if (s.filtered_rows > 0) {
    line("%-22s %lld (left out by the reader's filters)\n", "filtered rows",
         static_cast<long long>(s.filtered_rows));
  }
  return out;
}

}  // namespace servelab
