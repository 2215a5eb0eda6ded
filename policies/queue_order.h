// Queue-order plugins: the WaitingQueue implementations behind `policies.queue`.
//
//   fcfs           arrival order; preempted victims at the head (vLLM v1 default)
//   priority       (priority, arrival, id) ascending; victims re-inserted by key (vLLM v1)
//   sjf            oracle shortest remaining output first: (max_output - outputs so far,
//                  arrival, id); with max_wait_s > 0, requests that waited longer go first
//                  (starvation prevention, promoted at the start of each step)
//   predicted-sjf  the same on a noisy prediction: predicted total output
//                  = max_output * exp(error * N(0,1)), drawn once per request from a stream
//                  keyed by (seed, request id), so it does not depend on arrival order
//   fair           VTC (Sheng et al., OSDI'24): per-tenant virtual token counters; the next
//                  admission comes from the backlogged tenant with the smallest counter
//   edf            earliest TTFT deadline first: (arrival + the request class's TTFT objective,
//                  arrival, id); a class without one after every deadline (PolicyTarget's
//                  ttft_targets_ns, from the experiment's slo: section); with late: demote, a
//                  request past its deadline before its first token goes after the others
//
// SGLang's policies (lpm, dfs-weight, lof, random), which re-sort the queue every step, are in
// policies/queue_order_sglang.cc.
//
// See docs/policies.md for when each wins. All keyed orders re-insert a preempted request by
// its (updated) key; only fcfs and fair (within a tenant) have a head to put it at.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/scheduler_config.h"
#include "core/waiting_queue.h"
#include "policies/registry.h"

namespace servelab {

// The queue for `spec` (a registered queue plugin; parameters validated by the registry).
// `seed` is the experiment seed (only predicted-sjf draws from it). Throws ConfigError for an
// unknown plugin name.
// `ttft_targets_ns`: the TTFT objective of each request class (PolicyTarget; only edf reads it).
std::unique_ptr<WaitingQueue> make_waiting_queue(const PolicySpec& spec, std::uint64_t seed,
                                                 std::vector<TimeNs> ttft_targets_ns = {});

// edf's key: arrival + the TTFT objective of the request's class (saturating), or TimeNs's
// largest value where the class has none (kNoTtftTarget or no entry).
TimeNs ttft_deadline(const RequestSpec& spec, const std::vector<TimeNs>& ttft_targets_ns);

// A queue plugin's factory: the scheduler config gets a maker bound to the spec and the seed
// (each Scheduler builds its own queue: queues hold state, the config is shared). `make`:
// (const PolicySpec&, std::uint64_t seed) -> std::unique_ptr<WaitingQueue>.
template <class Make>
PolicyFactory queue_factory(Make make) {
  return [make](const PolicySpec& spec, PolicyTarget& t) {
    // One queue made now: a parameter combination its constructor refuses
    // (std::invalid_argument) is an error of the experiment (build_policy), not of the run.
    make(spec, t.seed);
    t.scheduler->make_waiting_queue = [make, spec, seed = t.seed] { return make(spec, seed); };
  };
}

// The predicted total output length predicted-sjf uses for request `id` whose true output
// length is `true_output` (exposed for tests).
double predicted_output_tokens(std::uint64_t seed, double error, std::uint64_t id,
                               std::int32_t true_output);

}  // namespace servelab
