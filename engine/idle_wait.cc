#include "engine/idle_wait.h"

#include <chrono>
#include <thread>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

namespace servelab {

void use_fine_timer_slack() {
#if defined(__linux__)
  thread_local const bool done = [] {
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // best effort: a failure keeps the default
    return true;
  }();
  (void)done;
#endif
}

void wait_until(const WallClock& clock, TimeNs target) {
  use_fine_timer_slack();
  const TimeNs sleep = target - kIdleSpinNs - clock.now();
  if (sleep > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(sleep));
  while (clock.now() < target) std::this_thread::yield();
}

}  // namespace servelab
