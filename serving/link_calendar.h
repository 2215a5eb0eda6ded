// LinkCalendar: the busy time of a set of channels (a link's direction, a port's way), for the
// booked P/D KV transfer models (serving/direct_kv_links.h, serving/topology_kv_transfer.h).
//
// Each channel keeps its busy intervals [start, end), disjoint and merged where they touch.
// book() places `duration` ns of data that needs every channel of a list at once (a route) at
// the earliest free time from `earliest` on, in the idle gaps that earlier bookings left
// (backfilling), split over several gaps where the first is too short: a channel carries data
// whenever it would otherwise be idle, and what was booked before keeps its times (first booked,
// first served). So a transfer decided later may move bytes before one decided earlier when the
// earlier one leaves the channel idle (its next layer not computed yet, its other channel busy).
//
// Memory: forget_before(h) is the caller's promise that no later booking has earliest < h; h
// becomes a floor (a booking that breaks the promise starts no earlier than h, as if every
// channel were busy until then: conservative, never a time a channel was taken) and the
// intervals that end by h are dropped (in sweeps amortised over the bookings, so the calendar
// holds what is ahead of the floor plus a bounded remainder).
//
// Times are in [0, kTimeHorizonNs]; a booking that would end past the horizon ends at it.
// Determinism: results depend only on the calls and their order. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/time.h"

namespace servelab {

class LinkCalendar {
 public:
  struct Booking {
    TimeNs first = 0;  // when the data started moving (its first fragment)
    TimeNs last = 0;   // when its last byte left (first == last for no data)
  };

  // Channels are 0 .. n-1; a booking on a channel past the end grows the calendar.
  explicit LinkCalendar(std::size_t num_channels = 0) : busy_(num_channels) {}

  // Books `duration` (>= 0) ns on every channel of `channels` (distinct ids >= 0) at once, from
  // max(earliest, floor) on. With no channels or no duration nothing is booked and the
  // booking is the instant max(earliest, floor). Throws std::invalid_argument on a negative
  // duration or channel.
  Booking book(std::span<const std::int32_t> channels, TimeNs earliest, TimeNs duration);

  // Makes `horizon` the floor and drops what ended by it (see above); a horizon below the
  // current floor changes nothing.
  void forget_before(TimeNs horizon);

  TimeNs floor() const { return floor_; }
  // Busy intervals kept, over all channels (for tests and memory checks).
  std::size_t num_intervals() const;
  // The busy intervals of `channel`, in time order (for tests).
  std::vector<std::pair<TimeNs, TimeNs>> intervals(std::int32_t channel) const;

 private:
  // (start, end), by start: a sorted vector, as bookings land near its end (a backfilled gap
  // inserts before the last few) and sweeps drop a prefix.
  using Intervals = std::vector<std::pair<TimeNs, TimeNs>>;

  // The end of the interval of `c` holding t, or t when t is free there.
  static TimeNs busy_until(const Intervals& c, TimeNs t);
  // The start of the first interval of `c` after t (t free), or the horizon.
  static TimeNs next_start(const Intervals& c, TimeNs t);
  static void insert(Intervals& c, TimeNs start, TimeNs end);

  std::vector<Intervals> busy_;  // by channel
  TimeNs floor_ = 0;
  std::size_t inserted_ = 0;  // intervals added since the last sweep
};

}  // namespace servelab
