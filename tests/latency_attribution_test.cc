// sim/latency_attribution.h on hand-made steps: each request's TTFT and TPOT re-timed with the
// steps back to back and as the cost model prices them, the residual of the step a request
// arrived in, the time between steps that share a request, the engine's idle wake-ups, token
// times inside the next step (async scheduling) attributed to their step, and others left out
// and counted.
#include "sim/latency_attribution.h"

#include <gtest/gtest.h>

#include <vector>

namespace servelab {
namespace {

// Four steps (start, measured, predicted) with 1.0, 0.5 and 0.5 ms between them:
//   0  [0, 10 ms)        request 1's 10-token prompt (its first token)
//   1  [11, 16 ms)       request 1 decodes; request 2's 4-token prompt (arrived at 10.5 ms)
//   2  [16.5, 21.5 ms)   requests 1 and 2 decode (request 1's last token)
//   3  [22, 42 ms)       request 3's 8-token prompt (arrived at 12 ms, during step 1); request 2
//                        decodes (its last token)
std::vector<AttributionStep> steps() {
  return {{0.000, 0.010, 0.008, {{1, 0, 10}}},
          {0.011, 0.005, 0.004, {{1, 10, 1}, {2, 0, 4}}},
          {0.0165, 0.005, 0.006, {{1, 11, 1}, {2, 4, 1}}},
          {0.022, 0.020, 0.010, {{3, 0, 8}, {2, 5, 1}}}};
}

std::vector<AttributionRequest> requests() {
  AttributionRequest r1{1, 0.0, 0.010, 0.0215, 10, 3, 9.0, 5.0};
  AttributionRequest r2{2, 0.0105, 0.016, 0.042, 4, 3, 6.0, 10.0};
  AttributionRequest r3{3, 0.012, 0.042, 0.042, 8, 1, 25.0, std::nullopt};
  return {r1, r2, r3};
}

TEST(LatencyAttribution, RetimesEachRequestOneCauseAtATime) {
  const std::vector<AttributionStep> s = steps();
  const std::vector<AttributionRequest> r = requests();
  const LatencyAttribution a = attribute_latency(s, r);
  EXPECT_EQ(a.requests, 3);
  EXPECT_EQ(a.tpot_requests, 2);  // request 3 has one token
  EXPECT_EQ(a.unmatched, 0);
  EXPECT_NEAR(a.between_steps_s, 0.002, 1e-12);
  EXPECT_NEAR(a.steps_s, 0.040, 1e-12);
  ASSERT_EQ(a.rows.size(), 4u);
  // TTFT, ms: request 1 10 / 10 / 8; request 2 5.5 / 5 / 4; request 3 (4 ms left of step 1 when it
  // arrived, priced at 4 x 4/5, then steps 2 and 3) 30 / 29 / 3.2 + 6 + 10. p50: the middle one.
  EXPECT_EQ(a.rows[0].name, "measured");
  EXPECT_NEAR(a.rows[0].ttft_p50_ms, 10.0, 1e-9);
  EXPECT_EQ(a.rows[1].name, "back to back");
  EXPECT_NEAR(a.rows[1].ttft_p50_ms, 10.0, 1e-9);
  EXPECT_EQ(a.rows[2].name, "priced");
  EXPECT_NEAR(a.rows[2].ttft_p50_ms, 8.0, 1e-9);
  EXPECT_EQ(a.rows[3].name, "simulator");
  EXPECT_NEAR(a.rows[3].ttft_p50_ms, 9.0, 1e-9);
  // TPOT, ms: request 1 (21.5 - 10) / 2, (5 + 5) / 2, (4 + 6) / 2; request 2 (42 - 16) / 2,
  // (5 + 20) / 2, (6 + 10) / 2; the p50 of two is their mean.
  EXPECT_NEAR(*a.rows[0].tpot_p50_ms, (5.75 + 13.0) / 2, 1e-9);
  EXPECT_NEAR(*a.rows[1].tpot_p50_ms, (5.0 + 12.5) / 2, 1e-9);
  EXPECT_NEAR(*a.rows[2].tpot_p50_ms, (5.0 + 8.0) / 2, 1e-9);
  EXPECT_NEAR(*a.rows[3].tpot_p50_ms, 7.5, 1e-9);
  // Errors against the measured row; none on the measured row itself.
  EXPECT_FALSE(a.rows[0].ttft_error);
  EXPECT_FALSE(a.rows[0].tpot_error);
  EXPECT_NEAR(*a.rows[2].ttft_error, -0.2, 1e-9);
  EXPECT_NEAR(*a.rows[1].tpot_error, 8.75 / 9.375 - 1, 1e-9);
  EXPECT_NEAR(*a.rows[3].tpot_error, 7.5 / 9.375 - 1, 1e-9);
  // Each request alone: request 3's priced TTFT carries the scaled residual.
  const LatencyAttribution only3 = attribute_latency(s, std::vector<AttributionRequest>{r[2]});
  ASSERT_EQ(only3.rows.size(), 4u);
  EXPECT_NEAR(only3.rows[0].ttft_p50_ms, 30.0, 1e-9);
  EXPECT_NEAR(only3.rows[1].ttft_p50_ms, 29.0, 1e-9);
  EXPECT_NEAR(only3.rows[2].ttft_p50_ms, 19.2, 1e-9);
  EXPECT_FALSE(only3.rows[0].tpot_p50_ms);
  EXPECT_FALSE(only3.rows[2].tpot_error);
}

// Idle wake-ups: a step that continues no request of the step before it, whose new requests all
// arrived after that step ended, started (start - earliest arrival) after the engine was woken.
//   0  [1, 3 ms)       request 1 (arrived at 0): a wake-up of 1 ms
//   1  [3.1, 4 ms)     request 1 decodes (continues: not one)
//   2  [10.5, 12 ms)   requests 2 and 3 (arrived at 10.1 and 10.2, after step 1 ended): 0.4 ms
//   3  [12.5, 13 ms)   request 4 (arrived at 11.5, while step 2 ran: it waited for a busy engine)
//   4  [20, 21 ms)     request 5 (arrived at 19.9) with request 4 (continues: not one)
TEST(LatencyAttribution, IdleWakeUpsAreStepsStartedOnAnArrivalAtAnIdleEngine) {
  const std::vector<AttributionStep> s = {{0.001, 0.002, 0.002, {{1, 0, 8}}},
                                          {0.0031, 0.0009, 0.001, {{1, 8, 1}}},
                                          {0.0105, 0.0015, 0.001, {{2, 0, 4}, {3, 0, 4}}},
                                          {0.0125, 0.0005, 0.001, {{4, 0, 4}}},
                                          {0.020, 0.001, 0.001, {{5, 0, 4}, {4, 4, 1}}}};
  std::vector<AttributionRequest> r;
  const double arrivals[] = {0.0, 0.0101, 0.0102, 0.0115, 0.0199};
  for (std::int64_t id = 1; id <= 5; ++id) {
    AttributionRequest q;
    q.id = id;
    q.arrival_s = arrivals[id - 1];
    r.push_back(q);
  }
  const std::vector<double> wake = idle_wake_ups(s, r);
  ASSERT_EQ(wake.size(), 2u);
  EXPECT_NEAR(wake[0], 0.001, 1e-12);
  EXPECT_NEAR(wake[1], 0.0004, 1e-12);
  // Only the requests given count: without request 1, step 0 has nothing new.
  EXPECT_EQ(idle_wake_ups(s, std::vector<AttributionRequest>(r.begin() + 1, r.end())).size(), 1u);
  const LatencyAttribution a = attribute_latency(s, r);
  EXPECT_EQ(a.wake_ups, 2);
  EXPECT_NEAR(a.wake_up_p50_s, 0.0007, 1e-12);   // between 0.4 and 1 ms
  EXPECT_NEAR(a.wake_up_p90_s, 0.00094, 1e-12);  // 0.4 + 0.9 x 0.6 ms
  // The hand-made run above: step 0 started at request 1's arrival (a wake-up of 0).
  const LatencyAttribution b = attribute_latency(steps(), requests());
  EXPECT_EQ(b.wake_ups, 1);
  EXPECT_EQ(b.wake_up_p50_s, 0.0);
}

// With async scheduling a step's tokens are applied after the next plan: a token time after its
// step's end but before the next step's is that step's (the delay is time outside the steps).
// One after the next step's end is not: that request is counted, not attributed.
TEST(LatencyAttribution, RequestsWhoseTokensAreNotAtTheirStepsAreCounted) {
  std::vector<AttributionRequest> r = requests();
  r[1].first_token_s += 0.0003;  // 0.3 ms after step 1's end, inside step 2: async scheduling
  LatencyAttribution a = attribute_latency(steps(), r);
  EXPECT_EQ(a.requests, 3);
  EXPECT_EQ(a.unmatched, 0);
  ASSERT_EQ(a.rows.size(), 4u);
  EXPECT_NEAR(a.rows[1].ttft_p50_ms, 10.0, 1e-9);  // back to back: unchanged
  const LatencyAttribution only2 =
      attribute_latency(steps(), std::vector<AttributionRequest>{r[1]});
  ASSERT_EQ(only2.rows.size(), 4u);
  EXPECT_NEAR(only2.rows[0].ttft_p50_ms, 5.8, 1e-9);  // measured: 5.5 + the 0.3 ms delay
  EXPECT_NEAR(only2.rows[1].ttft_p50_ms, 5.0, 1e-9);  // back to back leaves the delay out
  r[1].first_token_s = 0.0216;  // after step 2's end (21.5 ms): not step 1's token
  a = attribute_latency(steps(), r);
  EXPECT_EQ(a.requests, 2);
  EXPECT_EQ(a.unmatched, 1);
  ASSERT_EQ(a.rows.size(), 4u);
  EXPECT_NEAR(a.rows[0].ttft_p50_ms, 20.0, 1e-9);  // requests 1 and 3: (10 + 30) / 2
  // A request no step ran (its first token never reached), and one whose first token came before
  // it arrived: unmatched too. None attributed: no rows.
  r = {requests()[0], requests()[0]};
  r[0].id = 7;
  r[1].arrival_s = 0.0105;  // after step 0 started, yet step 0 sampled its first token
  a = attribute_latency(steps(), r);
  EXPECT_EQ(a.requests, 0);
  EXPECT_EQ(a.unmatched, 2);
  EXPECT_TRUE(a.rows.empty());
  EXPECT_TRUE(attribute_latency({}, {}).rows.empty());
}

}  // namespace
}  // namespace servelab
