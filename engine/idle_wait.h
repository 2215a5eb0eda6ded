// How an idle engine waits for a replayed arrival (engine run's trace, a cluster's router): a
// plain sleep_for overshoots by the kernel's timer slack (50 us by default on Linux) plus the
// wake-up of the thread, 100-200 us on the 2-core CI machine (docs/validation.md "Idle
// wake-up"), which every request arriving at an idle engine then waits through. wait_until
// sets the calling thread's timer slack to 1 ns (Linux; once per thread), sleeps until
// kIdleSpinNs before the target and yields the core in a loop for the rest.
// Contract: returns once clock.now() >= target (at once when it already is); never throws.
#pragma once

#include "core/time.h"
#include "engine/engine_loop.h"

namespace servelab {

// How long before its target wait_until stops sleeping and spins (yielding): a little above
// the sleep overshoot left with a 1 ns timer slack (about 55 us on the 2-core machine).
inline constexpr TimeNs kIdleSpinNs = 150'000;

void wait_until(const WallClock& clock, TimeNs target);

// Sets the calling thread's timer slack to 1 ns (Linux; once per thread; a failure keeps the
// default), for a thread that waits on a condition variable with a timeout instead (the
// cluster's router: it sleeps until kIdleSpinNs before an arrival and yields for the rest).
void use_fine_timer_slack();

}  // namespace servelab
