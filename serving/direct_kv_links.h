// DirectKvLinks and DirectLinkKvTransfer: P/D KV transfers between replicas that each run on a
// machine of their own (a cluster without `cluster.topology`), over one of two link layouts
// (`cluster.kv_transfer.links`):
// - kPerReplica, the default: every replica has one port, full duplex, of port_bandwidth(r) B/s
//   each way (kv_transfer.bandwidth_gb_s, or its GPUs' host links). A transfer src -> dst crosses
//   src's outgoing channel and dst's incoming one, so every transfer leaving one prefill replica
//   shares its port (a burst towards several decode replicas queues there), as does everything
//   arriving at one decode replica; alone, a transfer moves at min(port(src), port(dst)).
// - kPerPair: every ordered (source, destination) pair has a link of its own of
//   min(port(src), port(dst)); a prefill replica sends to several decode replicas at once, each
//   at that rate (a machine with a port per peer).
// Channels get dense ids 0, 1, 2, ... in the order they are first used; their bandwidth is asked
// once, then.
//
// DirectLinkKvTransfer is the booked (`sharing: queue`) model over them: each piece of a transfer
// (in order: a piece leaves once it is ready and the one before has left) takes bytes / bandwidth
// at the slower channel's rate on every channel the transfer crosses at once, in the time those
// channels are free of what was booked before (serving/link_calendar.h: first booked, first
// served, with idle gaps backfilled, so the layers of a prompt booked second fill the time
// between the first prompt's layers, and a transfer waiting on one port does not hold the other
// idle); the channels are free again once the last byte has left (a latency overlaps the next
// one's data), and the per-transfer latency comes once, after the last piece (a one-piece
// transfer alone takes latency + bytes / bandwidth). sim/shared_kv_transfer.h runs the same
// channels with max-min fair sharing.
//
// Determinism: bookings depend only on the order of the calls. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/time.h"
#include "serving/kv_transfer.h"
#include "serving/link_calendar.h"

namespace servelab {

enum class KvLinkLayout { kPerReplica, kPerPair };

class DirectKvLinks {
 public:
  // B/s of replica r's port, each way; must be > 0 (checked when first asked).
  using PortBandwidth = std::function<double(std::uint32_t replica)>;
  DirectKvLinks(KvLinkLayout layout, PortBandwidth port_bandwidth);

  KvLinkLayout layout() const { return layout_; }
  // The channels a transfer src -> dst crosses (one per pair, or src's out and dst's in).
  // Throws std::invalid_argument on a bandwidth that is not > 0.
  std::vector<std::int32_t> channels(std::uint32_t src, std::uint32_t dst);
  double bandwidth(std::int32_t channel) const { return bandwidth_[channel]; }
  std::int32_t num_channels() const { return static_cast<std::int32_t>(bandwidth_.size()); }

 private:
  std::int32_t channel(std::uint64_t key, double bytes_per_s);
  double port(std::uint32_t replica);

  KvLinkLayout layout_;
  PortBandwidth port_bandwidth_;
  std::unordered_map<std::uint32_t, double> port_;           // asked once per replica; probed
  std::unordered_map<std::uint64_t, std::int32_t> channel_;  // by key; probed, never iterated
  std::vector<double> bandwidth_;                            // by channel id
};

class DirectLinkKvTransfer final : public KvTransferModel {
 public:
  // REQUIRES: latency >= 0 (throws std::invalid_argument otherwise).
  DirectLinkKvTransfer(DirectKvLinks links, TimeNs latency);
  KvTransferTimes transfer_pieces(std::span<const KvPiece> pieces, std::uint32_t src,
                                  std::uint32_t dst) override;
  void forget_before(TimeNs horizon) override;
  std::size_t num_intervals() const { return calendar_.num_intervals(); }

 private:
  DirectKvLinks links_;
  TimeNs latency_;
  LinkCalendar calendar_;  // by channel id
};

}  // namespace servelab
