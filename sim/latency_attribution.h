// Where a latency error comes from (`sim validate`, docs/validation.md "Latency attribution"):
// the engine's requests re-timed on the engine's own schedule, one cause at a time.
//
// A finished request's latencies are made of the engine steps it waited through. With a_r its
// arrival, f_r the step that sampled its first token, l_r the last step it was in, n_r its
// output tokens, and steps k with start s_k, measured duration d_k and end e_k = s_k + d_k:
//   TTFT_r = e_{f_r} - a_r        TPOT_r = (e_{l_r} - e_{f_r}) / (n_r - 1)
// (the engine's token time is its step's end). Re-timed, each figure keeps only what is named:
//   back to back   the steps' measured durations, nothing between them:
//                    TTFT = residual_r + sum_{k = k_r}^{f_r} d_k,  TPOT = sum_{k = f_r + 1}^{l_r}
//                    d_k / (n_r - 1), where k_r is the first step starting at or after a_r and
//                    residual_r = e_{k_r - 1} - a_r when the request arrived while step k_r - 1
//                    ran (0 otherwise);
//   priced         the same sums over the cost model's predicted durations p_k (the residual
//                    scaled by p / d of its step).
// So, over the same requests and as p50s, measured -> back to back is the engine's time outside
// its steps (completing a step, idle wake-ups), back to back -> priced is the cost model, and
// priced -> the simulator's own run is everything else (mostly that its schedule differs: a
// faster or slower model changes which requests share a step). Each row's signed error against
// the measured p50 adds one cause to the row above it. Requests are re-timed individually (no
// shared timeline), so a re-timed request never waits for an arrival it did not wait for.
//
// A request is attributed only when its engine token times fall at its steps (within
// kTokenTimeTolerance): at the step's end with synchronous scheduling, before the next step ends
// with async scheduling (a step's tokens are applied once the next plan is formed, so that delay
// is part of the engine's time outside its steps). Others are counted as unmatched.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace servelab {

// One scheduled entry of a step: the request and the tokens it computed.
struct AttributionEntry {
  std::int64_t request = 0;
  std::int64_t first_token = 0, num_tokens = 0;
};

// One executed engine step, in execution order (steps.csv with schedule.csv).
struct AttributionStep {
  double start_s = 0, measured_s = 0, predicted_s = 0;
  std::vector<AttributionEntry> entries;
};

// One request finished in both runs: the engine's times (requests.csv) and the simulator's.
struct AttributionRequest {
  std::int64_t id = 0;
  double arrival_s = 0, first_token_s = 0, finish_s = 0;
  std::int64_t prompt_tokens = 0, output_tokens = 0;
  double sim_ttft_ms = 0;
  std::optional<double> sim_tpot_ms;  // none for a request of one output token
};

inline constexpr double kTokenTimeTolerance = 2e-6;  // seconds (the files keep nanoseconds)

// One way of timing the requests: p50s over the attributed requests (TPOT over those with at
// least two output tokens) and their signed errors against the measured row's.
struct LatencyRow {
  std::string name;  // "measured", "back to back", "priced", "simulator"
  double ttft_p50_ms = 0;
  std::optional<double> tpot_p50_ms;
  std::optional<double> ttft_error, tpot_error;  // (row - measured) / measured
};

struct LatencyAttribution {
  std::int64_t requests = 0;       // attributed (TTFT)
  std::int64_t tpot_requests = 0;  // of them, with a TPOT
  std::int64_t unmatched = 0;      // token times not at their steps (or steps not found)
  // The engine's time between consecutive steps that share a request (work was running), and
  // the sum of every step's measured duration.
  double between_steps_s = 0, steps_s = 0;
  // The engine's idle wake-ups (idle_wake_ups): how many, and the p50 and p90 of their latency.
  std::int64_t wake_ups = 0;
  double wake_up_p50_s = 0, wake_up_p90_s = 0;
  std::vector<LatencyRow> rows;  // measured, back to back, priced, simulator; empty when none
                                 // was attributed
};

// The engine's time after each step until the next one starts, when the next continues one of
// its requests (the loop's work after a step: the recorder, applying tokens, freeing blocks);
// 0 when it does not (the gap before an idle spell is not known), for the last step, and where
// the next step starts before this one ends. One entry per step.
std::vector<double> time_after_steps(std::span<const AttributionStep> steps);

// The engine's latency from an arrival at an idle engine to the step that starts on it, one
// entry per such step in step order: for each step k that continues no request of step k - 1
// (or k = 0), whose new requests (those of `requests` it is the first step of) all arrived at or
// after step k - 1 ended, start_k minus the earliest of their arrivals. The simulator starts that
// step at the arrival itself (no wake-up latency), so in a bursty workload the engine's first
// step after an idle spell holds the arrivals of its wake-up window and the simulator's does
// not: one way their schedules part.
std::vector<double> idle_wake_ups(std::span<const AttributionStep> steps,
                                  std::span<const AttributionRequest> requests);

// Deterministic: sums in step order. REQUIRES: steps in execution order with start_s ascending.
LatencyAttribution attribute_latency(std::span<const AttributionStep> steps,
                                     std::span<const AttributionRequest> requests);

}  // namespace servelab
