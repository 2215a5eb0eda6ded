// FrontEnd: the server's per-request front-end work (HTTP handling, tokenisation) between a
// request's arrival and the moment it reaches the scheduler (`serving.frontend` of an
// experiment; docs/experiments.md).
//
// Each request needs service_ns(prompt_len) = per_request_us + per_prompt_token_us * prompt_len
// (microseconds, rounded once to the nearest ns) of front-end time. `concurrency` requests are
// served at once, in arrival order (a k-server FIFO queue): a request starts when it has arrived
// and one of the k servers is free (the one free earliest), and is ready (handed to the
// scheduler) service_ns later. concurrency 1, the default, is vLLM's API server: one process
// whose event loop tokenises requests one at a time, so a burst queues in front of the
// tokenizer. concurrency 0 means unbounded: every request is ready at arrival + service_ns.
//
// With both costs 0 (the default) the front end is disabled: drivers hand requests to the
// scheduler at arrival, exactly as without it. Arrival stays the request's arrival_ns, from which
// TTFT, E2E and queueing delay are measured (docs/metrics.md): front-end time shows up in all
// three.
//
// The ready times depend only on the arrivals (not on the server's state), so the simulator and
// the engine compute the same ones. Deterministic: ties in ready time leave in push order.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

#include "core/request.h"
#include "core/time.h"

namespace servelab {

struct FrontendConfig {
  double per_request_us = 0;       // fixed front-end time per request (>= 0)
  double per_prompt_token_us = 0;  // front-end time per prompt token (>= 0)
  std::int32_t concurrency = 1;    // requests in the front end at once; 0: unbounded
  bool set = false;                // the section was given (config.yaml then shows it)

  bool enabled() const { return per_request_us > 0 || per_prompt_token_us > 0; }
  // Front-end time of a request with `prompt_len` prompt tokens, in ns (rounded once).
  TimeNs service_ns(std::int32_t prompt_len) const;
};

class FrontEnd {
 public:
  // REQUIRES: config.concurrency >= 0 and both costs >= 0 and finite (the experiment parser
  // checks them; std::invalid_argument otherwise).
  explicit FrontEnd(const FrontendConfig& config);

  // A request that arrived at spec.arrival_ns enters the front end; returns the time it will be
  // ready. REQUIRES: arrivals are pushed in non-decreasing arrival order (std::logic_error
  // otherwise).
  TimeNs push(RequestSpec spec);
  // The arrival of the last request pushed (0 before any).
  TimeNs last_arrival() const { return last_arrival_; }
  bool empty() const { return pending_.empty(); }
  std::size_t size() const { return pending_.size(); }
  // The earliest ready time of a request in the front end, if any.
  std::optional<TimeNs> next_ready() const {
    return pending_.empty() ? std::nullopt : std::optional<TimeNs>(pending_.front().ready);
  }
  // Removes and returns the request ready first (ties: pushed first). REQUIRES: !empty().
  RequestSpec pop();

 private:
  struct Pending {
    TimeNs ready;
    std::uint64_t seq;
    RequestSpec spec;
  };
  struct Later {
    bool operator()(const Pending& a, const Pending& b) const {
      return a.ready != b.ready ? a.ready > b.ready : a.seq > b.seq;
    }
  };
  FrontendConfig config_;
  std::vector<Pending> pending_;  // a heap under Later: front() is ready first
  // concurrency > 0: when each busy server frees up (a min-heap, at most `concurrency` entries).
  std::priority_queue<TimeNs, std::vector<TimeNs>, std::greater<>> free_at_;
  std::uint64_t next_seq_ = 0;
  TimeNs last_arrival_ = 0;
};

}  // namespace servelab
