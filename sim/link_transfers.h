// LinkTransfers: concurrent transfers over a topology's links, sharing each link's bandwidth.
//
// Each transfer crosses a route's channels (serving/topology.h: a link has one channel per
// direction). Whenever the set of transfers moving data changes (one starts, one has sent its
// last byte), every transfer's rate is recomputed as the max-min fair share (progressive
// filling): repeatedly take the channel whose remaining capacity divided by the transfers not
// yet fixed on it is least (lowest channel id on ties), fix those transfers at that share, and
// take their rate off every channel they cross. Between changes rates are constant, so the
// model is event-driven and exact up to rounding to integer nanoseconds.
//
// A transfer of B bytes started at t finishes when its last byte has left (its data phase ends)
// plus its route's latency (the last byte's propagation over every hop); a zero-byte transfer,
// or one from a GPU to itself, finishes after the latency alone. Bertsekas and Gallager, "Data
// Networks", section 6.5.2, defines max-min fairness and the filling algorithm; docs/cost-model.md
// ("Transfers sharing links") has the worked example the tests check.
//
// Cost: each start or drain recomputes the shares over the channels in use, O(R * C) for C
// channels crossed by the transfers in flight and R filling rounds (at most the number of
// transfers); next_finish() runs the model forward on a copy until the first finish.
//
// Determinism: transfers get ids 0, 1, 2, ... in the order they start; finishes come out in
// (time, id) order; no decision depends on addresses or unordered containers. Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/time.h"
#include "serving/topology.h"

namespace servelab {

struct FinishedTransfer {
  std::int64_t id = 0;
  TimeNs finish_ns = 0;
};

class LinkTransfers {
 public:
  // Transfers between the GPUs of `topology` (a copy is kept; copies share the graph).
  explicit LinkTransfers(Topology topology);
  // Transfers over bare channels of the given bandwidths (B/s, > 0), started with start_on().
  explicit LinkTransfers(std::vector<double> channel_bandwidth);
  LinkTransfers(const LinkTransfers&) = delete;

  // Adds a bare channel of `bandwidth` B/s (> 0) and returns its id (the next after the last).
  std::int32_t add_channel(double bandwidth);
  LinkTransfers& operator=(const LinkTransfers&) = delete;

  // Starts moving `bytes` from `from` to `to` at `now`; returns its id.
  // REQUIRES: built from a topology; now >= the time of the previous call; bytes >= 0.
  std::int64_t start(TimeNs now, GpuId from, GpuId to, std::int64_t bytes);
  // The same over explicit channels (distinct, each < the number of channels) and latency.
  std::int64_t start_on(TimeNs now, const std::vector<std::int32_t>& channels, TimeNs latency_ns,
                        std::int64_t bytes);

  // When the next transfer in flight finishes, provided no other starts before then; nullopt
  // when none is in flight.
  std::optional<TimeNs> next_finish() const;
  // Moves the clock to `now` and returns the transfers that finished at or before it, in
  // (finish time, id) order. REQUIRES: now >= the time of the previous call.
  std::vector<FinishedTransfer> advance(TimeNs now);

  std::size_t in_flight() const { return sending_.size() + propagating_.size(); }
  TimeNs now() const { return now_; }
  // Current rate of a transfer still sending, B/s (0 when it is not sending).
  double rate(std::int64_t id) const;

 private:
  struct Flow {
    std::int64_t id;
    std::vector<std::int32_t> channels;
    TimeNs latency_ns;
    double remaining;  // bytes
    double rate;       // B/s
    TimeNs drain_ns;   // when the last byte leaves at the current rate
  };

  void progress_to(TimeNs t);  // sends data at the current rates up to t (no drain in between)
  // Moves every flow whose last byte leaves at or before `now` from sending to propagating, in
  // drain order, resharing the link after each drain (the clock ends at the last such drain).
  void drain_until(TimeNs now);
  void reshare();  // max-min rates and drain times for every sending flow
  void check_time(TimeNs now) const;

  std::optional<Topology> topology_;
  std::vector<double> capacity_;  // by channel
  TimeNs now_ = 0;
  std::int64_t next_id_ = 0;
  std::vector<Flow> sending_;                  // in id order
  std::vector<FinishedTransfer> propagating_;  // drained; finish_ns = drain + latency
};

// Each transfer's finish time when all of them are known up front (the batch form of the above).
struct TransferSpec {
  TimeNs start_ns = 0;
  GpuId from = 0, to = 0;
  std::int64_t bytes = 0;
};
// REQUIRES: specs sorted by start_ns. Returns finish times in the order of `specs`.
std::vector<TimeNs> transfer_finish_times(const Topology& topology,
                                          const std::vector<TransferSpec>& specs);

}  // namespace servelab
