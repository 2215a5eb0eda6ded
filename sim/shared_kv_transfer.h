// SharedKvTransfer: P/D KV transfers that share their links' bandwidth while they overlap
// (`cluster.kv_transfer.sharing: fair`), the event-driven counterpart of the booked models
// (serving/direct_kv_links.h DirectLinkKvTransfer, serving/topology_kv_transfer.h), which queue a
// transfer behind the ones booked before it.
//
// A transfer's streams are the booked models': without a cluster topology one stream over the
// direct links' channels (the source's port out and the destination's port in, or the ordered
// pair's own link: serving/direct_kv_links.h); over a cluster topology
// k = max(n, m) streams from the source replica's GPU j mod n to the destination's GPU j mod m,
// stream j carrying bytes / k (the first bytes % k streams one byte more) over its route's
// channels and then taking the route's latency and the fixed per-transfer `latency`. Every stream
// is a flow of LinkTransfers (sim/link_transfers.h): while flows overlap, each channel's bandwidth
// is shared max-min fairly between the flows that cross it, so a transfer that starts later slows
// the ones in flight instead of waiting for them, and no channel idles while a flow crossing it has
// bytes left. A transfer ends when its last stream has arrived. Alone on its links, a transfer
// takes what the booked model gives it (up to the rounding of each to whole nanoseconds).
//
// A later start can delay a transfer in flight, so its end is not known when it starts: the
// caller asks next_finish() after every start and advance()s the clock to it, or to any earlier
// time at which something else happens. next_finish() is the earliest time at which a stream
// may arrive: advancing to it returns nothing when that stream is not its transfer's last.
//
// Cost: a start or a stream's drain recomputes the shares over the channels in use
// (LinkTransfers: O(R * C) for R filling rounds over C channels).
// Determinism: advance() returns transfers in (finish time, start order) order; routes are the
// topology's. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/time.h"
#include "serving/direct_kv_links.h"
#include "serving/topology.h"
#include "serving/topology_kv_transfer.h"
#include "sim/link_transfers.h"

namespace servelab {

class SharedKvTransfer {
 public:
  using Placement = TopologyKvTransfer::Placement;
  // Over direct links (replicas on machines of their own). REQUIRES: latency >= 0.
  SharedKvTransfer(DirectKvLinks links, TimeNs latency);
  // Over the routes of `topology` between replicas placed at `replicas` (as TopologyKvTransfer).
  // Throws std::invalid_argument on a placement outside the topology or a negative latency.
  SharedKvTransfer(Topology topology, std::vector<Placement> replicas, TimeNs latency);
  SharedKvTransfer(const SharedKvTransfer&) = delete;
  SharedKvTransfer& operator=(const SharedKvTransfer&) = delete;

  // Starts moving `bytes` (>= 0) of KV from replica `src` to replica `dst` at `now`, as
  // transfer `id` (the caller's; advance() returns it). Throws std::invalid_argument when `id` is
  // in flight. REQUIRES: now >= the time of the previous call.
  void start(TimeNs now, std::int64_t id, std::int64_t bytes, std::uint32_t src, std::uint32_t dst);
  // The earliest time at which a transfer in flight may end (a stream's arrival), provided
  // nothing starts before then; nullopt when none is in flight.
  std::optional<TimeNs> next_finish() const { return links_.next_finish(); }
  // Moves the clock to `now` and returns the transfers that ended at or before it (their ids
  // and ends), in (finish time, start order) order. REQUIRES: now >= the time of the previous
  // call.
  std::vector<FinishedTransfer> advance(TimeNs now);
  std::size_t in_flight() const { return streams_left_.size(); }

 private:
  struct Stream {
    std::vector<std::int32_t> channels;
    TimeNs latency_ns = 0;
  };
  // The streams of a transfer from replica src to dst.
  std::vector<Stream> streams(std::uint32_t src, std::uint32_t dst);
  const Route& route(GpuId from, GpuId to);

  std::optional<Topology> topology_;  // unset: direct links
  std::vector<Placement> replicas_;
  std::optional<DirectKvLinks> direct_;  // set without a topology
  TimeNs latency_;
  LinkTransfers links_;
  std::map<std::pair<GpuId, GpuId>, Route> routes_;       // computed on first use
  std::int32_t added_ = 0;                                // direct links' channels given to links_
  std::int64_t next_seq_ = 0;                             // start order
  std::unordered_map<std::int64_t, std::int64_t> owner_;  // stream flow id -> transfer id
  struct Left {
    std::int64_t seq = 0;      // the transfer's place in start order
    std::int32_t streams = 0;  // still on the wire
    TimeNs last = 0;           // the latest arrival of the streams done
  };
  std::unordered_map<std::int64_t, Left> streams_left_;  // by transfer id; probed only
};

}  // namespace servelab
