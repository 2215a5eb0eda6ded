#include "serving/link_calendar.h"

#include <algorithm>
#include <stdexcept>

namespace servelab {

namespace {

// The first interval of `c` (an Intervals, const or not) starting after t.
template <class Intervals>
auto after(Intervals& c, TimeNs t) {
  return std::upper_bound(c.begin(), c.end(), t, [](TimeNs x, const std::pair<TimeNs, TimeNs>& iv) {
    return x < iv.first;
  });
}

}  // namespace

TimeNs LinkCalendar::busy_until(const Intervals& c, TimeNs t) {
  if (c.empty() || c.back().second <= t) return t;  // the common case: past every booking
  const auto it = after(c, t);
  if (it == c.begin()) return t;
  const auto& prev = *std::prev(it);  // the last one starting at or before t
  return prev.second > t ? prev.second : t;
}

TimeNs LinkCalendar::next_start(const Intervals& c, TimeNs t) {
  if (c.empty() || c.back().first <= t) return kTimeHorizonNs;
  return after(c, t)->first;
}

void LinkCalendar::insert(Intervals& c, TimeNs start, TimeNs end) {
  // [start, end) is free (the caller found it so): it goes before the first interval starting
  // after `start`, merged with its neighbours where they touch.
  auto next = c.empty() || c.back().first < start ? c.end() : after(c, start);
  const bool joins_next = next != c.end() && next->first == end;
  if (next != c.begin() && std::prev(next)->second == start) {
    auto prev = std::prev(next);
    if (joins_next) {
      prev->second = next->second;
      c.erase(next);
    } else {
      prev->second = end;
    }
    return;
  }
  if (joins_next) {
    next->first = start;
    return;
  }
  c.insert(next, {start, end});
}

LinkCalendar::Booking LinkCalendar::book(std::span<const std::int32_t> channels, TimeNs earliest,
                                         TimeNs duration) {
  if (duration < 0) throw std::invalid_argument("LinkCalendar: negative duration");
  for (const std::int32_t c : channels) {
    if (c < 0) throw std::invalid_argument("LinkCalendar: negative channel");
    if (static_cast<std::size_t>(c) >= busy_.size()) busy_.resize(static_cast<std::size_t>(c) + 1);
  }
  TimeNs t = std::max(earliest, floor_);
  if (channels.empty() || duration == 0) return {t, t};
  Booking b{-1, t};
  TimeNs left = duration;
  while (left > 0 && t < kTimeHorizonNs) {
    // The first instant from t on when every channel is free: each busy interval met pushes t
    // past it, until a pass moves it no more.
    for (bool moved = true; moved;) {
      moved = false;
      for (const std::int32_t c : channels) {
        const TimeNs free = busy_until(busy_[static_cast<std::size_t>(c)], t);
        if (free != t) {
          t = free;
          moved = true;
        }
      }
    }
    TimeNs gap_end = kTimeHorizonNs;
    for (const std::int32_t c : channels) {
      gap_end = std::min(gap_end, next_start(busy_[static_cast<std::size_t>(c)], t));
    }
    if (t >= gap_end) break;  // only at the horizon
    const TimeNs end = std::min(gap_end, add_saturated(t, left));
    for (const std::int32_t c : channels) insert(busy_[static_cast<std::size_t>(c)], t, end);
    inserted_ += channels.size();
    if (b.first < 0) b.first = t;
    left -= end - t;
    t = end;
  }
  if (b.first < 0) b.first = t;
  b.last = left > 0 ? kTimeHorizonNs : t;
  return b;
}

void LinkCalendar::forget_before(TimeNs horizon) {
  if (horizon <= floor_) return;
  floor_ = horizon;
  // Intervals below the floor change no answer; they are swept once enough have been added
  // since the last sweep to pay for visiting every channel.
  if (inserted_ < std::max<std::size_t>(64, busy_.size())) return;
  inserted_ = 0;
  for (Intervals& c : busy_) {
    auto it = c.begin();
    while (it != c.end() && it->second <= horizon) ++it;  // ends increase with starts
    c.erase(c.begin(), it);
  }
}

std::size_t LinkCalendar::num_intervals() const {
  std::size_t n = 0;
  for (const Intervals& c : busy_) n += c.size();
  return n;
}

std::vector<std::pair<TimeNs, TimeNs>> LinkCalendar::intervals(std::int32_t channel) const {
  if (channel < 0 || static_cast<std::size_t>(channel) >= busy_.size()) return {};
  return busy_[static_cast<std::size_t>(channel)];
}

}  // namespace servelab
