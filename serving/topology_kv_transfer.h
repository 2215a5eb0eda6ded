// TopologyKvTransfer: P/D KV transfers between replicas placed on one topology's GPUs
// (`cluster.topology`), priced over the routes between them (serving/topology.h).
//
// A replica occupies GPUs [first, first + count) (its tensor x pipeline GPUs, placed pool by
// pool). Each GPU holds its share of every block, so a request's KV leaves from all the source
// replica's GPUs at once: k = max(n, m) streams for a source of n GPUs and a destination of m,
// stream j from source GPU j mod n to destination GPU j mod m carrying its share of each piece
// (bytes split in integers, the first streams taking the remainder). A stream's piece crosses the
// route's channels (one per link direction) at the route's bottleneck bandwidth and then takes
// the route's latency; the transfer ends when its last stream's last byte has arrived, plus the
// fixed per-transfer `latency` (software: the KV connector's handshake).
//
// Channels are booked first come, first served, as the prefills end (serving/link_calendar.h): a
// piece moves once it is ready and the stream's previous piece has left, in the time every
// channel of its route is free of what was booked before (idle gaps backfilled, a piece split
// over gaps too short for it; never two pieces on one channel at once). So transfers that share
// a link (two prefill replicas sending into one node's GPU, streams of a wide replica leaving one
// GPU) queue, and transfers over disjoint routes (different GPUs of an NVSwitch node) do not. A
// transfer between replicas in one node goes over NVLink, one between nodes over the network links.
//
// Determinism: routes are the topology's (deterministic tie-breaks); bookings depend only on the
// order of the calls. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "core/time.h"
#include "serving/kv_transfer.h"
#include "serving/link_calendar.h"
#include "serving/topology.h"

namespace servelab {

class TopologyKvTransfer final : public KvTransferModel {
 public:
  struct Placement {
    GpuId first = 0;
    std::int32_t count = 1;  // >= 1
  };
  // `replicas[r]`: the GPUs of cluster replica r. REQUIRES: every placement inside the topology,
  // latency >= 0. Throws std::invalid_argument otherwise.
  TopologyKvTransfer(Topology topology, std::vector<Placement> replicas, TimeNs latency);

  KvTransferTimes transfer_pieces(std::span<const KvPiece> pieces, std::uint32_t src,
                                  std::uint32_t dst) override;
  void forget_before(TimeNs horizon) override;
  std::size_t num_intervals() const { return calendar_.num_intervals(); }

 private:
  const Route& route(GpuId from, GpuId to);

  Topology topology_;
  std::vector<Placement> replicas_;
  TimeNs latency_;
  LinkCalendar calendar_;                            // by channel (2 per link)
  std::map<std::pair<GpuId, GpuId>, Route> routes_;  // computed on first use
};

}  // namespace servelab
