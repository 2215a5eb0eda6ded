#include "sim/latency_attribution.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/metrics.h"

namespace servelab {

namespace {

struct Span {
  std::int64_t first_token_step = -1, last_step = -1;
};

double p50(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return percentile_sorted(v, 50);
}

// A row from per-request figures (ms), its errors against `measured` when given.
LatencyRow make_row(const std::string& name, const std::vector<double>& ttft,
                    const std::vector<double>& tpot, const LatencyRow* measured) {
  LatencyRow row;
  row.name = name;
  row.ttft_p50_ms = p50(ttft);
  if (!tpot.empty()) row.tpot_p50_ms = p50(tpot);
  if (measured) {
    if (measured->ttft_p50_ms > 0) {
      row.ttft_error = (row.ttft_p50_ms - measured->ttft_p50_ms) / measured->ttft_p50_ms;
    }
    if (row.tpot_p50_ms && measured->tpot_p50_ms && *measured->tpot_p50_ms > 0) {
      row.tpot_error = (*row.tpot_p50_ms - *measured->tpot_p50_ms) / *measured->tpot_p50_ms;
    }
  }
  return row;
}

}  // namespace

namespace {

// continues[k]: step k shares a request with step k - 1 (false for step 0).
std::vector<bool> continues_previous(std::span<const AttributionStep> steps) {
  std::vector<bool> out(steps.size(), false);
  std::vector<std::int64_t> ids, next;
  auto ids_of = [](const AttributionStep& st, std::vector<std::int64_t>& v) {
    v.clear();
    for (const AttributionEntry& e : st.entries) v.push_back(e.request);
    std::sort(v.begin(), v.end());
  };
  if (!steps.empty()) ids_of(steps.front(), next);
  for (std::size_t k = 1; k < steps.size(); ++k) {
    ids.swap(next);
    ids_of(steps[k], next);
    bool shared = false;
    for (std::size_t a = 0, b = 0; a < ids.size() && b < next.size() && !shared;) {
      if (ids[a] == next[b]) {
        shared = true;
      } else if (ids[a] < next[b]) {
        ++a;
      } else {
        ++b;
      }
    }
    out[k] = shared;
  }
  return out;
}

}  // namespace

std::vector<double> time_after_steps(std::span<const AttributionStep> steps) {
  std::vector<double> out(steps.size(), 0.0);
  const std::vector<bool> continues = continues_previous(steps);
  for (std::size_t k = 0; k + 1 < steps.size(); ++k) {
    if (continues[k + 1]) {
      out[k] = std::max(0.0, steps[k + 1].start_s - (steps[k].start_s + steps[k].measured_s));
    }
  }
  return out;
}

std::vector<double> idle_wake_ups(std::span<const AttributionStep> steps,
                                  std::span<const AttributionRequest> requests) {
  std::unordered_map<std::int64_t, double> arrival;  // request id -> arrival, until first seen
  for (const AttributionRequest& r : requests) arrival[r.id] = r.arrival_s;
  const std::vector<bool> continues = continues_previous(steps);
  std::vector<double> out;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const AttributionStep& st = steps[k];
    double earliest = 0;
    bool any_new = false;
    for (const AttributionEntry& e : st.entries) {
      const auto a = arrival.find(e.request);
      if (a == arrival.end()) continue;
      earliest = any_new ? std::min(earliest, a->second) : a->second;
      any_new = true;
      arrival.erase(a);  // the request's later steps are not its first
    }
    const double prev_end = k > 0 ? steps[k - 1].start_s + steps[k - 1].measured_s : -1e300;
    if (!continues[k] && any_new && earliest >= prev_end) out.push_back(st.start_s - earliest);
  }
  return out;
}

