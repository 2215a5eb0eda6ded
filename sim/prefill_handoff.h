// PrefillHandoff: the observer of a cluster's prefill replicas (P/D disaggregation).
//
// The simulator queues a request that will continue on a decode replica on a prefill replica
// with max_output_tokens 1 (Scheduler::add_prefill_only_request), then tells the handoff
// (expect()) how many tokens it really wants. When such a request finishes there (its prompt
// computed and its first token sampled), the handoff keeps it (take()) instead of reporting the
// finish: the request is not over, its KV now travels to a decode replica. Every other event, and
// the finish of any request it was not told about (parallel sampling, a one-token request, one
// whose first token is EOS, an abort), goes on to `downstream` (the recorder, or the workload
// feedback in front of it), so each request is reported finished exactly once, by the replica where
// it really ended.
//
// For layer-wise KV transfers (serving/kv_transfer.h layerwise_kv_pieces) the simulator also
// tells it of every step that computes part of an expected request (on_chunk); a handed-over
// request carries those steps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/scheduler.h"
#include "core/scheduler_observer.h"
#include "serving/kv_transfer.h"

namespace servelab {

class PrefillHandoff final : public ForwardingObserver {
 public:
  struct Handed {
    RequestSpec spec;  // with the request's real max_output_tokens
    Scheduler::PrefilledState state;
    std::vector<PrefillChunk> chunks;  // its steps, when the simulator reported them (on_chunk)
  };

  explicit PrefillHandoff(SchedulerObserver& downstream) : ForwardingObserver(downstream) {}

  // Request `id`, about to be queued on a prefill replica with max_output_tokens 1, really wants
  // `max_output_tokens` (>= 2).
  void expect(RequestId id, std::int32_t max_output_tokens) {
    expected_.emplace(id, Expected{max_output_tokens, {}});
  }
  // A step from `start` to `end` computes `tokens` of request `id`; ignored unless expected.
  void on_chunk(RequestId id, std::int32_t tokens, TimeNs start, TimeNs end) {
    const auto it = expected_.find(id);
    if (it == expected_.end()) return;
    if (it->second.chunks.empty()) first_starts_.insert(start);
    it->second.chunks.push_back({start, end, tokens});
  }
  void on_reject(const Request& req, TimeNs now) override {
    const auto it = expected_.find(req.id());
    if (it != expected_.end()) take(it);
    ForwardingObserver::on_reject(req, now);
  }
  void on_finish(const Request& req, TimeNs now) override;
  // The requests handed over since the last call, in finish order.
  std::vector<Handed>& handed() { return handed_; }
  // No request handed over after `now` has a step that started before the result: the earliest
  // first step of the requests still expected, or `now` (the layer-wise pieces of later
  // transfers are ready no earlier: KvTransferModel::forget_before).
  TimeNs earliest_step_start(TimeNs now) const {
    return first_starts_.empty() ? now : std::min(now, *first_starts_.begin());
  }

 private:
  struct Expected {
    std::int32_t max_output_tokens = 0;
    std::vector<PrefillChunk> chunks;
  };
  using ExpectedMap = std::unordered_map<RequestId, Expected>;
  // Forgets an expected request; returns its steps.
  std::vector<PrefillChunk> take(ExpectedMap::iterator it);

  ExpectedMap expected_;                // probed only, never iterated
  std::multiset<TimeNs> first_starts_;  // of the expected requests with steps
  std::vector<Handed> handed_;
};

}  // namespace servelab
