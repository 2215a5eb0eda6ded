#include "core/idle_session_offload.h"

#include <stdexcept>

namespace servelab {

IdleSessionOffload::IdleSessionOffload(SchedulerObserver& downstream, TimeNs idle_ns)
    : ForwardingObserver(downstream), idle_ns_(idle_ns) {
  if (idle_ns <= 0) throw std::invalid_argument("IdleSessionOffload: idle_ns must be > 0");
}

void IdleSessionOffload::on_finish(const Request& req, TimeNs now) {
  ForwardingObserver::on_finish(req, now);
  if (req.spec.session == 0 || req.status != RequestStatus::kFinished) return;
  Pending& p = pending_[req.spec.session];
  p.due = now + idle_ns_;
  const std::vector<BlockHash>& h = req.block_hashes();
  p.hashes.insert(p.hashes.end(), h.begin(), h.end());
  deadlines_.push_back({p.due, req.spec.session});
}

void IdleSessionOffload::on_arrival(std::uint64_t session) {
  if (session != 0) pending_.erase(session);
}

std::int64_t IdleSessionOffload::offload_due(TimeNs now, KvCacheManager& kv) {
  std::int64_t stored = 0;
  while (!deadlines_.empty() && deadlines_.front().due <= now) {
    const Deadline d = deadlines_.front();
    deadlines_.pop_front();
    const auto it = pending_.find(d.session);
    // Stale: the session got a request since, or finished another one later (a later deadline).
    if (it == pending_.end() || it->second.due != d.due) continue;
    stored += kv.offload_idle_blocks(it->second.hashes);
    ++sessions_offloaded_;
    pending_.erase(it);
  }
  return stored;
}

}  // namespace servelab
