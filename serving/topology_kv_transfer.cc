#include "serving/topology_kv_transfer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace servelab {

TopologyKvTransfer::TopologyKvTransfer(Topology topology, std::vector<Placement> replicas,
                                       TimeNs latency)
    : topology_(std::move(topology)),
      replicas_(std::move(replicas)),
      latency_(latency),
      calendar_(static_cast<std::size_t>(2 * topology_.num_links())) {
  if (latency < 0) throw std::invalid_argument("TopologyKvTransfer: latency must be >= 0");
  for (const Placement& p : replicas_) {
    if (p.count < 1 || p.first < 0 || p.first + p.count > topology_.num_gpus()) {
      throw std::invalid_argument("TopologyKvTransfer: a replica's GPUs outside the topology");
    }
  }
}

const Route& TopologyKvTransfer::route(GpuId from, GpuId to) {
  auto it = routes_.find({from, to});
  if (it == routes_.end())
    it = routes_.emplace(std::pair{from, to}, topology_.route(from, to)).first;
  return it->second;
}

KvTransferTimes TopologyKvTransfer::transfer_pieces(std::span<const KvPiece> pieces,
                                                    std::uint32_t src, std::uint32_t dst) {
  if (pieces.empty()) throw std::invalid_argument("TopologyKvTransfer: a transfer of no pieces");
  if (src >= replicas_.size() || dst >= replicas_.size()) {
    throw std::invalid_argument("TopologyKvTransfer: no such replica");
  }
  const Placement& from = replicas_[src];
  const Placement& to = replicas_[dst];
  const std::int32_t streams = std::max(from.count, to.count);
  KvTransferTimes t;
  t.begin = std::numeric_limits<TimeNs>::max();
  t.finish = 0;
  for (std::int32_t j = 0; j < streams; ++j) {
    const Route& r = route(from.first + j % from.count, to.first + j % to.count);
    TimeNs at = 0;  // when this stream's previous piece left
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const KvPiece& p = pieces[i];
      const std::int64_t bytes = p.bytes / streams + (j < p.bytes % streams ? 1 : 0);
      const TimeNs wire = r.channels.empty() || bytes == 0
                              ? 0
                              : saturated_ns(std::ceil(static_cast<double>(bytes) / r.bottleneck *
                                                       static_cast<double>(kNsPerS)));
      const LinkCalendar::Booking b = calendar_.book(r.channels, std::max(p.ready, at), wire);
      if (i == 0) t.begin = std::min(t.begin, b.first);
      at = b.last;
    }
    t.finish = std::max(t.finish, add_saturated(at, r.latency_ns));
  }
  t.finish = add_saturated(t.finish, latency_);
  return t;
}

void TopologyKvTransfer::forget_before(TimeNs horizon) { calendar_.forget_before(horizon); }

}  // namespace servelab
