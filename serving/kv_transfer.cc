#include "serving/kv_transfer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace servelab {

PairLinkKvTransfer::PairLinkKvTransfer(Bandwidth bandwidth, TimeNs latency)
    : bandwidth_(std::move(bandwidth)), latency_(latency) {
  if (latency < 0) throw std::invalid_argument("PairLinkKvTransfer: negative latency");
}

KvTransferTimes PairLinkKvTransfer::transfer(std::int64_t bytes, std::uint32_t src,
                                             std::uint32_t dst, TimeNs ready) {
  const std::uint64_t key = (static_cast<std::uint64_t>(src) << 32) | dst;
  auto it = links_.find(key);
  if (it == links_.end()) {
    const double bw = bandwidth_(src, dst);
    if (!(bw > 0)) throw std::invalid_argument("PairLinkKvTransfer: link bandwidth must be > 0");
    it = links_.emplace(key, Link{bw, 0}).first;
  }
  Link& link = it->second;
  KvTransferTimes t;
  t.begin = std::max(ready, link.free_at);
  const auto wire = static_cast<TimeNs>(
      std::ceil(static_cast<double>(bytes) / link.bytes_per_s * static_cast<double>(kNsPerS)));
  t.finish = t.begin + latency_ + wire;
  link.free_at = t.finish;
  return t;
}

}  // namespace servelab
