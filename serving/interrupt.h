// Clean stops on SIGINT and SIGTERM: the handler only records the signal; long loops (the
// simulator, the engine driver, trace conversion) call throw_if_interrupted() and unwind, so
// temporary outputs are removed by their owners (AtomicFile, StagedDir) and nothing half-written
// is left. The commands report "interrupted; no output written" and exit with 128 + the signal
// (130 for SIGINT, 143 for SIGTERM).
#pragma once

#include <stdexcept>

namespace servelab {

// Thrown by throw_if_interrupted(); `signal` is the signal number received.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int signal);
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Installs the SIGINT and SIGTERM handlers (idempotent). A second signal of the same kind takes
// the default action (the process dies at once), so a stuck run can still be killed.
void install_interrupt_handlers();

// The signal received since start (0 when none); async-signal-safe to set, cheap to read.
int interrupt_signal();

// Throws Interrupted when a signal was received.
inline void throw_if_interrupted() {
  if (const int s = interrupt_signal()) throw Interrupted(s);
}

// For tests: forget a received signal.
void reset_interrupt();

// For a library inside another program (the Python module): while at least one scope is alive,
// SIGINT is recorded by the handler above (so throw_if_interrupted() sees it, from any thread);
// the first scope forgets any earlier signal and saves the program's own SIGINT action, the last
// one restores it and forgets the signal. A signal hands SIGINT back to the program at once, so a
// second one reaches the program's own handler (Python's: KeyboardInterrupt in the Python code
// running, a policy stuck in a loop included). A program that ignores SIGINT keeps ignoring it.
// SIGTERM is left to the host program. Scopes may overlap from several threads.
class ScopedInterruptHandler {
 public:
  ScopedInterruptHandler();
  ~ScopedInterruptHandler();
  ScopedInterruptHandler(const ScopedInterruptHandler&) = delete;
  ScopedInterruptHandler& operator=(const ScopedInterruptHandler&) = delete;
};

}  // namespace servelab
