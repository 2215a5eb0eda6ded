// PrefillHandoff: the observer of a cluster's prefill replicas (P/D disaggregation).
//
// The simulator sends a request that will continue on a decode replica to a prefill replica
// with max_output_tokens 1, after telling the handoff (expect()) how many tokens it really
// wants. When such a request finishes there (its prompt computed and its first token sampled),
// the handoff keeps it (take()) instead of reporting the finish: the request is not over, its KV
// now travels to a decode replica. Every other event, and the finish of any request it was not
// told about (parallel sampling, a one-token request, an abort), goes on to `downstream` (the
// recorder, or the workload feedback in front of it), so each request is reported finished
// exactly once, by the replica where it really ended.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/scheduler.h"
#include "core/scheduler_observer.h"

namespace servelab {

class PrefillHandoff final : public ForwardingObserver {
 public:
  struct Handed {
    RequestSpec spec;  // with the request's real max_output_tokens
    Scheduler::PrefilledState state;
  };

  explicit PrefillHandoff(SchedulerObserver& downstream) : ForwardingObserver(downstream) {}

  // Request `id`, about to be queued on a prefill replica with max_output_tokens 1, really wants
  // `max_output_tokens` (>= 2).
  void expect(RequestId id, std::int32_t max_output_tokens) {
    expected_.emplace(id, max_output_tokens);
  }
  void on_reject(const Request& req, TimeNs now) override {
    expected_.erase(req.id());
    ForwardingObserver::on_reject(req, now);
  }
  void on_finish(const Request& req, TimeNs now) override;
  // The requests handed over since the last call, in finish order.
  std::vector<Handed>& handed() { return handed_; }

 private:
  std::unordered_map<RequestId, std::int32_t> expected_;  // probed only, never iterated
  std::vector<Handed> handed_;
};

}  // namespace servelab
