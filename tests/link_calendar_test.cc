// LinkCalendar (serving/link_calendar.h): hand-computed bookings (gaps backfilled, data split
// over gaps, routes of several channels, merged intervals), the floor that forget_before sets,
// and a randomized check that no channel is ever booked twice over, that every booking gets its
// whole duration, and that forgetting what the caller promises not to need changes no answer.
#include "serving/link_calendar.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

namespace servelab {
namespace {

using Intervals = std::vector<std::pair<TimeNs, TimeNs>>;

TEST(LinkCalendar, OneChannelQueuesAndBackfills) {
  LinkCalendar cal;
  const std::int32_t ch[] = {0};
  EXPECT_EQ(cal.book(ch, 0, 10).last, 10);
  const LinkCalendar::Booking b = cal.book(ch, 5, 10);  // queues behind the first
  EXPECT_EQ(b.first, 10);
  EXPECT_EQ(b.last, 20);
  const LinkCalendar::Booking later = cal.book(ch, 50, 10);
  EXPECT_EQ(later.first, 50);
  EXPECT_EQ((cal.intervals(0)), (Intervals{{0, 20}, {50, 60}}));  // touching bookings merged
  // Ready at 0, booked last: 30 ns into the gap [20, 50), then the rest after 60.
  const LinkCalendar::Booking split = cal.book(ch, 0, 35);
  EXPECT_EQ(split.first, 20);
  EXPECT_EQ(split.last, 65);
  EXPECT_EQ((cal.intervals(0)), (Intervals{{0, 65}}));
  EXPECT_EQ(cal.num_intervals(), 1u);
}

TEST(LinkCalendar, ARouteNeedsEveryChannelFreeAtOnce) {
  LinkCalendar cal(3);
  const std::int32_t a[] = {0}, b[] = {1}, both[] = {0, 1}, other[] = {2};
  cal.book(a, 0, 10);   // channel 0 busy [0, 10)
  cal.book(b, 15, 10);  // channel 1 busy [15, 25)
  // Both from 0: free together only in [10, 15), then from 25.
  const LinkCalendar::Booking r = cal.book(both, 0, 8);
  EXPECT_EQ(r.first, 10);
  EXPECT_EQ(r.last, 28);
  EXPECT_EQ((cal.intervals(0)), (Intervals{{0, 15}, {25, 28}}));
  EXPECT_EQ((cal.intervals(1)), (Intervals{{10, 28}}));
  EXPECT_EQ(cal.book(other, 3, 4).first, 3);  // a channel of its own: no wait
  // No data or no channel: the instant asked for, nothing booked.
  EXPECT_EQ(cal.book(both, 1, 0).first, 1);
  EXPECT_EQ(cal.book({}, 2, 100).last, 2);
  EXPECT_EQ(cal.num_intervals(), 4u);
  EXPECT_THROW(cal.book(a, 0, -1), std::invalid_argument);
  const std::int32_t bad[] = {-1};
  EXPECT_THROW(cal.book(bad, 0, 1), std::invalid_argument);
}

TEST(LinkCalendar, TheFloorHoldsBookingsThatBreakThePromise) {
  LinkCalendar cal;
  const std::int32_t ch[] = {0};
  cal.book(ch, 0, 10);
  cal.book(ch, 100, 10);
  cal.forget_before(50);
  EXPECT_EQ(cal.floor(), 50);
  EXPECT_EQ(cal.book(ch, 20, 10).first, 50);  // the gap [10, 50) is no longer offered
  EXPECT_EQ(cal.book(ch, 55, 50).last, 120);  // [60, 100) then [110, 120)
  cal.forget_before(10);                      // below the floor: nothing changes
  EXPECT_EQ(cal.floor(), 50);
  // Near the horizon a booking ends at it.
  EXPECT_EQ(cal.book(ch, kTimeHorizonNs - 5, 10).last, kTimeHorizonNs);
}

// Random routes over 6 channels, earliest times that wander back by up to 3 us (as layer-wise
// pieces ready before the call), with and without forgetting up to the next call's earliest.
TEST(LinkCalendar, RandomBookingsNeverOverlapAndForgettingChangesNothing) {
  std::uint64_t x = 2026;
  auto next = [&x](std::uint64_t n) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::int64_t>((x >> 33) % n);
  };
  struct Call {
    std::vector<std::int32_t> channels;
    TimeNs earliest, duration;
  };
  std::vector<Call> calls;
  TimeNs now = 0;
  for (int i = 0; i < 4000; ++i) {
    now += next(1500);
    Call c;
    const std::int32_t first = static_cast<std::int32_t>(next(6));
    c.channels.push_back(first);
    if (next(2) == 1) c.channels.push_back((first + 1 + static_cast<std::int32_t>(next(5))) % 6);
    c.earliest = std::max<TimeNs>(0, now - next(3000));
    c.duration = next(4) == 0 ? 0 : next(2500);
    calls.push_back(c);
  }
  std::vector<TimeNs> least_ahead(calls.size() + 1, kTimeHorizonNs);  // min earliest of calls >= i
  for (std::size_t i = calls.size(); i-- > 0;) {
    least_ahead[i] = std::min(least_ahead[i + 1], calls[i].earliest);
  }
  LinkCalendar keep, forget;
  std::map<std::int32_t, TimeNs> booked;  // channel -> total duration
  std::size_t most = 0;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    SCOPED_TRACE(i);
    const LinkCalendar::Booking a = keep.book(c.channels, c.earliest, c.duration);
    const LinkCalendar::Booking b = forget.book(c.channels, c.earliest, c.duration);
    ASSERT_EQ(a.first, b.first);
    ASSERT_EQ(a.last, b.last);
    EXPECT_GE(a.first, c.earliest);
    EXPECT_GE(a.last - a.first, c.duration);
    if (c.duration == 0) {
      EXPECT_EQ(a.first, a.last);
    }
    for (const std::int32_t ch : c.channels) booked[ch] += c.duration;
    forget.forget_before(least_ahead[i + 1]);
    most = std::max(most, forget.num_intervals());
  }
  for (const auto& [ch, total] : booked) {
    TimeNs busy = 0, last_end = -1;
    for (const auto& [s, e] : keep.intervals(ch)) {
      EXPECT_GT(s, last_end);  // disjoint, and merged where they touch
      busy += e - s;
      last_end = e;
    }
    EXPECT_EQ(busy, total) << "channel " << ch;
  }
  // Forgetting keeps the calendar small; keeping everything grows with the bookings.
  EXPECT_LT(most, 200u);
  EXPECT_GT(keep.num_intervals(), 1000u);
}

}  // namespace
}  // namespace servelab
