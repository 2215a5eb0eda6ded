#include "serving/direct_kv_links.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace servelab {

DirectKvLinks::DirectKvLinks(KvLinkLayout layout, PortBandwidth port_bandwidth)
    : layout_(layout), port_bandwidth_(std::move(port_bandwidth)) {}

double DirectKvLinks::port(std::uint32_t replica) {
  auto it = port_.find(replica);
  if (it == port_.end()) {
    const double bw = port_bandwidth_(replica);
    if (!(bw > 0)) throw std::invalid_argument("DirectKvLinks: port bandwidth must be > 0");
    it = port_.emplace(replica, bw).first;
  }
  return it->second;
}

std::int32_t DirectKvLinks::channel(std::uint64_t key, double bytes_per_s) {
  auto it = channel_.find(key);
  if (it == channel_.end()) {
    it = channel_.emplace(key, num_channels()).first;
    bandwidth_.push_back(bytes_per_s);
  }
  return it->second;
}

std::vector<std::int32_t> DirectKvLinks::channels(std::uint32_t src, std::uint32_t dst) {
  if (layout_ == KvLinkLayout::kPerPair) {
    const std::uint64_t key = (static_cast<std::uint64_t>(src) << 32) | dst;
    return {channel(key, std::min(port(src), port(dst)))};
  }
  // Keys: bit 0 tells a port's outgoing (0) and incoming (1) direction apart.
  return {channel(static_cast<std::uint64_t>(src) << 1, port(src)),
          channel((static_cast<std::uint64_t>(dst) << 1) | 1, port(dst))};
}

DirectLinkKvTransfer::DirectLinkKvTransfer(DirectKvLinks links, TimeNs latency)
    : links_(std::move(links)), latency_(latency) {
  if (latency < 0) throw std::invalid_argument("DirectLinkKvTransfer: negative latency");
}

KvTransferTimes DirectLinkKvTransfer::transfer_pieces(std::span<const KvPiece> pieces,
                                                      std::uint32_t src, std::uint32_t dst) {
  if (pieces.empty()) throw std::invalid_argument("DirectLinkKvTransfer: a transfer of no pieces");
  const std::vector<std::int32_t> channels = links_.channels(src, dst);
  double bytes_per_s = links_.bandwidth(channels.front());
  for (const std::int32_t c : channels) bytes_per_s = std::min(bytes_per_s, links_.bandwidth(c));
  KvTransferTimes t;
  t.begin = -1;
  TimeNs at = pieces.front().ready;  // when the piece before has left
  for (const KvPiece& p : pieces) {
    const TimeNs wire = saturated_ns(
        std::ceil(static_cast<double>(p.bytes) / bytes_per_s * static_cast<double>(kNsPerS)));
    const LinkCalendar::Booking b = calendar_.book(channels, std::max(at, p.ready), wire);
    if (t.begin < 0 && wire > 0) t.begin = b.first;
    at = b.last;
  }
  if (t.begin < 0) t.begin = std::max(pieces.front().ready, calendar_.floor());  // no bytes
  // The latency overlaps the next transfer's data, as over a topology's links and under
  // `sharing: fair`.
  t.finish = add_saturated(at, latency_);
  return t;
}

void DirectLinkKvTransfer::forget_before(TimeNs horizon) { calendar_.forget_before(horizon); }

}  // namespace servelab