LatencyAttribution attribute_latency(std::span<const AttributionStep> steps,
                                     std::span<const AttributionRequest> requests) {
  LatencyAttribution out;
  {
    std::vector<double> wake = idle_wake_ups(steps, requests);
    out.wake_ups = static_cast<std::int64_t>(wake.size());
    if (!wake.empty()) {
      std::sort(wake.begin(), wake.end());
      out.wake_up_p50_s = percentile_sorted(wake, 50);
      out.wake_up_p90_s = percentile_sorted(wake, 90);
    }
  }
  const std::size_t n = steps.size();
  std::unordered_map<std::int64_t, std::size_t> index;  // request id -> position in requests
  for (std::size_t i = 0; i < requests.size(); ++i) index[requests[i].id] = i;
  std::vector<Span> spans(requests.size());
  // Prefix sums of measured and predicted durations, and the step starts (for k_r).
  std::vector<double> measured(n + 1, 0.0), predicted(n + 1, 0.0), starts(n);
  for (const double gap : time_after_steps(steps)) out.between_steps_s += gap;
  for (std::size_t k = 0; k < n; ++k) {
    const AttributionStep& st = steps[k];
    measured[k + 1] = measured[k] + st.measured_s;
    predicted[k + 1] = predicted[k] + st.predicted_s;
    starts[k] = st.start_s;
    for (const AttributionEntry& e : st.entries) {
      const auto r = index.find(e.request);
      if (r == index.end()) continue;
      Span& s = spans[r->second];
      if (s.first_token_step < 0 &&
          e.first_token + e.num_tokens >= requests[r->second].prompt_tokens) {
        s.first_token_step = static_cast<std::int64_t>(k);
      }
      s.last_step = static_cast<std::int64_t>(k);
    }
  }
  out.steps_s = measured[n];

  auto end_of = [&](std::int64_t k) {
    const AttributionStep& st = steps[static_cast<std::size_t>(k)];
    return st.start_s + st.measured_s;
  };
  // A token time belongs to step k when it lies from k's end to the next step's end (the end of
  // k itself with synchronous scheduling; within the next step with async scheduling).
  auto at_step = [&](std::int64_t k, double t) {
    if (t < end_of(k) - kTokenTimeTolerance) return false;
    return k + 1 >= static_cast<std::int64_t>(n) || t <= end_of(k + 1) + kTokenTimeTolerance;
  };
  std::vector<double> ttft[4], tpot[4];  // measured, back to back, priced, simulator
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const AttributionRequest& r = requests[i];
    const Span& s = spans[i];
    const auto k_r = static_cast<std::int64_t>(
        std::lower_bound(starts.begin(), starts.end(), r.arrival_s) - starts.begin());
    if (s.first_token_step < k_r || s.last_step < s.first_token_step ||
        !at_step(s.first_token_step, r.first_token_s) || !at_step(s.last_step, r.finish_s)) {
      ++out.unmatched;
      continue;
    }
    const auto f = static_cast<std::size_t>(s.first_token_step);
    const auto l = static_cast<std::size_t>(s.last_step);
    const auto kr = static_cast<std::size_t>(k_r);
    double residual = 0, residual_priced = 0;
    if (kr > 0) {
      const AttributionStep& before = steps[kr - 1];
      residual = std::max(0.0, before.start_s + before.measured_s - r.arrival_s);
      if (before.measured_s > 0) {
        residual_priced = residual * before.predicted_s / before.measured_s;
      }
    }
    ++out.requests;
    ttft[0].push_back(1e3 * (r.first_token_s - r.arrival_s));
    ttft[1].push_back(1e3 * (residual + measured[f + 1] - measured[kr]));
    ttft[2].push_back(1e3 * (residual_priced + predicted[f + 1] - predicted[kr]));
    ttft[3].push_back(r.sim_ttft_ms);
    if (r.output_tokens >= 2 && r.sim_tpot_ms) {
      ++out.tpot_requests;
      const double tokens = static_cast<double>(r.output_tokens - 1);
      tpot[0].push_back(1e3 * (r.finish_s - r.first_token_s) / tokens);
      tpot[1].push_back(1e3 * (measured[l + 1] - measured[f + 1]) / tokens);
      tpot[2].push_back(1e3 * (predicted[l + 1] - predicted[f + 1]) / tokens);
      tpot[3].push_back(*r.sim_tpot_ms);
    }
  }
  if (out.requests == 0) return out;
  static const char* const kNames[4] = {"measured", "back to back", "priced", "simulator"};
  out.rows.push_back(make_row(kNames[0], ttft[0], tpot[0], nullptr));
  for (int i = 1; i < 4; ++i)
    out.rows.push_back(make_row(kNames[i], ttft[i], tpot[i], &out.rows[0]));
  return out;
}

}  // namespace servelab
