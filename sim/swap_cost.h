// The `auto` preemption plugin's cost oracle (SchedulerConfig::prefer_swap) for the simulator.
//
// Swapping a victim costs two host-link transfers of its device blocks (out now, back in later):
//   2 * swap_time(blocks) = 2 * blocks * block_bytes / (host_link_bandwidth * efficiency).
// Recomputing it costs the prefill of its num_computed_tokens, priced as the marginal roofline
// time of a prefill-only step of that many tokens over a one-token one: the weight reads and
// the fixed step overhead are paid by the batch the recompute rides in anyway. Prefix-cache
// hits that would shorten the recompute are not foreseen (the estimate favours swapping a
// little when the victim's blocks are still cached). Header-only so core/ stays free of sim/.
#pragma once

#include <cstdint>

#include "core/request_state.h"
#include "sim/roofline_cost_model.h"

namespace servelab {

// Seconds to recompute `tokens` tokens from scratch as one prefill (marginal, see above).
inline double recompute_seconds(const RooflineCostModel& cost, std::int64_t tokens) {
  auto prefill = [&](std::int64_t c) {
    StepFeatures f;
    f.num_tokens = c;
    f.prefill_tokens = c;
    f.prefill_pairs = c * (c + 1) / 2;
    f.prefill_context_tokens = c;
    return cost.breakdown(f).total();
  };
  return tokens <= 1 ? 0.0 : prefill(tokens) - prefill(1);
}

// Seconds to swap `blocks` device blocks out and back in.
inline double swap_round_trip_seconds(const RooflineCostModel& cost, std::int64_t blocks) {
  return 2.0 * ns_to_s(cost.swap_time(blocks));
}

// True when swapping `victim` (a running request holding device blocks) is the cheaper way to
// preempt it.
inline bool swap_is_cheaper(const RooflineCostModel& cost, const Request& victim) {
  return swap_round_trip_seconds(cost, static_cast<std::int64_t>(victim.block_table.size())) <
         recompute_seconds(cost, victim.num_computed_tokens);
}

}  // namespace servelab
