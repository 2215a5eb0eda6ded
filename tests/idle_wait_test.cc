// engine/idle_wait.h: an idle engine's wait for its next arrival never returns before it (the
// loop would then find nothing to admit and wait again), and returns at once for a time that is
// already past. How close after the target it returns is measured, not tested:
// docs/performance.md "Idle wake-up of engine run".
#include "engine/idle_wait.h"

#include <gtest/gtest.h>

namespace servelab {
namespace {

TEST(IdleWait, NeverReturnsBeforeItsTarget) {
  const WallClock clock(1'000'000);  // an origin: engine time need not start at 0
  for (const TimeNs ahead : {TimeNs{0}, TimeNs{50'000}, kIdleSpinNs, TimeNs{2'000'000}}) {
    const TimeNs target = clock.now() + ahead;
    wait_until(clock, target);
    EXPECT_GE(clock.now(), target) << ahead;
  }
}

TEST(IdleWait, APastTargetReturnsAtOnce) {
  const WallClock clock;
  const TimeNs before = clock.now();
  wait_until(clock, before - 1'000'000'000);
  // A generous bound: nothing is slept, so only a descheduled thread could take this long.
  EXPECT_LT(clock.now() - before, TimeNs{500'000'000});
}

}  // namespace
}  // namespace servelab
