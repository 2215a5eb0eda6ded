#include "serving/interrupt.h"

#include <csignal>
#include <mutex>
#include <string>

namespace servelab {

namespace {

volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_hand_back = 0;  // a scope's handler: give SIGINT back when it fires
struct sigaction g_saved_sigint {};  // the host program's action, restored by the last scope

extern "C" void on_signal(int sig) {
  g_signal = sig;
  // Inside a host program the next SIGINT is the host's again (sigaction is async-signal-safe):
  // Python raises KeyboardInterrupt in whatever Python code runs, a policy stuck in a loop too.
  if (g_hand_back) sigaction(SIGINT, &g_saved_sigint, nullptr);
}

std::mutex g_scope_mutex;
int g_scopes = 0;  // live ScopedInterruptHandlers

}  // namespace

Interrupted::Interrupted(int signal)
    : std::runtime_error("interrupted by signal " + std::to_string(signal)), signal_(signal) {}

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second signal kills the process
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int interrupt_signal() { return g_signal; }

void reset_interrupt() { g_signal = 0; }

ScopedInterruptHandler::ScopedInterruptHandler() {
  const std::lock_guard<std::mutex> lock(g_scope_mutex);
  if (g_scopes++ > 0) return;
  g_signal = 0;
  sigaction(SIGINT, nullptr, &g_saved_sigint);
  if (g_saved_sigint.sa_handler == SIG_IGN) return;  // the program ignores Ctrl-C: so do we
  g_hand_back = 1;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

ScopedInterruptHandler::~ScopedInterruptHandler() {
  const std::lock_guard<std::mutex> lock(g_scope_mutex);
  if (--g_scopes > 0) return;
  sigaction(SIGINT, &g_saved_sigint, nullptr);
  g_hand_back = 0;
  g_signal = 0;
}

}  // namespace servelab
