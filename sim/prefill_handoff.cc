#include "sim/prefill_handoff.h"

#include <algorithm>
#include <utility>

namespace servelab {

std::vector<PrefillChunk> PrefillHandoff::take(ExpectedMap::iterator it) {
  std::vector<PrefillChunk> chunks = std::move(it->second.chunks);
  if (!chunks.empty()) first_starts_.erase(first_starts_.find(chunks.front().start));
  expected_.erase(it);
  return chunks;
}

void PrefillHandoff::on_finish(const Request& req, TimeNs now) {
  const auto it = expected_.find(req.id());
  if (it == expected_.end()) {
    ForwardingObserver::on_finish(req, now);
    return;
  }
  const std::int32_t max_tokens = it->second.max_output_tokens;
  std::vector<PrefillChunk> chunks = take(it);
  if (req.status != RequestStatus::kFinished) {  // aborted on the prefill replica: it ends here
    ForwardingObserver::on_finish(req, now);
    return;
  }
  Handed h{req.spec, {}, std::move(chunks)};
  h.spec.max_output_tokens = max_tokens;
  h.state.first_scheduled_ns = req.first_scheduled_ns;
  h.state.first_token_ns = req.first_token_ns;
  h.state.num_cached_tokens = std::max(0, req.num_cached_tokens);
  h.state.num_preemptions = req.num_preemptions;
  h.state.num_recomputed_tokens = req.num_recomputed_tokens;
  h.state.capped_from_tokens = req.capped_from_tokens;
  handed_.push_back(std::move(h));
}

}  // namespace servelab
