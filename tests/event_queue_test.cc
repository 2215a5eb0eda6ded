// EventQueue: ordering by (time, insertion sequence).
#include "sim/event_queue.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace servelab {
namespace {

TEST(EventQueue, OrdersByTimeThenInsertion) {
  EventQueue q;
  q.push(50, EventKind::kStepEnd, 1);
  q.push(10, EventKind::kArrival, 2);
  q.push(50, EventKind::kArrival, 3);
  q.push(10, EventKind::kStepEnd, 4);
  std::vector<std::uint32_t> order;
  while (!q.empty()) order.push_back(q.pop().target);
  EXPECT_EQ(order, (std::vector<std::uint32_t>{2, 4, 1, 3}));
  EXPECT_EQ(q.now(), 50);
}

TEST(EventQueue, RejectsEventsInThePast) {
  EventQueue q;
  q.push(100, EventKind::kArrival);
  q.pop();
  EXPECT_THROW(q.push(99, EventKind::kArrival), std::logic_error);
  EXPECT_NO_THROW(q.push(100, EventKind::kArrival));
}

}  // namespace
}  // namespace servelab
