// KvTransferModel: how long moving a request's KV blocks between two replicas takes, for
// prefill/decode disaggregation (the simulator asks it once per handed-over request).
//
// The interface is deliberately narrow: bytes, source and destination replica (cluster indices)
// and the earliest start; the answer is when the transfer really began (after any queueing for
// the link) and when its last byte arrived. Calls come in non-decreasing `ready` order, so a
// model may keep the links' occupancy as state. A topology model (GPUs in nodes over NVLink,
// PCIe, InfiniBand; shared bandwidth along paths) implements the same interface.
//
// PairLinkKvTransfer, the default: one dedicated link per ordered (source, destination) pair;
// a transfer takes latency + bytes / bandwidth, and transfers on one link run one after another
// (first come, first served), so a burst of prefills towards one decode replica queues.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>

#include "core/time.h"

namespace servelab {

struct KvTransferTimes {
  TimeNs begin = 0;   // the link started moving this request's bytes (>= ready)
  TimeNs finish = 0;  // the last byte arrived (> begin unless bytes == 0 and latency == 0)
};

class KvTransferModel {
 public:
  virtual ~KvTransferModel() = default;
  // Books moving `bytes` (>= 0) from replica `src` to replica `dst`, available from `ready` on.
  // REQUIRES: ready >= the previous call's ready.
  virtual KvTransferTimes transfer(std::int64_t bytes, std::uint32_t src, std::uint32_t dst,
                                   TimeNs ready) = 0;
};

class PairLinkKvTransfer final : public KvTransferModel {
 public:
  // Bandwidth in bytes/s of the link src -> dst (called once per pair, when first used; must be
  // > 0); `latency` per transfer.
  using Bandwidth = std::function<double(std::uint32_t src, std::uint32_t dst)>;
  PairLinkKvTransfer(Bandwidth bandwidth, TimeNs latency);
  KvTransferTimes transfer(std::int64_t bytes, std::uint32_t src, std::uint32_t dst,
                           TimeNs ready) override;

 private:
  struct Link {
    double bytes_per_s = 0;
    TimeNs free_at = 0;  // the end of the last transfer booked on it
  };
  Bandwidth bandwidth_;
  TimeNs latency_;
  std::unordered_map<std::uint64_t, Link> links_;  // by (src << 32 | dst); probed, never iterated
};

}  // namespace servelab
